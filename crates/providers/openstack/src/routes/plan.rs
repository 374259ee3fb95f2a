//! The route decisions, pure: which of a router's extra routes are this cluster's, how each is
//! reported to the route controller, the nexthop of a new route, and the full-list and
//! allowed-address-pair edits.
//!
//! Neutron's extra routes carry no owner, so OCCM lists every route of the router as its own, and
//! clusters sharing a router delete each other's routes (OCCM #3128). Here a route is this
//! cluster's only when the router carries the ownership tag for exactly that route
//! ([`ownership_tag`]: cluster, destination, nexthop), written before the route is added and
//! removed after it is deleted. A route of another cluster, of an operator, or one OCCM made
//! before the switch is never listed, so never deleted; the route controller asks again for the
//! routes it wants, and creating an existing route only adds its tag (adoption).

use std::{
    collections::{BTreeSet, HashMap},
    net::IpAddr,
};

use ipnet::IpNet;
use provider::{AddressType, NodeAddress, ProviderError, Route};

use crate::neutron::ports::{AddressPair, FixedIp, Port};
pub use crate::neutron::routers::{ExtraRoute, Router};

/// The prefix of every ownership tag.
pub const TAG_PREFIX: &str = "kube-route";

/// The router tag that makes `route` this cluster's: `kube-route:<cluster>:<destination>:<nexthop>`,
/// the destination's `/` written `_` (a tag travels as one URL path segment). Neutron allows 255
/// characters; a longer tag (a very long cluster name) is refused by Neutron with a clear error.
pub fn ownership_tag(cluster: &str, route: &ExtraRoute) -> String {
    format!(
        "{TAG_PREFIX}:{cluster}:{}:{}",
        route.destination.replace('/', "_"),
        route.nexthop
    )
}

/// The router's routes that are this cluster's: those whose ownership tag the router carries.
pub fn owned_routes<'a>(router: &'a Router, cluster: &str) -> Vec<&'a ExtraRoute> {
    router
        .routes
        .iter()
        .filter(|r| router.tags.contains(&ownership_tag(cluster, r)))
        .collect()
}

/// Ownership tags of this cluster whose route is no longer on the router (a deletion that
/// stopped between the route and its tag, or a route removed by hand): removed when seen.
pub fn stale_tags(router: &Router, cluster: &str) -> Vec<String> {
    let prefix = format!("{TAG_PREFIX}:{cluster}:");
    let live: BTreeSet<String> = router.routes.iter().map(|r| ownership_tag(cluster, r)).collect();
    router
        .tags
        .iter()
        .filter(|t| t.starts_with(&prefix) && !live.contains(*t))
        .cloned()
        .collect()
}

/// The server behind a nexthop address: the port that holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NexthopOwner {
    /// The server (the port's `device_id`).
    pub server_id: String,
    /// The server's name, when known.
    pub server_name: Option<String>,
}

/// How a route of ours is reported to the route controller: named by its destination (as
/// OCCM), its nexthop kept as the target's InternalIP (a deletion removes exactly that route),
/// the target found by the server holding the nexthop (its name, and its providerID so the
/// controller matches the Node whatever its name). A nexthop no port holds is a blackhole whose
/// target is the nexthop itself, as OCCM reports it.
pub fn listed_route(
    route: &ExtraRoute,
    owner: Option<&NexthopOwner>,
    provider_id: impl Fn(&str) -> String,
) -> Route {
    let nexthop = NodeAddress::new(AddressType::InternalIP, route.nexthop.clone());
    match owner {
        Some(owner) => Route {
            name: route.destination.clone(),
            target_node: owner
                .server_name
                .clone()
                .unwrap_or_else(|| owner.server_id.clone()),
            destination_cidr: route.destination.clone(),
            blackhole: false,
            target_node_addresses: vec![nexthop],
            target_provider_id: provider_id(&owner.server_id),
        },
        None => Route {
            name: route.destination.clone(),
            target_node: route.nexthop.clone(),
            destination_cidr: route.destination.clone(),
            blackhole: true,
            target_node_addresses: vec![nexthop],
            target_provider_id: String::new(),
        },
    }
}

