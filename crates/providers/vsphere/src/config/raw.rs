//! Both formats of `vsphere.conf` as one list of keys per section, each with its spelling, line
//! and value, so one builder ([`super::build`]) gives them one meaning.
//!
//! Key names are matched by their letters alone (case, `-` and `_` ignored): `insecure-flag`,
//! `insecureFlag` and `insecure_flag` are one key. The spelling of the file's own format is read
//! silently; the other format's spelling is read by its evident meaning with a notice, where CPI
//! ignores it without a word (CPI #1455: INI keys in a YAML file).

use std::collections::BTreeMap;

/// A value as the file wrote it.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// An INI value (`None` for a blank key).
    Ini(Option<String>),
    /// A YAML scalar string.
    Str(String),
    /// A YAML boolean.
    Bool(bool),
    /// A YAML integer.
    Int(i64),
    /// A YAML sequence of scalars.
    List(Vec<String>),
    /// A YAML null (the key with nothing after it).
    Null,
    /// Anything else (a float, a map): an error where a key is read.
    Other(&'static str),
}

/// One key of a section.
#[derive(Debug, Clone, PartialEq)]
pub struct Key {
    /// The key as written.
    pub written: String,
    /// Its line (INI only; YAML keys are named by their path).
    pub line: Option<usize>,
    /// Its value.
    pub value: Value,
}

/// The keys of one section, by their letters (lower-case, no `-`/`_`); the last one wins.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Section {
    /// Keys by letters.
    pub keys: BTreeMap<String, Key>,
    /// Where it is, for messages: `[Global]`, `[VirtualCenter "x"]`, `global`, `vcenter.x`.
    pub label: String,
}

impl Section {
    /// A new empty section named `label`.
    pub fn new(label: impl Into<String>) -> Self {
        Self {
            keys: BTreeMap::new(),
            label: label.into(),
        }
    }

    /// Adds a key (a later one replaces an earlier one with the same letters).
    pub fn insert(&mut self, written: &str, line: Option<usize>, value: Value) {
        self.keys.insert(
            letters(written),
            Key {
                written: written.to_owned(),
                line,
                value,
            },
        );
    }
}

/// The file: `[Global]`, `[VirtualCenter "x"]` by name in file order, `[Labels]`, `[Nodes]`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Raw {
    /// Which format it was.
    pub format: super::Format,
    /// `[Global]` / `global`.
    pub global: Section,
    /// `[VirtualCenter "x"]` / `vcenter: {x: …}`, by their names in file order.
    pub vcenters: Vec<(String, Section)>,
    /// `[Labels]` / `labels`.
    pub labels: Section,
    /// `[Nodes]` / `nodes`.
    pub nodes: Section,
    /// Sections neither CPI nor we read, for the notices.
    pub unknown_sections: Vec<String>,
    /// Sections read under another spelling than CPI's, for the notices.
    pub respelled_sections: Vec<String>,
}

/// A key's letters: lower-case, without `-` and `_`.
pub fn letters(name: &str) -> String {
    name.chars()
        .filter(|c| *c != '-' && *c != '_')
        .flat_map(char::to_lowercase)
        .collect()
}
