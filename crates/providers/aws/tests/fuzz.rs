//! Property tests of what the AWS provider reads from a Service: every
//! `service.beta.kubernetes.io/aws-load-balancer-*` annotation (known, unknown, and the AWS Load
//! Balancer Controller's), the legacy source-range annotation, `loadBalancerSourceRanges`, the
//! ports and the UID its names derive from. Each input gets a clear error or the reading
//! cloud-provider-aws gives it, never a panic.
//!
//! 256 cases per property by default; `PROPTEST_CASES=100000` (what `make fuzz` sets) for the
//! full run.

use std::collections::BTreeMap;

use proptest::prelude::*;
use provider::{ExternalTrafficPolicy, Protocol, ProviderError, ServicePort, ServiceSpec};
use provider_aws::{
    annotations::{self as a, KNOWN, PortSet},
    config::LbSettings,
    naming,
    spec::{self, Kind},
    tags::ClusterTagging,
};

/// Values that mean something to one annotation or another, and some that mean nothing.
fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(vec![
            "", "true", "false", "False", "TRUE", "0", "1", "nlb", "external", "nlb-ip", "clb",
            "*", "443", "443,https", "443, 8443", "https,80", "-1", "+80", "2147483648", "30", "5",
            "tcp", "ssl", "http", "https", "TCP", "HTTP", "/healthz", "traffic-port", "10256",
            "k=v", "a=b,c=d", "a=b=c", "key", "=v", ",,", " , ", "kubernetes.io/cluster/x=owned",
            "sg-0123456789abcdef0", "sg-1, sg-2", "subnet-1,subnet-2", "eipalloc-1,eipalloc-2",
            "10.0.1.5", "10.0.0.0/8", "0.0.0.0/0", "::/0", "10.0.0.0/33", "proxy_protocol_v2.enabled=true",
            "deregistration_delay.timeout_seconds=30", "arn:aws:acm:us-east-1:123456789012:certificate/x",
            "ELBSecurityPolicy-TLS13-1-2-2021-06", "internal", "internet-facing", "instance", "ip",
            "ipv4", "dualstack", "my-bucket", "logs/prefix", "60",
        ])
        .prop_map(str::to_owned),
        1 => any::<String>(),
        1 => "[ -~]{0,40}",
    ]
}

/// Annotation keys: upstream's, unknown ones under its prefix, the Load Balancer Controller's,
/// the legacy source-range key and unrelated ones.
fn key() -> impl Strategy<Value = String> {
    let known: Vec<String> = KNOWN.iter().map(|(k, _)| (*k).to_owned()).collect();
    prop_oneof![
        6 => prop::sample::select(known),
        1 => prop::sample::select(vec![
            a::LBC_SCHEME.to_owned(),
            a::LBC_NLB_TARGET_TYPE.to_owned(),
            a::LBC_IP_ADDRESS_TYPE.to_owned(),
            a::LEGACY_SOURCE_RANGES.to_owned(),
        ]),
        1 => "[a-z-]{1,20}".prop_map(|s| format!("{}{s}", a::PREFIX)),
        1 => "[a-z./-]{1,30}",
    ]
}

fn protocol() -> impl Strategy<Value = Protocol> {
    prop_oneof![4 => Just(Protocol::Tcp), 1 => Just(Protocol::Udp), 1 => Just(Protocol::Sctp)]
}

fn port() -> impl Strategy<Value = ServicePort> {
    (
        prop_oneof![Just(String::new()), "[a-z]{1,8}", any::<String>()],
        protocol(),
        prop_oneof![prop::sample::select(vec![80u16, 443, 53, 8443]), any::<u16>()],
        any::<u16>(),
    )
        .prop_map(|(name, protocol, port, node_port)| ServicePort {
            name,
            protocol,
            port,
            node_port,
        })
}

fn source_range() -> impl Strategy<Value = String> {
    prop_oneof![
        (any::<[u8; 4]>(), 0u8..=32)
            .prop_map(|(o, len)| format!("{}.{}.{}.{}/{len}", o[0], o[1], o[2], o[3])),
        Just(" 10.0.0.0/8 ".to_owned()),
        Just("fd00::/8".to_owned()),
        "[ -~]{0,20}",
    ]
}

