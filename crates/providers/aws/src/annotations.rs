//! The Service annotations cloud-provider-aws reads, which load balancer type each applies to,
//! and the value syntaxes they share. Pure functions only.
//!
//! Every `service.beta.kubernetes.io/aws-load-balancer-*` key is either one of upstream's (read
//! as upstream reads it), one of the AWS Load Balancer Controller's whose value means what we
//! build anyway, or refused by name: a Service never gets a load balancer that silently differs
//! from what its manifest asks for.

use std::collections::{BTreeMap, BTreeSet};

use provider::ProviderError;

/// Prefix of every key this module knows.
pub const PREFIX: &str = "service.beta.kubernetes.io/aws-load-balancer-";

pub const TYPE: &str = "service.beta.kubernetes.io/aws-load-balancer-type";
pub const INTERNAL: &str = "service.beta.kubernetes.io/aws-load-balancer-internal";
pub const PROXY_PROTOCOL: &str = "service.beta.kubernetes.io/aws-load-balancer-proxy-protocol";
pub const ACCESS_LOG_EMIT_INTERVAL: &str =
    "service.beta.kubernetes.io/aws-load-balancer-access-log-emit-interval";
pub const ACCESS_LOG_ENABLED: &str = "service.beta.kubernetes.io/aws-load-balancer-access-log-enabled";
pub const ACCESS_LOG_BUCKET: &str = "service.beta.kubernetes.io/aws-load-balancer-access-log-s3-bucket-name";
pub const ACCESS_LOG_PREFIX: &str =
    "service.beta.kubernetes.io/aws-load-balancer-access-log-s3-bucket-prefix";
pub const DRAINING_ENABLED: &str = "service.beta.kubernetes.io/aws-load-balancer-connection-draining-enabled";
pub const DRAINING_TIMEOUT: &str = "service.beta.kubernetes.io/aws-load-balancer-connection-draining-timeout";
pub const IDLE_TIMEOUT: &str = "service.beta.kubernetes.io/aws-load-balancer-connection-idle-timeout";
pub const CROSS_ZONE: &str = "service.beta.kubernetes.io/aws-load-balancer-cross-zone-load-balancing-enabled";
pub const EXTRA_SECURITY_GROUPS: &str = "service.beta.kubernetes.io/aws-load-balancer-extra-security-groups";
pub const SECURITY_GROUPS: &str = "service.beta.kubernetes.io/aws-load-balancer-security-groups";
pub const SSL_CERT: &str = "service.beta.kubernetes.io/aws-load-balancer-ssl-cert";
pub const SSL_PORTS: &str = "service.beta.kubernetes.io/aws-load-balancer-ssl-ports";
pub const SSL_NEGOTIATION_POLICY: &str =
    "service.beta.kubernetes.io/aws-load-balancer-ssl-negotiation-policy";
pub const BACKEND_PROTOCOL: &str = "service.beta.kubernetes.io/aws-load-balancer-backend-protocol";
pub const ADDITIONAL_TAGS: &str = "service.beta.kubernetes.io/aws-load-balancer-additional-resource-tags";
pub const HC_PROTOCOL: &str = "service.beta.kubernetes.io/aws-load-balancer-healthcheck-protocol";
pub const HC_PORT: &str = "service.beta.kubernetes.io/aws-load-balancer-healthcheck-port";
pub const HC_PATH: &str = "service.beta.kubernetes.io/aws-load-balancer-healthcheck-path";
pub const HC_HEALTHY: &str = "service.beta.kubernetes.io/aws-load-balancer-healthcheck-healthy-threshold";
pub const HC_UNHEALTHY: &str = "service.beta.kubernetes.io/aws-load-balancer-healthcheck-unhealthy-threshold";
pub const HC_TIMEOUT: &str = "service.beta.kubernetes.io/aws-load-balancer-healthcheck-timeout";
pub const HC_INTERVAL: &str = "service.beta.kubernetes.io/aws-load-balancer-healthcheck-interval";
pub const TARGET_GROUP_ATTRIBUTES: &str =
    "service.beta.kubernetes.io/aws-load-balancer-target-group-attributes";