/// The nexthop of a new route to `route`'s target: its first InternalIP of the destination's
/// family (OCCM's `getAddrByNodeName`). An error when the destination is not a CIDR or the
/// target has no such address.
pub fn nexthop_for(route: &Route) -> Result<String, ProviderError> {
    let destination: IpNet = route.destination_cidr.trim().parse().map_err(|_| {
        ProviderError::InvalidArgument(format!(
            "route destination {:?} is not a CIDR",
            route.destination_cidr
        ))
    })?;
    route
        .target_node_addresses
        .iter()
        .filter(|a| a.kind == AddressType::InternalIP)
        .filter_map(|a| a.address.parse::<IpAddr>().ok())
        .find(|ip| ip.is_ipv4() == destination.addr().is_ipv4())
        .map(|ip| ip.to_string())
        .ok_or_else(|| {
            ProviderError::InvalidArgument(format!(
                "node {} has no InternalIP of the family of {} to route it to",
                route.target_node, route.destination_cidr
            ))
        })
}

/// Whether a new route's nexthop may be used: the port holding it (`holder`, looked up when the
/// target's server is known or allowed address pairs are in use) must exist, and when the
/// route names its target's server (`target_server`, from the providerID) it must be that
/// server's port. Otherwise a Node's address that some other port of the cloud holds (another
/// vendor's node after a gateway swap, an address reused on another network) would get the
/// pod CIDR routed to, and the address pair set on, a server that is not the Node's.
pub fn check_nexthop_holder(
    route: &Route,
    nexthop: &str,
    target_server: Option<&str>,
    holder: Option<&Port>,
) -> Result<(), ProviderError> {
    let Some(port) = holder else {
        return Err(ProviderError::InvalidArgument(format!(
            "no port of this cloud holds {nexthop} (node {}'s address for {}): its pod CIDR is not routed",
            route.target_node, route.destination_cidr
        )));
    };
    match target_server {
        Some(server) if port.device_id != server => Err(ProviderError::InvalidArgument(format!(
            "{nexthop} (node {}'s address for {}) is held by port {} of {:?}, not by the node's server {server}: its pod CIDR is not routed there",
            route.target_node, route.destination_cidr, port.id, port.device_id
        ))),
        _ => Ok(()),
    }
}

/// The nexthop of a listed route that is to be deleted: the InternalIP it was listed with.
pub fn listed_nexthop(route: &Route) -> Option<String> {
    route
        .target_node_addresses
        .iter()
        .find(|a| a.kind == AddressType::InternalIP)
        .map(|a| a.address.clone())
}

/// The router's full route list with `route` added; `None` when it is there already (for a
/// router without `extraroute-atomic`, written whole with `If-Match`).
pub fn with_route(routes: &[ExtraRoute], route: &ExtraRoute) -> Option<Vec<ExtraRoute>> {
    if routes.contains(route) {
        return None;
    }
    let mut all = routes.to_vec();
    all.push(route.clone());
    Some(all)
}

/// The router's full route list without `route`; `None` when it is not there.
pub fn without_route(routes: &[ExtraRoute], route: &ExtraRoute) -> Option<Vec<ExtraRoute>> {
    routes
        .contains(route)
        .then(|| routes.iter().filter(|r| *r != route).cloned().collect())
}

/// The port's pairs with the pod CIDR added, so port security lets the node send from its pods'
/// addresses (OCCM adds a pair with no MAC); `None` when a pair for the CIDR is there already.
pub fn pairs_with(pairs: &[AddressPair], cidr: &str) -> Option<Vec<AddressPair>> {
    if pairs.iter().any(|p| p.ip_address == cidr) {
        return None;
    }
    let mut all = pairs.to_vec();
    all.push(AddressPair {
        ip_address: cidr.to_owned(),
        mac_address: None,
    });
    Some(all)
}

/// The port's pairs without the pod CIDR's; `None` when it has none.
pub fn pairs_without(pairs: &[AddressPair], cidr: &str) -> Option<Vec<AddressPair>> {
    pairs
        .iter()
        .any(|p| p.ip_address == cidr)
        .then(|| pairs.iter().filter(|p| p.ip_address != cidr).cloned().collect())
}

