//! Table tests: each row is a case of upstream's `controllers/service/controller_test.go`
//! (named after it), with the outcome our controller must have.

use std::collections::BTreeMap;

use k8s_openapi::{
    api::core::v1::{LoadBalancerIngress, LoadBalancerStatus, Node},
    apimachinery::pkg::util::intstr::IntOrString,
};
use serde_json::json;
use test_support::{NodeBuilder, ServiceBuilder};

use super::*;

const CLEANUP: &str = "service.kubernetes.io/load-balancer-cleanup";

fn svc(name: &str) -> ServiceBuilder {
    ServiceBuilder::new(name)
}

fn node(name: &str) -> NodeBuilder {
    NodeBuilder::new(name)
        .provider_id(&format!("sim://{name}"))
        .ready(true)
}

fn identity(nodes: &[Node]) -> BTreeMap<String, String> {
    backend_identity(&backends(nodes))
}

fn synced(service: &Service, nodes: &[Node]) -> Synced {
    Synced {
        service: service.clone(),
        nodes: identity(nodes),
    }
}

#[test]
fn sync_load_balancer_if_needed() {
    // TestSyncLoadBalancerIfNeeded, each Service seen for the first time (no record).
    let cases: Vec<(&str, Service, Decision)> = vec![
        (
            "service doesn't want LB: never ours, no cloud call",
            svc("s").type_("ClusterIP").build(),
            Decision::Nothing,
        ),
        (
            "udp service that wants LB",
            svc("s").ports(&[("UDP", 80, 30080)]).build(),
            Decision::Ensure,
        ),
        ("tcp service that wants LB", svc("s").build(), Decision::Ensure),
        (
            "sctp service that wants LB",
            svc("s").ports(&[("SCTP", 80, 30080)]).build(),
            Decision::Ensure,
        ),
        (
            "service specifies loadBalancerClass: another controller's",
            svc("s").class("custom-loadbalancer").build(),
            Decision::Nothing,
        ),
        (
            "service with finalizer that no longer wants LB",
            svc("s")
                .type_("ClusterIP")
                .ingress(&["8.8.8.8"])
                .finalizer()
                .build(),
            Decision::Cleanup,
        ),
        (
            "service that needs cleanup",
            svc("s").ingress(&["8.8.8.8"]).finalizer().deleting().build(),
            Decision::Cleanup,
        ),
        (
            "service with finalizer that wants LB",
            svc("s").finalizer().build(),
            Decision::Ensure,
        ),
        (
            "being deleted without our finalizer: nothing of ours to keep",
            svc("s").deleting().build(),
            Decision::Nothing,
        ),
        (
            "another class with the finalizer (another install's): untouched even when deleted",
            svc("s").class("other").finalizer().deleting().build(),
            Decision::Nothing,
        ),
    ];
    for (what, service, want) in cases {
        assert_eq!(decide(&service, None, &BTreeMap::new(), None), want, "{what}");
    }
}

#[test]
fn a_configured_class_is_served_and_no_other() {
    let class = Some("example.com/internal");
    let cases = [
        (
            "our class",
            svc("s").class("example.com/internal").build(),
            Decision::Ensure,
        ),
        (
            "no class: upstream's, not ours",
            svc("s").build(),
            Decision::Nothing,
        ),
        (
            "another class",
            svc("s").class("other").build(),
            Decision::Nothing,
        ),
        (
            "our class, deleted with the finalizer",
            svc("s")
                .class("example.com/internal")
                .finalizer()
                .deleting()
                .build(),
            Decision::Cleanup,
        ),
        (
            "no longer a LoadBalancer (the class went with the type)",
            svc("s").type_("ClusterIP").finalizer().build(),
            Decision::Cleanup,
        ),
    ];
    for (what, service, want) in cases {
        assert_eq!(decide(&service, None, &BTreeMap::new(), class), want, "{what}");
    }
}

#[test]
fn a_service_that_stops_wanting_its_load_balancer_is_cleaned_up() {
    let before = svc("s").finalizer().build();
    let nodes = [node("n1").build()];
    let record = synced(&before, &nodes);
    let cases = [
        (
            "type changed, finalizer kept",
            svc("s").type_("ClusterIP").finalizer().build(),
        ),
        // Someone removed the finalizer by hand: we ensured it, so we clean up.
        ("type changed, finalizer gone", svc("s").type_("NodePort").build()),
    ];
    for (what, after) in cases {
        assert_eq!(
            decide(&after, Some(&record), &identity(&nodes), None),
            Decision::Cleanup,
            "{what}"
        );
    }
}