pub const EIP_ALLOCATIONS: &str = "service.beta.kubernetes.io/aws-load-balancer-eip-allocations";
pub const PRIVATE_IPV4: &str = "service.beta.kubernetes.io/aws-load-balancer-private-ipv4-addresses";
pub const TARGET_NODE_LABELS: &str = "service.beta.kubernetes.io/aws-load-balancer-target-node-labels";
pub const SUBNETS: &str = "service.beta.kubernetes.io/aws-load-balancer-subnets";

/// The legacy source-range annotation (`spec.loadBalancerSourceRanges` wins over it).
pub const LEGACY_SOURCE_RANGES: &str = "service.beta.kubernetes.io/load-balancer-source-ranges";

/// AWS Load Balancer Controller annotations accepted when their value means what this provider
/// builds anyway; any other value is refused (the Service asks for a different load balancer).
pub const LBC_SCHEME: &str = "service.beta.kubernetes.io/aws-load-balancer-scheme";
pub const LBC_NLB_TARGET_TYPE: &str = "service.beta.kubernetes.io/aws-load-balancer-nlb-target-type";
pub const LBC_IP_ADDRESS_TYPE: &str = "service.beta.kubernetes.io/aws-load-balancer-ip-address-type";

/// Which load balancer types an annotation applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppliesTo {
    /// Classic ELB and NLB.
    Both,
    /// Classic ELB only.
    Classic,
    /// Network load balancer only.
    Network,
}

/// Upstream's annotations and the types they apply to. An annotation on a type it does not apply
/// to is refused by name (upstream ignores most of them: a proxy-protocol asked of an NLB would
/// silently not happen).
pub const KNOWN: &[(&str, AppliesTo)] = &[
    (TYPE, AppliesTo::Both),
    (INTERNAL, AppliesTo::Both),
    (PROXY_PROTOCOL, AppliesTo::Classic),
    (ACCESS_LOG_EMIT_INTERVAL, AppliesTo::Classic),
    (ACCESS_LOG_ENABLED, AppliesTo::Both),
    (ACCESS_LOG_BUCKET, AppliesTo::Both),
    (ACCESS_LOG_PREFIX, AppliesTo::Both),
    (DRAINING_ENABLED, AppliesTo::Classic),
    (DRAINING_TIMEOUT, AppliesTo::Classic),
    (IDLE_TIMEOUT, AppliesTo::Classic),
    (CROSS_ZONE, AppliesTo::Both),
    (EXTRA_SECURITY_GROUPS, AppliesTo::Classic),
    (SECURITY_GROUPS, AppliesTo::Classic),
    (SSL_CERT, AppliesTo::Both),
    (SSL_PORTS, AppliesTo::Both),
    (SSL_NEGOTIATION_POLICY, AppliesTo::Both),
    (BACKEND_PROTOCOL, AppliesTo::Both),
    (ADDITIONAL_TAGS, AppliesTo::Both),
    (HC_PROTOCOL, AppliesTo::Both),
    (HC_PORT, AppliesTo::Both),
    (HC_PATH, AppliesTo::Both),
    (HC_HEALTHY, AppliesTo::Both),
    (HC_UNHEALTHY, AppliesTo::Both),
    (HC_TIMEOUT, AppliesTo::Both),
    (HC_INTERVAL, AppliesTo::Both),
    (TARGET_GROUP_ATTRIBUTES, AppliesTo::Network),
    (EIP_ALLOCATIONS, AppliesTo::Network),
    (PRIVATE_IPV4, AppliesTo::Network),
    (TARGET_NODE_LABELS, AppliesTo::Both),
    (SUBNETS, AppliesTo::Both),
];

pub(crate) fn invalid(msg: impl Into<String>) -> ProviderError {
    ProviderError::InvalidArgument(msg.into())
}

