//! The YAML form of `vsphere.conf` (CPI's `yaml.v2` structs: `global`, `vcenter`, `labels`,
//! `nodes`) into [`Raw`].

use serde_json::Value as Json;

use super::{
    Format,
    raw::{Raw, Section, Value, letters},
};

/// Why the text is not CPI's YAML.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum YamlError {
    /// Not YAML, or YAML that is no mapping: the text may be INI.
    NotYaml(String),
    /// A YAML mapping with CPI's top-level keys whose shape is wrong: an error of its own.
    Shape(String),
}

fn value(json: &Json) -> Value {
    match json {
        Json::Null => Value::Null,
        Json::Bool(b) => Value::Bool(*b),
        Json::Number(n) => match n.as_i64() {
            Some(i) => Value::Int(i),
            None => Value::Other("a number that is no integer"),
        },
        Json::String(s) => Value::Str(s.clone()),
        Json::Array(items) => {
            let mut list = Vec::new();
            for item in items {
                match item {
                    Json::String(s) => list.push(s.clone()),
                    Json::Number(n) => list.push(n.to_string()),
                    Json::Bool(b) => list.push(b.to_string()),
                    _ => return Value::Other("a list of other than strings"),
                }
            }
            Value::List(list)
        }
        Json::Object(_) => Value::Other("a mapping"),
    }
}

fn section(json: &Json, label: &str) -> Result<Section, YamlError> {
    let mut out = Section::new(label);
    match json {
        Json::Null => {}
        Json::Object(map) => {
            for (k, v) in map {
                out.insert(k, None, value(v));
            }
        }
        _ => return Err(YamlError::Shape(format!("{label} is not a mapping"))),
    }
    Ok(out)
}

/// Parses YAML text.
pub fn parse(text: &str) -> Result<Raw, YamlError> {
    let doc: Json =
        serde_saphyr::from_str(text).map_err(|e| YamlError::NotYaml(e.without_snippet().to_string()))?;
    let Json::Object(top) = doc else {
        return Err(YamlError::NotYaml("not a YAML mapping".into()));
    };
    let mut raw = Raw {
        format: Format::Yaml,
        global: Section::new("global"),
        labels: Section::new("labels"),
        nodes: Section::new("nodes"),
        ..Raw::default()
    };
    for (key, v) in &top {
        let official = ["global", "vcenter", "labels", "nodes"];
        if !official.contains(&key.as_str())
            && (official.contains(&letters(key).as_str()) || letters(key) == "virtualcenter")
        {
            raw.respelled_sections.push(key.clone());
        }
        match letters(key).as_str() {
            "global" => raw.global = section(v, "global")?,
            "labels" => raw.labels = section(v, "labels")?,
            "nodes" => raw.nodes = section(v, "nodes")?,
            "vcenter" | "virtualcenter" => match v {
                Json::Null => {}
                Json::Object(map) => {
                    for (name, vc) in map {
                        raw.vcenters
                            .push((name.clone(), section(vc, &format!("vcenter.{name}"))?));
                    }
                }
                _ => return Err(YamlError::Shape("vcenter is not a mapping of servers".into())),
            },
            _ => raw.unknown_sections.push(key.clone()),
        }
    }
    Ok(raw)
}