#[test]
fn needs_cleanup() {
    // TestNeedsCleanup.
    let cases = [
        ("service without finalizer", svc("s").type_("").build(), false),
        (
            "service with finalizer without timestamp without LB",
            svc("s").type_("NodePort").finalizer().build(),
            true,
        ),
        (
            "service with finalizer without timestamp with LB",
            svc("s").finalizer().build(),
            false,
        ),
        (
            "service with finalizer with timestamp",
            svc("s").type_("").finalizer().deleting().build(),
            true,
        ),
    ];
    for (what, service, want) in cases {
        assert_eq!(super::needs_cleanup(&service), want, "{what}");
    }
}

#[test]
fn needs_update() {
    // TestNeedsUpdate, plus the checks upstream makes that its table does not show.
    let base = || svc("s").ports(&[("TCP", 8000, 30000), ("TCP", 9000, 30001), ("TCP", 10000, 30002)]);
    let cases: Vec<(&str, Service, Service, bool)> = vec![
        (
            "Service type changed",
            svc("s").build(),
            svc("s").type_("ClusterIP").build(),
            true,
        ),
        (
            "Ports are different",
            base().build(),
            svc("s")
                .ports(&[("TCP", 8001, 30000), ("TCP", 9001, 30001), ("TCP", 10001, 30002)])
                .build(),
            true,
        ),
        (
            "external ip counts different",
            svc("s").external_ips(&["old.IP.1"]).build(),
            svc("s").external_ips(&["new.IP.1", "new.IP.2"]).build(),
            true,
        ),
        (
            "external ips different",
            svc("s").external_ips(&["old.IP.1", "old.IP.2"]).build(),
            svc("s").external_ips(&["new.IP.1", "new.IP.2"]).build(),
            true,
        ),
        (
            "UID different",
            svc("s").uid("UID old").build(),
            svc("s").uid("UID new").build(),
            true,
        ),
        (
            "ExternalTrafficPolicy different",
            svc("s").build(),
            svc("s").external_traffic_policy("Local").build(),
            true,
        ),
        (
            "HealthCheckNodePort different",
            svc("s").build(),
            svc("s").health_check_node_port(30123).build(),
            true,
        ),
        (
            "TargetGroup is different 1",
            svc("s").target_port(IntOrString::Int(20)).build(),
            svc("s").target_port(IntOrString::Int(21)).build(),
            true,
        ),
        (
            "TargetGroup is different 2",
            svc("s").target_port(IntOrString::Int(22)).build(),
            svc("s").target_port(IntOrString::String("dns".into())).build(),
            true,
        ),
        (
            "appProtocol is the same",
            svc("s").app_protocol("http").build(),
            svc("s").app_protocol("http").build(),
            false,
        ),
        (
            "IPFamilies single to dual",
            svc("s").ip_families(&["IPv4"]).build(),
            svc("s").ip_families(&["IPv4", "IPv6"]).build(),
            true,
        ),
        (
            "IPFamilies dual to single",
            svc("s").ip_families(&["IPv4", "IPv6"]).build(),
            svc("s").ip_families(&["IPv4"]).build(),
            true,
        ),
        (
            "IPFamilies not change",
            svc("s").ip_families(&["IPv4"]).build(),
            svc("s").ip_families(&["IPv4"]).build(),
            false,
        ),
        (
            "IPFamilies order is not compared, only the count",
            svc("s").ip_families(&["IPv4", "IPv6"]).build(),
            svc("s").ip_families(&["IPv6", "IPv4"]).build(),
            false,
        ),
        (
            "appProtocol set when previously unset",
            svc("s").build(),
            svc("s").app_protocol("http").build(),
            true,
        ),
        (
            "appProtocol set to different value",
            svc("s").app_protocol("http").build(),
            svc("s").app_protocol("tcp").build(),
            true,
        ),
        (
            "an annotation changed",
            svc("s").build(),
            svc("s").annotation("a", "b").build(),
            true,
        ),
        (
            "source ranges changed",
            svc("s").build(),
            svc("s").source_ranges(&["10.0.0.0/8"]).build(),
            true,
        ),
        (
            "loadBalancerIP changed",
            svc("s").build(),
            svc("s").load_balancer_ip("192.168.1.11").build(),
            true,
        ),
        (
            "session affinity changed",
            svc("s").build(),
            svc("s").session_affinity("ClientIP").build(),
            true,
        ),
        (
            "only the status changed",
            svc("s").build(),
            svc("s").ingress(&["1.2.3.4"]).build(),
            false,
        ),
        (
            "only the finalizers changed",
            svc("s").build(),
            svc("s").finalizer().build(),
            false,
        ),
        (
            "neither wants a load balancer",
            svc("s").type_("ClusterIP").build(),
            svc("s").type_("NodePort").annotation("a", "b").build(),
            false,
        ),
    ];
    for (what, old, new, want) in cases {
        assert_eq!(super::needs_update(&old, &new, None), want, "{what}");
    }
}

