//! The Service annotations cloud-provider-aws reads, which load balancer type each applies to,
//! the value syntaxes they share, and what is read other than written. Pure functions only.
//!
//! # What cloud-provider-aws accepts is accepted; what it ignores is ignored, and said
//! Every `service.beta.kubernetes.io/aws-load-balancer-*` key is read as upstream reads it.
//! Where upstream returns an error (a boolean `ParseBool` refuses, an integer `ParseInt`
//! refuses, `proxy-protocol` other than `*`, `extra-security-groups` on an NLB,
//! `target-group-attributes` on a Classic ELB) the Service is refused by name. Where upstream
//! silently ignores or falls back (a key it does not read, an AWS Load Balancer Controller
//! annotation, a key read only for the other load balancer type, the tail of `a=b=c`) the same
//! happens here and a [`Notices`] entry says so; the service controller tells each once per
//! Service in a Warning event.

use std::{
    cell::RefCell,
    collections::{BTreeMap, BTreeSet},
};

use provider::{ProviderError, ServiceNotice};

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

/// Upstream's annotations and the types they apply to. On the other type upstream ignores them
/// (so does this provider, with a notice), except the two its validation refuses
/// (`extra-security-groups` on an NLB, `target-group-attributes` on a Classic ELB).
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

/// AWS Load Balancer Controller annotations under [`PREFIX`] that upstream does not read (a
/// notice names them as the controller's, not as a misspelling).
const LOAD_BALANCER_CONTROLLER: &[&str] = &[
    "name",
    "ipv6-addresses",
    "alpn-policy",
    "attributes",
    "healthcheck-success-codes",
    "manage-backend-security-group-rules",
    "security-group-prefix-lists",
    "enable-prefix-for-ipv6-source-nat",
    "source-nat-ipv6-prefixes",
    "inbound-sg-rules-on-private-link-traffic",
    "minimum-load-balancer-capacity",
    "enable-icmp-for-path-mtu-discovery",
    "multi-cluster-target-group",
    "listener-attributes",
];

/// The event reason of a value read as cloud-provider-aws reads it, not as written (upstream
/// has none: it falls back silently).
pub const VALUE_IGNORED: &str = "AnnotationValueIgnored";
/// The event reason of a key cloud-provider-aws does not read here (upstream ignores it
/// silently).
pub const KEY_IGNORED: &str = "AnnotationIgnored";

pub(crate) fn invalid(msg: impl Into<String>) -> ProviderError {
    ProviderError::InvalidArgument(msg.into())
}

/// What a Service's reading took other than written, in reading order. Interior mutability
/// lets the pure readers note through a shared reference.
#[derive(Debug, Default)]
pub struct Notices(RefCell<Vec<ServiceNotice>>);

impl Notices {
    fn push(&self, reason: &str, message: String) {
        self.0.borrow_mut().push(ServiceNotice {
            reason: reason.to_owned(),
            message,
        });
    }

    /// `value` of `key` is not used as written: `instead` is, as upstream does.
    pub fn value_ignored(&self, key: &str, value: &str, why: &str, instead: &str) {
        self.push(
            VALUE_IGNORED,
            format!("annotation {key}: {value:?} {why}; {instead}, as cloud-provider-aws does"),
        );
    }

    /// `key` is not read at all (`why`), as upstream does not read it.
    pub fn key_ignored(&self, key: &str, why: &str) {
        self.push(
            KEY_IGNORED,
            format!("annotation {key} {why}: ignored, as cloud-provider-aws ignores it"),
        );
    }

    /// The notices, in order.
    pub fn into_vec(self) -> Vec<ServiceNotice> {
        self.0.into_inner()
    }
}

/// Refuses what upstream's validation refuses (`extra-security-groups` on an NLB,
/// `target-group-attributes` on a Classic ELB) and notes every other
/// `aws-load-balancer-*` key that is ignored: unknown ones, the AWS Load Balancer Controller's,
/// and upstream's on the type they are not read for. `network`: the Service gets an NLB.
pub fn check_known(
    annotations: &BTreeMap<String, String>,
    network: bool,
    internal: bool,
    notices: &Notices,
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
            if fits {
                continue;
            }
            match key.as_str() {
                EXTRA_SECURITY_GROUPS => {
                    return Err(invalid(format!(
                        "{key} is not supported on a network load balancer (cloud-provider-aws refuses it too)"
                    )));
                }
                TARGET_GROUP_ATTRIBUTES => {
                    return Err(invalid(format!(
                        "{key} is only supported for network load balancers (aws-load-balancer-type: nlb), as in cloud-provider-aws"
                    )));
                }
                _ => {}
            }
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
            notices.key_ignored(key, &format!("is read for {other} only, not for {this}{hint}"));
            continue;
        }
        not_read(key, value, internal, notices);
    }
    Ok(())
}

