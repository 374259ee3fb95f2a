//! Every decision of the route controller, pure: which routes to keep, create and delete
//! (upstream's `reconcile`), the `NetworkUnavailable` condition a node gets, and which node
//! changes call for a reconcile. No I/O here; table tests beside it (`plan/tests.rs`).

use std::{
    collections::{HashMap, HashSet},
    fmt,
};

use controller_kit::routes::Route;
use ipnet::IpNet;
use k8s_openapi::{
    api::core::v1::{Node, NodeAddress, NodeCondition},
    apimachinery::pkg::apis::meta::v1::Time,
};
use serde_json::{Value, json};

#[cfg(test)]
mod tests;

/// The node condition this controller owns (`v1.NodeNetworkUnavailable`).
pub const NETWORK_UNAVAILABLE: &str = "NetworkUnavailable";
/// Reason of `NetworkUnavailable=False`: every pod CIDR of the node has a route.
pub const REASON_ROUTE_CREATED: &str = "RouteCreated";
/// Message of `NetworkUnavailable=False` (upstream's words).
pub const MESSAGE_ROUTE_CREATED: &str = "RouteController created a route";
/// Reason of `NetworkUnavailable=True`: some pod CIDR of the node has no route.
pub const REASON_NO_ROUTE_CREATED: &str = "NoRouteCreated";
/// Message of `NetworkUnavailable=True` (upstream's words).
pub const MESSAGE_NO_ROUTE_CREATED: &str = "RouteController failed to create a route";

/// `--cluster-cidr`: the ranges whose routes this controller manages. One CIDR, or one IPv4
/// and one IPv6 (dual-stack).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterCidrs(Vec<IpNet>);

impl ClusterCidrs {
    /// Parses a comma-separated list. Host bits are dropped (`10.244.1.5/16` is
    /// `10.244.0.0/16`), as upstream's `ParseCIDRSloppy` does: a value upstream accepts works.
    ///
    /// # Errors
    /// What is wrong, without the flag's name (the caller adds it): an entry that is not a CIDR,
    /// more than two, two of one family.
    pub fn parse(list: &str) -> Result<Self, String> {
        let nets = list
            .split(',')
            .map(str::trim)
            .map(|c| {
                c.parse::<IpNet>()
                    .map(|n| n.trunc())
                    .map_err(|_| format!("{c:?} is not a CIDR"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        match nets.as_slice() {
            [] => Err("no CIDR given".into()),
            [_] => Ok(Self(nets)),
            [a, b] if matches!(a, IpNet::V4(_)) != matches!(b, IpNet::V4(_)) => Ok(Self(nets)),
            [_, _] => Err("two CIDRs make a dual-stack cluster: one IPv4 and one IPv6".into()),
            _ => Err("at most two CIDRs (one IPv4, one IPv6)".into()),
        }
    }

    /// Whether a route to `destination` is this controller's (upstream's
    /// `isResponsibleForRoute`): its first or its last address lies inside a cluster CIDR. An
    /// unparsable destination is nobody's: it is never touched.
    pub fn is_responsible(&self, destination: &str) -> bool {
        let Ok(net) = destination.trim().parse::<IpNet>() else {
            return false;
        };
        self.0
            .iter()
            .any(|c| c.contains(&net.network()) || c.contains(&net.broadcast()))
    }
}

impl fmt::Display for ClusterCidrs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let all: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        f.write_str(&all.join(","))
    }
}

/// What the plan needs of a Node.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NodeFacts {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.uid`: the name hint of its routes.
    pub uid: String,
    /// `spec.providerID`: sent with a create; a listed route carrying it is this node's,
    /// whatever name the cloud knows the instance by.
    pub provider_id: String,
    /// `spec.podCIDRs` (`spec.podCIDR` when only that is set).
    pub pod_cidrs: Vec<String>,
    /// `status.addresses`, sent with a create.
    pub addresses: Vec<NodeAddress>,
}

impl NodeFacts {
    /// The facts of `node`.
    pub fn of(node: &Node) -> Self {
        let spec = node.spec.as_ref();
        let mut pod_cidrs = spec.and_then(|s| s.pod_cidrs.clone()).unwrap_or_default();
        if pod_cidrs.is_empty()
            && let Some(one) = spec.and_then(|s| s.pod_cidr.clone()).filter(|c| !c.is_empty())
        {
            pod_cidrs.push(one);
        }
        Self {
            name: node.metadata.name.clone().unwrap_or_default(),
            uid: node.metadata.uid.clone().unwrap_or_default(),
            provider_id: spec.and_then(|s| s.provider_id.clone()).unwrap_or_default(),
            pod_cidrs,
            addresses: node
                .status
                .as_ref()
                .and_then(|s| s.addresses.clone())
                .unwrap_or_default(),
        }
    }
}

/// A route to create.
#[derive(Debug, Clone, PartialEq)]
pub struct Create {
    /// The target node's name.
    pub node: String,
    /// The target node's UID: the name hint.
    pub uid: String,
    /// The route: target, destination (the pod CIDR as the node has it), target addresses.
    pub route: Route,
    /// Routes to the same destination to delete first (another node's, a blackhole, one with
    /// stale addresses): a destination is routed once, so the create waits for them.
    pub replaces: Vec<Route>,
}

/// Why a node's pod CIDR has no route and gets none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unrouted {
    /// It lies outside `--cluster-cidr`: not this controller's to create.
    OutsideClusterCidr,
    /// Another node has the same pod CIDR, and the route is that node's (kept, or created first).
    HeldBy(String),
}

