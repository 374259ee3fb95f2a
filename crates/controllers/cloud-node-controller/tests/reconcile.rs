//! Reconcile-level tests: one node's reconcile against fake-apiserver in-process and a fake
//! cloud, between the pure plan tests and the end-to-end tests of the processes.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use cloud_node_controller::{
    metrics::Metrics,
    reconcile::{self, Context, Error},
};
use controller_kit::{
    events::Events,
    gateway::GatewayError,
    leader::Leadership,
    names::{TAINT_UNINITIALIZED, labels},
    node::has_taint,
    patch::Writer,
};
use http::Method;
use k8s_openapi::api::{core::v1::Node, events::v1::Event};
use kube::{
    Api,
    api::{ListParams, PostParams},
    runtime::controller::Action,
};
use side_port::MetricsRegistry;
use test_support::{
    FakeCloud, InstanceBuilder, NodeBuilder,
    intercept::{self, Intercept},
};

struct Harness {
    _server: fake_apiserver::RunningServer,
    /// For the test's own reads and writes.
    nodes: Api<Node>,
    /// What the controller sent to the API server.
    requests: intercept::Log,
    events: Api<Event>,
    cloud: Arc<FakeCloud>,
    ctx: Arc<Context>,
    metrics: MetricsRegistry,
}

async fn harness() -> Harness {
    harness_with(|_, _| Intercept::Pass).await
}

/// The controller talks to the API server through a client that asks `hook` about every
/// request (to answer some itself, e.g. with a conflict).
async fn harness_with<F>(hook: F) -> Harness
where
    F: Fn(&Method, &str) -> Intercept + Send + Sync + 'static,
{
    let server = fake_apiserver::FakeApiServer::start(fake_apiserver::Config::default())
        .await
        .unwrap();
    let client = server.client().unwrap();
    let (controllers_client, requests) = intercept::client(&server, hook);
    let cloud = FakeCloud::new();
    let metrics = MetricsRegistry::new();
    let ctx = Arc::new(Context::new(
        Api::all(controllers_client.clone()),
        cloud.clone(),
        Writer::new("cloud-node-controller", Leadership::unconditional()),
        Events::new(controllers_client, "cloud-node-controller", None),
        Metrics::register(&metrics),
    ));
    Harness {
        _server: server,
        nodes: Api::all(client.clone()),
        requests,
        events: Api::namespaced(client, "default"),
        cloud,
        ctx,
        metrics,
    }
}

impl Harness {
    /// Registers `node` and returns it as the watch would deliver it.
    async fn register(&self, node: NodeBuilder) -> Arc<Node> {
        Arc::new(
            self.nodes
                .create(&PostParams::default(), &node.build())
                .await
                .unwrap(),
        )
    }

    async fn node(&self, name: &str) -> Node {
        self.nodes.get(name).await.unwrap()
    }

    async fn event_reasons(&self) -> Vec<String> {
        let events = self.events.list(&ListParams::default()).await.unwrap();
        events.items.into_iter().filter_map(|e| e.reason).collect()
    }
}

fn kubelet_node(name: &str) -> NodeBuilder {
    NodeBuilder::new(name)
        .taint(TAINT_UNINITIALIZED)
        .addresses(&[("Hostname", name), ("InternalIP", "192.168.0.9")])
}

/// The node's `status.addresses`, as `type=address`.
fn addresses(node: &Node) -> Vec<String> {
    node.status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .into_iter()
        .flatten()
        .map(|a| format!("{}={}", a.type_, a.address))
        .collect()
}

fn instance() -> InstanceBuilder {
    InstanceBuilder::new("sim://zone-a/i-1")
        .address("InternalIP", "10.0.0.1")
        .address("ExternalIP", "203.0.113.1")
}