/// Refuses every `aws-load-balancer-*` annotation this provider does not read, and upstream's
/// annotations on a type they do not apply to. `network`: the Service gets an NLB.
pub fn check_known(
    annotations: &BTreeMap<String, String>,
    network: bool,
    internal: bool,
) -> Result<(), ProviderError> {
    for (key, value) in annotations {
        if !key.starts_with(PREFIX) {
            continue;
        }
        if let Some((_, applies)) = KNOWN.iter().find(|(k, _)| k == key) {
            let fits = match applies {
                AppliesTo::Both => true,
                AppliesTo::Classic => !network,
                AppliesTo::Network => network,
            };
            if !fits {
                let (this, other) = if network {
                    ("a network load balancer", "Classic ELBs")
                } else {
                    (
                        "a Classic ELB",
                        "network load balancers (aws-load-balancer-type: nlb)",
                    )
                };
                let hint = match key.as_str() {
                    PROXY_PROTOCOL => {
                        "; for an NLB use aws-load-balancer-target-group-attributes: proxy_protocol_v2.enabled=true"
                    }
                    _ => "",
                };
                return Err(invalid(format!(
                    "{key} does not apply to {this}: it is read for {other} only{hint}"
                )));
            }
            continue;
        }
        check_load_balancer_controller(key, value, network, internal)?;
    }
    Ok(())
}

/// AWS Load Balancer Controller annotations: accepted only where the value asks for what this
/// provider builds; everything else would change the meaning, so it is refused by name.
fn check_load_balancer_controller(
    key: &str,
    value: &str,
    network: bool,
    internal: bool,
) -> Result<(), ProviderError> {
    let refused = |why: &str| {
        Err(invalid(format!(
            "{key}={value:?} is an AWS Load Balancer Controller annotation this provider cannot honour: {why}"
        )))
    };
    match key {
        LBC_SCHEME => match value {
            "internet-facing" if !internal => Ok(()),
            "internal" if internal => Ok(()),
            "internal" => refused(&format!(
                "set {INTERNAL}: \"true\" for an internal load balancer (without it the load balancer would be internet-facing)"
            )),
            _ => refused(&format!("the scheme follows {INTERNAL}")),
        },
        LBC_NLB_TARGET_TYPE if network && value == "instance" => Ok(()),
        LBC_NLB_TARGET_TYPE => refused(
            "this provider registers instances on their node ports; IP targets need the AWS Load Balancer Controller (aws-load-balancer-type: external)",
        ),
        LBC_IP_ADDRESS_TYPE if value == "ipv4" => Ok(()),
        LBC_IP_ADDRESS_TYPE => refused("this provider builds IPv4 load balancers"),
        _ => Err(invalid(format!(
            "{key} is not an annotation of cloud-provider-aws, which this provider follows; remove it (for the AWS Load Balancer Controller's annotations set aws-load-balancer-type: external)"
        ))),
    }
}

/// Go's `strconv.ParseBool`, which upstream uses for boolean annotations.
pub fn parse_bool(value: &str) -> Option<bool> {
    match value {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

/// A boolean annotation; absent or empty: `default`.
pub fn bool_or(
    annotations: &BTreeMap<String, String>,
    key: &str,
    default: bool,
) -> Result<bool, ProviderError> {
    match annotations.get(key).map(String::as_str) {
        None | Some("") => Ok(default),
        Some(v) => {
            parse_bool(v).ok_or_else(|| invalid(format!("{key}={v:?} is not a boolean (true or false)")))
        }
    }
}

/// An integer annotation (Go's `ParseInt(v, 10, 32)`): `None` when absent, or when empty and
/// `empty_is_absent` (upstream skips empty values for the attribute annotations, but parses
/// them for health checks, where empty is an error).
pub fn int(
    annotations: &BTreeMap<String, String>,
    key: &str,
    empty_is_absent: bool,
) -> Result<Option<i32>, ProviderError> {
    match annotations.get(key).map(String::as_str) {
        None => Ok(None),
        Some("") if empty_is_absent => Ok(None),
        Some(v) => v
            .parse::<i32>()
            .map(Some)
            .map_err(|_| invalid(format!("{key}={v:?} is not an integer"))),
    }
}

/// A string annotation; absent or empty: `None`.
pub fn non_empty<'a>(annotations: &'a BTreeMap<String, String>, key: &str) -> Option<&'a str> {
    annotations.get(key).map(String::as_str).filter(|v| !v.is_empty())
}

