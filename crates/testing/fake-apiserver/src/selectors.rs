//! Label and field selectors: parsing (with the real server's errors) and matching.
//! Pure functions; the grammar follows `k8s.io/apimachinery/pkg/labels` and `.../fields`.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::resources::{ResourceDef, Store};
use crate::validation;

#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    Equals,
    NotEquals,
    In,
    NotIn,
    Exists,
    DoesNotExist,
    GreaterThan,
    LessThan,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Requirement {
    pub key: String,
    pub op: Op,
    pub values: Vec<String>,
}

/// A parsed label selector; empty matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector {
    pub requirements: Vec<Requirement>,
}

#[derive(Debug, PartialEq)]
enum Tok {
    Ident(String),
    Not,
    Eq,
    DoubleEq,
    NotEq,
    Gt,
    Lt,
    In,
    NotIn,
    Open,
    Close,
    Comma,
}

fn is_ident_char(c: char) -> bool {
    !c.is_whitespace() && !matches!(c, '!' | '=' | '>' | '<' | '(' | ')' | ',')
}

fn lex(s: &str) -> Result<Vec<Tok>, String> {
    let chars: Vec<char> = s.chars().collect();
    let mut i = 0;
    let mut out = Vec::new();
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        match c {
            '!' if chars.get(i + 1) == Some(&'=') => {
                out.push(Tok::NotEq);
                i += 2;
            }
            '!' => {
                out.push(Tok::Not);
                i += 1;
            }
            '=' if chars.get(i + 1) == Some(&'=') => {
                out.push(Tok::DoubleEq);
                i += 2;
            }
            '=' => {
                out.push(Tok::Eq);
                i += 1;
            }
            '>' => {
                out.push(Tok::Gt);
                i += 1;
            }
            '<' => {
                out.push(Tok::Lt);
                i += 1;
            }
            '(' => {
                out.push(Tok::Open);
                i += 1;
            }
            ')' => {
                out.push(Tok::Close);
                i += 1;
            }
            ',' => {
                out.push(Tok::Comma);
                i += 1;
            }
            _ => {
                let start = i;
                while i < chars.len() && is_ident_char(chars[i]) {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                out.push(match word.as_str() {
                    "in" => Tok::In,
                    "notin" => Tok::NotIn,
                    _ => Tok::Ident(word),
                });
            }
        }
    }
    Ok(out)
}

fn check_key(key: &str) -> Result<(), String> {
    let errs = validation::qualified_name(key);
    if errs.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "unable to parse requirement: invalid label key {key:?}: {}",
            errs.join("; ")
        ))
    }
}

fn check_value(v: &str) -> Result<(), String> {
    let errs = validation::label_value(v);
    if errs.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "unable to parse requirement: invalid label value: {v:?}: at key: {}",
            errs.join("; ")
        ))
    }
}

