//! Reconcile-level tests: one reconcile of the route controller against fake-apiserver
//! in-process and the fake cloud, between the pure plan tests and the end-to-end tests of the
//! processes. The Node cache is filled by the test, as the watch would.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use controller_kit::{
    events::Events, gateway::GatewayError, leader::Leadership, patch::Writer, routes::Route,
};
use http::Method;
use k8s_openapi::api::{core::v1::Node, events::v1::Event};
use kube::{
    Api,
    api::{ListParams, Patch, PatchParams, PostParams},
    runtime::{reflector, watcher},
};
use node_route_controller::{
    metrics::Metrics,
    plan::{self, ClusterCidrs},
    reconcile::{self, Context, Error, Outcome, error_policy},
};
use serde_json::json;
use side_port::MetricsRegistry;
use test_support::{
    FakeCloud, NodeBuilder, RouteOp,
    intercept::{self, Intercept, Log},
};

const CLUSTER: &str = "kubernetes";

struct Harness {
    _server: fake_apiserver::RunningServer,
    /// A client of its own, as kubelet and the test's checks.
    nodes: Api<Node>,
    cloud: Arc<FakeCloud>,
    ctx: Arc<Context>,
    cache: reflector::store::Writer<Node>,
    requests: Log,
    metrics: MetricsRegistry,
    events: Api<Event>,
}

async fn harness(leadership: Leadership, concurrency: usize) -> Harness {
    let server = fake_apiserver::FakeApiServer::start(fake_apiserver::Config::default())
        .await
        .unwrap();
    let (client, requests) = intercept::client(&server, |_, _| Intercept::Pass);
    let cloud = FakeCloud::new();
    let metrics = MetricsRegistry::new();
    let (store, cache) = reflector::store();
    let ctx = Context::new(
        Api::all(client.clone()),
        store,
        cloud.clone(),
        CLUSTER.into(),
        ClusterCidrs::parse("10.244.0.0/16,fd00:10::/56").unwrap(),
        Writer::new("node-route-controller", leadership),
        Events::new(client, "route-controller", None),
        Metrics::register(&metrics),
        concurrency,
    );
    let own = server.client().unwrap();
    Harness {
        nodes: Api::all(own.clone()),
        events: Api::namespaced(own, "default"),
        _server: server,
        cloud,
        ctx: Arc::new(ctx),
        cache,
        requests,
        metrics,
    }
}

impl Harness {
    /// Registers the node (with a Ready condition, as kubelet) and puts it in the cache.
    async fn register(&mut self, node: NodeBuilder) -> Node {
        let created = self
            .nodes
            .create(&PostParams::default(), &node.build())
            .await
            .unwrap();
        let name = created.metadata.name.clone().unwrap();
        let ready = json!({"status": {"conditions": [
            {"type": "Ready", "status": "True", "reason": "KubeletReady"},
        ]}});
        let node = self
            .nodes
            .patch_status(&name, &PatchParams::default(), &Patch::Strategic(&ready))
            .await
            .unwrap();
        self.cache
            .apply_watcher_event(&watcher::Event::Apply(node.clone()));
        node
    }

    /// The cache catches up with the API server, as the watch does.
    async fn sync_cache(&mut self) {
        for node in self.nodes.list(&ListParams::default()).await.unwrap() {
            self.cache.apply_watcher_event(&watcher::Event::Apply(node));
        }
    }

    fn forget(&mut self, node: &Node) {
        self.cache
            .apply_watcher_event(&watcher::Event::Delete(node.clone()));
    }

    async fn reconcile(&self) -> Result<Outcome, Error> {
        reconcile::reconcile(&self.ctx).await
    }

    /// `(status, reason)` of the node's NetworkUnavailable condition, and its other conditions' types.
    async fn condition(&self, name: &str) -> (Option<(String, String)>, Vec<String>) {
        let node = self.nodes.get(name).await.unwrap();
        let ours = plan::network_unavailable(&node)
            .map(|c| (c.status.clone(), c.reason.clone().unwrap_or_default()));
        let others = node
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .into_iter()
            .filter(|c| c.type_ != plan::NETWORK_UNAVAILABLE)
            .map(|c| c.type_)
            .collect();
        (ours, others)
    }

    async fn reasons(&self, node: &str) -> Vec<String> {
        let list = self.events.list(&ListParams::default()).await.unwrap();
        list.items
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(node))
            .filter_map(|e| e.reason)
            .collect()
    }

    fn writes(&self) -> usize {
        self.requests
            .sent()
            .iter()
            .filter(|s| s.method != Method::GET)
            .count()
    }
}