/// One node's share of the plan: what its `NetworkUnavailable` condition depends on.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NodeRoutes {
    /// Node name.
    pub name: String,
    /// Pod CIDRs whose route exists (kept).
    pub kept: Vec<String>,
    /// Pod CIDRs whose route this pass creates (their [`Create`]s are in [`Plan::creates`]).
    pub creating: Vec<String>,
    /// Pod CIDRs that have no route and get none, and why.
    pub unrouted: Vec<(String, Unrouted)>,
}

impl NodeRoutes {
    /// Whether every pod CIDR of the node has a route once the creates are done, `failed`
    /// being the pod CIDRs whose create failed or was not made. A node without pod CIDRs (it
    /// is here because routes point at it, which go) has none: upstream's `NoRouteCreated`.
    pub fn routes_created(&self, failed: &[String]) -> bool {
        let any = !self.kept.is_empty() || !self.creating.is_empty();
        any && self.unrouted.is_empty() && !self.creating.iter().any(|c| failed.contains(c))
    }
}

/// The whole change to make to the cloud's routes, and what each node's condition depends on.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Plan {
    /// Routes to delete: inside `--cluster-cidr`, and a blackhole, or to a node that is gone,
    /// or to a pod CIDR its node no longer has (those replaced by a create are in its
    /// [`Create::replaces`] instead).
    pub deletes: Vec<Route>,
    /// Routes to create, in node order.
    pub creates: Vec<Create>,
    /// The nodes whose `NetworkUnavailable` condition this controller sets: those with pod
    /// CIDRs, and those routes point at (upstream's route map), in node order.
    pub nodes: Vec<NodeRoutes>,
}

impl Plan {
    /// Whether the cloud is left as it is.
    pub fn changes_nothing(&self) -> bool {
        self.deletes.is_empty() && self.creates.is_empty()
    }
}

/// A destination as compared: the canonical network (so `a00:0100::/24` is `a00:100::/24`),
/// or the text as given when it does not parse.
fn cidr_key(cidr: &str) -> String {
    cidr.trim()
        .parse::<IpNet>()
        .map_or_else(|_| cidr.to_owned(), |n| n.trunc().to_string())
}

/// The name of each route's target Node, in the routes' order: a route that carries a provider
/// ID one node has is that node's (cloud-provider-aws names a route's target by the Node whose
/// providerID holds the route's instance ID, not by the instance's DNS name, so nodes named
/// otherwise, as kops and kubelet `--hostname-override` name them, keep their routes). A route
/// whose provider ID no node has (or two nodes claim) keeps the name the provider gave.
pub fn target_names<'a>(nodes: &'a [NodeFacts], routes: &'a [Route]) -> Vec<&'a str> {
    let mut by_provider_id: HashMap<&str, Option<&str>> = HashMap::new();
    for n in nodes.iter().filter(|n| !n.provider_id.is_empty()) {
        by_provider_id
            .entry(n.provider_id.as_str())
            // Two nodes claiming one instance: neither is trusted with it.
            .and_modify(|holder| *holder = None)
            .or_insert(Some(n.name.as_str()));
    }
    routes
        .iter()
        .map(|r| match by_provider_id.get(r.target_provider_id.as_str()) {
            Some(Some(name)) if !r.target_provider_id.is_empty() => *name,
            _ => r.target_node.as_str(),
        })
        .collect()
}

