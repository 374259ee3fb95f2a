//! OCCM's node decisions as pure functions: what Nova and Neutron answered ([`crate::nova`],
//! [`crate::neutron`]) goes in, the providerID, addresses, zone, instance type, shutdown state or
//! by-name match comes out. [`crate::instances`] makes the calls around them.
//!
//! - [`provider_id`]: `openstack:///<id>` and `openstack://<region>/<id>`, both ways.
//! - [`addresses`]: OCCM's `nodeAddresses` and `address-sort-order`.
//! - [`metadata`]: zone (`SanitizeLabel`), instance type, shutdown, InstanceMetadata.
//! - [`by_name`]: the Nova name filter for Nodes without providerID, singly or batched, and the
//!   decision on its answer (a definite not-found, unlike OCCM's fault F1).
//!
//! Tests ported from OCCM keep its test names (`occm_test_…`) and fixtures.

pub mod addresses;
pub mod by_name;
pub mod metadata;
pub mod provider_id;

pub use crate::{
    lenient::ModelError,
    neutron::{networks::Network, ports::Port},
    nova::{Flavor, Server},
};
pub use addresses::{
    AddressOptions, SubportAddresses, node_addresses, node_addresses_with_subports, parse_address_sort_order,
    resolve_trunk_subports, sort_node_addresses, trunk_subport_ids,
};
pub use by_name::{
    ByNameMatch, NameBatch, batch_name_filters, match_batch_by_name, match_by_name, name_filter, quote_meta,
};
pub use metadata::{
    FlavorLookups, InstanceTypeChoice, choose_instance_type, instance_metadata, is_shutdown, sanitize_label,
};
pub use provider_id::{ProviderIdError, ProviderIdScheme, instance_id_from_provider_id, make_instance_id};

#[cfg(test)]
mod fuzz_tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Any providerID parses or is refused, never panics; what parses is OCCM's regex match,
        /// and a made ID always parses back.
        #[test]
        fn fuzz_provider_ids_never_panic(pid in "(openstack|other|)(://|:/|/|)[a-zA-Z0-9/:._-]{0,12}", region in "[a-zA-Z0-9-]{0,8}") {
            let occm = regex::Regex::new("^openstack://([^/]*)/([^/]+)$").unwrap();
            let prefixed = if !pid.is_empty() && !pid.contains("://") { format!("openstack://{pid}") } else { pid.clone() };
            let want = occm.captures(&prefixed).map(|c| (c[2].to_owned(), c[1].to_owned()));
            let got = instance_id_from_provider_id(&pid).ok().map(|(i, r)| (i.to_owned(), r.to_owned()));
            prop_assert_eq!(got, want);
            let scheme = ProviderIdScheme { region, regional: true };
            let _ = scheme.server_id(&pid);
            if !pid.is_empty() && !pid.contains('/') {
                let made = scheme.make_instance_id(&pid);
                prop_assert_eq!(scheme.server_id(&made), Ok(pid.as_str()));
            }
        }

        /// Go's QuoteMeta output, anchored, is a regex matching exactly the name.
        #[test]
        fn fuzz_quote_meta_round_trips(name in "\\PC{0,24}", other in "\\PC{0,24}") {
            let re = regex::Regex::new(&name_filter(&name)).unwrap();
            prop_assert!(re.is_match(&name));
            prop_assert_eq!(re.is_match(&other), other == name);
            if !name.is_empty() && !other.is_empty() {
                let batch = batch_name_filters(&[name.as_str(), other.as_str()], 1 << 16);
                let re = regex::Regex::new(&batch[0].filter).unwrap();
                prop_assert!(re.is_match(&name) && re.is_match(&other));
            }
        }

        /// Any name against any list decides without panicking, and "found" is that name.
        #[test]
        fn fuzz_names_never_panic(name in "\\PC{0,12}", names in proptest::collection::vec("[a-cA-C.]{0,3}", 0..6)) {
            let servers: Vec<Server> = names.iter().enumerate()
                .map(|(i, n)| Server { id: i.to_string(), name: n.clone(), ..Server::default() })
                .collect();
            if let ByNameMatch::Found(s) = match_by_name(&name, &servers) {
                prop_assert_eq!(s.name.to_lowercase(), name.to_lowercase());
            }
        }

        /// Zone labels are always valid label values once sanitized and not cut mid-separator.
        #[test]
        fn fuzz_sanitize_label(input in "\\PC{0,80}") {
            let out = sanitize_label(&input);
            prop_assert!(out.len() <= 63);
            prop_assert!(out.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)));
            if out.len() < 63 {
                prop_assert!(metadata::is_valid_label_value(&out), "{:?}", out);
            }
        }

        /// Arbitrary JSON-ish server bodies never panic the reader or the address algorithm.
        #[test]
        fn fuzz_server_bodies(body in "\\{\"server\": \\{\"id\": \"x\"(, \"(addresses|metadata|flavor|accessIPv4|status)\": (null|1|\"s\"|\\[\\]|\\{\\}|\\{\"n\": \\[\\{\"addr\": (1|\"10.0.0.1\"|\"::1\"|null)\\}\\]\\}|\\{\"hostname\": \"h\"\\})){0,5}\\}\\}",
                              v6_off in any::<bool>()) {
            if let Ok(s) = Server::from_get_body(body.as_bytes()) {
                let opts = AddressOptions { ipv6_support_disabled: v6_off, address_sort_order: parse_address_sort_order("10.0.0.0/8 ::/0"), ..AddressOptions::default() };
                let addrs = node_addresses(&s, &[], &opts);
                prop_assert!(addrs.iter().all(|a| !a.address.is_empty()));
            }
        }
    }
}