fn created() -> Option<(String, String)> {
    Some(("False".into(), plan::REASON_ROUTE_CREATED.into()))
}

fn not_created() -> Option<(String, String)> {
    Some(("True".into(), plan::REASON_NO_ROUTE_CREATED.into()))
}

fn route(target: &str, cidr: &str) -> Route {
    Route {
        name: format!("manual-{target}"),
        target_node: target.into(),
        destination_cidr: cidr.into(),
        ..Default::default()
    }
}

#[tokio::test]
async fn nodes_get_their_routes_and_network_available_and_then_nothing_more_is_done() {
    let mut h = harness(Leadership::unconditional(), 200).await;
    let n1 = h
        .register(
            NodeBuilder::new("n1")
                .pod_cidrs(&["10.244.1.0/24"])
                .addresses(&[("InternalIP", "10.0.0.1")]),
        )
        .await;
    h.register(NodeBuilder::new("n2").pod_cidrs(&["10.244.2.0/24", "fd00:10:0:2::/64"]))
        .await;
    h.register(NodeBuilder::new("no-cidr")).await;
    // Kubelet reports after the cache's copy: the condition write meets a 409 and plans again.
    let heartbeat = json!({"status": {"conditions": [
        {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory"},
    ]}});
    h.nodes
        .patch_status("n1", &PatchParams::default(), &Patch::Strategic(&heartbeat))
        .await
        .unwrap();

    let outcome = h.reconcile().await.unwrap();

    assert_eq!(
        outcome,
        Outcome {
            created: 3,
            deleted: 0,
            conditions_written: 2
        }
    );
    assert_eq!(
        h.cloud.described_routes(CLUSTER),
        ["n1 10.244.1.0/24", "n2 10.244.2.0/24", "n2 fd00:10:0:2::/64"]
    );
    let n1_create = h
        .cloud
        .route_calls()
        .into_iter()
        .find(|c| c.op == RouteOp::Create && c.route.target_node == "n1")
        .unwrap();
    assert_eq!(
        n1_create.name_hint,
        n1.metadata.uid.unwrap(),
        "the name hint is the node's UID"
    );
    assert_eq!(n1_create.cluster, CLUSTER);
    assert_eq!(n1_create.route.target_node_addresses[0].address, "10.0.0.1");
    let (n1, n1_others) = h.condition("n1").await;
    assert_eq!(n1, created());
    assert_eq!(
        n1_others,
        ["MemoryPressure", "Ready"],
        "kubelet's conditions are kept"
    );
    assert_eq!(h.condition("n2").await.0, created());
    assert_eq!(
        h.condition("no-cidr").await.0,
        None,
        "a node without pod CIDRs is left alone"
    );

    // Steady state: the cache has the written nodes; a resync is one ListRoutes, nothing else.
    h.sync_cache().await;
    h.cloud.clear_route_calls();
    let writes = h.writes();
    assert_eq!(h.reconcile().await.unwrap(), Outcome::default());
    assert_eq!(h.cloud.described_route_calls(), ["List"]);
    assert_eq!(h.writes(), writes, "no API write");
    let metrics = h.metrics.render();
    assert!(
        metrics.contains("route_controller_route_sync_total 2"),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            r#"node_route_controller_route_operations_total{operation="create",result="success"} 3"#
        )
    );
    assert!(metrics.contains("node_route_controller_reconcile_total 2"));
}

#[tokio::test]
async fn routes_of_gone_nodes_and_blackholes_go_and_routes_outside_the_cluster_cidr_stay() {
    let mut h = harness(Leadership::unconditional(), 200).await;
    h.register(NodeBuilder::new("n1").pod_cidrs(&["10.244.1.0/24"]))
        .await;
    let gone = h
        .register(NodeBuilder::new("gone").pod_cidrs(&["10.244.9.0/24"]))
        .await;
    h.reconcile().await.unwrap();
    h.forget(&gone);
    h.cloud.add_route(CLUSTER, route("nobody", "10.244.50.0/24"));
    h.cloud.add_route(
        CLUSTER,
        Route {
            blackhole: true,
            ..route("n1-old", "10.244.60.0/24")
        },
    );
    h.cloud.add_route(CLUSTER, route("vpn", "192.168.0.0/24"));
    h.cloud
        .add_route("another-cluster", route("theirs", "10.244.70.0/24"));

    let outcome = h.reconcile().await.unwrap();

    assert_eq!(outcome.deleted, 3);
    assert_eq!(
        h.cloud.described_routes(CLUSTER),
        ["n1 10.244.1.0/24", "vpn 192.168.0.0/24"]
    );
    assert_eq!(
        h.cloud.described_routes("another-cluster").len(),
        1,
        "another cluster's routes are never listed, so never touched"
    );
}

