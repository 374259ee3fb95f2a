//! Table tests of the plan: every case of upstream's `route_controller_test.go` (facts carried
//! over, one row each) and ours beside them (outside the cluster CIDR, a pod CIDR two nodes
//! claim, blackholes, destinations written differently).

use k8s_openapi::{
    api::core::v1::{NodeSpec, NodeStatus},
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
    jiff::Timestamp,
};

use super::*;

const SINGLE: &str = "10.120.0.0/16";
/// Upstream's dual-stack cluster CIDRs in `TestReconcile` (`a00:100::/24` lies in the /8).
const DUAL: &str = "10.120.0.0/16,ace:cab:deca::/8";

fn addr(ip: &str) -> NodeAddress {
    NodeAddress {
        type_: "InternalIP".into(),
        address: ip.into(),
    }
}

fn node(name: &str, uid: &str, cidrs: &[&str], ip: &str) -> NodeFacts {
    NodeFacts {
        name: name.into(),
        uid: uid.into(),
        pod_cidrs: cidrs.iter().map(|c| (*c).to_owned()).collect(),
        addresses: vec![addr(ip)],
        provider_id: String::new(),
    }
}

/// A route as upstream's tests list them: `name`, target, destination, target addresses.
fn route(name: &str, target: &str, cidr: &str, ips: &[&str]) -> Route {
    Route {
        name: name.into(),
        target_node: target.into(),
        destination_cidr: cidr.into(),
        blackhole: false,
        target_node_addresses: ips.iter().map(|ip| addr(ip)).collect(),
        target_provider_id: String::new(),
    }
}

fn blackhole(mut r: Route) -> Route {
    r.blackhole = true;
    r
}

/// The cloud's routes after the plan is carried out without a failure, each as
/// `target cidr [ips]`, sorted.
fn after(plan: &Plan, routes: &[Route]) -> Vec<String> {
    let replaced: Vec<&Route> = plan.creates.iter().flat_map(|c| &c.replaces).collect();
    let mut left: Vec<Route> = routes
        .iter()
        .filter(|r| !plan.deletes.contains(r) && !replaced.contains(r))
        .cloned()
        .collect();
    left.extend(plan.creates.iter().map(|c| c.route.clone()));
    let mut out: Vec<String> = left
        .iter()
        .map(|r| {
            let ips: Vec<&str> = r
                .target_node_addresses
                .iter()
                .map(|a| a.address.as_str())
                .collect();
            format!("{} {} [{}]", r.target_node, r.destination_cidr, ips.join(" "))
        })
        .collect();
    out.sort();
    out
}

/// Each node's condition once the plan is carried out without a failure: `Some(true)`
/// RouteCreated, `Some(false)` NoRouteCreated, `None` not written.
fn conditions(plan: &Plan, nodes: &[NodeFacts]) -> Vec<Option<bool>> {
    nodes
        .iter()
        .map(|n| {
            plan.nodes
                .iter()
                .find(|r| r.name == n.name)
                .map(|r| r.routes_created(&[]))
        })
        .collect()
}

struct Case {
    name: &'static str,
    cluster: &'static str,
    /// Upstream's `EnableNodeAddresses` on the routes.
    compare_addresses: bool,
    nodes: Vec<NodeFacts>,
    routes: Vec<Route>,
    want_routes: Vec<&'static str>,
    want_conditions: Vec<Option<bool>>,
    /// (creates, routes deleted: alone or before a create)
    want_ops: (usize, usize),
}

fn check(case: &Case) {
    let cluster = ClusterCidrs::parse(case.cluster).unwrap();
    let plan = plan(&cluster, &case.nodes, &case.routes, case.compare_addresses);
    let mut want: Vec<String> = case.want_routes.iter().map(|s| (*s).to_owned()).collect();
    want.sort();
    assert_eq!(
        after(&plan, &case.routes),
        want,
        "{}: routes\n{plan:#?}",
        case.name
    );
    assert_eq!(
        conditions(&plan, &case.nodes),
        case.want_conditions,
        "{}: conditions",
        case.name
    );
    let deleted = plan.deletes.len() + plan.creates.iter().map(|c| c.replaces.len()).sum::<usize>();
    assert_eq!(
        (plan.creates.len(), deleted),
        case.want_ops,
        "{}: operations\n{plan:#?}",
        case.name
    );
    // The name hint of every create is its node's UID.
    for create in &plan.creates {
        let node = case.nodes.iter().find(|n| n.name == create.node).unwrap();
        assert_eq!(create.uid, node.uid, "{}", case.name);
        assert_eq!(create.route.target_node, node.name, "{}", case.name);
    }
}