/// Upstream's comma lists of security groups and subnets: split on commas, entries trimmed,
/// empty entries dropped.
pub fn list(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Upstream's `K1=V1,K2=V2,K3=,K4` lists (additional tags, target-group attributes, target-node
/// labels): each entry trimmed; a bare key has an empty value.
///
/// Upstream keeps only the text between the first and the second `=`, so `a=b=c` gives `b`;
/// here the value is everything after the first `=` (`b=c`), as written.
pub fn key_values(value: &str) -> Vec<(String, String)> {
    value
        .trim()
        .split(',')
        .map(str::trim)
        .filter_map(|entry| {
            let (key, value) = entry.split_once('=').unwrap_or((entry, ""));
            (!key.is_empty()).then(|| (key.to_owned(), value.to_owned()))
        })
        .collect()
}

/// `key_values` as a map (a repeated key keeps its last value, as upstream's map does).
pub fn key_value_map(value: &str) -> BTreeMap<String, String> {
    key_values(value).into_iter().collect()
}

/// The ports `ssl-ports` names: `None` for all ports (absent, empty or `*`).
///
/// Kept exactly as upstream: entries are *not* trimmed, so `443, 8443` names port 443 and the
/// port named `" 8443"`; changing that would turn listeners users have run as plain TCP for years
/// into TLS the day they switch controllers.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PortSet {
    /// Port numbers.
    pub numbers: BTreeSet<i64>,
    /// Port names.
    pub names: BTreeSet<String>,
}

impl PortSet {
    /// Parses `ssl-ports`.
    pub fn parse(value: Option<&str>) -> Option<Self> {
        let value = value.filter(|v| !v.is_empty() && *v != "*")?;
        let mut set = Self::default();
        for item in value.split(',') {
            // Go's strconv.Atoi: an optional sign, then digits.
            match item.parse::<i64>() {
                Ok(n) => {
                    set.numbers.insert(n);
                }
                Err(_) => {
                    set.names.insert(item.to_owned());
                }
            }
        }
        Some(set)
    }