/// Upstream's `equalNodeAddrs`: as sets (every address of one in the other, same length).
fn equal_addresses(a: &[NodeAddress], b: &[NodeAddress]) -> bool {
    a.len() == b.len() && a.iter().all(|x| b.contains(x))
}

/// Upstream's route reconcile, decided from the nodes (the cache) and the cloud's routes:
///
/// - a node's pod CIDR (duplicates count once) whose route to it exists is kept: with
///   `compare_addresses` (upstream's `EnableNodeAddresses`, which cloudgateway.v1 does not
///   carry, so the controller passes `false`) only if the route's target addresses equal the
///   node's, else it is replaced;
/// - a pod CIDR without its route gets one, if it lies inside `--cluster-cidr` (upstream creates
///   any; a route outside could never be deleted again) and no other node holds it; routes to
///   that destination that are ours are deleted first;
/// - every other route inside `--cluster-cidr` is deleted: blackholes, routes to nodes that
///   are gone or have no pod CIDR, routes to a pod CIDR their node no longer has. A blackhole
///   never counts as a node's route (upstream keeps it for the node and deletes it, so the node
///   is left without a route until the next pass);
/// - routes outside `--cluster-cidr` are never touched, and count as the route of their node's
///   pod CIDR.
///
/// A route's node is the one with its provider ID, else the one with its target name
/// ([`target_names`]).
pub fn plan(cluster: &ClusterCidrs, nodes: &[NodeFacts], routes: &[Route], compare_addresses: bool) -> Plan {
    let targets = target_names(nodes, routes);
    // Each route's destination key and whether it is inside the cluster CIDR, read once; the
    // routes by destination key, in the cloud's order.
    let keys: Vec<String> = routes.iter().map(|r| cidr_key(&r.destination_cidr)).collect();
    let ours: Vec<bool> = routes
        .iter()
        .map(|r| cluster.is_responsible(&r.destination_cidr))
        .collect();
    let mut by_key: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, key) in keys.iter().enumerate() {
        by_key.entry(key).or_default().push(i);
    }
    let routes_to = |key: &str| by_key.get(key).into_iter().flatten().copied();
    // Each node's pod CIDRs, duplicates dropped, in the node's order.
    let wanted: Vec<Vec<&str>> = nodes
        .iter()
        .map(|n| {
            let mut seen = HashSet::new();
            n.pod_cidrs
                .iter()
                .map(|c| c.as_str())
                .filter(|c| seen.insert(cidr_key(c)))
                .collect()
        })
        .collect();
    // The routes kept (by index) and the destinations given to a node in this plan.
    let mut kept: HashSet<usize> = HashSet::new();
    let mut claimed: HashMap<String, &str> = HashMap::new();
    let mut out: Vec<NodeRoutes> = nodes
        .iter()
        .map(|n| NodeRoutes {
            name: n.name.clone(),
            ..NodeRoutes::default()
        })
        .collect();

    // First the routes that stay, so that no create takes a destination a kept route holds.
    for (i, node) in nodes.iter().enumerate() {
        for cidr in &wanted[i] {
            let key = cidr_key(cidr);
            let found = routes_to(&key).find(|&r| {
                let route = &routes[r];
                !route.blackhole
                    && targets[r] == node.name
                    && (!compare_addresses
                        || !ours[r]
                        || equal_addresses(&node.addresses, &route.target_node_addresses))
            });
            if let Some(r) = found
                && !claimed.contains_key(&key)
            {
                kept.insert(r);
                claimed.insert(key, &node.name);
                out[i].kept.push((*cidr).to_owned());
            }
        }
    }

    let mut creates = Vec::new();
    for (i, node) in nodes.iter().enumerate() {
        for cidr in &wanted[i] {
            let key = cidr_key(cidr);
            match claimed.get(&key) {
                Some(holder) if *holder == node.name => continue,
                Some(holder) => {
                    out[i]
                        .unrouted
                        .push(((*cidr).to_owned(), Unrouted::HeldBy((*holder).to_owned())));
                    continue;
                }
                None => {}
            }
            if !cluster.is_responsible(cidr) {
                out[i]
                    .unrouted
                    .push(((*cidr).to_owned(), Unrouted::OutsideClusterCidr));
                continue;
            }
            claimed.insert(key.clone(), &node.name);
            let replaces = routes_to(&key)
                .filter(|r| !kept.contains(r) && ours[*r])
                .map(|r| routes[r].clone())
                .collect();
            out[i].creating.push((*cidr).to_owned());
            creates.push(Create {
                node: node.name.clone(),
                uid: node.uid.clone(),
                route: Route {
                    name: String::new(),
                    target_node: node.name.clone(),
                    destination_cidr: (*cidr).to_owned(),
                    blackhole: false,
                    target_node_addresses: node.addresses.clone(),
                    target_provider_id: node.provider_id.clone(),
                },
                replaces,
            });
        }
    }

    let replaced: HashSet<String> = creates
        .iter()
        .filter(|c| !c.replaces.is_empty())
        .map(|c| cidr_key(&c.route.destination_cidr))
        .collect();
    let deletes = routes
        .iter()
        .enumerate()
        .filter(|(i, _)| !kept.contains(i) && ours[*i] && !replaced.contains(&keys[*i]))
        .map(|(_, r)| r.clone())
        .collect();

    let targeted: HashSet<&str> = targets.iter().copied().filter(|t| !t.is_empty()).collect();
    let nodes = out
        .into_iter()
        .zip(&wanted)
        .filter(|(n, w)| !w.is_empty() || targeted.contains(n.name.as_str()))
        .map(|(n, _)| n)
        .collect();
    Plan {
        deletes,
        creates,
        nodes,
    }
}