/// `TestReconcile`, every case. Upstream's `expectedNetworkUnavailable` lists `true` for
/// "condition False" (it compares `status == False`); a node without pod CIDRs gets no write.
#[test]
fn upstream_test_reconcile() {
    let cluster = "my-k8s";
    let n = |i: &str| format!("{cluster}-{i}");
    let node1 = node("node-1", "01", &["10.120.0.0/24"], "10.0.1.1");
    let node2 = node("node-2", "02", &["10.120.1.0/24"], "10.0.2.1");
    let node_no_cidr = node("node-2", "02", &[], "10.0.5.1");
    let node3 = node("node-3", "03", &["10.120.0.0/24", "a00:100::/24"], "10.0.3.1");
    let node4 = node("node-4", "04", &["10.120.1.0/24", "a00:200::/24"], "10.0.4.1");
    let node_duplicate_cidr = node("node-4", "04", &["10.120.1.0/24", "10.120.1.0/24"], "10.0.4.1");
    let dual_all = vec![
        "node-3 10.120.0.0/24 [10.0.3.1]",
        "node-4 10.120.1.0/24 [10.0.4.1]",
        "node-3 a00:100::/24 [10.0.3.1]",
        "node-4 a00:200::/24 [10.0.4.1]",
    ];
    let single_all = vec![
        "node-1 10.120.0.0/24 [10.0.1.1]",
        "node-2 10.120.1.0/24 [10.0.2.1]",
    ];
    let dual_routes = |ip3: &[&str], ip4: &[&str]| {
        vec![
            route(&n("01"), "node-3", "10.120.0.0/24", ip3),
            route(&n("02"), "node-4", "10.120.1.0/24", ip4),
            route(&n("03"), "node-3", "a00:100::/24", ip3),
            route(&n("04"), "node-4", "a00:200::/24", ip4),
        ]
    };
    let both = vec![Some(true), Some(true)];
    let cases = vec![
        Case {
            name: "routes have no TargetNodeAddresses at the beginning (EnableNodeAddresses): replaced",
            cluster: DUAL,
            compare_addresses: true,
            nodes: vec![node3.clone(), node4.clone()],
            routes: dual_routes(&[], &[]),
            want_routes: dual_all.clone(),
            want_conditions: both.clone(),
            want_ops: (4, 4),
        },
        Case {
            name: "routes' TargetNodeAddresses changed (EnableNodeAddresses): replaced",
            cluster: DUAL,
            compare_addresses: true,
            nodes: vec![node3.clone(), node4.clone()],
            routes: dual_routes(&["10.0.13.1"], &["10.0.14.1"]),
            want_routes: dual_all.clone(),
            want_conditions: both.clone(),
            want_ops: (4, 4),
        },
        Case {
            name: "multicidr 2 nodes and no routes",
            cluster: DUAL,
            compare_addresses: false,
            nodes: vec![node3.clone(), node4.clone()],
            routes: vec![],
            want_routes: dual_all.clone(),
            want_conditions: both.clone(),
            want_ops: (4, 0),
        },
        Case {
            name: "multicidr 2 nodes and all routes created",
            cluster: DUAL,
            compare_addresses: false,
            nodes: vec![node3.clone(), node4.clone()],
            routes: dual_routes(&["10.0.3.1"], &["10.0.4.1"]),
            want_routes: dual_all.clone(),
            want_conditions: both.clone(),
            want_ops: (0, 0),
        },
        Case {
            name: "multicidr 2 nodes and few wrong routes: each replaced, its destination freed first",
            cluster: DUAL,
            compare_addresses: false,
            nodes: vec![node3.clone(), node4.clone()],
            routes: vec![
                route(&n("01"), "node-3", "10.120.1.0/24", &["10.0.3.1"]),
                route(&n("02"), "node-4", "10.120.0.0/24", &["10.0.4.1"]),
                route(&n("03"), "node-3", "a00:200::/24", &["10.0.3.1"]),
                route(&n("04"), "node-4", "a00:100::/24", &["10.0.4.1"]),
            ],
            want_routes: dual_all.clone(),
            want_conditions: both.clone(),
            want_ops: (4, 4),
        },
        Case {
            name: "multicidr 2 nodes and some routes created",
            cluster: DUAL,
            compare_addresses: false,
            nodes: vec![node3.clone(), node4.clone()],
            routes: vec![
                route(&n("01"), "node-3", "10.120.0.0/24", &["10.0.3.1"]),
                route(&n("04"), "node-4", "a00:200::/24", &["10.0.4.1"]),
            ],
            want_routes: dual_all.clone(),
            want_conditions: both.clone(),
            want_ops: (2, 0),
        },
        Case {
            name: "multicidr 2 nodes and too many routes",
            cluster: DUAL,
            compare_addresses: false,
            nodes: vec![node3.clone(), node4.clone()],
            routes: {
                let mut r = dual_routes(&["10.0.3.1"], &["10.0.4.1"]);
                r.push(route(&n("001"), "node-x", "10.120.2.0/24", &["10.0.5.1"]));
                r.push(route(&n("0002"), "node-y", "a00:300::/24", &["10.0.6.1"]));
                r
            },
            want_routes: dual_all.clone(),
            want_conditions: both.clone(),
            want_ops: (0, 2),
        },
        Case {
            name: "single cidr 2 nodes and routes created",
            cluster: SINGLE,
            compare_addresses: false,
            nodes: vec![node1.clone(), node2.clone()],
            routes: vec![
                route(&n("01"), "node-1", "10.120.0.0/24", &["10.0.1.1"]),
                route(&n("02"), "node-2", "10.120.1.0/24", &["10.0.2.1"]),
            ],
            want_routes: single_all.clone(),
            want_conditions: both.clone(),
            want_ops: (0, 0),
        },
        Case {
            name: "single cidr node ips changed so routes should be updated (EnableNodeAddresses)",
            cluster: SINGLE,
            compare_addresses: true,
            nodes: vec![node1.clone(), node2.clone()],
            routes: vec![
                route(&n("01"), "node-1", "10.120.0.0/24", &["10.0.1.2"]),
                route(&n("02"), "node-2", "10.120.1.0/24", &["10.0.2.2"]),
            ],
            want_routes: single_all.clone(),
            want_conditions: both.clone(),
            want_ops: (2, 2),
        },
        Case {
            name: "single cidr 2 nodes and one route created",
            cluster: SINGLE,
            compare_addresses: false,
            nodes: vec![node1.clone(), node2.clone()],
            routes: vec![route(&n("01"), "node-1", "10.120.0.0/24", &["10.0.1.1"])],
            want_routes: single_all.clone(),
            want_conditions: both.clone(),
            want_ops: (1, 0),
        },
        Case {
            name: "single cidr 2 nodes and no routes",
            cluster: SINGLE,
            compare_addresses: false,
            nodes: vec![node1.clone(), node2.clone()],
            routes: vec![],
            want_routes: single_all.clone(),
            want_conditions: both.clone(),
            want_ops: (2, 0),
        },
        Case {
            name: "single cidr 2 nodes and too many routes",
            cluster: SINGLE,
            compare_addresses: false,
            nodes: vec![node1.clone(), node2.clone()],
            routes: vec![
                route(&n("01"), "node-1", "10.120.0.0/24", &["10.0.1.1"]),
                route(&n("02"), "node-2", "10.120.1.0/24", &["10.0.2.1"]),
                route(&n("03"), "node-3", "10.120.2.0/24", &["10.0.3.1"]),
                route(&n("04"), "node-4", "10.120.3.0/24", &["10.0.4.1"]),
            ],
            want_routes: single_all.clone(),
            want_conditions: both.clone(),
            want_ops: (0, 2),
        },
        Case {
            name: "single cidr 2 nodes and 2 routes with 1 incorrect",
            cluster: SINGLE,
            compare_addresses: false,
            nodes: vec![node1.clone(), node2.clone()],
            routes: vec![
                route(&n("01"), "node-1", "10.120.0.0/24", &["10.0.1.1"]),
                route(&n("03"), "node-3", "10.120.2.0/24", &["10.0.2.1"]),
            ],
            want_routes: single_all.clone(),
            want_conditions: both.clone(),
            want_ops: (1, 1),
        },
        Case {
            name: "single cidr 2 nodes and one node without cidr assigned: its condition is not written",
            cluster: SINGLE,
            compare_addresses: false,
            nodes: vec![node1.clone(), node_no_cidr.clone()],
            routes: vec![],
            want_routes: vec!["node-1 10.120.0.0/24 [10.0.1.1]"],
            want_conditions: vec![Some(true), None],
            want_ops: (1, 0),
        },
        Case {
            name: "single cidr 2 nodes and an extra blackhole route in our range",
            cluster: SINGLE,
            compare_addresses: false,
            nodes: vec![node1.clone(), node2.clone()],
            routes: vec![
                route(&n("01"), "node-1", "10.120.0.0/24", &["10.0.1.1"]),
                route(&n("02"), "node-2", "10.120.1.0/24", &["10.0.2.1"]),
                blackhole(route(&n("03"), "", "10.120.2.0/24", &["10.0.100.1"])),
            ],
            want_routes: single_all.clone(),
            want_conditions: both.clone(),
            want_ops: (0, 1),
        },
        Case {
            name: "single cidr 2 nodes and an extra blackhole route not in our range: never touched",
            cluster: SINGLE,
            compare_addresses: false,
            nodes: vec![node1.clone(), node2.clone()],
            routes: vec![
                route(&n("01"), "node-1", "10.120.0.0/24", &["10.0.1.1"]),
                route(&n("02"), "node-2", "10.120.1.0/24", &["10.0.2.1"]),
                blackhole(route(&n("03"), "", "10.1.2.0/24", &["10.0.100.1"])),
            ],
            want_routes: vec![
                "node-1 10.120.0.0/24 [10.0.1.1]",
                "node-2 10.120.1.0/24 [10.0.2.1]",
                " 10.1.2.0/24 [10.0.100.1]",
            ],
            want_conditions: both.clone(),
            want_ops: (0, 0),
        },
        Case {
            // Upstream's fake cloud refuses the second create of the same name, and the test
            // expects an error; the pod CIDR listed twice is one route here.
            name: "duplicate pod cidr: one route",
            cluster: SINGLE,
            compare_addresses: false,
            nodes: vec![node_duplicate_cidr.clone()],
            routes: vec![],
            want_routes: vec!["node-4 10.120.1.0/24 [10.0.4.1]"],
            want_conditions: vec![Some(true)],
            want_ops: (1, 0),
        },
    ];
    for case in &cases {
        check(case);
    }
}

