//! Kubernetes' own rules for label keys and values (apimachinery's `IsQualifiedName` and
//! `IsValidLabelValue`), so a controller can drop a bad label before the API server refuses the
//! whole write.

/// Why `key` cannot be a label key, or `None` when it can: `[prefix/]name`, the prefix a DNS-1123
/// subdomain of at most 253 characters, the name at most 63 characters of alphanumerics, `-`,
/// `_` and `.`, starting and ending with an alphanumeric.
pub fn label_key_error(key: &str) -> Option<String> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix
        && (prefix.is_empty() || prefix.len() > 253 || !prefix.split('.').all(is_subdomain_part))
    {
        return Some(format!(
            "prefix of {key:?} must be a lowercase DNS-1123 subdomain"
        ));
    }
    if name.is_empty() || name.len() > 63 || !is_label_body(name) {
        return Some(format!(
            "name part of {key:?} must be 1 to 63 alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
        ));
    }
    None
}

/// Why `value` cannot be a label value, or `None` when it can: empty, or at most 63
/// alphanumerics, `-`, `_` and `.`, starting and ending with an alphanumeric.
pub fn label_value_error(value: &str) -> Option<String> {
    if value.is_empty() || (value.len() <= 63 && is_label_body(value)) {
        None
    } else {
        Some(format!(
            "value {value:?} must be at most 63 alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
        ))
    }
}

fn is_label_body(s: &str) -> bool {
    let bytes = s.as_bytes();
    let edge = |b: &u8| b.is_ascii_alphanumeric();
    bytes.first().is_some_and(edge)
        && bytes.last().is_some_and(edge)
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// One dot-separated part of a DNS-1123 subdomain (the whole is capped at 253, not each part).
fn is_subdomain_part(s: &str) -> bool {
    let bytes = s.as_bytes();
    let edge = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    bytes.first().is_some_and(edge)
        && bytes.last().is_some_and(edge)
        && bytes.iter().all(|b| edge(b) || *b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_keys_follow_the_api_servers_rules() {
        let long_name = "a".repeat(64);
        let long_prefix = format!("{}.com/x", "a".repeat(250));
        for (key, valid) in [
            ("rack", true),
            ("sim.cloud/rack", true),
            ("a.b-c.example/Rack_1.x", true),
            ("", false),
            ("/rack", false),
            ("sim.cloud/", false),
            ("Sim.Cloud/rack", false),
            ("sim_cloud/rack", false),
            ("a/b/c", false),
            ("-rack", false),
            ("rack-", false),
            ("ra ck", false),
            (long_name.as_str(), false),
            (long_prefix.as_str(), false),
        ] {
            assert_eq!(label_key_error(key).is_none(), valid, "{key:?}");
        }
    }

    #[test]
    fn label_values_follow_the_api_servers_rules() {
        let long = "v".repeat(64);
        for (value, valid) in [
            ("", true),
            ("r7", true),
            ("A-b_c.9", true),
            ("-x", false),
            ("x.", false),
            ("a/b", false),
            ("with space", false),
            (long.as_str(), false),
        ] {
            assert_eq!(label_value_error(value).is_none(), valid, "{value:?}");
        }
    }
}