/// The node's `NetworkUnavailable` condition, if it has one.
pub fn network_unavailable(node: &Node) -> Option<&NodeCondition> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == NETWORK_UNAVAILABLE)
}

/// The strategic merge patch of `/status` that sets the node's `NetworkUnavailable`
/// condition: `False`/`RouteCreated` when `routes_created`, else `True`/`NoRouteCreated`.
/// `None` when it says so already (status and reason; upstream's check, so a CNI's
/// `False`/`CalicoIsUp` is still replaced). The transition time moves only when the status
/// changes; the heartbeat is `now`, as upstream's `SetNodeCondition`. The patch carries only
/// this condition: conditions merge by `type`, so kubelet's stay.
pub fn condition_patch(node: &Node, routes_created: bool, now: &Time) -> Option<Value> {
    let (status, reason, message) = if routes_created {
        ("False", REASON_ROUTE_CREATED, MESSAGE_ROUTE_CREATED)
    } else {
        ("True", REASON_NO_ROUTE_CREATED, MESSAGE_NO_ROUTE_CREATED)
    };
    let current = network_unavailable(node);
    if current.is_some_and(|c| c.status == status && c.reason.as_deref() == Some(reason)) {
        return None;
    }
    let transition = current
        .filter(|c| c.status == status)
        .and_then(|c| c.last_transition_time.clone())
        .unwrap_or_else(|| now.clone());
    let condition = NodeCondition {
        type_: NETWORK_UNAVAILABLE.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_transition_time: Some(transition),
        last_heartbeat_time: Some(now.clone()),
    };
    Some(json!({ "status": { "conditions": [condition] } }))
}

/// The condition when the cloud's routes could not be listed: nothing is known of them, so a
/// node keeps whatever condition it has (an outage of the cloud's API must not mark the
/// cluster's network unavailable), but a node with pod CIDRs that has none yet gets
/// `True`/`NoRouteCreated`: no route could be created for it. (Upstream writes nothing then.)
pub fn condition_patch_without_routes(node: &Node, now: &Time) -> Option<Value> {
    if NodeFacts::of(node).pod_cidrs.is_empty() || network_unavailable(node).is_some() {
        return None;
    }
    condition_patch(node, false, now)
}

/// What of a Node its routes depend on: its identity, provider ID, pod CIDRs and addresses. A
/// reconcile is due when a node appears or goes, or this changes (upstream's watch-based mode:
/// added, deleted, `spec.podCIDRs` or `status.addresses` changed; also `spec.providerID` here,
/// as routes are matched to nodes by it); anything else (kubelet's
/// heartbeats, conditions, labels, this controller's own condition writes) is not a reason.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RouteInputs {
    /// `metadata.uid` (a node deleted and created again under its name is another node).
    pub uid: String,
    /// `spec.providerID` (set once, by the node controller, when kubelet did not).
    pub provider_id: String,
    /// `spec.podCIDRs`.
    pub pod_cidrs: Vec<String>,
    /// `status.addresses`.
    pub addresses: Vec<NodeAddress>,
}

impl RouteInputs {
    /// What of `node` its routes depend on.
    pub fn of(node: &Node) -> Self {
        let facts = NodeFacts::of(node);
        Self {
            uid: facts.uid,
            provider_id: facts.provider_id,
            pod_cidrs: facts.pod_cidrs,
            addresses: facts.addresses,
        }
    }
}