fn service() -> impl Strategy<Value = ServiceSpec> {
    (
        prop_oneof![
            4 => "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
            1 => any::<String>(),
        ],
        "[a-z][a-z0-9-]{0,20}",
        "[a-z][a-z0-9-]{0,30}",
        prop::collection::vec(port(), 0..4),
        any::<bool>(),
        any::<u16>(),
        prop::collection::vec(source_range(), 0..3),
        prop_oneof![4 => Just(String::new()), 1 => "[0-9.]{1,15}"],
        prop::collection::btree_map(key(), value(), 0..8),
        prop_oneof![9 => Just(false), 1 => Just(true)],
    )
        .prop_map(
            |(uid, namespace, name, ports, local, hc, source_ranges, requested_ip, annotations, affinity)| {
                ServiceSpec {
                    cluster_id: String::new(),
                    uid,
                    namespace,
                    name,
                    ports,
                    external_traffic_policy: if local {
                        ExternalTrafficPolicy::Local
                    } else {
                        ExternalTrafficPolicy::Cluster
                    },
                    health_check_node_port: hc,
                    source_ranges,
                    requested_ip,
                    annotations,
                    session_affinity_client_ip: affinity,
                    // AWS reads no ipFamilies (cloud-provider-aws does not either).
                    ip_families: Vec::new(),
                }
            },
        )
}

/// The annotations under upstream's prefix that are not upstream's (the Load Balancer
/// Controller's three aside, which are silent when they mean what is built).
fn unknown_aws_annotations(annotations: &BTreeMap<String, String>) -> Vec<&str> {
    annotations
        .keys()
        .map(String::as_str)
        .filter(|k| {
            k.starts_with(a::PREFIX)
                && !KNOWN.iter().any(|(known, _)| known == k)
                && ![a::LBC_SCHEME, a::LBC_NLB_TARGET_TYPE, a::LBC_IP_ADDRESS_TYPE].contains(k)
        })
        .collect()
}