#[tokio::test]
async fn a_tainted_node_is_initialized_from_the_cloud() {
    let h = harness().await;
    h.cloud.set_instance("n1", instance().build());
    let node = h.register(kubelet_node("n1")).await;

    let action = reconcile::reconcile(node, h.ctx.clone()).await.unwrap();

    assert_eq!(action, Action::await_change());
    let node = h.node("n1").await;
    assert_eq!(
        node.spec.as_ref().unwrap().provider_id.as_deref(),
        Some("sim://zone-a/i-1")
    );
    assert!(!has_taint(&node, TAINT_UNINITIALIZED));
    let labels = node.metadata.labels.unwrap();
    assert_eq!(labels[labels::ZONE], "zone-a");
    assert_eq!(labels[labels::INSTANCE_TYPE_BETA], "sim.large");
    let addresses: Vec<_> = node
        .status
        .unwrap()
        .addresses
        .unwrap()
        .into_iter()
        .map(|a| a.address)
        .collect();
    assert_eq!(
        addresses,
        ["10.0.0.1", "203.0.113.1", "n1"],
        "the cloud's, plus kubelet's Hostname"
    );
    assert_eq!(h.cloud.calls().len(), 1, "one cloud call");
    let requests: Vec<_> = h
        .requests
        .sent()
        .into_iter()
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert_eq!(
        requests,
        [
            "PATCH /api/v1/nodes/n1",
            "PATCH /api/v1/nodes/n1/status",
            "POST /apis/events.k8s.io/v1/namespaces/default/events",
        ],
        "three API requests per node: no read, the watch delivered the node"
    );
    assert_eq!(h.event_reasons().await, ["Synced"]);
    let metrics = h.metrics.render();
    assert!(
        metrics.contains("node_controller_cloud_provider_taint_removal_delay_seconds_count 1"),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_retry_after_answer_requeues_after_exactly_that_delay() {
    let h = harness().await;
    let retry = GatewayError::RetryAfter {
        after: Duration::from_secs(7),
        message: "the cloud is provisioning".into(),
    };
    h.cloud.set_error("n1", retry);
    let node = h.register(kubelet_node("n1")).await;

    for _ in 0..3 {
        let err = reconcile::reconcile(node.clone(), h.ctx.clone())
            .await
            .unwrap_err();
        let action = reconcile::error_policy(node.clone(), &err, h.ctx.clone());
        assert_eq!(action, Action::requeue(Duration::from_secs(7)), "not the backoff");
    }
    assert!(has_taint(&h.node("n1").await, TAINT_UNINITIALIZED));

    // Any other failure backs off from 1 s.
    h.cloud.set_error("n1", GatewayError::Unavailable("down".into()));
    let err = reconcile::reconcile(node.clone(), h.ctx.clone())
        .await
        .unwrap_err();
    assert_eq!(
        reconcile::error_policy(node, &err, h.ctx.clone()),
        Action::requeue(Duration::from_secs(1))
    );
}

#[tokio::test]
async fn an_instance_not_found_keeps_the_taint_and_writes_nothing() {
    let h = harness().await;
    let node = h.register(kubelet_node("n1")).await;
    let before = h.node("n1").await.metadata.resource_version;

    let err = reconcile::reconcile(node, h.ctx.clone()).await.unwrap_err();

    assert!(
        matches!(
            err,
            Error::CloudLookup {
                source: GatewayError::InstanceNotFound(_),
                ..
            }
        ),
        "{err:?}"
    );
    let node = h.node("n1").await;
    assert!(has_taint(&node, TAINT_UNINITIALIZED));
    assert_eq!(node.metadata.resource_version, before, "nothing written");
    assert!(h.event_reasons().await.is_empty());
}

#[tokio::test]
async fn a_provided_ip_the_cloud_does_not_report_keeps_the_taint() {
    let h = harness().await;
    h.cloud.set_instance("n1", instance().build());
    let node = h
        .register(kubelet_node("n1").annotation("alpha.kubernetes.io/provided-node-ip", "10.9.9.9"))
        .await;

    let err = reconcile::reconcile(node, h.ctx.clone()).await.unwrap_err();

    assert!(matches!(err, Error::NotYet(_)), "{err:?}");
    assert!(has_taint(&h.node("n1").await, TAINT_UNINITIALIZED));
}

#[tokio::test]
async fn an_invalid_provider_label_is_dropped_with_a_warning_and_the_node_initialized() {
    let h = harness().await;
    h.cloud.set_instance(
        "n1",
        instance()
            .label("sim.cloud/rack", "r7")
            .label("sim.cloud/owner", "not a label value")
            .build(),
    );
    let node = h.register(kubelet_node("n1")).await;

    reconcile::reconcile(node, h.ctx.clone()).await.unwrap();

    let node = h.node("n1").await;
    assert!(!has_taint(&node, TAINT_UNINITIALIZED));
    let labels = node.metadata.labels.unwrap();
    assert_eq!(labels["sim.cloud/rack"], "r7");
    assert!(!labels.contains_key("sim.cloud/owner"));
    let mut reasons = h.event_reasons().await;
    reasons.sort();
    assert_eq!(reasons, ["InvalidNodeLabel", "Synced"]);
}

#[tokio::test]
async fn the_refresh_rewrites_changed_addresses_but_not_a_reordered_list() {
    let h = harness().await;
    let node = NodeBuilder::new("n1")
        .provider_id("sim://zone-a/i-1")
        .addresses(&[
            ("ExternalIP", "203.0.113.1"),
            ("InternalIP", "10.0.0.1"),
            ("Hostname", "n1"),
        ]);
    let node = h.register(node).await;
    h.cloud.set_instance("sim://zone-a/i-1", instance().build());
    let before = h.node("n1").await.metadata.resource_version;

    assert_eq!(
        reconcile::refresh_addresses(&h.ctx, vec![node.clone()], 4).await,
        0
    );
    assert_eq!(
        h.node("n1").await.metadata.resource_version,
        before,
        "same set, other order"
    );

    h.cloud.set_instance(
        "sim://zone-a/i-1",
        instance().address("InternalIP", "10.0.0.2").build(),
    );
    assert_eq!(reconcile::refresh_addresses(&h.ctx, vec![node], 4).await, 1);
    let addresses = h.node("n1").await.status.unwrap().addresses.unwrap();
    assert!(addresses.iter().any(|a| a.address == "10.0.0.2"));
}

/// Kubelet updates the node's status between the controller's two writes: the status patch
/// meets a 409 after the main patch has removed the taint. The re-planned write must still
/// bring the cloud's addresses, not leave an initialized node without them until the refresh.
#[tokio::test]
async fn addresses_are_written_when_the_status_patch_conflicts_after_the_taint_is_gone() {
    let conflicted = AtomicBool::new(false);
    let h = harness_with(move |method, path| {
        if method == Method::PATCH
            && path.ends_with("/nodes/n1/status")
            && !conflicted.swap(true, Ordering::SeqCst)
        {
            intercept::status(
                409,
                "Conflict",
                "Operation cannot be fulfilled on nodes \"n1\": the object has been modified",
            )
        } else {
            Intercept::Pass
        }
    })
    .await;
    h.cloud.set_instance("n1", instance().build());
    let node = h.register(kubelet_node("n1")).await;

    let action = reconcile::reconcile(node, h.ctx.clone()).await.unwrap();

    assert_eq!(action, Action::await_change());
    let node = h.node("n1").await;
    assert!(!has_taint(&node, TAINT_UNINITIALIZED));
    assert_eq!(
        addresses(&node),
        ["InternalIP=10.0.0.1", "ExternalIP=203.0.113.1", "Hostname=n1"],
        "the cloud's addresses, not kubelet's"
    );
    let status_patches = h.requests.matching(&Method::PATCH, "/nodes/n1/status");
    assert_eq!(status_patches.len(), 2, "the conflict, then the retry");
    assert_eq!(
        h.event_reasons().await,
        ["Synced"],
        "one Synced: this reconcile removed the taint"
    );
    assert!(
        h.metrics
            .render()
            .contains("node_controller_cloud_provider_taint_removal_delay_seconds_count 1")
    );
}

/// The gateway turns a "found" answer without metadata into an internal error: the node is
/// not initialized from nothing, keeps its taint, and is retried with the backoff.
#[tokio::test]
async fn found_without_metadata_keeps_the_taint_and_is_retried_with_backoff() {
    let h = harness().await;
    h.cloud.set_error(
        "n1",
        GatewayError::Internal("the gateway answered found without metadata for node n1".into()),
    );
    let node = h.register(kubelet_node("n1")).await;
    let before = h.node("n1").await.metadata.resource_version;

    let mut delays = Vec::new();
    for _ in 0..3 {
        let err = reconcile::reconcile(node.clone(), h.ctx.clone())
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                Error::CloudLookup {
                    source: GatewayError::Internal(_),
                    ..
                }
            ),
            "{err:?}"
        );
        assert_eq!(err.retry_after(), None);
        delays.push(reconcile::error_policy(node.clone(), &err, h.ctx.clone()));
    }

    assert_eq!(
        delays,
        [1, 2, 4].map(|s| Action::requeue(Duration::from_secs(s))),
        "exponential backoff"
    );
    let node = h.node("n1").await;
    assert!(has_taint(&node, TAINT_UNINITIALIZED));
    assert_eq!(node.metadata.resource_version, before, "nothing written");
    assert!(
        h.requests.sent().is_empty(),
        "no request at all: {:?}",
        h.requests.sent()
    );
    assert!(h.event_reasons().await.is_empty());
    assert!(
        h.metrics
            .render()
            .contains(r#"cloud_node_controller_reconcile_errors_total{error="cloud_lookup"} 3"#),
        "{}",
        h.metrics.render()
    );
}
