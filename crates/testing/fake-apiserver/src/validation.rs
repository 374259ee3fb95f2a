//! Name, label and metadata validation with the real server's messages
//! (`k8s.io/apimachinery/pkg/util/validation`, `.../api/validation/objectmeta.go`).

use serde_json::{Value, json};

use crate::errors::Cause;

const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const DNS1035_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
const QUALIFIED_NAME_MSG: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";

fn is_label_body(s: &str, first: fn(u8) -> bool) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && first(b[0])
        && (b[b.len() - 1].is_ascii_lowercase() || b[b.len() - 1].is_ascii_digit())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}

fn lower_alnum(c: u8) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

pub fn dns1123_label(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push("must be no more than 63 characters".to_string());
    }
    if !is_label_body(s, lower_alnum) {
        errs.push(DNS1123_LABEL_MSG.to_string());
    }
    errs
}

pub fn dns1123_subdomain(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 253 {
        errs.push("must be no more than 253 characters".to_string());
    }
    if s.is_empty() || !s.split('.').all(|p| is_label_body(p, lower_alnum)) {
        errs.push(DNS1123_SUBDOMAIN_MSG.to_string());
    }
    errs
}

pub fn dns1035_label(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push("must be no more than 63 characters".to_string());
    }
    if !is_label_body(s, |c| c.is_ascii_lowercase()) {
        errs.push(DNS1035_MSG.to_string());
    }
    errs
}

fn is_qualified_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// Label keys, annotation keys and finalizers: `[prefix/]name`.
pub fn qualified_name(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = s.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_string());
            } else {
                for e in dns1123_subdomain(prefix) {
                    errs.push(format!("prefix part {e}"));
                }
            }
            name
        }
        _ => {
            errs.push(format!("{QUALIFIED_NAME_MSG} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_string());
    } else if name.len() > 63 {
        errs.push("name part must be no more than 63 characters".to_string());
    }
    if !name.is_empty() && !is_qualified_part(name) {
        errs.push(QUALIFIED_NAME_MSG.to_string());
    }
    errs
}

pub fn label_value(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push("must be no more than 63 characters".to_string());
    }
    if !s.is_empty() && !is_qualified_part(s) {
        errs.push(LABEL_VALUE_MSG.to_string());
    }
    errs
}

/// Which name rule a kind uses.
#[derive(Clone, Copy, Debug)]
pub enum NameRule {
    Dns1123Subdomain,
    Dns1123Label,
    Dns1035Label,
}

impl NameRule {
    pub fn check(self, s: &str) -> Vec<String> {
        match self {
            NameRule::Dns1123Subdomain => dns1123_subdomain(s),
            NameRule::Dns1123Label => dns1123_label(s),
            NameRule::Dns1035Label => dns1035_label(s),
        }
    }
}

const TOTAL_ANNOTATION_SIZE_LIMIT: usize = 256 * 1024;

pub fn validate_labels(labels: Option<&Value>, path: &str, causes: &mut Vec<Cause>) {
    let Some(map) = labels.and_then(Value::as_object) else {
        return;
    };
    for (k, v) in map {
        for e in qualified_name(k) {
            causes.push(Cause::invalid(path, &json!(k), e));
        }
        let v = v.as_str().unwrap_or("");
        for e in label_value(v) {
            causes.push(Cause::invalid(path, &json!(v), e));
        }
    }
}