/// What the controller does with upstream's `EnableNodeAddresses` cases: cloudgateway.v1
/// carries no such flag, so routes target nodes by name and are kept whatever addresses they
/// list (upstream's behaviour with the flag unset, every provider's but one).
#[test]
fn without_address_comparison_routes_with_other_addresses_are_kept() {
    let node3 = node("node-3", "03", &["10.120.0.0/24", "a00:100::/24"], "10.0.3.1");
    let routes = vec![
        route("a", "node-3", "10.120.0.0/24", &[]),
        route("b", "node-3", "a00:100::/24", &["10.0.13.1"]),
    ];
    let plan = plan(&ClusterCidrs::parse(DUAL).unwrap(), &[node3], &routes, false);
    assert!(plan.changes_nothing(), "{plan:#?}");
    assert_eq!(plan.nodes[0].kept, ["10.120.0.0/24", "a00:100::/24"]);
}

/// Ours: what upstream's cases do not cover.
#[test]
fn outside_the_cluster_cidr_nothing_is_created_or_deleted() {
    let cases = vec![
        Case {
            name: "a pod CIDR outside --cluster-cidr gets no route: the node has NoRouteCreated",
            cluster: SINGLE,
            compare_addresses: false,
            nodes: vec![node("node-1", "01", &["10.200.0.0/24"], "10.0.1.1")],
            routes: vec![],
            want_routes: vec![],
            want_conditions: vec![Some(false)],
            want_ops: (0, 0),
        },
        Case {
            name: "a route outside --cluster-cidr made by someone else counts as the node's route",
            cluster: SINGLE,
            compare_addresses: true,
            nodes: vec![node("node-1", "01", &["10.200.0.0/24"], "10.0.1.1")],
            routes: vec![route("manual", "node-1", "10.200.0.0/24", &["10.9.9.9"])],
            want_routes: vec!["node-1 10.200.0.0/24 [10.9.9.9]"],
            want_conditions: vec![Some(true)],
            want_ops: (0, 0),
        },
        Case {
            name: "routes outside --cluster-cidr to no node, or blackholes, are never touched",
            cluster: DUAL,
            compare_addresses: false,
            nodes: vec![],
            routes: vec![
                route("v4", "gone", "192.168.0.0/24", &[]),
                blackhole(route("v6", "gone", "fd00::/64", &[])),
                route("unparsable", "gone", "banana", &[]),
            ],
            want_routes: vec!["gone 192.168.0.0/24 []", "gone fd00::/64 []", "gone banana []"],
            want_conditions: vec![],
            want_ops: (0, 0),
        },
        Case {
            name: "dual-stack: the IPv4 pod CIDR inside, the IPv6 one outside: NoRouteCreated",
            cluster: DUAL,
            compare_addresses: false,
            nodes: vec![node(
                "node-1",
                "01",
                &["10.120.5.0/24", "fd00:1::/64"],
                "10.0.1.1",
            )],
            routes: vec![],
            want_routes: vec!["node-1 10.120.5.0/24 [10.0.1.1]"],
            want_conditions: vec![Some(false)],
            want_ops: (1, 0),
        },
    ];
    for case in &cases {
        check(case);
    }
    let plan = plan(
        &ClusterCidrs::parse(SINGLE).unwrap(),
        &[node("node-1", "01", &["10.200.0.0/24"], "10.0.1.1")],
        &[],
        false,
    );
    assert_eq!(
        plan.nodes[0].unrouted,
        [("10.200.0.0/24".to_owned(), Unrouted::OutsideClusterCidr)]
    );
}

