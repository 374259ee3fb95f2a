//! A controller's concurrent one-node lookups share `BatchLookupInstances` calls.

use std::{sync::Arc, time::Duration};

use controller_kit::gateway::{BatchingLookups, CloudInstances, GatewayError, NodeRef};
use test_support::{FakeCloud, InstanceBuilder};

fn node(i: usize) -> NodeRef {
    NodeRef {
        name: format!("n{i}"),
        provider_id: String::new(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
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

    let answers = futures::future::join_all((0..200).map(|i| {
        let lookups = lookups.clone();
        async move { lookups.instance(&node(i)).await }
    }))
    .await;

    for (i, answer) in answers.iter().enumerate() {
        match (i, answer) {
            (7, Err(GatewayError::InstanceNotFound(_))) => {}
            (_, Ok(instance)) => assert_eq!(instance.metadata.provider_id, format!("sim://z/i-{i}")),
            (_, other) => panic!("node {i}: {other:?}"),
        }
    }
    let calls = cloud.calls();
    assert!(
        calls.len() <= 2,
        "{} calls for 200 concurrent lookups",
        calls.len()
    );
    assert_eq!(calls.iter().map(Vec::len).sum::<usize>(), 200);

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