impl LabelSelector {
    pub fn parse(s: &str) -> Result<Self, String> {
        let toks = lex(s)?;
        let mut reqs = Vec::new();
        let mut i = 0;
        if toks.is_empty() {
            return Ok(Self::default());
        }
        loop {
            // requirement
            let (key, op, values);
            match toks.get(i) {
                Some(Tok::Not) => {
                    i += 1;
                    match toks.get(i) {
                        Some(Tok::Ident(k)) => {
                            key = k.clone();
                            op = Op::DoesNotExist;
                            values = vec![];
                            i += 1;
                        }
                        other => return Err(format!("found '{other:?}', expected: identifier after '!'")),
                    }
                }
                Some(Tok::Ident(k)) => {
                    key = k.clone();
                    i += 1;
                    match toks.get(i) {
                        None | Some(Tok::Comma) => {
                            op = Op::Exists;
                            values = vec![];
                        }
                        Some(t @ (Tok::Eq | Tok::DoubleEq | Tok::NotEq | Tok::Gt | Tok::Lt)) => {
                            op = match t {
                                Tok::Eq | Tok::DoubleEq => Op::Equals,
                                Tok::NotEq => Op::NotEquals,
                                Tok::Gt => Op::GreaterThan,
                                _ => Op::LessThan,
                            };
                            i += 1;
                            match toks.get(i) {
                                Some(Tok::Ident(v)) => {
                                    values = vec![v.clone()];
                                    i += 1;
                                }
                                // `key=` selects the empty value
                                None | Some(Tok::Comma) => values = vec![String::new()],
                                Some(other) => {
                                    return Err(format!("found '{other:?}', expected: identifier"));
                                }
                            }
                            if matches!(op, Op::GreaterThan | Op::LessThan)
                                && values[0].parse::<i64>().is_err()
                            {
                                return Err(format!(
                                    "unable to parse requirement: for 'Gt', 'Lt' operators, the value must be an integer: {:?}",
                                    values[0]
                                ));
                            }
                        }
                        Some(t @ (Tok::In | Tok::NotIn)) => {
                            op = if *t == Tok::In { Op::In } else { Op::NotIn };
                            i += 1;
                            if toks.get(i) != Some(&Tok::Open) {
                                return Err("found unexpected token, expected: '('".into());
                            }
                            i += 1;
                            let mut vals = Vec::new();
                            loop {
                                match toks.get(i) {
                                    Some(Tok::Ident(v)) => {
                                        vals.push(v.clone());
                                        i += 1;
                                    }
                                    Some(Tok::Comma) => {
                                        // an empty element between commas is the empty string
                                        if matches!(toks.get(i.wrapping_sub(1)), Some(Tok::Comma | Tok::Open))
                                        {
                                            vals.push(String::new());
                                        }
                                        i += 1;
                                        continue;
                                    }
                                    Some(Tok::Close) => {
                                        if matches!(toks.get(i.wrapping_sub(1)), Some(Tok::Comma)) {
                                            vals.push(String::new());
                                        }
                                        i += 1;
                                        break;
                                    }
                                    _ => {
                                        return Err(
                                            "found unexpected token, expected: ',', ')' or identifier".into(),
                                        );
                                    }
                                }
                                match toks.get(i) {
                                    Some(Tok::Comma) => i += 1,
                                    Some(Tok::Close) => {
                                        i += 1;
                                        break;
                                    }
                                    _ => return Err("found unexpected token, expected: ',' or ')'".into()),
                                }
                            }
                            if vals.is_empty() {
                                return Err("unable to parse requirement: for 'in', 'notin' operators, values set can't be empty".into());
                            }
                            values = vals;
                        }
                        Some(other) => {
                            return Err(format!(
                                "found '{other:?}', expected: '=', '!=', '==', 'in', notin'"
                            ));
                        }
                    }
                }
                other => {
                    return Err(format!(
                        "found '{other:?}', expected: !, identifier, or 'end of string'"
                    ));
                }
            }
            check_key(&key)?;
            for v in &values {
                if !matches!(op, Op::GreaterThan | Op::LessThan) {
                    check_value(v)?;
                }
            }
            reqs.push(Requirement { key, op, values });
            match toks.get(i) {
                None => break,
                Some(Tok::Comma) => {
                    i += 1;
                    if i >= toks.len() {
                        return Err("found 'end of string', expected: identifier or '!'".into());
                    }
                }
                Some(other) => return Err(format!("found '{other:?}', expected: ',' or 'end of string'")),
            }
        }
        Ok(LabelSelector { requirements: reqs })
    }

    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Matches a `metadata.labels` object (absent labels are an empty set).
    pub fn matches(&self, labels: Option<&serde_json::Map<String, Value>>) -> bool {
        self.requirements.iter().all(|r| {
            let v = labels.and_then(|l| l.get(&r.key)).and_then(Value::as_str);
            match r.op {
                Op::Equals | Op::In => v.is_some_and(|v| r.values.iter().any(|x| x == v)),
                Op::NotEquals | Op::NotIn => v.is_none_or(|v| !r.values.iter().any(|x| x == v)),
                Op::Exists => v.is_some(),
                Op::DoesNotExist => v.is_none(),
                Op::GreaterThan | Op::LessThan => {
                    let (Some(v), Some(want)) = (
                        v.and_then(|v| v.parse::<i64>().ok()),
                        r.values[0].parse::<i64>().ok(),
                    ) else {
                        return false;
                    };
                    if r.op == Op::GreaterThan {
                        v > want
                    } else {
                        v < want
                    }
                }
            }
        })
    }
}

/// One `key=value` / `key!=value` term of a field selector.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldTerm {
    pub field: String,
    pub value: String,
    pub negated: bool,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector {
    pub terms: Vec<FieldTerm>,
}

