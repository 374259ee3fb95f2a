//! A controller's concurrent one-node lookups share `BatchLookupInstances` calls.

use std::{sync::Arc, time::Duration};

use controller_kit::{
    gateway::{BatchingLookups, CloudInstances, GatewayError, NodeRef},
    gateway_batching::PendingNodes,
    gateway_provider::ProviderWatch,
};
use test_support::{FakeCloud, InstanceBuilder};

fn node(i: usize) -> NodeRef {
    NodeRef {
        name: format!("n{i}"),
        provider_id: String::new(),
    }
}

// Paused time: the call out takes its 50 ms only once every lookup has been asked, however
// slowly they are, so the count is exact.
#[tokio::test(start_paused = true)]
async fn concurrent_lookups_share_calls_while_one_is_out() {
    let cloud = FakeCloud::new();
    for i in 0..200 {
        cloud.set_instance(
            &format!("n{i}"),
            InstanceBuilder::new(&format!("sim://z/i-{i}")).build(),
        );
    }
    cloud.set_error("n7", GatewayError::InstanceNotFound("n7".into()));
    cloud.set_latency(Duration::from_millis(50));
    let lookups = Arc::new(BatchingLookups::new(cloud.clone()));

    // Node 0's lookup goes out first; the 199 others come while it is out (50 ms).
    let first = tokio::spawn({
        let lookups = lookups.clone();
        async move { lookups.instance(&node(0)).await }
    });
    wait_until(|| cloud.calls().len() == 1).await;
    let rest = futures::future::join_all((1..200).map(|i| {
        let lookups = lookups.clone();
        async move { lookups.instance(&node(i)).await }
    }))
    .await;
    let mut answers = vec![first.await.unwrap()];
    answers.extend(rest);

    for (i, answer) in answers.iter().enumerate() {
        match (i, answer) {
            (7, Err(GatewayError::InstanceNotFound(_))) => {}
            (_, Ok(instance)) => assert_eq!(instance.metadata.provider_id, format!("sim://z/i-{i}")),
            (_, other) => panic!("node {i}: {other:?}"),
        }
    }
    // The first went out alone; the 199 others shared the next call.
    let sizes: Vec<usize> = cloud.calls().iter().map(Vec::len).collect();
    assert_eq!(sizes, [1, 199], "calls for 200 concurrent lookups");

    // Idle, a lookup goes out at once, alone.
    lookups.instance(&node(1)).await.unwrap();
    assert_eq!(cloud.calls().last().unwrap().len(), 1);
}

#[tokio::test]
async fn a_failed_call_fails_each_of_its_lookups_and_the_next_goes_out() {
    let cloud = FakeCloud::new();
    cloud.set_instance("n1", InstanceBuilder::new("sim://z/i-1").build());
    let lookups = BatchingLookups::new(cloud.clone());
    cloud.fail_calls(Some(GatewayError::Unavailable("gateway down".into())));
    assert!(matches!(
        lookups.instance(&node(1)).await,
        Err(GatewayError::Unavailable(_))
    ));
    cloud.fail_calls(None);
    assert!(lookups.instance(&node(1)).await.is_ok());
}

/// How long answers are kept in these tests: longer than any of them runs.
const KEEP: Duration = Duration::from_secs(60);

/// A look-ahead over `nodes`, as the node controller's over its tainted nodes.
fn pending(nodes: Vec<NodeRef>) -> PendingNodes {
    Arc::new(move || nodes.clone())
}