#[test]
fn nodes_gone_blackholes_and_odd_routes() {
    let cases = vec![
        Case {
            name: "a deleted node's route goes",
            cluster: SINGLE,
            compare_addresses: false,
            nodes: vec![node("node-1", "01", &["10.120.0.0/24"], "10.0.1.1")],
            routes: vec![
                route("a", "node-1", "10.120.0.0/24", &[]),
                route("b", "node-gone", "10.120.7.0/24", &[]),
            ],
            want_routes: vec!["node-1 10.120.0.0/24 []"],
            want_conditions: vec![Some(true)],
            want_ops: (0, 1),
        },
        Case {
            // Upstream keeps it for the node and deletes it as a blackhole in the same pass,
            // leaving the node without a route (and RouteCreated) until the next pass.
            name: "a blackhole to a node that exists is replaced by a live route at once",
            cluster: SINGLE,
            compare_addresses: false,
            nodes: vec![node("node-1", "01", &["10.120.0.0/24"], "10.0.1.1")],
            routes: vec![blackhole(route("a", "node-1", "10.120.0.0/24", &[]))],
            want_routes: vec!["node-1 10.120.0.0/24 [10.0.1.1]"],
            want_conditions: vec![Some(true)],
            want_ops: (1, 1),
        },
        Case {
            name: "a node without pod CIDRs that routes point at: they go, and it has NoRouteCreated",
            cluster: SINGLE,
            compare_addresses: false,
            nodes: vec![node("node-1", "01", &[], "10.0.1.1")],
            routes: vec![route("a", "node-1", "10.120.0.0/24", &[])],
            want_routes: vec![],
            want_conditions: vec![Some(false)],
            want_ops: (0, 1),
        },
        Case {
            name: "a route whose destination is written differently is the same route",
            cluster: DUAL,
            compare_addresses: false,
            nodes: vec![node("node-3", "03", &["a00:100::/24"], "10.0.3.1")],
            routes: vec![route("a", "node-3", "0a00:0100:0000::/24", &[])],
            want_routes: vec!["node-3 0a00:0100:0000::/24 []"],
            want_conditions: vec![Some(true)],
            want_ops: (0, 0),
        },
        Case {
            name: "two nodes with one pod CIDR: the one whose route exists keeps it, the other has none",
            cluster: SINGLE,
            compare_addresses: false,
            nodes: vec![
                node("node-1", "01", &["10.120.0.0/24"], "10.0.1.1"),
                node("node-2", "02", &["10.120.0.0/24"], "10.0.2.1"),
            ],
            routes: vec![route("b", "node-2", "10.120.0.0/24", &[])],
            want_routes: vec!["node-2 10.120.0.0/24 []"],
            want_conditions: vec![Some(false), Some(true)],
            want_ops: (0, 0),
        },
        Case {
            name: "two nodes with one pod CIDR and no route: the first gets it",
            cluster: SINGLE,
            compare_addresses: false,
            nodes: vec![
                node("node-1", "01", &["10.120.0.0/24"], "10.0.1.1"),
                node("node-2", "02", &["10.120.0.0/24"], "10.0.2.1"),
            ],
            routes: vec![],
            want_routes: vec!["node-1 10.120.0.0/24 [10.0.1.1]"],
            want_conditions: vec![Some(true), Some(false)],
            want_ops: (1, 0),
        },
    ];
    for case in &cases {
        check(case);
    }
    let plan = plan(
        &ClusterCidrs::parse(SINGLE).unwrap(),
        &[
            node("node-1", "01", &["10.120.0.0/24"], "10.0.1.1"),
            node("node-2", "02", &["10.120.0.0/24"], "10.0.2.1"),
        ],
        &[],
        false,
    );
    assert_eq!(
        plan.nodes[1].unrouted,
        [("10.120.0.0/24".to_owned(), Unrouted::HeldBy("node-1".into()))]
    );
}