#[test]
fn backends_are_upstreams_stable_node_set() {
    // Test_respectsPredicates, with the predicates upstream uses for load balancers today
    // (readiness is not one of them: KEP-3458).
    let exclude = "node.kubernetes.io/exclude-from-external-load-balancers";
    let cases = [
        ("empty node", NodeBuilder::new("n").build(), true),
        ("providerID and Ready", node("n").build(), true),
        (
            "not Ready still serves (KEP-3458)",
            node("n").ready(false).build(),
            true,
        ),
        (
            "exclude label empty: excluded",
            node("n").label(exclude, "").build(),
            false,
        ),
        (
            "exclude label false: included",
            node("n").label(exclude, "false").build(),
            true,
        ),
        (
            "exclude label 0: included",
            node("n").label(exclude, "0").build(),
            true,
        ),
        (
            "exclude label true: excluded",
            node("n").label(exclude, "true").build(),
            false,
        ),
        (
            "exclude label foo: excluded",
            node("n").label(exclude, "foo").build(),
            false,
        ),
        (
            "autoscaler's deletion taint: excluded",
            node("n").taint(TAINT_TO_BE_DELETED).build(),
            false,
        ),
        ("another taint: included", node("n").taint("Other").build(), true),
        ("being deleted: excluded", node("n").deleting().build(), false),
    ];
    for (what, n, want) in cases {
        assert_eq!(is_backend(&n), want, "{what}");
    }
}

#[test]
fn node_changes_update_only_load_balancers_whose_backends_changed() {
    // TestNodeChangesForStableNodeSetEnabled: every service has these nodes as last synced.
    let n = |name: &str| node(name).build();
    let exclude = "node.kubernetes.io/exclude-from-external-load-balancers";
    /// (case, last synced nodes, nodes now, the backends updated to or `None` for no update)
    type Case = (&'static str, Vec<Node>, Vec<Node>, Option<Vec<&'static str>>);
    let cases: Vec<Case> = vec![
        (
            "No node changes",
            vec![n("n1"), n("n2"), n("n3")],
            vec![n("n1"), n("n2"), n("n3")],
            None,
        ),
        (
            "1 new node gets added",
            vec![n("n1"), n("n2")],
            vec![n("n1"), n("n2"), n("n3")],
            Some(vec!["n1", "n2", "n3"]),
        ),
        (
            "1 node goes NotReady",
            vec![n("n1"), n("n2"), n("n3")],
            vec![n("n1"), node("n2").ready(false).build(), n("n3")],
            None,
        ),
        (
            "1 node gets Tainted",
            vec![n("n1"), n("n2"), n("n3")],
            vec![n("n1"), node("n2").taint(TAINT_TO_BE_DELETED).build(), n("n3")],
            Some(vec!["n1", "n3"]),
        ),
        (
            "1 node goes Ready",
            vec![n("n1"), node("n2").ready(false).build(), n("n3")],
            vec![n("n1"), n("n2"), n("n3")],
            None,
        ),
        (
            "1 node get excluded",
            vec![n("n1"), n("n2"), n("n3")],
            vec![n("n1"), node("n2").label(exclude, "").build(), n("n3")],
            Some(vec!["n1", "n3"]),
        ),
        (
            "1 old node gets deleted",
            vec![n("n1"), n("n2"), n("n3")],
            vec![n("n1"), n("n2")],
            Some(vec!["n1", "n2"]),
        ),
        (
            "1 node marked for deletion",
            vec![n("n1"), n("n2"), n("n3")],
            vec![n("n1"), node("n2").deleting().build(), n("n3")],
            Some(vec!["n1", "n3"]),
        ),
        (
            "1 spurious node update",
            vec![n("n1"), n("n2"), n("n3")],
            vec![n("n1"), node("n2").taint("Other").build(), n("n3")],
            None,
        ),
    ];
    for policy in ["Cluster", "Local"] {
        let service = svc("s0").external_traffic_policy(policy).finalizer().build();
        for (what, initial, now, want) in &cases {
            let record = synced(&service, initial);
            let decision = decide(&service, Some(&record), &identity(now), None);
            match want {
                None => assert_eq!(decision, Decision::Nothing, "{what} ({policy})"),
                Some(hosts) => {
                    assert_eq!(decision, Decision::UpdateHosts, "{what} ({policy})");
                    let names: Vec<String> = backends(now).into_iter().map(|b| b.name).collect();
                    assert_eq!(names, *hosts, "{what} ({policy})");
                }
            }
        }
    }
}