fn cloud_with(count: usize) -> Arc<FakeCloud> {
    let cloud = FakeCloud::new();
    for i in 0..count {
        cloud.set_instance(
            &format!("n{i}"),
            InstanceBuilder::new(&format!("sim://z/i-{i}")).build(),
        );
    }
    cloud
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lookup_asks_ahead_for_pending_nodes_whose_reconciles_then_need_no_call() {
    let cloud = cloud_with(300);
    cloud.set_error("n7", GatewayError::InstanceNotFound("n7".into()));
    let all: Vec<NodeRef> = (0..300).map(node).collect();
    let lookups = Arc::new(BatchingLookups::new(cloud.clone()).looking_ahead(pending(all), 1000, KEEP));

    let first = lookups.instance(&node(0)).await.unwrap();
    assert_eq!(first.metadata.provider_id, "sim://z/i-0");
    assert_eq!(cloud.calls().len(), 1);
    assert_eq!(
        cloud.calls()[0].len(),
        300,
        "the call asked for every pending node"
    );

    let answers = futures::future::join_all((1..300).map(|i| {
        let lookups = lookups.clone();
        async move { (i, lookups.instance(&node(i)).await) }
    }))
    .await;
    for (i, answer) in answers {
        match (i, answer) {
            (7, Err(GatewayError::InstanceNotFound(_))) => {}
            (_, Ok(instance)) => assert_eq!(instance.metadata.provider_id, format!("sim://z/i-{i}")),
            (_, other) => panic!("node {i}: {other:?}"),
        }
    }
    // Only the node the cloud did not know asked again, alone: the used answers keep the
    // others out of its call.
    assert_eq!(cloud.calls()[1..], [vec![node(7)]]);

    // A retry of a reconcile whose answer was used asks the cloud itself.
    lookups.instance(&node(3)).await.unwrap();
    assert_eq!(cloud.calls().last().unwrap(), &vec![node(3)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconcile_whose_node_is_being_looked_ahead_joins_that_call() {
    let cloud = cloud_with(100);
    cloud.set_latency(Duration::from_millis(300));
    let all: Vec<NodeRef> = (0..100).map(node).collect();
    let lookups = Arc::new(BatchingLookups::new(cloud.clone()).looking_ahead(pending(all), 1000, KEEP));

    let first = tokio::spawn({
        let lookups = lookups.clone();
        async move { lookups.instance(&node(0)).await }
    });
    wait_until(|| cloud.calls().len() == 1).await;
    let joined = lookups.instance(&node(42)).await.unwrap();
    assert_eq!(joined.metadata.provider_id, "sim://z/i-42");
    first.await.unwrap().unwrap();
    assert_eq!(
        cloud.calls().len(),
        1,
        "node 42 joined the call that asked for it ahead"
    );
}

#[tokio::test]
async fn a_looked_ahead_answer_older_than_its_keep_time_is_not_used() {
    let keep = Duration::from_millis(200);
    let cloud = cloud_with(2);
    let lookups =
        BatchingLookups::new(cloud.clone()).looking_ahead(pending(vec![node(0), node(1)]), 1000, keep);
    lookups.instance(&node(0)).await.unwrap();
    assert_eq!(cloud.calls(), [vec![node(0), node(1)]]);

    // The instance behind n1 changed meanwhile; a stale answer would name the old one.
    cloud.set_instance("n1", InstanceBuilder::new("sim://z/i-new").build());
    tokio::time::sleep(keep + Duration::from_millis(50)).await; // the expiry is what is tested
    let fresh = lookups.instance(&node(1)).await.unwrap();
    assert_eq!(fresh.metadata.provider_id, "sim://z/i-new");
    assert_eq!(cloud.calls().len(), 2);
}

#[tokio::test]
async fn a_call_looks_ahead_at_most_up_to_its_size_and_not_at_all_when_off() {
    let cloud = cloud_with(50);
    let all: Vec<NodeRef> = (0..50).map(node).collect();
    let limited = BatchingLookups::new(cloud.clone()).looking_ahead(pending(all.clone()), 10, KEEP);
    limited.instance(&node(0)).await.unwrap();
    assert_eq!(cloud.calls()[0].len(), 10);

    let off = BatchingLookups::new(cloud.clone()).looking_ahead(pending(all), 0, KEEP);
    off.instance(&node(0)).await.unwrap();
    assert_eq!(cloud.calls()[1], vec![node(0)]);
}

#[tokio::test]
async fn a_kept_answer_is_not_used_once_the_gateway_serves_another_provider() {
    let cloud = cloud_with(2);
    let provider = ProviderWatch::default();
    provider.observe("simulator");
    let lookups = BatchingLookups::new(cloud.clone())
        .looking_ahead(pending(vec![node(0), node(1)]), 1000, KEEP)
        .answered_by(provider.clone());
    lookups.instance(&node(0)).await.unwrap();
    assert_eq!(cloud.calls(), [vec![node(0), node(1)]]);

    // The gateway was swapped for another vendor, which knows n1 as another instance.
    provider.observe("aws");
    cloud.set_instance("n1", InstanceBuilder::new("aws:///z/i-1").build());
    let answer = lookups.instance(&node(1)).await.unwrap();
    assert_eq!(answer.metadata.provider_id, "aws:///z/i-1");
    assert_eq!(cloud.calls().len(), 2);
}

/// Waits (at most 5 s) until `done` holds.
async fn wait_until(done: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !done() {
        assert!(tokio::time::Instant::now() < deadline, "condition not met in 5 s");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