#[tokio::test]
async fn a_failed_create_is_no_route_created_with_a_warning_until_it_succeeds() {
    let mut h = harness(Leadership::unconditional(), 200).await;
    h.register(NodeBuilder::new("n1").pod_cidrs(&["10.244.1.0/24"]))
        .await;
    h.register(NodeBuilder::new("n2").pod_cidrs(&["10.244.2.0/24"]))
        .await;
    h.cloud.fail_routes_to(
        "10.244.2.0/24",
        Some(GatewayError::Unavailable("the cloud is down".into())),
    );

    let err = h.reconcile().await.unwrap_err();

    assert!(
        matches!(
            err,
            Error::Operations {
                failed: 1,
                attempted: 2,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        error_policy(&err, 1, Duration::from_secs(10)),
        Duration::from_secs(1)
    );
    assert_eq!(h.condition("n1").await.0, created());
    assert_eq!(h.condition("n2").await.0, not_created());
    assert_eq!(h.reasons("n2").await, ["FailedToCreateRoute"]);
    assert!(h.reasons("n1").await.is_empty());
    assert!(
        h.metrics
            .render()
            .contains(r#"node_route_controller_reconcile_errors_total{error="route_operations"} 1"#)
    );

    h.cloud.fail_routes_to("10.244.2.0/24", None);
    h.sync_cache().await;
    let outcome = h.reconcile().await.unwrap();
    assert_eq!((outcome.created, outcome.conditions_written), (1, 1));
    assert_eq!(h.condition("n2").await.0, created());
}

#[tokio::test]
async fn a_full_route_table_warns_naming_the_quota_and_backs_off_like_other_errors() {
    let mut h = harness(Leadership::unconditional(), 200).await;
    h.register(NodeBuilder::new("n1").pod_cidrs(&["10.244.1.0/24"]))
        .await;
    let message = "CreateRoute: RouteLimitExceeded: The maximum number of routes has been reached.";
    h.cloud
        .fail_routes_to("10.244.1.0/24", Some(GatewayError::QuotaExceeded(message.into())));

    let err = h.reconcile().await.unwrap_err();

    assert!(
        matches!(
            &err,
            Error::Operations {
                first: GatewayError::QuotaExceeded(_),
                retry_after: None,
                ..
            }
        ),
        "{err:?}"
    );
    let backoff: Vec<u64> = (1..=3)
        .map(|n| error_policy(&err, n, Duration::from_secs(10)).as_secs())
        .collect();
    assert_eq!(backoff, [1, 2, 4], "the ordinary backoff");
    assert_eq!(h.condition("n1").await.0, not_created());
    assert_eq!(h.reasons("n1").await, ["FailedToCreateRoute"]);
    let notes: Vec<String> = h
        .events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|e| e.note)
        .collect();
    assert!(
        notes
            .iter()
            .any(|n| n.contains(&format!("quota exceeded: {message}"))),
        "{notes:?}"
    );
}

#[tokio::test]
async fn without_a_route_list_nothing_changes_but_new_nodes_get_no_route_created() {
    let mut h = harness(Leadership::unconditional(), 200).await;
    h.register(NodeBuilder::new("old").pod_cidrs(&["10.244.1.0/24"]))
        .await;
    h.reconcile().await.unwrap();
    h.sync_cache().await;
    h.cloud.add_route(CLUSTER, route("nobody", "10.244.50.0/24"));
    h.register(NodeBuilder::new("new").pod_cidrs(&["10.244.2.0/24"]))
        .await;
    h.cloud
        .fail_route_calls(RouteOp::List, Some(GatewayError::Unavailable("down".into())));
    h.cloud.clear_route_calls();

    let err = h.reconcile().await.unwrap_err();

    assert!(matches!(err, Error::ListRoutes(_)), "{err:?}");
    assert_eq!(
        h.cloud.described_route_calls(),
        ["List"],
        "no create or delete blind"
    );
    assert_eq!(
        h.condition("old").await.0,
        created(),
        "an outage does not take it away"
    );
    assert_eq!(h.condition("new").await.0, not_created());
}

#[tokio::test]
async fn retry_after_and_a_provider_without_routes_pause_the_reconciles() {
    let h = harness(Leadership::unconditional(), 200).await;
    h.cloud.fail_route_calls(
        RouteOp::List,
        Some(GatewayError::RetryAfter {
            after: Duration::from_secs(42),
            message: "busy".into(),
        }),
    );
    let err = h.reconcile().await.unwrap_err();
    assert_eq!(
        error_policy(&err, 1, Duration::from_secs(10)),
        Duration::from_secs(42)
    );
    h.cloud.fail_route_calls(
        RouteOp::List,
        Some(GatewayError::NotImplemented("no routes".into())),
    );
    let err = h.reconcile().await.unwrap_err();
    assert!(err.not_implemented());
    assert_eq!(
        error_policy(&err, 1, Duration::from_secs(10)),
        Duration::from_secs(60)
    );
    h.cloud
        .fail_route_calls(RouteOp::List, Some(GatewayError::Unavailable("x".into())));
    let err = h.reconcile().await.unwrap_err();
    let backoff: Vec<u64> = (1..=6)
        .map(|n| error_policy(&err, n, Duration::from_secs(10)).as_secs())
        .collect();
    assert_eq!(
        backoff,
        [1, 2, 4, 8, 10, 10],
        "doubling, never later than the resync"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_deleted_before_its_create_gets_no_route() {
    // One operation at a time, each taking a while: one node's create waits behind the other's.
    let mut h = harness(Leadership::unconditional(), 1).await;
    let a = h
        .register(NodeBuilder::new("a").pod_cidrs(&["10.244.1.0/24"]))
        .await;
    let b = h
        .register(NodeBuilder::new("b").pod_cidrs(&["10.244.2.0/24"]))
        .await;
    h.cloud.set_route_latency(Duration::from_millis(300));
    let ctx = h.ctx.clone();
    let running = tokio::spawn(async move { reconcile::reconcile(&ctx).await });
    let deadline = Instant::now() + Duration::from_secs(10);
    let first = loop {
        let calls = h.cloud.route_calls();
        if let Some(create) = calls.iter().find(|c| c.op == RouteOp::Create) {
            break create.route.target_node.clone();
        }
        assert!(Instant::now() < deadline, "no create started");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    // The other node is deleted while the first create is out.
    let (waiting, kept) = if first == "a" { (b, "a") } else { (a, "b") };
    h.forget(&waiting);
    let outcome = running.await.unwrap().unwrap();

    assert_eq!(outcome.created, 1);
    let creates: Vec<String> = h
        .cloud
        .route_calls()
        .iter()
        .filter(|c| c.op == RouteOp::Create)
        .map(|c| c.route.target_node.clone())
        .collect();
    assert_eq!(creates, [kept]);
}

#[tokio::test]
async fn a_replica_that_does_not_lead_changes_nothing() {
    let mut h = harness(Leadership::elected(), 200).await;
    h.register(NodeBuilder::new("n1").pod_cidrs(&["10.244.1.0/24"]))
        .await;
    h.cloud.add_route(CLUSTER, route("nobody", "10.244.50.0/24"));
    let writes = h.writes();

    let _ = h.reconcile().await;

    assert_eq!(h.cloud.described_route_calls(), ["List"]);
    assert_eq!(h.writes(), writes);
    assert_eq!(h.condition("n1").await.0, None);
}

#[tokio::test]
async fn a_pod_cidr_outside_the_cluster_cidr_is_explained_on_the_node() {
    let mut h = harness(Leadership::unconditional(), 200).await;
    h.register(NodeBuilder::new("n1").pod_cidrs(&["10.99.1.0/24"]))
        .await;

    let outcome = h.reconcile().await.unwrap();

    assert_eq!(outcome.created, 0);
    assert!(h.cloud.routes_of(CLUSTER).is_empty());
    assert_eq!(h.condition("n1").await.0, not_created());
    let list = h.events.list(&ListParams::default()).await.unwrap();
    let notes: Vec<String> = list.items.into_iter().filter_map(|e| e.note).collect();
    assert!(
        notes
            .iter()
            .any(|n| n.contains("outside --cluster-cidr 10.244.0.0/16,fd00:10::/56")),
        "{notes:?}"
    );
}