/// `ValidateObjectMeta` (create).
pub fn validate_object_meta(obj: &Value, namespaced: bool, rule: NameRule) -> Vec<Cause> {
    let mut causes = Vec::new();
    let meta = obj.get("metadata").cloned().unwrap_or(Value::Null);
    let name = meta.get("name").and_then(Value::as_str).unwrap_or("");
    let generate = meta.get("generateName").and_then(Value::as_str).unwrap_or("");
    if name.is_empty() {
        causes.push(Cause::required(
            "metadata.name",
            "name or generateName is required",
        ));
    } else {
        for e in rule.check(name) {
            causes.push(Cause::invalid("metadata.name", &json!(name), e));
        }
    }
    if !generate.is_empty() {
        // generateName is validated as a prefix: the name rule without the trailing-character check
        let trimmed = generate.trim_end_matches('-');
        if !trimmed.is_empty() {
            for e in rule.check(trimmed) {
                causes.push(Cause::invalid("metadata.generateName", &json!(generate), e));
            }
        }
    }
    let ns = meta.get("namespace").and_then(Value::as_str).unwrap_or("");
    if namespaced {
        if ns.is_empty() {
            causes.push(Cause::required("metadata.namespace", ""));
        } else {
            for e in dns1123_label(ns) {
                causes.push(Cause::invalid("metadata.namespace", &json!(ns), e));
            }
        }
    } else if !ns.is_empty() {
        causes.push(Cause::forbidden("metadata.namespace", "not allowed on this type"));
    }
    if let Some(g) = meta.get("generation").and_then(Value::as_i64)
        && g < 0
    {
        causes.push(Cause::invalid(
            "metadata.generation",
            &json!(g),
            "must be greater than or equal to 0",
        ));
    }
    validate_labels(meta.get("labels"), "metadata.labels", &mut causes);
    if let Some(ann) = meta.get("annotations").and_then(Value::as_object) {
        let mut total = 0;
        for (k, v) in ann {
            for e in qualified_name(&k.to_lowercase()) {
                causes.push(Cause::invalid("metadata.annotations", &json!(k), e));
            }
            total += k.len() + v.as_str().map_or(0, str::len);
        }
        if total > TOTAL_ANNOTATION_SIZE_LIMIT {
            causes.push(Cause {
                reason: "FieldValueTooLong",
                message: format!("Too long: may not be more than {TOTAL_ANNOTATION_SIZE_LIMIT} bytes"),
                field: "metadata.annotations".into(),
            });
        }
    }
    if let Some(fins) = meta.get("finalizers").and_then(Value::as_array) {
        for (i, f) in fins.iter().enumerate() {
            let f = f.as_str().unwrap_or("");
            for e in qualified_name(f) {
                causes.push(Cause::invalid(format!("metadata.finalizers[{i}]"), &json!(f), e));
            }
        }
    }
    if let Some(refs) = meta.get("ownerReferences").and_then(Value::as_array) {
        for (i, r) in refs.iter().enumerate() {
            for (field, what) in [
                ("apiVersion", "version must not be empty"),
                ("kind", "kind must not be empty"),
                ("name", "name must not be empty"),
                ("uid", "uid must not be empty"),
            ] {
                if r.get(field).and_then(Value::as_str).unwrap_or("").is_empty() {
                    causes.push(Cause::invalid(
                        format!("metadata.ownerReferences[{i}].{field}"),
                        r.get(field).unwrap_or(&json!("")),
                        what,
                    ));
                }
            }
        }
    }
    causes
}

/// `ValidateObjectMetaUpdate`: identity fields cannot change.
pub fn validate_object_meta_update(new: &Value, old: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    for field in ["name", "namespace", "uid", "creationTimestamp"] {
        let n = new
            .pointer(&format!("/metadata/{field}"))
            .cloned()
            .unwrap_or(json!(""));
        let o = old
            .pointer(&format!("/metadata/{field}"))
            .cloned()
            .unwrap_or(json!(""));
        if n != o {
            causes.push(Cause::immutable(format!("metadata.{field}"), &n));
        }
    }
    causes
}

pub fn is_ip(s: &str) -> bool {
    s.parse::<std::net::IpAddr>().is_ok()
}

pub fn is_cidr(s: &str) -> bool {
    s.parse::<ipnet::IpNet>().is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(dns1123_subdomain("node-1.example.com").is_empty());
        assert!(!dns1123_subdomain("Node_1").is_empty());
        assert!(!dns1123_subdomain("").is_empty());
        assert!(dns1123_label("default").is_empty());
        assert!(!dns1123_label("a.b").is_empty());
        assert!(dns1035_label("my-svc").is_empty());
        assert!(!dns1035_label("1svc").is_empty());
        assert!(!dns1035_label(&"a".repeat(64)).is_empty());
    }

    #[test]
    fn labels_and_keys() {
        assert!(qualified_name("kubernetes.io/hostname").is_empty());
        assert!(qualified_name("app").is_empty());
        assert!(!qualified_name("a/b/c").is_empty());
        assert!(!qualified_name("/x").is_empty());
        assert!(!qualified_name("Bad_Prefix/x").is_empty());
        assert!(label_value("").is_empty());
        assert!(label_value("v1.2_3-x").is_empty());
        assert!(!label_value("has space").is_empty());
        assert!(!label_value("-lead").is_empty());
        assert!(!label_value(&"a".repeat(64)).is_empty());
    }

    #[test]
    fn object_meta_rules() {
        let c = validate_object_meta(&json!({"metadata": {}}), false, NameRule::Dns1123Subdomain);
        assert_eq!(c[0].field, "metadata.name");
        assert_eq!(c[0].reason, "FieldValueRequired");
        let c = validate_object_meta(
            &json!({"metadata": {"name": "x", "namespace": "default", "labels": {"a": "b c"}}}),
            true,
            NameRule::Dns1035Label,
        );
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].field, "metadata.labels");
    }
}
