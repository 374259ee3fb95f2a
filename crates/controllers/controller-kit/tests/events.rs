//! Best-effort events against fake-apiserver: a repeat within the window updates the first
//! event's series instead of adding an object; a failed write never fails the caller.

use controller_kit::events::Events;
use k8s_openapi::api::{core::v1::ObjectReference, events::v1::Event};
use kube::{Api, api::ListParams};

fn node(name: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Node".into()),
        name: Some(name.into()),
        uid: Some(format!("uid-{name}")),
        ..Default::default()
    }
}

#[tokio::test]
async fn a_repeated_event_is_a_series_and_others_are_new_events() {
    let server = fake_apiserver::FakeApiServer::start(fake_apiserver::Config::default())
        .await
        .unwrap();
    let client = server.client().unwrap();
    let events = Events::new(client.clone(), "cloud-node-lifecycle-controller", None);
    for _ in 0..3 {
        events
            .warning(&node("n1"), "DeletingNodeFailed", "DeleteNode", "refused".into())
            .await;
    }
    events
        .warning(
            &node("n1"),
            "DeletingNodeFailed",
            "DeleteNode",
            "other reason".into(),
        )
        .await;
    events
        .normal(&node("n2"), "DeletingNode", "DeleteNode", "gone".into())
        .await;

    let api: Api<Event> = Api::namespaced(client, "default");
    let mut listed: Vec<(String, String, i32)> = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|e| {
            let count = e.series.as_ref().map_or(1, |s| s.count);
            (
                e.regarding.unwrap().name.unwrap(),
                e.note.unwrap_or_default(),
                count,
            )
        })
        .collect();
    listed.sort();
    assert_eq!(
        listed,
        [
            ("n1".into(), "other reason".into(), 1),
            ("n1".into(), "refused".into(), 3),
            ("n2".into(), "gone".into(), 1),
        ]
    );
    let all = Api::<Event>::namespaced(server.client().unwrap(), "default")
        .list(&ListParams::default())
        .await
        .unwrap();
    let first = all
        .items
        .iter()
        .find(|e| e.note.as_deref() == Some("refused"))
        .unwrap();
    assert_eq!(
        first.reporting_controller.as_deref(),
        Some("cloud-node-lifecycle-controller")
    );
    assert_eq!(first.type_.as_deref(), Some("Warning"));
}

#[tokio::test]
async fn an_event_that_cannot_be_written_is_dropped() {
    let server = fake_apiserver::FakeApiServer::start(fake_apiserver::Config::default())
        .await
        .unwrap();
    let (client, _) = test_support::intercept::client(&server, |_, _| {
        test_support::intercept::status(403, "Forbidden", "events is forbidden")
    });
    // Returns (having logged) instead of failing or hanging.
    Events::new(client, "test", None)
        .normal(&node("n1"), "Synced", "InitializeNode", "ok".into())
        .await;
}
