//! Pass-level tests: the lifecycle controller's periodic pass against fake-apiserver in-process
//! and a fake cloud, between the pure plan tests and the end-to-end tests of the processes.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use cloud_node_lifecycle_controller::{
    metrics::Metrics,
    reconcile::{Context, monitor_nodes},
};
use controller_kit::{
    events::Events, gateway::GatewayError, leader::Leadership, names::TAINT_SHUTDOWN, node::has_taint,
    patch::Writer,
};
use http::Method;
use k8s_openapi::api::core::v1::Node;
use kube::{Api, api::PostParams};
use side_port::MetricsRegistry;
use test_support::{
    FakeCloud, InstanceBuilder, NodeBuilder,
    intercept::{self, Intercept, Log},
};

struct Harness {
    _server: fake_apiserver::RunningServer,
    nodes: Api<Node>,
    cloud: Arc<FakeCloud>,
    ctx: Context,
    leadership: Leadership,
    requests: Log,
    metrics: MetricsRegistry,
}

/// The controller writes through a client whose event writes take `event_delay`.
async fn harness(leadership: Leadership, event_delay: Duration) -> Harness {
    harness_with(leadership, event_delay, Duration::ZERO).await
}

/// `delete_delay` holds every DELETE before it goes out, as a client-side rate limit would.
async fn harness_with(leadership: Leadership, event_delay: Duration, delete_delay: Duration) -> Harness {
    let server = fake_apiserver::FakeApiServer::start(fake_apiserver::Config::default())
        .await
        .unwrap();
    let (client, requests) = intercept::client(&server, move |method, path| {
        if method == Method::POST && path.contains("/events") {
            Intercept::Delay(event_delay)
        } else if method == Method::DELETE {
            Intercept::Delay(delete_delay)
        } else {
            Intercept::Pass
        }
    });
    let cloud = FakeCloud::new();
    let metrics = MetricsRegistry::new();
    let ctx = Context::new(
        Api::all(client.clone()),
        cloud.clone(),
        Writer::new("cloud-node-lifecycle-controller", leadership.clone()),
        Events::new(client, "cloud-node-lifecycle-controller", None),
        Metrics::register(&metrics),
    );
    Harness {
        nodes: Api::all(server.client().unwrap()),
        _server: server,
        cloud,
        ctx,
        leadership,
        requests,
        metrics,
    }
}

impl Harness {
    async fn register(&self, node: NodeBuilder) -> Arc<Node> {
        Arc::new(
            self.nodes
                .create(&PostParams::default(), &node.build())
                .await
                .unwrap(),
        )
    }

    async fn exists(&self, name: &str) -> bool {
        self.nodes.get_opt(name).await.unwrap().is_some()
    }

    fn deletes(&self) -> Vec<intercept::Sent> {
        self.requests.matching(&Method::DELETE, "/nodes/")
    }
}

/// A node whose kubelet reports `ready`, on instance `provider_id`.
fn node(name: &str, provider_id: &str, ready: bool) -> NodeBuilder {
    NodeBuilder::new(name).provider_id(provider_id).ready(ready)
}

fn leading_for(duration: Duration) -> Leadership {
    let leadership = Leadership::elected();
    leadership.lead_until(Some(Instant::now() + duration));
    leadership
}