#[test]
fn nodes_are_equal_by_name_and_provider_id() {
    // TestNodesNotEqual.
    let service = svc("s0").finalizer().build();
    let with_id = |name: &str, id: &str| NodeBuilder::new(name).provider_id(id).build();
    let cases = [
        (
            "Nodes with updated providerID",
            vec![with_id("node1", "providerID"), with_id("node2", "providerID")],
            vec![with_id("node1", "cumulus/1"), with_id("node2", "cumulus/2")],
            Decision::UpdateHosts,
        ),
        (
            "Nodes unchanged",
            vec![with_id("node1", "cumulus/1"), with_id("node2", "cumulus/2")],
            vec![with_id("node1", "cumulus/1"), with_id("node2", "cumulus/2")],
            Decision::Nothing,
        ),
        (
            "Change node with empty providerID",
            vec![with_id("node1", "cumulus/1"), NodeBuilder::new("node2").build()],
            vec![with_id("node1", "cumulus/1"), NodeBuilder::new("node3").build()],
            Decision::UpdateHosts,
        ),
        (
            "addresses changed: not a backend change (upstream compares names and providerIDs)",
            vec![with_id("node1", "cumulus/1")],
            vec![
                NodeBuilder::new("node1")
                    .provider_id("cumulus/1")
                    .addresses(&[("InternalIP", "10.0.0.9")])
                    .build(),
            ],
            Decision::Nothing,
        ),
    ];
    for (what, before, after, want) in cases {
        let record = synced(&service, &before);
        assert_eq!(
            decide(&service, Some(&record), &identity(&after), None),
            want,
            "{what}"
        );
    }
}

#[test]
fn only_load_balancer_services_get_host_updates() {
    // TestUpdateNodesInExternalLoadBalancer: which Services a node-set change updates.
    let nodes = [
        node("node1").build(),
        node("node2").build(),
        node("node3").build(),
    ];
    let services = [
        (svc("s0").type_("NodePort").build(), Decision::Nothing),
        (svc("s1").finalizer().build(), Decision::UpdateHosts),
        (svc("s3").finalizer().build(), Decision::UpdateHosts),
        (svc("s4").type_("ClusterIP").build(), Decision::Nothing),
    ];
    for (service, want) in services {
        // Load balancers were last synced with no nodes; the others were never synced.
        let record = (want == Decision::UpdateHosts).then(|| synced(&service, &[]));
        assert_eq!(
            decide(&service, record.as_ref(), &identity(&nodes), None),
            want,
            "{:?}",
            service.metadata.name
        );
    }
}

#[test]
fn a_changed_service_is_ensured_again_with_the_current_nodes() {
    // TestProcessServiceCreateOrUpdate "If Updating Loadbalancer IP", and the node-sync retry
    // path: a change that needs the cloud wins over a host update.
    let nodes = [node("n1").build()];
    let before = svc("s").load_balancer_ip("192.168.1.1").finalizer().build();
    let after = svc("s").load_balancer_ip("192.168.1.11").finalizer().build();
    let record = synced(&before, &[]);
    assert_eq!(
        decide(&after, Some(&record), &identity(&nodes), None),
        Decision::Ensure
    );
}

