//! Routes: one route table shared by every cluster of the cloud (as a VPC's is), keyed by
//! destination CIDR; each cluster sees and deletes only its own routes.

use std::{collections::HashMap, time::SystemTime};

use ipnet::IpNet;
use provider::{AddressType, NodeAddress, ProviderError, Route};
use serde::{Deserialize, Serialize};

use crate::{
    SimulatorError,
    state::{Instance, RouteRecord, State},
};

type Result<T, E = ProviderError> = std::result::Result<T, E>;

fn invalid(msg: impl Into<String>) -> ProviderError {
    ProviderError::InvalidArgument(msg.into())
}

/// A destination CIDR, which must be a network address (`10.244.1.0/24`, not `10.244.1.5/24`):
/// a route that silently became another one would never match what the caller lists.
pub fn parse_cidr(s: &str) -> Result<IpNet> {
    let net: IpNet = s
        .trim()
        .parse()
        .map_err(|_| invalid(format!("destination {s:?} is not a CIDR")))?;
    if net.trunc() != net {
        return Err(invalid(format!(
            "destination {s} has host bits set; did you mean {}?",
            net.trunc()
        )));
    }
    Ok(net)
}

fn live_by_name(state: &State) -> HashMap<&str, &Instance> {
    state
        .instances
        .iter()
        .filter(|i| i.is_live())
        .map(|i| (i.name.as_str(), i))
        .collect()
}

/// The cluster's routes. A route whose target node has no live instance is a blackhole, as a
/// cloud route whose instance is gone.
pub fn list(state: &State, cluster: &str) -> Vec<Route> {
    let live = live_by_name(state);
    state
        .routes
        .iter()
        .filter(|r| r.cluster == cluster)
        .map(|r| {
            let target = live.get(r.target_node.as_str());
            Route {
                name: r.name.clone(),
                target_node: r.target_node.clone(),
                destination_cidr: r.destination_cidr.to_string(),
                blackhole: target.is_none(),
                target_node_addresses: target
                    .map(|i| {
                        vec![NodeAddress::new(
                            AddressType::InternalIP,
                            i.private_ip.to_string(),
                        )]
                    })
                    .unwrap_or_default(),
                // The simulator routes to node names: the name is the match.
                target_provider_id: String::new(),
            }
        })
        .collect()
}

/// Creates a route named `<cluster>-<name_hint>`. The same destination to the same target is
/// already done; to another target (or owned by another cluster) it is refused.
pub fn create(
    state: &mut State,
    cluster: &str,
    name_hint: &str,
    route: &Route,
    now: SystemTime,
) -> Result<()> {
    if cluster.is_empty() {
        return Err(invalid(
            "the cluster name is required (routes are tagged with it)",
        ));
    }
    if route.target_node.is_empty() {
        return Err(invalid("the route's target node is required"));
    }
    let cidr = parse_cidr(&route.destination_cidr)?;
    if let Some(existing) = state.routes.iter().find(|r| r.destination_cidr == cidr) {
        if existing.cluster == cluster && existing.target_node == route.target_node {
            return Ok(());
        }
        return Err(invalid(format!(
            "destination {cidr} is already routed to node {} by cluster {:?} (route {})",
            existing.target_node, existing.cluster, existing.name
        )));
    }
    // As with a real cloud route to an instance: the instance must exist to be a target.
    if !live_by_name(state).contains_key(route.target_node.as_str()) {
        return Err(invalid(format!(
            "no instance is named {:?}, so it cannot be a route target",
            route.target_node
        )));
    }
    let hint = if name_hint.is_empty() {
        route.target_node.as_str()
    } else {
        name_hint
    };
    state.routes.push(RouteRecord {
        cluster: cluster.to_string(),
        name: format!("{cluster}-{hint}"),
        target_node: route.target_node.clone(),
        destination_cidr: cidr,
        created_at: now,
    });
    Ok(())
}

/// What the admin API takes to add a route out of band, as an operator or another tool would
/// (the route controller then finds it in its cluster's list).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewRoute {
    /// The cluster whose route it is (its tag); required.
    pub cluster: String,
    /// The target instance's name (a live one); required.
    pub target_node: String,
    /// The destination, a network CIDR; required.
    pub destination_cidr: String,
    /// Name hint; default the target's name (the route is named `<cluster>-<hint>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name_hint: Option<String>,
}

/// Adds a route from the admin API: as [`create`], but a destination routed already (by any
/// cluster, to any target) is a conflict, not something done.
pub fn add(state: &mut State, spec: &NewRoute, now: SystemTime) -> Result<(), SimulatorError> {
    let cidr = parse_cidr(&spec.destination_cidr).map_err(|e| SimulatorError::Invalid(e.to_string()))?;
    if let Some(existing) = state.routes.iter().find(|r| r.destination_cidr == cidr) {
        return Err(SimulatorError::Conflict(format!(
            "destination {cidr} is already routed to node {} by cluster {:?} (route {})",
            existing.target_node, existing.cluster, existing.name
        )));
    }
    let route = Route {
        name: String::new(),
        target_node: spec.target_node.clone(),
        destination_cidr: spec.destination_cidr.clone(),
        blackhole: false,
        target_node_addresses: vec![],
        target_provider_id: String::new(),
    };
    let hint = spec.name_hint.as_deref().unwrap_or_default();
    create(state, &spec.cluster, hint, &route, now).map_err(|e| SimulatorError::Invalid(e.to_string()))
}