#[test]
fn a_failed_create_leaves_its_node_without_routes_created() {
    let nodes = [node(
        "node-3",
        "03",
        &["10.120.0.0/24", "a00:100::/24"],
        "10.0.3.1",
    )];
    let plan = plan(&ClusterCidrs::parse(DUAL).unwrap(), &nodes, &[], false);
    let n = &plan.nodes[0];
    assert!(n.routes_created(&[]));
    assert!(!n.routes_created(&["a00:100::/24".into()]));
}

/// `TestIsResponsibleForRoute`, every case.
#[test]
fn upstream_is_responsible_for_route() {
    let cases = [
        // Routes that belong to this cluster
        ("10.244.0.0/16", "10.244.0.0/24", true),
        ("10.244.0.0/16", "10.244.10.0/24", true),
        ("10.244.0.0/16", "10.244.255.0/24", true),
        ("10.244.0.0/14", "10.244.0.0/24", true),
        ("10.244.0.0/14", "10.247.255.0/24", true),
        ("a00:100::/10", "a00:100::/24", true),
        // Routes that match our naming/tagging scheme, but are outside our cidr
        ("10.244.0.0/16", "10.224.0.0/24", false),
        ("10.244.0.0/16", "10.0.10.0/24", false),
        ("10.244.0.0/16", "10.255.255.0/24", false),
        ("10.244.0.0/14", "10.248.0.0/24", false),
        ("10.244.0.0/14", "10.243.255.0/24", false),
        ("a00:100::/10", "b00:100::/24", false),
    ];
    for (cluster, route, want) in cases {
        let cidrs = ClusterCidrs::parse(cluster).unwrap();
        assert_eq!(cidrs.is_responsible(route), want, "{cluster} {route}");
    }
    // Ours: dual-stack checks both; what does not parse is nobody's.
    let dual = ClusterCidrs::parse("10.244.0.0/16,fd00:10::/56").unwrap();
    assert!(dual.is_responsible("fd00:10:0:1::/64"));
    assert!(dual.is_responsible("10.244.3.0/24"));
    assert!(!dual.is_responsible("fd00:11::/64"));
    assert!(!dual.is_responsible("banana"));
    // A route wider than the cluster CIDR that starts inside it is ours, as upstream.
    assert!(dual.is_responsible("10.244.0.0/15"));
    assert_eq!(dual.to_string(), "10.244.0.0/16,fd00:10::/56");
    // Host bits are dropped, as upstream's ParseCIDRSloppy does.
    assert_eq!(
        ClusterCidrs::parse(DUAL).unwrap().to_string(),
        "10.120.0.0/16,a00::/8"
    );
}