#[test]
fn the_finalizer_is_added_once_and_keeps_other_finalizers() {
    // TestAddFinalizer.
    assert_eq!(
        add_finalizer(&svc("s").finalizer().build(), None),
        None,
        "no-op add finalizer"
    );
    let patch =
        add_finalizer(&svc("s").other_finalizer("example.com/keep").build(), None).expect("add finalizer");
    assert_eq!(
        patch.main,
        Some(json!({"metadata": {"finalizers": ["example.com/keep", CLEANUP]}}))
    );
    assert_eq!(patch.status, None);
}

#[test]
fn the_provider_holding_the_load_balancer_is_recorded_with_the_finalizer() {
    let recorded = |s: ServiceBuilder, p: &str| s.annotation(ANNOTATION_PROVIDER, p);
    assert_eq!(
        add_finalizer(&svc("s").build(), Some("simulator")).and_then(|p| p.main),
        Some(
            json!({"metadata": {"finalizers": [CLEANUP], "annotations": {ANNOTATION_PROVIDER: "simulator"}}})
        )
    );
    assert_eq!(
        add_finalizer(&svc("s").finalizer().build(), Some("aws")).and_then(|p| p.main),
        Some(json!({"metadata": {"annotations": {ANNOTATION_PROVIDER: "aws"}}})),
        "a Service from before the record gets it"
    );
    assert_eq!(
        add_finalizer(&recorded(svc("s").finalizer(), "aws").build(), Some("aws")),
        None
    );

    let at_simulator = recorded(svc("s").finalizer(), "simulator").build();
    assert_eq!(
        former_provider(&at_simulator, Some("aws")).as_deref(),
        Some("simulator")
    );
    assert_eq!(former_provider(&at_simulator, Some("simulator")), None);
    assert_eq!(
        former_provider(&svc("s").finalizer().build(), Some("aws")),
        None,
        "nothing recorded"
    );
    // Our own record is no change of the Service: no needless ensure after writing it.
    assert!(!super::needs_update(
        &svc("s").finalizer().build(),
        &at_simulator,
        None
    ));
    assert!(super::needs_update(
        &at_simulator,
        &recorded(svc("s"), "simulator").annotation("a", "b").build(),
        None
    ));
}

#[test]
fn the_finalizer_and_the_status_go_once_the_load_balancer_is_gone() {
    // TestRemoveFinalizer, TestPatchStatus (clear status).
    assert!(
        remove_finalizer_and_status(&svc("s").type_("ClusterIP").build()).is_empty(),
        "no-op remove finalizer"
    );
    let patch = remove_finalizer_and_status(
        &svc("s")
            .type_("ClusterIP")
            .finalizer()
            .ingress(&["8.8.8.8"])
            .build(),
    );
    assert_eq!(patch.main, Some(json!({"metadata": {"finalizers": null}})));
    assert_eq!(
        patch.status,
        Some(json!({"status": {"loadBalancer": {"ingress": null}}}))
    );
    let patch = remove_finalizer_and_status(
        &svc("s")
            .other_finalizer("example.com/keep")
            .finalizer()
            .ingress(&["8.8.8.8"])
            .deleting()
            .build(),
    );
    assert_eq!(
        patch.main,
        Some(json!({"metadata": {"finalizers": ["example.com/keep"]}}))
    );
    assert_eq!(patch.status, None, "a Service being deleted goes with its status");
}

#[test]
fn the_status_is_patched_only_when_the_ingress_changed() {
    // TestPatchStatus.
    let ingress = |ips: &[&str]| LoadBalancerStatus {
        ingress: Some(
            ips.iter()
                .map(|ip| LoadBalancerIngress {
                    ip: Some((*ip).into()),
                    ..Default::default()
                })
                .collect(),
        ),
    };
    let with_mode = LoadBalancerStatus {
        ingress: Some(vec![LoadBalancerIngress {
            ip: Some("8.8.8.8".into()),
            ip_mode: Some("VIP".into()),
            ..Default::default()
        }]),
    };
    let cases = [
        (
            "no-op add status",
            svc("s").ingress(&["8.8.8.8"]).build(),
            ingress(&["8.8.8.8"]),
            false,
        ),
        ("add status", svc("s").build(), ingress(&["8.8.8.8"]), true),
        (
            "no-op clear status",
            svc("s").build(),
            LoadBalancerStatus::default(),
            false,
        ),
        (
            "clear status",
            svc("s").ingress(&["8.8.8.8"]).build(),
            LoadBalancerStatus::default(),
            true,
        ),
        (
            "the server's default ipMode VIP is no change",
            svc("s").ingress(&["8.8.8.8"]).build(),
            with_mode,
            false,
        ),
        (
            "order counts",
            svc("s").ingress(&["1.1.1.1", "2.2.2.2"]).build(),
            ingress(&["2.2.2.2", "1.1.1.1"]),
            true,
        ),
    ];
    for (what, service, status, want) in cases {
        assert_eq!(status_patch(&service, &status).is_some(), want, "{what}");
    }
    assert_eq!(
        status_patch(&svc("s").build(), &ingress(&["8.8.8.8"])),
        Some(json!({"status": {"loadBalancer": {"ingress": [{"ip": "8.8.8.8"}]}}}))
    );
}