/// Splits on unescaped `sep`, keeping escapes for the next stage.
fn split_unescaped(s: &str, sep: char) -> Vec<String> {
    let mut parts = Vec::new();
    let mut cur = String::new();
    let mut escaped = false;
    for c in s.chars() {
        if escaped {
            cur.push('\\');
            cur.push(c);
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == sep {
            parts.push(std::mem::take(&mut cur));
        } else {
            cur.push(c);
        }
    }
    if escaped {
        cur.push('\\');
    }
    parts.push(cur);
    parts
}

fn unescape(s: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some(e @ ('\\' | ',' | '=')) => out.push(e),
                Some(e) => return Err(format!("invalid field selector: invalid escape sequence: \\{e}")),
                None => return Err("invalid field selector: unterminated escape sequence".into()),
            }
        } else {
            out.push(c);
        }
    }
    Ok(out)
}

impl FieldSelector {
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut terms = Vec::new();
        if s.trim().is_empty() {
            return Ok(Self::default());
        }
        for part in split_unescaped(s, ',') {
            if part.is_empty() {
                continue;
            }
            // Find the first unescaped operator.
            let bytes: Vec<char> = part.chars().collect();
            let mut i = 0;
            let mut found = None;
            while i < bytes.len() {
                if bytes[i] == '\\' {
                    i += 2;
                    continue;
                }
                if bytes[i] == '!' && bytes.get(i + 1) == Some(&'=') {
                    found = Some((i, 2, true));
                    break;
                }
                if bytes[i] == '=' {
                    let len = if bytes.get(i + 1) == Some(&'=') { 2 } else { 1 };
                    found = Some((i, len, false));
                    break;
                }
                i += 1;
            }
            let Some((at, len, negated)) = found else {
                return Err(format!("invalid selector: '{part}'; can't understand '{part}'"));
            };
            let field: String = bytes[..at].iter().collect();
            let value: String = bytes[at + len..].iter().collect();
            terms.push(FieldTerm {
                field: unescape(&field)?,
                value: unescape(&value)?,
                negated,
            });
        }
        Ok(FieldSelector { terms })
    }

    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// The value a `metadata.name=x` term pins, if any (used to narrow watches and lists).
    pub fn pinned_name(&self) -> Option<&str> {
        self.terms
            .iter()
            .find(|t| t.field == "metadata.name" && !t.negated)
            .map(|t| t.value.as_str())
    }

    pub fn matches(&self, fields: &BTreeMap<&'static str, String>) -> bool {
        self.terms.iter().all(|t| {
            let v = fields.get(t.field.as_str()).map(String::as_str).unwrap_or("");
            (v == t.value) != t.negated
        })
    }
}

/// The fields each kind supports in field selectors (the real server's field label
/// conversion functions), with the stored field they read. For `events.k8s.io` the
/// names differ from core/v1 but read the same stored fields.
fn supported_fields(def: &ResourceDef) -> &'static [(&'static str, &'static str)] {
    match (def.store, def.events_v1) {
        (Store::Nodes, _) => &[
            ("metadata.name", "metadata.name"),
            ("spec.unschedulable", "spec.unschedulable"),
        ],
        (Store::Namespaces, _) => &[
            ("metadata.name", "metadata.name"),
            ("status.phase", "status.phase"),
        ],
        (Store::Services, _) => &[
            ("metadata.name", "metadata.name"),
            ("metadata.namespace", "metadata.namespace"),
            ("spec.clusterIP", "spec.clusterIP"),
            ("spec.type", "spec.type"),
        ],
        (Store::Secrets, _) => &[
            ("metadata.name", "metadata.name"),
            ("metadata.namespace", "metadata.namespace"),
            ("type", "type"),
        ],
        (Store::Events, false) => &[
            ("metadata.name", "metadata.name"),
            ("metadata.namespace", "metadata.namespace"),
            ("involvedObject.kind", "involvedObject.kind"),
            ("involvedObject.namespace", "involvedObject.namespace"),
            ("involvedObject.name", "involvedObject.name"),
            ("involvedObject.uid", "involvedObject.uid"),
            ("involvedObject.apiVersion", "involvedObject.apiVersion"),
            ("involvedObject.resourceVersion", "involvedObject.resourceVersion"),
            ("involvedObject.fieldPath", "involvedObject.fieldPath"),
            ("reason", "reason"),
            ("reportingComponent", "reportingComponent"),
            ("source", "source"),
            ("type", "type"),
        ],
        (Store::Events, true) => &[
            ("metadata.name", "metadata.name"),
            ("metadata.namespace", "metadata.namespace"),
            ("regarding.kind", "involvedObject.kind"),
            ("regarding.namespace", "involvedObject.namespace"),
            ("regarding.name", "involvedObject.name"),
            ("regarding.uid", "involvedObject.uid"),
            ("regarding.apiVersion", "involvedObject.apiVersion"),
            ("regarding.resourceVersion", "involvedObject.resourceVersion"),
            ("regarding.fieldPath", "involvedObject.fieldPath"),
            ("reason", "reason"),
            ("reportingController", "reportingComponent"),
            ("type", "type"),
        ],
        (Store::ConfigMaps | Store::Leases, _) => &[
            ("metadata.name", "metadata.name"),
            ("metadata.namespace", "metadata.namespace"),
        ],
    }
}