#[tokio::test]
async fn a_not_ready_node_whose_instance_is_gone_is_deleted() {
    let h = harness(Leadership::unconditional(), Duration::ZERO).await;
    let gone = h.register(node("gone", "sim://zone-a/i-gone", false)).await;
    let ready = h.register(node("ready", "sim://zone-a/i-x", true)).await;

    monitor_nodes(&h.ctx, &[gone, ready]).await;

    assert!(!h.exists("gone").await);
    assert!(h.exists("ready").await, "Ready nodes are not even looked up");
    assert_eq!(h.cloud.calls().len(), 1);
    assert_eq!(h.cloud.calls()[0].len(), 1);
    assert!(
        h.metrics
            .render()
            .contains(r#"cloud_node_lifecycle_controller_actions_total{action="delete"} 1"#)
    );
}

#[tokio::test]
async fn nothing_is_deleted_on_an_error_or_for_a_stopped_instance() {
    let h = harness(Leadership::unconditional(), Duration::ZERO).await;
    h.cloud
        .set_error("sim://zone-a/i-1", GatewayError::Unavailable("cloud down".into()));
    h.cloud.set_instance(
        "sim://zone-a/i-2",
        InstanceBuilder::new("sim://zone-a/i-2").shut_down().build(),
    );
    let erring = h.register(node("erring", "sim://zone-a/i-1", false)).await;
    let stopped = h.register(node("stopped", "sim://zone-a/i-2", false)).await;

    monitor_nodes(&h.ctx, &[erring, stopped]).await;

    assert!(h.exists("erring").await);
    let stopped = h.nodes.get("stopped").await.unwrap();
    assert!(
        has_taint(&stopped, TAINT_SHUTDOWN),
        "a stopped instance is tainted, not deleted"
    );

    // A whole failed call changes nothing either.
    h.cloud
        .fail_calls(Some(GatewayError::Unavailable("gateway down".into())));
    let gone = h.register(node("gone", "sim://zone-a/i-gone", false)).await;
    monitor_nodes(&h.ctx, &[gone]).await;
    assert!(h.exists("gone").await);
}

#[tokio::test]
async fn a_replica_without_leadership_deletes_nothing() {
    let h = harness(Leadership::elected(), Duration::ZERO).await;
    let gone = h.register(node("gone", "sim://zone-a/i-gone", false)).await;

    monitor_nodes(&h.ctx, std::slice::from_ref(&gone)).await;
    assert!(h.exists("gone").await);
    assert!(h.deletes().is_empty(), "no DELETE was even sent");

    h.leadership
        .lead_until(Some(Instant::now() + Duration::from_secs(60)));
    monitor_nodes(&h.ctx, &[gone]).await;
    assert!(!h.exists("gone").await);
}

/// With an events API that takes 5 s to answer, the DELETE still goes out while the lease
/// is fresh: the leadership check comes right before it, and the event after it.
#[tokio::test]
async fn no_delete_reaches_the_server_after_the_lease_ran_out_even_with_slow_events() {
    let lease_left = Duration::from_secs(1);
    let h = harness(leading_for(lease_left), Duration::from_secs(5)).await;
    let started = Instant::now();
    let gone = h.register(node("gone", "sim://zone-a/i-gone", false)).await;
    let gone_too = h
        .register(node("gone-too", "sim://zone-a/i-gone-too", false))
        .await;

    monitor_nodes(&h.ctx, &[gone, gone_too]).await;

    let deletes = h.deletes();
    assert!(!deletes.is_empty(), "the nodes were deleted while leading");
    for delete in deletes {
        let sent = delete.forwarded_at.unwrap();
        assert!(
            sent.duration_since(started) < lease_left,
            "DELETE {} sent {:?} after start, once the lease had run out",
            delete.path,
            sent.duration_since(started)
        );
    }
    assert!(!h.exists("gone").await);
}

/// A DELETE held on its way out (a client-side rate limit, a slow connection) past the moment
/// the lease could be taken over is dropped unsent: the leadership check before it is not the
/// last word.
#[tokio::test]
async fn a_delete_held_back_past_the_lease_is_never_sent() {
    let lease_left = Duration::from_secs(1);
    let h = harness_with(leading_for(lease_left), Duration::ZERO, Duration::from_secs(3)).await;
    let gone = h.register(node("gone", "sim://zone-a/i-gone", false)).await;

    let started = Instant::now();
    monitor_nodes(&h.ctx, &[gone]).await;

    // The pass gave up on the DELETE when the lease ran out, not when the held request would
    // have gone out.
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(2),
        "the pass waited for the held DELETE: {took:?}"
    );
    assert!(
        h.deletes().is_empty(),
        "a DELETE went out after the lease: {:?}",
        h.deletes()
    );
    assert!(h.exists("gone").await, "the node is still there");
    let metrics = h.metrics.render();
    assert!(
        metrics.contains("cloud_node_lifecycle_controller_reconcile_errors_total{error=\"write\"} 1"),
        "the refused write is counted: {metrics}"
    );
}

/// A RETRY_AFTER answer to the batched lookup: the following passes do not ask the cloud
/// before the delay (they would every `--node-monitor-period`), delete nothing, and still
/// handle Ready nodes.
#[tokio::test]
async fn after_a_retry_after_answer_passes_do_not_ask_the_cloud_before_the_delay() {
    let h = harness(Leadership::unconditional(), Duration::ZERO).await;
    h.cloud.fail_calls(Some(GatewayError::RetryAfter {
        after: Duration::from_secs(60),
        message: "the cloud is busy".into(),
    }));
    let gone = h.register(node("gone", "sim://zone-a/i-gone", false)).await;

    monitor_nodes(&h.ctx, std::slice::from_ref(&gone)).await;
    assert_eq!(h.cloud.calls().len(), 1);
    assert!(h.exists("gone").await, "nothing deleted on an error");

    // The cloud would answer now, but asked for 60 s.
    h.cloud.fail_calls(None);
    let back = h
        .register(node("back", "sim://zone-a/i-back", true).taint(TAINT_SHUTDOWN))
        .await;
    monitor_nodes(&h.ctx, &[gone, back]).await;
    assert_eq!(h.cloud.calls().len(), 1, "no lookup before the delay");
    assert!(h.exists("gone").await);
    assert!(
        !has_taint(&h.nodes.get("back").await.unwrap(), TAINT_SHUTDOWN),
        "Ready nodes are still handled"
    );
}