/// The server holding each address, from a port list: only servers' ports count (a nexthop on a
/// router's own port is no node). Addresses no such port holds have no owner.
pub fn nexthop_owners(ports: &[Port]) -> HashMap<String, String> {
    ports
        .iter()
        .filter(|p| p.is_servers())
        .flat_map(|p| {
            p.fixed_ips
                .iter()
                .map(|ip| (ip.ip_address.clone(), p.device_id.clone()))
        })
        .collect()
}

/// The route an ownership tag of `cluster` names; `None` for a tag that is not one of the
/// cluster's ownership tags. The inverse of [`ownership_tag`] (the destination has exactly one
/// `_`, written for its `/`; the nexthop follows the `:` after it, IPv6 colons and all).
pub fn parse_ownership_tag(cluster: &str, tag: &str) -> Option<ExtraRoute> {
    let rest = tag.strip_prefix(&format!("{TAG_PREFIX}:{cluster}:"))?;
    let underscore = rest.find('_')?;
    let colon = underscore + rest[underscore..].find(':')?;
    let (destination, nexthop) = (&rest[..colon], &rest[colon + 1..]);
    (!nexthop.is_empty() && !destination.is_empty())
        .then(|| ExtraRoute::new(destination.replace('_', "/"), nexthop))
}

/// The ownership tags of *other* clusters for exactly `route` (two clusters routing the same CIDR
/// to the same node): while one remains, deleting our route only removes our tag.
pub fn other_owner_tags(router: &Router, cluster: &str, route: &ExtraRoute) -> Vec<String> {
    let ours = ownership_tag(cluster, route);
    let suffix = format!(":{}:{}", route.destination.replace('/', "_"), route.nexthop);
    let prefix = format!("{TAG_PREFIX}:");
    router
        .tags
        .iter()
        .filter(|t| {
            **t != ours
                && t.starts_with(&prefix)
                && t.ends_with(&suffix)
                && t.len() > prefix.len() + suffix.len()
        })
        .cloned()
        .collect()
}