#[test]
fn node_names_in_messages_are_sorted_and_limited_to_twenty() {
    let backends = |n: usize| -> Vec<BackendNode> {
        (0..n)
            .rev()
            .map(|i| BackendNode {
                name: format!("node-{i:02}"),
                ..Default::default()
            })
            .collect()
    };
    assert_eq!(loggable_node_names(&backends(3)), "[node-00 node-01 node-02]");
    let many = loggable_node_names(&backends(25));
    assert!(many.starts_with("[node-05 node-06"), "{many}");
    assert!(many.ends_with("node-24 <5 more>]"), "{many}");
}

#[test]
fn provider_annotations_are_only_the_changed_ones_under_the_providers_prefix() {
    const P: &str = "loadbalancer.openstack.org/";
    type Pairs<'a> = &'a [(&'a str, &'a str)];
    let map = |pairs: Pairs<'_>| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    };
    let id = "loadbalancer.openstack.org/load-balancer-id";
    let address = "loadbalancer.openstack.org/load-balancer-address";
    let bare = svc("web").build();
    let written = svc("web")
        .annotation(id, "lb-1")
        .annotation(address, "203.0.113.7")
        .build();
    struct Case<'a> {
        name: &'a str,
        service: &'a Service,
        answered: Pairs<'a>,
        prefix: &'a str,
        want: Option<Pairs<'a>>,
    }
    let cases = [
        Case {
            name: "first ensure: both written",
            service: &bare,
            answered: &[(id, "lb-1"), (address, "203.0.113.7")],
            prefix: P,
            want: Some(&[(id, "lb-1"), (address, "203.0.113.7")]),
        },
        Case {
            name: "already there (OCCM wrote them): nothing",
            service: &written,
            answered: &[(id, "lb-1"), (address, "203.0.113.7")],
            prefix: P,
            want: None,
        },
        Case {
            name: "a stale id replaced, the address kept",
            service: &written,
            answered: &[(id, "lb-2"), (address, "203.0.113.7")],
            prefix: P,
            want: Some(&[(id, "lb-2")]),
        },
        Case {
            name: "a key outside the prefix never",
            service: &bare,
            answered: &[("kubernetes.io/owner", "me"), (id, "lb-1")],
            prefix: P,
            want: Some(&[(id, "lb-1")]),
        },
        Case {
            name: "a provider that names no prefix writes nothing",
            service: &bare,
            answered: &[(id, "lb-1")],
            prefix: "",
            want: None,
        },
        Case {
            name: "the prefix alone is no key",
            service: &bare,
            answered: &[(P, "x")],
            prefix: P,
            want: None,
        },
        Case {
            name: "nothing answered",
            service: &bare,
            answered: &[],
            prefix: P,
            want: None,
        },
    ];
    for c in cases {
        assert_eq!(
            provider_annotations(c.service, &map(c.answered), c.prefix),
            c.want.map(map),
            "{}",
            c.name
        );
    }
}

#[test]
fn only_a_service_without_finalizer_or_ingress_shows_no_load_balancer() {
    // (case, Service as read before its finalizer is written, shows no load balancer)
    let cases = [
        ("just created", svc("s").build(), true),
        (
            "finalizer written, then a crash before the status",
            svc("s").finalizer().build(),
            false,
        ),
        (
            "provisioned by a controller that predates finalizers",
            svc("s").ingress(&["8.8.8.8"]).build(),
            false,
        ),
        (
            "provisioned",
            svc("s").finalizer().ingress(&["8.8.8.8"]).build(),
            false,
        ),
    ];
    for (case, service, want) in cases {
        assert_eq!(shows_no_load_balancer(&service), want, "{case}");
    }
}
