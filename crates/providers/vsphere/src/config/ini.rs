//! The INI form of `vsphere.conf` (gcfg, as CPI reads it with `gcfg.FatalOnly`) into [`Raw`].

use super::{
    Format,
    raw::{Raw, Section, Value},
};

/// Parses INI text; a syntax error names its line (gcfg's message).
pub fn parse(text: &str) -> Result<Raw, gcfg::Error> {
    let doc = gcfg::parse(text)?;
    let mut raw = Raw {
        format: Format::Ini,
        global: Section::new("[Global]"),
        labels: Section::new("[Labels]"),
        nodes: Section::new("[Nodes]"),
        ..Raw::default()
    };
    for section in &doc.sections {
        let target = if section.is("Global") && section.sub.is_none() {
            &mut raw.global
        } else if section.is("Labels") && section.sub.is_none() {
            &mut raw.labels
        } else if section.is("Nodes") && section.sub.is_none() {
            &mut raw.nodes
        } else if section.is("VirtualCenter") && section.sub.is_some() {
            let name = section.sub_or_empty().to_owned();
            let index = match raw.vcenters.iter().position(|(n, _)| *n == name) {
                Some(i) => i,
                None => {
                    raw.vcenters
                        .push((name.clone(), Section::new(format!("[VirtualCenter {name:?}]"))));
                    raw.vcenters.len() - 1
                }
            };
            &mut raw.vcenters[index].1
        } else {
            raw.unknown_sections.push(match &section.sub {
                Some(sub) => format!("line {}: [{} {sub:?}]", section.line, section.name),
                None => format!("line {}: [{}]", section.line, section.name),
            });
            continue;
        };
        for entry in &section.entries {
            target.insert(&entry.name, Some(entry.line), Value::Ini(entry.value.clone()));
        }
    }
    Ok(raw)
}