proptest! {
    #[test]
    fn fuzz_service_reading_answers_or_refuses_by_name(svc in service()) {
        let cluster = ClusterTagging::new("fuzz", false).unwrap();
        let (result, notices) = spec::parse_noting(&cluster, &LbSettings::default(), &svc);
        // The same Service, the same notices (the service controller tells each once).
        prop_assert_eq!(&spec::parse_noting(&cluster, &LbSettings::default(), &svc).1, &notices);
        for n in &notices {
            prop_assert!(n.reason == a::VALUE_IGNORED || n.reason == a::KEY_IGNORED, "{:?}", n);
            prop_assert!(n.message.starts_with("annotation service.beta.kubernetes.io/"), "{:?}", n);
        }
        let lb_type = svc.annotations.get(a::TYPE).map(String::as_str);
        match &result {
            Ok(parsed) => {
                // Upstream's readings.
                prop_assert_eq!(parsed.is_network(), lb_type == Some("nlb"));
                prop_assert_eq!(parsed.internal, spec::wants_internal(&svc.annotations));
                prop_assert_eq!(parsed.scheme(), if parsed.internal { "internal" } else { "internet-facing" });
                prop_assert_eq!(&parsed.name, &naming::load_balancer_name(&svc.uid).unwrap());
                prop_assert!(parsed.name.len() <= 32, "{}", parsed.name);
                prop_assert!(!svc.ports.is_empty());
                prop_assert!(svc.requested_ip.is_empty());
                prop_assert!(!svc.session_affinity_client_ip);
                prop_assert!(!parsed.source_ranges.is_empty());
                // An annotation this provider does not read never passes silently.
                for key in unknown_aws_annotations(&svc.annotations) {
                    prop_assert!(
                        notices.iter().any(|n| n.reason == a::KEY_IGNORED && n.message.starts_with(&format!("annotation {key} "))),
                        "{} passed silently: {:?}", key, notices
                    );
                }
                match &parsed.kind {
                    Kind::Network(_) => prop_assert!(lb_type == Some("nlb")),
                    Kind::Classic(_) => prop_assert!(lb_type != Some("nlb")),
                }
                for (k, v) in &parsed.extra_tags {
                    prop_assert_eq!(parsed.tags.get(k), Some(v));
                }
            }
            Err(ProviderError::ImplementedElsewhere(why)) => {
                prop_assert!(matches!(lb_type, Some("external" | "nlb-ip")), "{why}");
            }
            Err(ProviderError::InvalidArgument(why)) => {
                prop_assert!(!why.is_empty());
                prop_assert!(!matches!(lb_type, Some("external" | "nlb-ip")), "{why}");
            }
            Err(other) => prop_assert!(false, "a Service reading never fails with {other:?}"),
        }
    }

    #[test]
    fn fuzz_internal_is_anything_but_empty_or_exactly_false(v in value()) {
        let annotations = BTreeMap::from([(a::INTERNAL.to_owned(), v.clone())]);
        prop_assert_eq!(spec::wants_internal(&annotations), !v.is_empty() && v != "false");
    }

    #[test]
    fn fuzz_lists_trim_and_drop_empty_entries(entries in prop::collection::vec("[ ]{0,2}[a-z0-9-]{0,6}[ ]{0,2}", 0..6)) {
        let joined = entries.join(",");
        let want: Vec<String> = entries.iter().map(|e| e.trim().to_owned()).filter(|e| !e.is_empty()).collect();
        prop_assert_eq!(a::list(&joined), want);
        prop_assert!(a::list(&joined).iter().all(|e| !e.contains(',') && e.trim() == e));
    }

    #[test]
    fn fuzz_key_values_round_trip(pairs in prop::collection::btree_map("[a-z][a-z0-9./_-]{0,10}", "[a-z0-9./_-]{0,10}", 0..6), tail in "(=[a-z0-9=]{0,4})?") {
        let written: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}{tail}")).collect();
        // Upstream keeps the part between the first and the second `=`.
        prop_assert_eq!(a::key_value_map(&written.join(",")), pairs);
    }

    #[test]
    fn fuzz_key_values_never_panic(raw in any::<String>()) {
        for (k, _) in a::key_values(&raw) {
            prop_assert!(!k.is_empty() && !k.contains(','));
        }
    }

    #[test]
    fn fuzz_ssl_ports_cover_what_they_name(raw in any::<String>(), port in any::<u16>(), name in "[a-z]{0,6}") {
        match PortSet::parse(Some(&raw)) {
            None => {
                prop_assert!(raw.is_empty() || raw == "*");
                prop_assert!(PortSet::covers(None, port, &name));
            }
            Some(set) => {
                let named = raw.split(',').any(|item| item == name || item.parse::<i64>().ok() == Some(i64::from(port)));
                prop_assert_eq!(PortSet::covers(Some(&set), port, &name), named);
            }
        }
    }

    #[test]
    fn fuzz_names_from_any_uid_are_valid_or_refused(uid in any::<String>()) {
        match naming::load_balancer_name(&uid) {
            Ok(name) => {
                prop_assert!(name.len() > 1 && name.len() <= 32, "{name}");
                prop_assert!(name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'), "{name}");
                prop_assert!(!name.ends_with('-'));
            }
            Err(e) => prop_assert!(matches!(e, ProviderError::InvalidArgument(_))),
        }
    }

    #[test]
    fn fuzz_target_group_names_fit_aws(
        ns in any::<String>(), name in any::<String>(), port in any::<u16>(), node_port in any::<u16>(), interval in any::<i32>(),
    ) {
        let tg = naming::target_group_name(&naming::TargetGroupKey {
            cluster_id: "fuzz",
            namespace: &ns,
            name: &name,
            service_port: port,
            node_port,
            protocol: "TCP",
            health_check_protocol: "TCP",
            health_check_interval: interval,
        });
        prop_assert!(tg.len() <= 32, "{tg}");
        prop_assert!(tg.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'), "{tg}");
        prop_assert!(!tg.starts_with('-') && !tg.ends_with('-'), "{tg}");
    }
}