    /// Whether the set (or its absence, meaning every port) covers a port.
    pub fn covers(set: Option<&Self>, port: u16, name: &str) -> bool {
        set.is_none_or(|s| s.numbers.contains(&i64::from(port)) || s.names.contains(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn key_values_read_like_upstream_except_for_a_second_equals_sign() {
        // Upstream's TestGetKeyValuePropertiesFromAnnotation rows, then ours.
        let cases: &[(&str, &[(&str, &str)])] = &[
            ("key1=value1", &[("key1", "value1")]),
            (
                "key1=value1,key2=value2",
                &[("key1", "value1"), ("key2", "value2")],
            ),
            (
                " key1=value1 , key2=value2 ",
                &[("key1", "value1"), ("key2", "value2")],
            ),
            ("key1=", &[("key1", "")]),
            ("key1", &[("key1", "")]),
            ("key1,key2=value2", &[("key1", ""), ("key2", "value2")]),
            ("=value1", &[]),
            ("", &[]),
            (",,", &[]),
            ("a=b=c", &[("a", "b=c")]),
        ];
        for (input, want) in cases {
            let want: Vec<(String, String)> = want
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect();
            assert_eq!(key_values(input), want, "{input:?}");
        }
    }

    #[test]
    fn lists_are_trimmed_and_skip_empty_entries() {
        assert_eq!(list(" sg-1 ,, sg-2,"), vec!["sg-1", "sg-2"]);
        assert!(list("").is_empty());
    }

    #[test]
    fn ssl_ports_are_numbers_and_untrimmed_names() {
        assert_eq!(PortSet::parse(None), None);
        assert_eq!(PortSet::parse(Some("")), None);
        assert_eq!(PortSet::parse(Some("*")), None);
        let set = PortSet::parse(Some("443,https, 8443")).unwrap();
        assert!(PortSet::covers(Some(&set), 443, ""));
        assert!(PortSet::covers(Some(&set), 1, "https"));
        // Upstream's quirk, kept: " 8443" is a port name, so port 8443 stays plain.
        assert!(!PortSet::covers(Some(&set), 8443, ""));
        assert!(PortSet::covers(Some(&set), 8443, " 8443"));
        assert!(PortSet::covers(None, 80, "http"));
    }

    #[test]
    fn booleans_follow_go() {
        let a = annotations(&[("k", "T"), ("e", ""), ("bad", "yes")]);
        assert_eq!(bool_or(&a, "k", false), Ok(true));
        assert_eq!(bool_or(&a, "e", true), Ok(true));
        assert_eq!(bool_or(&a, "absent", false), Ok(false));
        assert!(bool_or(&a, "bad", false).unwrap_err().to_string().contains("bad"));
    }

    #[test]
    fn integers_name_the_annotation() {
        let a = annotations(&[("n", "42"), ("e", ""), ("bad", "4x")]);
        assert_eq!(int(&a, "n", false), Ok(Some(42)));
        assert_eq!(int(&a, "e", true), Ok(None));
        assert!(int(&a, "e", false).is_err());
        assert!(int(&a, "bad", true).unwrap_err().to_string().contains("bad"));
    }

    #[test]
    fn unknown_and_misplaced_annotations_are_refused_by_name() {
        type Row = (&'static str, &'static str, bool, bool, Option<&'static str>);
        // (key, value, network, internal, refusal naming …)
        let rows: &[Row] = &[
            (TYPE, "nlb", true, false, None),
            (PROXY_PROTOCOL, "*", false, false, None),
            (PROXY_PROTOCOL, "*", true, false, Some("proxy_protocol_v2")),
            (IDLE_TIMEOUT, "60", true, false, Some(IDLE_TIMEOUT)),
            (DRAINING_ENABLED, "true", true, false, Some(DRAINING_ENABLED)),
            (SECURITY_GROUPS, "sg-1", true, false, Some(SECURITY_GROUPS)),
            (
                EXTRA_SECURITY_GROUPS,
                "sg-1",
                true,
                false,
                Some(EXTRA_SECURITY_GROUPS),
            ),
            (
                TARGET_GROUP_ATTRIBUTES,
                "x",
                false,
                false,
                Some(TARGET_GROUP_ATTRIBUTES),
            ),
            (EIP_ALLOCATIONS, "eipalloc-1", false, false, Some(EIP_ALLOCATIONS)),
            (PRIVATE_IPV4, "10.0.0.5", false, false, Some(PRIVATE_IPV4)),
            (CROSS_ZONE, "true", true, false, None),
            (LBC_SCHEME, "internal", true, false, Some(INTERNAL)),
            (LBC_SCHEME, "internal", true, true, None),
            (LBC_SCHEME, "internet-facing", false, false, None),
            (LBC_SCHEME, "internet-facing", false, true, Some(LBC_SCHEME)),
            (LBC_NLB_TARGET_TYPE, "ip", true, false, Some(LBC_NLB_TARGET_TYPE)),
            (LBC_NLB_TARGET_TYPE, "instance", true, false, None),
            (
                LBC_NLB_TARGET_TYPE,
                "instance",
                false,
                false,
                Some(LBC_NLB_TARGET_TYPE),
            ),
            (
                LBC_IP_ADDRESS_TYPE,
                "dualstack",
                true,
                false,
                Some(LBC_IP_ADDRESS_TYPE),
            ),
            (LBC_IP_ADDRESS_TYPE, "ipv4", true, false, None),
            (
                "service.beta.kubernetes.io/aws-load-balancer-healthcheck-success-codes",
                "200",
                true,
                false,
                Some("healthcheck-success-codes"),
            ),
            (
                "service.beta.kubernetes.io/aws-load-balancer-name",
                "x",
                false,
                false,
                Some("-name"),
            ),
            ("example.com/other", "x", true, false, None),
        ];
        for (key, value, network, internal, refusal) in rows {
            let got = check_known(&annotations(&[(key, value)]), *network, *internal);
            match refusal {
                None => assert_eq!(got, Ok(()), "{key}={value}"),
                Some(named) => assert!(
                    matches!(&got, Err(ProviderError::InvalidArgument(m)) if m.contains(key) && m.contains(named)),
                    "{key}={value} network={network}: {got:?}"
                ),
            }
        }
    }
}