/// Checks the selector's fields against what the kind supports and rewrites them to the
/// stored field names. Unsupported fields are a 400 in the real server.
pub fn convert_field_selector(def: &ResourceDef, sel: FieldSelector) -> Result<FieldSelector, String> {
    let supported = supported_fields(def);
    let mut terms = Vec::with_capacity(sel.terms.len());
    for t in sel.terms {
        match supported.iter().find(|(label, _)| *label == t.field) {
            Some((_, stored)) => terms.push(FieldTerm {
                field: (*stored).to_string(),
                ..t
            }),
            None => return Err(format!("field label not supported: {}", t.field)),
        }
    }
    Ok(FieldSelector { terms })
}

fn str_at<'a>(obj: &'a Value, path: &[&str]) -> &'a str {
    let mut cur = obj;
    for p in path {
        match cur.get(p) {
            Some(v) => cur = v,
            None => return "",
        }
    }
    cur.as_str().unwrap_or("")
}

/// The selectable field set of a stored object (`GetAttrs` / `ToSelectableFields`).
pub fn object_fields(store: Store, obj: &Value) -> BTreeMap<&'static str, String> {
    let mut m = BTreeMap::new();
    m.insert("metadata.name", str_at(obj, &["metadata", "name"]).to_string());
    m.insert(
        "metadata.namespace",
        str_at(obj, &["metadata", "namespace"]).to_string(),
    );
    match store {
        Store::Nodes => {
            let u = obj
                .pointer("/spec/unschedulable")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            m.insert("spec.unschedulable", u.to_string());
        }
        Store::Namespaces => {
            m.insert("status.phase", str_at(obj, &["status", "phase"]).to_string());
        }
        Store::Services => {
            m.insert("spec.clusterIP", str_at(obj, &["spec", "clusterIP"]).to_string());
            m.insert("spec.type", str_at(obj, &["spec", "type"]).to_string());
        }
        Store::Secrets => {
            m.insert("type", str_at(obj, &["type"]).to_string());
        }
        Store::Events => {
            for (f, k) in [
                ("involvedObject.kind", "kind"),
                ("involvedObject.namespace", "namespace"),
                ("involvedObject.name", "name"),
                ("involvedObject.uid", "uid"),
                ("involvedObject.apiVersion", "apiVersion"),
                ("involvedObject.resourceVersion", "resourceVersion"),
                ("involvedObject.fieldPath", "fieldPath"),
            ] {
                m.insert(f, str_at(obj, &["involvedObject", k]).to_string());
            }
            m.insert("reason", str_at(obj, &["reason"]).to_string());
            m.insert(
                "reportingComponent",
                str_at(obj, &["reportingComponent"]).to_string(),
            );
            let mut source = str_at(obj, &["source", "component"]).to_string();
            if source.is_empty() {
                source = str_at(obj, &["reportingComponent"]).to_string();
            }
            m.insert("source", source);
            m.insert("type", str_at(obj, &["type"]).to_string());
        }
        Store::ConfigMaps | Store::Leases => {}
    }
    m
}

/// Both selectors of a list or watch, ready to match stored objects.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    pub labels: LabelSelector,
    pub fields: FieldSelector,
}