/// Deletes the cluster's route to `route.destination_cidr`; none is success.
pub fn delete(state: &mut State, cluster: &str, route: &Route) -> Result<()> {
    let cidr = parse_cidr(&route.destination_cidr)?;
    state
        .routes
        .retain(|r| !(r.cluster == cluster && r.destination_cidr == cidr));
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::ops::instances::{Action, act};

    fn now() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000)
    }

    fn state() -> State {
        crate::inventory::parse(
            "instances:\n- {name: n1, id: i-00000000000000001, private_ip: 10.0.0.11}\n\
             - {name: n2, id: i-00000000000000002}\n- {name: gone, state: terminated}\n",
        )
        .unwrap()
        .into_state(now())
    }

    fn route(target: &str, cidr: &str) -> Route {
        Route {
            name: String::new(),
            target_node: target.into(),
            destination_cidr: cidr.into(),
            blackhole: false,
            target_node_addresses: vec![],
            target_provider_id: String::new(),
        }
    }

    #[test]
    fn create_decisions() {
        let mut s = state();
        create(&mut s, "c1", "uid-1", &route("n1", "10.244.1.0/24"), now()).unwrap();
        let before = s.clone();
        // (cluster, route, Ok(()) | Err(fragment)); every one leaves the table as it was
        let cases = [
            ("c1", route("n1", "10.244.1.0/24"), Ok(())),
            (
                "c1",
                route("n2", "10.244.1.0/24"),
                Err("already routed to node n1"),
            ),
            ("c2", route("n1", "10.244.1.0/24"), Err("by cluster \"c1\"")),
            (
                "c1",
                route("n1", "10.244.1.5/24"),
                Err("did you mean 10.244.1.0/24"),
            ),
            ("c1", route("n1", "10.244.1.0/33"), Err("not a CIDR")),
            ("c1", route("n1", "banana"), Err("not a CIDR")),
            (
                "c1",
                route("gone", "10.244.9.0/24"),
                Err("no instance is named \"gone\""),
            ),
            ("c1", route("", "10.244.9.0/24"), Err("target node is required")),
            ("", route("n1", "10.244.9.0/24"), Err("cluster name")),
        ];
        for (cluster, r, want) in cases {
            match (create(&mut s, cluster, "uid-x", &r, now()), want) {
                (Ok(()), Ok(())) => {}
                (Err(ProviderError::InvalidArgument(m)), Err(w)) => assert!(m.contains(w), "{r:?}: {m}"),
                (got, want) => panic!("{cluster} {r:?}: got {got:?}, want {want:?}"),
            }
            assert_eq!(s, before, "{r:?}");
        }
    }

    #[test]
    fn list_is_per_cluster_and_marks_blackholes() {
        let mut s = state();
        create(&mut s, "c1", "uid-1", &route("n1", "10.244.1.0/24"), now()).unwrap();
        create(&mut s, "c1", "uid-2", &route("n2", "10.244.2.0/24"), now()).unwrap();
        create(&mut s, "c2", "uid-3", &route("n2", "fd00:10::/64"), now()).unwrap();
        act(&mut s, "i-00000000000000002", Action::Terminate).unwrap();
        let got = list(&s, "c1");
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].name, "c1-uid-1");
        assert!(!got[0].blackhole);
        assert_eq!(
            got[0].target_node_addresses,
            vec![NodeAddress::new(AddressType::InternalIP, "10.0.0.11")]
        );
        assert!(got[1].blackhole, "n2 is terminated");
        assert!(got[1].target_node_addresses.is_empty());
        let c2 = list(&s, "c2");
        assert_eq!(c2.len(), 1);
        assert_eq!(c2[0].destination_cidr, "fd00:10::/64");
        assert!(list(&s, "c3").is_empty());
    }

    #[test]
    fn routes_added_out_of_band_are_checked_like_creates_and_never_replace_one() {
        let mut s = state();
        let spec = |cluster: &str, target: &str, cidr: &str| NewRoute {
            cluster: cluster.into(),
            target_node: target.into(),
            destination_cidr: cidr.into(),
            name_hint: None,
        };
        add(&mut s, &spec("c1", "n1", "10.244.9.0/24"), now()).unwrap();
        assert_eq!(s.routes[0].name, "c1-n1", "named after the target without a hint");
        for (bad, kind) in [
            (spec("c1", "n1", "10.244.9.0/24"), "conflict"),
            (spec("c2", "n2", "10.244.9.0/24"), "conflict"),
            (spec("c1", "nobody", "10.244.8.0/24"), "invalid"),
            (spec("c1", "n1", "10.244.8.1/24"), "invalid"),
            (spec("", "n1", "10.244.8.0/24"), "invalid"),
        ] {
            let err = add(&mut s, &bad, now()).unwrap_err();
            assert_eq!(err.kind(), kind, "{bad:?}: {err}");
        }
        assert_eq!(s.routes.len(), 1);
    }

    #[test]
    fn delete_is_per_cluster_and_idempotent() {
        let mut s = state();
        create(&mut s, "c1", "uid-1", &route("n1", "10.244.1.0/24"), now()).unwrap();
        delete(&mut s, "c2", &route("n1", "10.244.1.0/24")).unwrap();
        assert_eq!(s.routes.len(), 1, "another cluster cannot delete it");
        delete(&mut s, "c1", &route("", "10.244.1.0/24")).unwrap();
        assert!(s.routes.is_empty());
        delete(&mut s, "c1", &route("", "10.244.1.0/24")).unwrap();
        assert!(delete(&mut s, "c1", &route("", "nope")).is_err());
    }
}