fn k8s_node(condition: Option<(&str, &str)>, cidrs: &[&str]) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some("test-node".into()),
            uid: Some("test-uid".into()),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            pod_cidrs: Some(cidrs.iter().map(|c| (*c).to_owned()).collect()),
            ..Default::default()
        }),
        status: Some(NodeStatus {
            conditions: condition.map(|(status, reason)| {
                vec![NodeCondition {
                    type_: NETWORK_UNAVAILABLE.into(),
                    status: status.into(),
                    reason: Some(reason.into()),
                    last_transition_time: Some(Time("2020-01-01T00:00:00Z".parse().unwrap())),
                    ..Default::default()
                }]
            }),
            ..Default::default()
        }),
    }
}

fn written(patch: &Value) -> NodeCondition {
    serde_json::from_value(patch["status"]["conditions"][0].clone()).unwrap()
}

/// `TestUpdateNetworkingCondition`, every case, and `TestUpdateNetworkingConditionWithCalicoScenario`.
#[test]
fn upstream_update_networking_condition() {
    // Whole seconds: a condition's times travel as RFC 3339 seconds.
    let now = Time("2026-01-01T12:00:00Z".parse().unwrap());
    // (description, existing (status, reason), routes created, expected (status, reason, message))
    type Row<'a> = (
        &'a str,
        Option<(&'a str, &'a str)>,
        bool,
        Option<(&'a str, &'a str, &'a str)>,
    );
    let created = Some(("False", REASON_ROUTE_CREATED, MESSAGE_ROUTE_CREATED));
    let not_created = Some(("True", REASON_NO_ROUTE_CREATED, MESSAGE_NO_ROUTE_CREATED));
    let rows: [Row; 9] = [
        (
            "No existing condition, routes created - should update",
            None,
            true,
            created,
        ),
        (
            "No existing condition, routes not created - should update",
            None,
            false,
            not_created,
        ),
        (
            "Existing condition with same status and reason (RouteCreated) - should not update",
            Some(("False", "RouteCreated")),
            true,
            None,
        ),
        (
            "Existing condition with same status but different reason (CalicoIsUp) - should update",
            Some(("False", "CalicoIsUp")),
            true,
            created,
        ),
        (
            "Existing condition with Status=False but different reason - should update when routes created",
            Some(("False", "ExternalCNI")),
            true,
            created,
        ),
        (
            "Existing condition with Status=True and different reason - should update when routes not created",
            Some(("True", "SomeOtherReason")),
            false,
            not_created,
        ),
        (
            "Existing condition with Status=False, transitioning to routes not created - should update",
            Some(("False", "RouteCreated")),
            false,
            not_created,
        ),
        (
            "Existing condition with Status=True and NoRouteCreated reason - should not update",
            Some(("True", "NoRouteCreated")),
            false,
            None,
        ),
        (
            "Calico scenario: Calico set NetworkUnavailable=False, routes created: ours replaces it",
            Some(("False", "CalicoIsUp")),
            true,
            created,
        ),
    ];
    for (what, existing, routes_created, want) in rows {
        let node = k8s_node(existing, &["10.244.0.0/24"]);
        let patch = condition_patch(&node, routes_created, &now);
        match (patch, want) {
            (None, None) => {}
            (Some(patch), Some((status, reason, message))) => {
                let c = written(&patch);
                assert_eq!(
                    (
                        c.type_.as_str(),
                        c.status.as_str(),
                        c.reason.as_deref(),
                        c.message.as_deref()
                    ),
                    (NETWORK_UNAVAILABLE, status, Some(reason), Some(message)),
                    "{what}"
                );
                assert_eq!(c.last_heartbeat_time, Some(now.clone()), "{what}");
                // Only this condition is in the patch: the others merge by type and stay.
                assert_eq!(patch["status"]["conditions"].as_array().unwrap().len(), 1);
                // The transition time moves only with the status.
                let moved = existing.is_none_or(|(s, _)| s != status);
                let want_transition = if moved {
                    now.clone()
                } else {
                    Time("2020-01-01T00:00:00Z".parse().unwrap())
                };
                assert_eq!(c.last_transition_time, Some(want_transition), "{what}");
            }
            (got, want) => panic!("{what}: got {got:?}, want {want:?}"),
        }
    }
}

