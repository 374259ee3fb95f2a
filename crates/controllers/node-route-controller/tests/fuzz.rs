//! Property test of the route controller's parser of outside input: `--cluster-cidr`, and the
//! destinations of the cloud's routes it decides on. Any text gets a clear error or the right
//! answer, never a panic.
//!
//! 256 cases by default; `PROPTEST_CASES=100000` (what `make fuzz` sets) for the full run.

use std::net::{Ipv4Addr, Ipv6Addr};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use node_route_controller::plan::ClusterCidrs;
use proptest::prelude::*;

fn v4() -> impl Strategy<Value = IpNet> {
    (any::<u32>(), 0u8..=32).prop_map(|(a, p)| IpNet::V4(Ipv4Net::new(Ipv4Addr::from(a), p).expect("prefix")))
}

fn v6() -> impl Strategy<Value = IpNet> {
    (any::<u128>(), 0u8..=128)
        .prop_map(|(a, p)| IpNet::V6(Ipv6Net::new(Ipv6Addr::from(a), p).expect("prefix")))
}

proptest! {
    #[test]
    fn fuzz_cluster_cidr_text_parses_or_says_why(text in "[0-9a-f.:/, ]{0,40}|(.){0,20}") {
        if let Err(e) = ClusterCidrs::parse(&text) {
            prop_assert!(!e.is_empty());
        }
    }

    #[test]
    fn fuzz_cluster_cidrs_are_what_was_given_without_host_bits(
        nets in prop_oneof![
            v4().prop_map(|n| vec![n]),
            v6().prop_map(|n| vec![n]),
            (v4(), v6()).prop_map(|(a, b)| vec![a, b]),
            (v6(), v4()).prop_map(|(a, b)| vec![a, b]),
        ],
        spaces in any::<bool>(),
        destination in prop_oneof![v4().prop_map(|n| n.to_string()), v6().prop_map(|n| n.to_string()), ".{0,20}"],
    ) {
        let separator = if spaces { " , " } else { "," };
        let text = nets.iter().map(ToString::to_string).collect::<Vec<_>>().join(separator);
        let parsed = ClusterCidrs::parse(&text).map_err(|e| TestCaseError::fail(format!("{text:?}: {e}")))?;
        let want = nets.iter().map(|n| n.trunc().to_string()).collect::<Vec<_>>().join(",");
        prop_assert_eq!(parsed.to_string(), want);
        // A route to a subnet of a cluster CIDR is the controller's; any text gets an answer.
        for net in &nets {
            let inside = IpNet::new(net.network(), net.max_prefix_len()).expect("host route");
            prop_assert!(parsed.is_responsible(&inside.to_string()), "{} in {}", inside, text);
        }
        let _ = parsed.is_responsible(&destination);
    }
}