/// Whether the pod CIDR's allowed address pair on a port is still needed by a route of the
/// router other than `route` (any owner, tagged or not: an OCCM route made before the switch, or
/// another cluster's): a route to the same destination via one of the port's addresses.
pub fn pair_still_needed(routes: &[ExtraRoute], route: &ExtraRoute, port_addresses: &[FixedIp]) -> bool {
    routes.iter().any(|r| {
        r != route
            && r.destination == route.destination
            && port_addresses.iter().any(|ip| ip.ip_address == r.nexthop)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn router(routes: &[(&str, &str)], tags: &[String]) -> Router {
        Router {
            id: "r1".into(),
            routes: routes.iter().map(|(d, n)| ExtraRoute::new(*d, *n)).collect(),
            tags: tags.iter().cloned().collect(),
            revision_number: 3,
        }
    }

    fn tag(cluster: &str, d: &str, n: &str) -> String {
        ownership_tag(cluster, &ExtraRoute::new(d, n))
    }

    #[test]
    fn a_nexthop_must_be_held_by_the_targets_own_server() {
        let route = Route {
            target_node: "n1".into(),
            destination_cidr: "10.244.1.0/24".into(),
            ..Route::default()
        };
        let port = |device: &str| Port {
            id: "p1".into(),
            device_id: device.into(),
            device_owner: "compute:nova".into(),
            ..Port::default()
        };
        // (case, target server, holder) → refused with a message containing
        type Case<'a> = (&'a str, Option<&'a str>, Option<Port>, Option<&'a str>);
        let cases: Vec<Case> = vec![
            ("the node's own port", Some("s1"), Some(port("s1")), None),
            ("no providerID: any holder", None, Some(port("s9")), None),
            (
                "another server's port",
                Some("s1"),
                Some(port("s9")),
                Some("not by the node's server s1"),
            ),
            (
                "a port of no server",
                Some("s1"),
                Some(port("")),
                Some("held by port p1"),
            ),
            (
                "nobody holds it",
                Some("s1"),
                None,
                Some("no port of this cloud holds 10.0.0.5"),
            ),
            (
                "nobody holds it, no providerID",
                None,
                None,
                Some("no port of this cloud holds"),
            ),
        ];
        for (case, server, holder, refused) in cases {
            let got = check_nexthop_holder(&route, "10.0.0.5", server, holder.as_ref());
            match (refused, got) {
                (None, Ok(())) => {}
                (Some(want), Err(ProviderError::InvalidArgument(m))) => {
                    assert!(m.contains(want), "{case}: {m}");
                }
                (want, got) => panic!("{case}: want refusal {want:?}, got {got:?}"),
            }
        }
    }

    #[test]
    fn a_tag_names_cluster_destination_and_nexthop_and_has_no_slash() {
        let t = tag("prod", "10.244.1.0/24", "10.0.0.5");
        assert_eq!(t, "kube-route:prod:10.244.1.0_24:10.0.0.5");
        assert!(!tag("prod", "fd00:1::/64", "fd00::5").contains('/'));
    }

    #[test]
    fn only_routes_with_this_clusters_tag_are_owned() {
        // (routes on the router, tags, cluster) → owned destinations
        let cases: Vec<(&str, Router, Vec<&str>)> = vec![
            (
                "ours among another cluster's and an operator's on a shared router",
                router(
                    &[
                        ("10.244.1.0/24", "10.0.0.5"),
                        ("10.244.2.0/24", "10.0.0.6"),
                        ("192.168.0.0/16", "10.0.0.1"),
                    ],
                    &[
                        tag("a", "10.244.1.0/24", "10.0.0.5"),
                        tag("b", "10.244.2.0/24", "10.0.0.6"),
                    ],
                ),
                vec!["10.244.1.0/24"],
            ),
            (
                "the same CIDR in both clusters (overlapping cluster CIDRs, OCCM #3128): each its own",
                router(
                    &[("10.244.1.0/24", "10.0.0.5"), ("10.244.1.0/24", "10.0.0.9")],
                    &[
                        tag("a", "10.244.1.0/24", "10.0.0.5"),
                        tag("b", "10.244.1.0/24", "10.0.0.9"),
                    ],
                ),
                vec!["10.244.1.0/24"],
            ),
            (
                "an untagged route (made by OCCM before the switch) is not listed",
                router(&[("10.244.1.0/24", "10.0.0.5")], &[]),
                vec![],
            ),
            (
                "a tag for another nexthop does not own the route",
                router(
                    &[("10.244.1.0/24", "10.0.0.5")],
                    &[tag("a", "10.244.1.0/24", "10.0.0.7")],
                ),
                vec![],
            ),
        ];
        for (name, r, want) in cases {
            let got: Vec<&str> = owned_routes(&r, "a")
                .into_iter()
                .map(|r| r.destination.as_str())
                .collect();
            assert_eq!(got, want, "{name}");
        }
        // Cluster b sees only its own route of the shared CIDR.
        let shared = router(
            &[("10.244.1.0/24", "10.0.0.5"), ("10.244.1.0/24", "10.0.0.9")],
            &[
                tag("a", "10.244.1.0/24", "10.0.0.5"),
                tag("b", "10.244.1.0/24", "10.0.0.9"),
            ],
        );
        assert_eq!(
            owned_routes(&shared, "b"),
            [&ExtraRoute::new("10.244.1.0/24", "10.0.0.9")]
        );
    }

    #[test]
    fn a_tag_without_its_route_is_stale_and_another_clusters_never() {
        let r = router(
            &[("10.244.1.0/24", "10.0.0.5")],
            &[
                tag("a", "10.244.1.0/24", "10.0.0.5"),
                tag("a", "10.244.3.0/24", "10.0.0.8"),
                tag("ab", "10.244.4.0/24", "10.0.0.8"),
                tag("b", "10.244.9.0/24", "10.0.0.8"),
                "unrelated".into(),
            ],
        );
        assert_eq!(stale_tags(&r, "a"), [tag("a", "10.244.3.0/24", "10.0.0.8")]);
    }

    #[test]
    fn a_listed_route_names_its_server_or_is_a_blackhole() {
        let pid = |id: &str| format!("openstack:///{id}");
        let route = ExtraRoute::new("10.244.1.0/24", "10.0.0.5");
        let owner = NexthopOwner {
            server_id: "s-1".into(),
            server_name: Some("node-1".into()),
        };
        let listed = listed_route(&route, Some(&owner), pid);
        assert_eq!(listed.name, "10.244.1.0/24");
        assert_eq!(listed.target_node, "node-1");
        assert_eq!(listed.target_provider_id, "openstack:///s-1");
        assert!(!listed.blackhole);
        assert_eq!(listed_nexthop(&listed).as_deref(), Some("10.0.0.5"));

        let nameless = NexthopOwner {
            server_name: None,
            ..owner
        };
        assert_eq!(listed_route(&route, Some(&nameless), pid).target_node, "s-1");

        let dead = listed_route(&route, None, pid);
        assert!(dead.blackhole);
        assert_eq!(
            dead.target_node, "10.0.0.5",
            "OCCM names a blackhole's target by its nexthop"
        );
        assert_eq!(dead.target_provider_id, "");
        assert_eq!(listed_nexthop(&dead).as_deref(), Some("10.0.0.5"));
    }

    /// OCCM's `TestGetAddrByNodeName`: the first InternalIP of the destination's family.
    #[test]
    fn the_nexthop_is_the_first_internal_ip_of_the_destinations_family() {
        let addresses = vec![
            NodeAddress::new(AddressType::ExternalIP, "203.0.113.5"),
            NodeAddress::new(AddressType::InternalIP, "fd00::5"),
            NodeAddress::new(AddressType::InternalIP, "10.0.0.5"),
            NodeAddress::new(AddressType::InternalIP, "10.0.0.6"),
            NodeAddress::new(AddressType::Hostname, "node-1"),
        ];
        let route = |cidr: &str, addresses: Vec<NodeAddress>| Route {
            target_node: "node-1".into(),
            destination_cidr: cidr.into(),
            target_node_addresses: addresses,
            ..Route::default()
        };
        let cases = [
            ("10.244.1.0/24", addresses.clone(), Ok("10.0.0.5")),
            ("fd00:1::/64", addresses.clone(), Ok("fd00::5")),
            (
                "10.244.1.0/24",
                vec![NodeAddress::new(AddressType::ExternalIP, "203.0.113.5")],
                Err("has no InternalIP"),
            ),
            ("not-a-cidr", addresses, Err("is not a CIDR")),
        ];
        for (cidr, addresses, want) in cases {
            let got = nexthop_for(&route(cidr, addresses));
            match (got, want) {
                (Ok(got), Ok(want)) => assert_eq!(got, want, "{cidr}"),
                (Err(ProviderError::InvalidArgument(m)), Err(want)) => assert!(m.contains(want), "{m}"),
                (got, want) => panic!("{cidr}: {got:?}, wanted {want:?}"),
            }
        }
    }

    #[test]
    fn full_list_and_pair_edits_are_none_when_nothing_changes() {
        let a = ExtraRoute::new("10.244.1.0/24", "10.0.0.5");
        let b = ExtraRoute::new("10.244.2.0/24", "10.0.0.6");
        assert_eq!(
            with_route(std::slice::from_ref(&a), &b),
            Some(vec![a.clone(), b.clone()])
        );
        assert_eq!(with_route(std::slice::from_ref(&a), &a), None);
        assert_eq!(without_route(&[a.clone(), b.clone()], &a), Some(vec![b.clone()]));
        assert_eq!(without_route(std::slice::from_ref(&b), &a), None);

        let mac = AddressPair {
            ip_address: "10.0.0.100".into(),
            mac_address: Some("fa:16:3e:00:00:01".into()),
        };
        let with = pairs_with(std::slice::from_ref(&mac), "10.244.1.0/24").unwrap();
        assert_eq!(with.len(), 2);
        assert_eq!(with[1].mac_address, None, "OCCM adds the pair without a MAC");
        assert_eq!(pairs_with(&with, "10.244.1.0/24"), None);
        assert_eq!(pairs_without(&with, "10.244.1.0/24"), Some(vec![mac.clone()]));
        assert_eq!(pairs_without(&[mac], "10.244.1.0/24"), None);
    }

    #[test]
    fn nexthop_owners_come_from_ports_of_servers() {
        let port = |owner: &str, device: &str, ips: &[&str]| {
            crate::routes::tests::port(&format!("p-{device}"), owner, device, "", ips)
        };
        let ports = [
            port("compute:nova", "s-1", &["10.0.0.5", "fd00::5"]),
            port("network:router_interface", "r-1", &["10.0.0.1"]),
            port("compute:nova", "", &["10.0.0.9"]),
        ];
        let owners = nexthop_owners(&ports);
        assert_eq!(owners.get("10.0.0.5").map(String::as_str), Some("s-1"));
        assert_eq!(owners.get("fd00::5").map(String::as_str), Some("s-1"));
        assert!(!owners.contains_key("10.0.0.1"), "a router's own port is no node");
        assert!(!owners.contains_key("10.0.0.9"), "an unattached port is no node");
    }
}

#[cfg(test)]
mod added_tests {
    use super::*;

    #[test]
    fn an_ownership_tag_reads_back_as_its_route() {
        for (cluster, d, n) in [
            ("prod", "10.244.1.0/24", "10.0.0.5"),
            ("a:b", "10.244.1.0/24", "10.0.0.5"),
            ("prod", "fd00:1::/64", "fd00:10::5"),
            ("prod_x", "fd00:1:2:3::/64", "10.0.0.5"),
        ] {
            let route = ExtraRoute::new(d, n);
            let tag = ownership_tag(cluster, &route);
            assert_eq!(parse_ownership_tag(cluster, &tag), Some(route), "{tag}");
        }
        assert_eq!(
            parse_ownership_tag("prod", "kube-route:other:10.244.1.0_24:10.0.0.5"),
            None
        );
        assert_eq!(parse_ownership_tag("prod", "kube-route:prod:garbage"), None);
        assert_eq!(
            parse_ownership_tag("prod", "kube-route:prod:10.244.1.0_24:"),
            None
        );
        assert_eq!(parse_ownership_tag("prod", "unrelated"), None);
    }

    #[test]
    fn other_owners_of_the_same_route_are_found_and_of_other_routes_not() {
        let route = ExtraRoute::new("10.244.1.0/24", "10.0.0.5");
        let router = Router {
            tags: [
                ownership_tag("a", &route),
                ownership_tag("b", &route),
                ownership_tag("c", &ExtraRoute::new("10.244.1.0/24", "10.0.0.55")),
                ownership_tag("d", &ExtraRoute::new("110.244.1.0/24", "10.0.0.5")),
                "kube-route::10.244.1.0_24:10.0.0.5".to_owned(),
                "x:10.244.1.0_24:10.0.0.5".to_owned(),
            ]
            .into_iter()
            .collect(),
            ..Router::default()
        };
        assert_eq!(
            other_owner_tags(&router, "a", &route),
            [ownership_tag("b", &route)]
        );
        assert_eq!(
            other_owner_tags(&router, "b", &route),
            [ownership_tag("a", &route)]
        );
    }

    #[test]
    fn a_pair_is_needed_while_another_route_to_the_cidr_goes_via_the_port() {
        let ips = |a: &[&str]| -> Vec<FixedIp> {
            a.iter()
                .map(|ip| FixedIp {
                    ip_address: (*ip).to_owned(),
                    ..FixedIp::default()
                })
                .collect()
        };
        let ours = ExtraRoute::new("10.244.1.0/24", "10.0.0.5");
        let via_other_ip = ExtraRoute::new("10.244.1.0/24", "10.0.0.6");
        let elsewhere = ExtraRoute::new("10.244.1.0/24", "10.0.0.9");
        let other_cidr = ExtraRoute::new("10.244.2.0/24", "10.0.0.5");
        let port = ips(&["10.0.0.5", "10.0.0.6"]);
        assert!(!pair_still_needed(std::slice::from_ref(&ours), &ours, &port));
        assert!(!pair_still_needed(
            &[ours.clone(), elsewhere, other_cidr],
            &ours,
            &port
        ));
        assert!(pair_still_needed(&[ours.clone(), via_other_ip], &ours, &port));
    }
}