#[test]
fn without_a_route_list_only_nodes_without_the_condition_get_no_route_created() {
    let now = Time(Timestamp::now());
    let fresh = k8s_node(None, &["10.244.0.0/24"]);
    let patch = condition_patch_without_routes(&fresh, &now).unwrap();
    assert_eq!(written(&patch).reason.as_deref(), Some(REASON_NO_ROUTE_CREATED));
    for node in [
        k8s_node(Some(("False", "RouteCreated")), &["10.244.0.0/24"]),
        k8s_node(Some(("False", "CalicoIsUp")), &["10.244.0.0/24"]),
        k8s_node(None, &[]),
    ] {
        assert_eq!(condition_patch_without_routes(&node, &now), None, "{node:?}");
    }
}

/// `TestHandleNodeUpdate`, every case: which node updates call for a reconcile.
#[test]
fn upstream_handle_node_update() {
    let base = || {
        let mut n = k8s_node(None, &["10.120.0.0/24"]);
        n.status.as_mut().unwrap().addresses = Some(vec![addr("10.0.1.1")]);
        n
    };
    let mut ip = base();
    ip.status.as_mut().unwrap().addresses = Some(vec![addr("10.0.1.2")]);
    let mut cidr = base();
    cidr.spec.as_mut().unwrap().pod_cidrs = Some(vec!["10.121.0.0/24".into()]);
    let mut images = base();
    images.status.as_mut().unwrap().images = Some(vec![Default::default()]);
    let mut condition = base();
    condition.status.as_mut().unwrap().conditions = Some(vec![NodeCondition {
        type_: NETWORK_UNAVAILABLE.into(),
        status: "False".into(),
        ..Default::default()
    }]);
    let mut recreated = base();
    recreated.metadata.uid = Some("another".into());
    let mut provider_id = base();
    provider_id.spec.as_mut().unwrap().provider_id = Some("aws:///us-east-1a/i-0abc".into());
    let rows = [
        ("internal IP updated", ip, true),
        ("pod CIDR updated", cidr, true),
        // Upstream reconciles on the informer's resync (an identical object); ours has the
        // periodic resync for that.
        ("node object not updated", base(), false),
        ("unrelated node update", images, false),
        ("ours: the NetworkUnavailable condition written", condition, false),
        (
            "ours: deleted and registered again under its name",
            recreated,
            true,
        ),
        ("ours: the providerID set", provider_id, true),
    ];
    for (what, updated, want) in rows {
        assert_eq!(
            RouteInputs::of(&base()) != RouteInputs::of(&updated),
            want,
            "{what}"
        );
    }
}