/// Keys upstream does not read. The AWS Load Balancer Controller's three that are often set
/// next to upstream's are silent when their value means what is built anyway; every other is
/// ignored with a notice saying what is built instead, or which key was likely meant.
fn not_read(key: &str, value: &str, internal: bool, notices: &Notices) {
    let controllers = |built: &str| {
        notices.key_ignored(
            key,
            &format!(
                "is an AWS Load Balancer Controller annotation, which cloud-provider-aws does not read ({value:?}; {built}; for that controller set aws-load-balancer-type: external)"
            ),
        );
    };
    match key {
        LBC_SCHEME => match value {
            "internet-facing" if !internal => {}
            "internal" if internal => {}
            _ if internal => controllers(&format!("the load balancer is internal, as {INTERNAL} asks")),
            _ => controllers(&format!(
                "the load balancer is INTERNET-FACING: set {INTERNAL}: \"true\" for an internal one"
            )),
        },
        LBC_NLB_TARGET_TYPE if value == "instance" => {}
        LBC_NLB_TARGET_TYPE => controllers("the nodes' instances are registered on their node ports"),
        LBC_IP_ADDRESS_TYPE if value == "ipv4" => {}
        LBC_IP_ADDRESS_TYPE => controllers("the load balancer is IPv4 only"),
        _ => {
            let suffix = &key[PREFIX.len()..];
            if LOAD_BALANCER_CONTROLLER
                .iter()
                .any(|c| suffix == *c || suffix.starts_with(&format!("{c}.")))
            {
                controllers("nothing is built from it");
            } else {
                let meant = likely_meant(suffix)
                    .map(|k| format!(" (did you mean {k}?)"))
                    .unwrap_or_default();
                notices.key_ignored(key, &format!("is not one cloud-provider-aws reads{meant}"));
            }
        }
    }
}

/// The known key a misspelt suffix most likely stands for: the nearest within three edits, or
/// one it cuts short or extends (`ssl-cert-arn`), nearest first.
fn likely_meant(suffix: &str) -> Option<&'static str> {
    KNOWN
        .iter()
        .map(|(k, _)| *k)
        .filter_map(|k| {
            let known = &k[PREFIX.len()..];
            let distance = edit_distance(suffix, known);
            let (short, long) = if suffix.len() < known.len() {
                (suffix, known)
            } else {
                (known, suffix)
            };
            let extends = short.len() >= 6 && long.starts_with(short);
            (distance <= 3 || extends).then_some((distance, k))
        })
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// Levenshtein distance over characters. Hand-written: a dozen lines for one hint, where a
/// crate would add a dependency to the provider.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1).min(row[j] + 1).min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
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
/// labels, `getKeyValuePropertiesFromAnnotation`), entry by entry in written order: the whole
/// value and each entry trimmed, an entry split on `=`, its key the first part and its value
/// the second, so `a=b=c` gives `b`, as upstream reads it; a bare key has an empty value; an
/// entry without a key is dropped.
pub fn key_values(value: &str) -> Vec<(String, String)> {
    value
        .trim()
        .split(',')
        .filter_map(|entry| {
            let mut parts = entry.trim().split('=');
            let key = parts.next().unwrap_or_default();
            let value = parts.next().unwrap_or_default();
            (!key.is_empty()).then(|| (key.to_owned(), value.to_owned()))
        })
        .collect()
}

/// `key_values` as a map (a repeated key keeps its last value, as upstream's map does).
pub fn key_value_map(value: &str) -> BTreeMap<String, String> {
    key_values(value).into_iter().collect()
}