impl Selection {
    pub fn is_everything(&self) -> bool {
        self.labels.is_empty() && self.fields.is_empty()
    }
    pub fn matches(&self, store: Store, obj: &Value) -> bool {
        if !self.labels.is_empty() {
            let labels = obj.pointer("/metadata/labels").and_then(Value::as_object);
            if !self.labels.matches(labels) {
                return false;
            }
        }
        self.fields.is_empty() || self.fields.matches(&object_fields(store, obj))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(v: Value) -> serde_json::Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn label_selector_table() {
        let l = labels(json!({"env": "prod", "tier": "web", "n": "5", "empty": ""}));
        let cases: &[(&str, bool)] = &[
            ("", true),
            ("env=prod", true),
            ("env==prod", true),
            ("env=dev", false),
            ("env!=dev", true),
            ("env!=prod", false),
            ("missing!=x", true),
            ("env in (prod, dev)", true),
            ("env in (dev,qa)", false),
            ("env notin (dev,qa)", true),
            ("env notin (prod)", false),
            ("missing notin (a)", true),
            ("tier", true),
            ("missing", false),
            ("!missing", true),
            ("!env", false),
            ("env=prod,tier=web", true),
            ("env=prod,tier=db", false),
            ("n>4", true),
            ("n<4", false),
            ("empty=", true),
            ("env in (prod),!missing,tier", true),
        ];
        for (sel, want) in cases {
            let s = LabelSelector::parse(sel).unwrap_or_else(|e| panic!("{sel}: {e}"));
            assert_eq!(s.matches(Some(&l)), *want, "selector {sel:?}");
        }
    }

    #[test]
    fn label_selector_rejects_garbage() {
        for bad in [
            "env in prod",
            "=x",
            "env=a b",
            "a,",
            "env in ()",
            "bad key!=x y",
            "n>x",
            "env=prod)",
        ] {
            assert!(LabelSelector::parse(bad).is_err(), "{bad:?} should not parse");
        }
    }

    #[test]
    fn field_selector_parse_and_match() {
        let s = FieldSelector::parse("metadata.name=a\\,b,spec.type!=ClusterIP").unwrap();
        assert_eq!(s.terms[0].value, "a,b");
        assert!(s.terms[1].negated);
        let mut f = BTreeMap::new();
        f.insert("metadata.name", "a,b".to_string());
        f.insert("spec.type", "NodePort".to_string());
        assert!(s.matches(&f));
        f.insert("spec.type", "ClusterIP".to_string());
        assert!(!s.matches(&f));
        assert!(FieldSelector::parse("nonsense").is_err());
        assert_eq!(
            FieldSelector::parse("metadata.name==x").unwrap().terms[0].value,
            "x"
        );
    }

    #[test]
    fn field_selector_support_per_kind() {
        let nodes = crate::resources::find("", "v1", "nodes").unwrap();
        let svc = crate::resources::find("", "v1", "services").unwrap();
        let ev1 = crate::resources::find("events.k8s.io", "v1", "events").unwrap();
        let p = |s: &str| FieldSelector::parse(s).unwrap();
        assert!(convert_field_selector(nodes, p("spec.unschedulable=true")).is_ok());
        assert_eq!(
            convert_field_selector(nodes, p("metadata.namespace=x")).unwrap_err(),
            "field label not supported: metadata.namespace"
        );
        assert!(convert_field_selector(svc, p("spec.type=NodePort,metadata.namespace=d")).is_ok());
        assert!(convert_field_selector(svc, p("spec.ports=1")).is_err());
        let conv = convert_field_selector(ev1, p("regarding.name=n1,reportingController=c")).unwrap();
        assert_eq!(conv.terms[0].field, "involvedObject.name");
        assert_eq!(conv.terms[1].field, "reportingComponent");
        assert!(convert_field_selector(ev1, p("involvedObject.name=x")).is_err());
    }

    #[test]
    fn object_fields_for_nodes_and_events() {
        let n = json!({"metadata": {"name": "n1"}, "spec": {"unschedulable": true}});
        assert_eq!(object_fields(Store::Nodes, &n)["spec.unschedulable"], "true");
        let n = json!({"metadata": {"name": "n1"}});
        assert_eq!(object_fields(Store::Nodes, &n)["spec.unschedulable"], "false");
        let e = json!({"metadata": {"name": "e", "namespace": "default"}, "involvedObject": {"kind": "Node", "name": "n1"}, "reportingComponent": "ctl"});
        let f = object_fields(Store::Events, &e);
        assert_eq!(f["involvedObject.name"], "n1");
        assert_eq!(f["source"], "ctl");
    }
}