#[test]
fn node_facts_read_pod_cidrs_and_addresses() {
    let mut node = k8s_node(None, &[]);
    node.spec.as_mut().unwrap().pod_cidr = Some("10.244.1.0/24".into());
    assert_eq!(
        NodeFacts::of(&node).pod_cidrs,
        ["10.244.1.0/24"],
        "podCIDR alone counts"
    );
    let node = k8s_node(None, &["10.244.1.0/24", "fd00::/64"]);
    let facts = NodeFacts::of(&node);
    assert_eq!(facts.pod_cidrs, ["10.244.1.0/24", "fd00::/64"]);
    assert_eq!(
        (facts.name.as_str(), facts.uid.as_str()),
        ("test-node", "test-uid")
    );
    assert_eq!(facts.provider_id, "");
    let mut node = k8s_node(None, &["10.244.1.0/24"]);
    node.spec.as_mut().unwrap().provider_id = Some("aws:///us-east-1a/i-0abc".into());
    assert_eq!(NodeFacts::of(&node).provider_id, "aws:///us-east-1a/i-0abc");
}

/// A node named otherwise than the cloud names its instance (kops, kubelet
/// `--hostname-override`): the provider lists its route under the instance's DNS name with the
/// node's provider ID, and the route is the node's, kept as it is, pass after pass.
#[test]
fn a_route_is_its_nodes_by_provider_id_whatever_the_names() {
    let cluster = ClusterCidrs::parse(SINGLE).unwrap();
    let with_id = |name: &str, id: &str, cidr: &str| NodeFacts {
        provider_id: id.into(),
        ..node(name, &format!("uid-{name}"), &[cidr], "10.0.0.1")
    };
    let listed = |dns: &str, id: &str, cidr: &str| Route {
        target_provider_id: id.into(),
        ..route("r", dns, cidr, &[])
    };
    let a = "aws:///us-east-1a/i-0aaa";
    let b = "aws:///us-east-1a/i-0bbb";
    let nodes = [
        with_id("node-a", a, "10.120.1.0/24"),
        with_id("node-b", b, "10.120.2.0/24"),
    ];

    // Both routes listed under DNS names no node has: both kept, nothing created or deleted.
    let routes = [
        listed("ip-10-0-0-1.ec2.internal", a, "10.120.1.0/24"),
        listed("ip-10-0-0-2.ec2.internal", b, "10.120.2.0/24"),
    ];
    let p = plan(&cluster, &nodes, &routes, false);
    assert!(p.changes_nothing(), "{p:?}");
    assert_eq!(conditions(&p, &nodes), [Some(true), Some(true)]);

    // The provider ID decides over the name: node-a's CIDR routed to node-b's instance (listed
    // under node-a's name) is node-b's stray route, replaced by a create for node-a that
    // carries node-a's provider ID.
    let routes = [
        listed("node-a", b, "10.120.1.0/24"),
        listed("ip-10-0-0-2.ec2.internal", b, "10.120.2.0/24"),
    ];
    let p = plan(&cluster, &nodes, &routes, false);
    assert!(p.deletes.is_empty(), "{p:?}");
    assert_eq!(p.creates.len(), 1, "{p:?}");
    assert_eq!(p.creates[0].node, "node-a");
    assert_eq!(p.creates[0].route.target_provider_id, a);
    assert_eq!(p.creates[0].replaces, [routes[0].clone()]);

    // A provider ID no node has (or two nodes claim) leaves the provider's name: the name
    // matches, or the route is a stray.
    let routes = [
        listed("node-a", "aws:///us-east-1a/i-0ccc", "10.120.1.0/24"),
        listed("node-b", b, "10.120.2.0/24"),
    ];
    let twins = [
        with_id("node-a", a, "10.120.1.0/24"),
        with_id("node-b", b, "10.120.2.0/24"),
        with_id("node-b-twin", b, "10.120.3.0/24"),
    ];
    assert_eq!(
        target_names(&twins, &routes),
        ["node-a", "node-b"],
        "unknown ID and a claimed-twice ID keep the listed names"
    );
    // Routes without a provider ID (other providers) match by name, as before.
    let routes = [route("r", "node-a", "10.120.1.0/24", &[])];
    assert_eq!(target_names(&nodes, &routes), ["node-a"]);
    let routes = [route("r", "ip-10-0-0-1.ec2.internal", "10.120.1.0/24", &[])];
    let p = plan(&cluster, &nodes[..1], &routes, false);
    assert_eq!(
        p.creates.len(),
        1,
        "without a provider ID the name decides: {p:?}"
    );
}