/// [`key_value_map`] of the annotation `key`, noting what is read other than written: the part
/// of an entry after a second `=`, and an earlier value of a key set twice.
pub fn key_value_map_noting(key: &str, value: &str, notices: &Notices) -> BTreeMap<String, String> {
    for entry in value.trim().split(',').map(str::trim) {
        let mut parts = entry.splitn(3, '=');
        if let (Some(k), Some(v), Some(_)) = (parts.next(), parts.next(), parts.next())
            && !k.is_empty()
        {
            notices.value_ignored(
                key,
                entry,
                "has a second \"=\"",
                &format!("{k}={v:?} is used (the rest is dropped)"),
            );
        }
    }
    let pairs = key_values(value);
    let map: BTreeMap<String, String> = pairs.iter().cloned().collect();
    for (i, (k, v)) in pairs.iter().enumerate() {
        if pairs[i + 1..].iter().any(|(later, _)| later == k) {
            notices.value_ignored(
                key,
                &format!("{k}={v}"),
                "is overridden by a later entry for the same key",
                &format!("{k}={:?} is used", map[k]),
            );
        }
    }
    map
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

/// `ssl-ports` of the annotations ([`PortSet::parse`]), noting each entry with spaces around
/// it: upstream does not trim, so `443, 8443` names port 443 and a port called `" 8443"`.
pub fn ssl_ports(annotations: &BTreeMap<String, String>, notices: &Notices) -> Option<PortSet> {
    let value = annotations.get(SSL_PORTS).map(String::as_str);
    let set = PortSet::parse(value)?;
    for item in value.unwrap_or_default().split(',') {
        if item != item.trim() && !item.trim().is_empty() {
            notices.value_ignored(
                SSL_PORTS,
                item,
                "has spaces around it, and entries are not trimmed",
                &format!(
                    "it names a port called {item:?}, so port {:?} gets no TLS from it",
                    item.trim()
                ),
            );
        }
    }
    Some(set)
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
    fn key_values_read_like_upstream() {
        // Upstream's TestGetKeyValuePropertiesFromAnnotation rows, then a second `=`.
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
            ("a=b=c", &[("a", "b")]),
            ("a=,a=2", &[("a", ""), ("a", "2")]),
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
    fn a_second_equals_sign_and_a_repeated_key_are_noted() {
        let notices = Notices::default();
        let map = key_value_map_noting(ADDITIONAL_TAGS, "team=web=blue, cost=1,cost=2", &notices);
        assert_eq!(map, annotations(&[("team", "web"), ("cost", "2")]));
        let messages: Vec<String> = notices.into_vec().into_iter().map(|n| n.message).collect();
        assert_eq!(messages.len(), 2, "{messages:?}");
        assert!(
            messages[0].contains("team=web=blue") && messages[0].contains(r#"team="web""#),
            "{messages:?}"
        );
        assert!(
            messages[1].contains("cost=1") && messages[1].contains(r#"cost="2""#),
            "{messages:?}"
        );
        let quiet = Notices::default();
        key_value_map_noting(ADDITIONAL_TAGS, "a=1,b,c=", &quiet);
        assert_eq!(quiet.into_vec(), []);
    }

    #[test]
    fn untrimmed_ssl_ports_are_noted() {
        let notices = Notices::default();
        let set = ssl_ports(&annotations(&[(SSL_PORTS, "443, 8443")]), &notices).unwrap();
        assert!(!PortSet::covers(Some(&set), 8443, ""));
        let n = notices.into_vec();
        assert_eq!(n.len(), 1);
        assert!(n[0].message.contains(r#"" 8443""#), "{n:?}");
        let quiet = Notices::default();
        ssl_ports(&annotations(&[(SSL_PORTS, "443,https")]), &quiet);
        assert_eq!(quiet.into_vec(), []);
    }

    #[test]
    fn edit_distance_counts_edits() {
        assert_eq!(edit_distance("", ""), 0);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("internel", "internal"), 1);
        assert_eq!(edit_distance("abc", ""), 3);
    }

    #[test]
    fn what_upstream_ignores_is_noted_and_what_it_refuses_is_refused() {
        // (key, value, network, internal, Ok(noted: a text the notice holds) or Err(refusal naming …))
        type Row = (
            &'static str,
            &'static str,
            bool,
            bool,
            Result<Option<&'static str>, &'static str>,
        );
        let hc_success = "service.beta.kubernetes.io/aws-load-balancer-healthcheck-success-codes";
        let rows: &[Row] = &[
            (TYPE, "nlb", true, false, Ok(None)),
            (PROXY_PROTOCOL, "*", false, false, Ok(None)),
            (CROSS_ZONE, "true", true, false, Ok(None)),
            ("example.com/other", "x", true, false, Ok(None)),
            // Upstream's validation (aws_validations.go) refuses these two.
            (
                EXTRA_SECURITY_GROUPS,
                "sg-1",
                true,
                false,
                Err(EXTRA_SECURITY_GROUPS),
            ),
            (
                TARGET_GROUP_ATTRIBUTES,
                "x",
                false,
                false,
                Err(TARGET_GROUP_ATTRIBUTES),
            ),
            // Read for the other type only: upstream ignores them.
            (PROXY_PROTOCOL, "*", true, false, Ok(Some("proxy_protocol_v2"))),
            (IDLE_TIMEOUT, "60", true, false, Ok(Some("Classic ELBs only"))),
            (
                ACCESS_LOG_EMIT_INTERVAL,
                "5",
                true,
                false,
                Ok(Some("Classic ELBs only")),
            ),
            (
                DRAINING_ENABLED,
                "true",
                true,
                false,
                Ok(Some("Classic ELBs only")),
            ),
            (DRAINING_TIMEOUT, "x", true, false, Ok(Some("Classic ELBs only"))),
            (
                SECURITY_GROUPS,
                "sg-1",
                true,
                false,
                Ok(Some("Classic ELBs only")),
            ),
            (
                EIP_ALLOCATIONS,
                "eipalloc-1",
                false,
                false,
                Ok(Some("network load balancers")),
            ),
            (
                PRIVATE_IPV4,
                "10.0.0.5",
                false,
                false,
                Ok(Some("network load balancers")),
            ),
            // The AWS Load Balancer Controller's: silent where they mean what is built.
            (LBC_SCHEME, "internal", true, true, Ok(None)),
            (LBC_SCHEME, "internet-facing", false, false, Ok(None)),
            (LBC_SCHEME, "internal", true, false, Ok(Some("INTERNET-FACING"))),
            (
                LBC_SCHEME,
                "internet-facing",
                false,
                true,
                Ok(Some("internal, as")),
            ),
            (LBC_NLB_TARGET_TYPE, "instance", true, false, Ok(None)),
            (LBC_NLB_TARGET_TYPE, "instance", false, false, Ok(None)),
            (LBC_NLB_TARGET_TYPE, "ip", true, false, Ok(Some("node ports"))),
            (LBC_IP_ADDRESS_TYPE, "ipv4", true, false, Ok(None)),
            (
                LBC_IP_ADDRESS_TYPE,
                "dualstack",
                true,
                false,
                Ok(Some("IPv4 only")),
            ),
            (
                hc_success,
                "200",
                true,
                false,
                Ok(Some("AWS Load Balancer Controller")),
            ),
            (
                "service.beta.kubernetes.io/aws-load-balancer-listener-attributes.TCP-80",
                "x",
                true,
                false,
                Ok(Some("AWS Load Balancer Controller")),
            ),
            // Unknown: ignored, with the key likely meant.
            (
                "service.beta.kubernetes.io/aws-load-balancer-internel",
                "true",
                false,
                false,
                Ok(Some(
                    "did you mean service.beta.kubernetes.io/aws-load-balancer-internal?",
                )),
            ),
            (
                "service.beta.kubernetes.io/aws-load-balancer-ssl-cert-arn",
                "arn:x",
                false,
                false,
                Ok(Some(
                    "did you mean service.beta.kubernetes.io/aws-load-balancer-ssl-cert?",
                )),
            ),
            (
                "service.beta.kubernetes.io/aws-load-balancer-healthcheck-intervals",
                "10",
                false,
                false,
                Ok(Some(
                    "did you mean service.beta.kubernetes.io/aws-load-balancer-healthcheck-interval?",
                )),
            ),
            (
                "service.beta.kubernetes.io/aws-load-balancer-frobnicate",
                "1",
                false,
                false,
                Ok(Some("is not one cloud-provider-aws reads: ignored")),
            ),
        ];
        for (key, value, network, internal, want) in rows {
            let notices = Notices::default();
            let got = check_known(&annotations(&[(key, value)]), *network, *internal, &notices);
            let notices = notices.into_vec();
            match want {
                Ok(None) => assert_eq!((got, notices), (Ok(()), vec![]), "{key}={value}"),
                Ok(Some(text)) => {
                    assert_eq!(got, Ok(()), "{key}={value}");
                    assert_eq!(notices.len(), 1, "{key}={value}: {notices:?}");
                    assert_eq!(notices[0].reason, KEY_IGNORED);
                    assert!(
                        notices[0].message.contains(key) && notices[0].message.contains(text),
                        "{key}={value} network={network}: {notices:?}"
                    );
                }
                Err(named) => assert!(
                    matches!(&got, Err(ProviderError::InvalidArgument(m)) if m.contains(named)),
                    "{key}={value} network={network}: {got:?}"
                ),
            }
        }
    }
}
