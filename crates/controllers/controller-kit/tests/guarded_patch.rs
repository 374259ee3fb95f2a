//! Guarded merge patches against fake-apiserver: a stale resourceVersion is a 409 the helper
//! retries with a fresh read, so concurrent writers never lose each other's changes.

use std::{
    convert::Infallible,
    sync::atomic::{AtomicU32, Ordering},
    time::{Duration, Instant},
};

use controller_kit::{
    leader::Leadership,
    patch::{Patches, WriteError, Writer},
};
use k8s_openapi::api::core::v1::Node;
use kube::{
    Api,
    api::{Patch, PatchParams, PostParams},
};
use serde_json::json;

fn writer() -> Writer {
    Writer::new("test", Leadership::unconditional())
}

async fn server_and_node() -> (fake_apiserver::RunningServer, Api<Node>) {
    let server = fake_apiserver::FakeApiServer::start(fake_apiserver::Config::default())
        .await
        .unwrap();
    let nodes: Api<Node> = Api::all(server.client().unwrap());
    let node: Node =
        serde_json::from_value(json!({"metadata": {"name": "n1", "labels": {"a": "1"}}})).unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
    (server, nodes)
}

#[tokio::test]
async fn a_merge_patch_with_a_stale_resource_version_is_a_conflict() {
    let (_server, nodes) = server_and_node().await;
    let stale = nodes.get("n1").await.unwrap().metadata.resource_version.unwrap();
    nodes
        .patch(
            "n1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"b": "2"}}})),
        )
        .await
        .unwrap();
    let err = nodes
        .patch(
            "n1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"resourceVersion": stale, "labels": {"c": "3"}}})),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, kube::Error::Api(ref s) if s.code == 409), "{err:?}");
}

// Multi-threaded: the competing write blocks inside `compute` while the client's worker runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrent_write_is_kept_and_the_change_recomputed() {
    let (_server, nodes) = server_and_node().await;
    let attempts = AtomicU32::new(0);
    let written = writer()
        .write(&nodes, "n1", |fresh: &Node| {
            if attempts.fetch_add(1, Ordering::SeqCst) == 0 {
                // Another writer changes the node between our read and our write.
                let nodes = nodes.clone();
                std::thread::scope(|s| {
                    s.spawn(|| {
                        let rt = tokio::runtime::Builder::new_current_thread()
                            .enable_all()
                            .build()
                            .unwrap();
                        rt.block_on(nodes.patch(
                            "n1",
                            &PatchParams::default(),
                            &Patch::Merge(json!({"metadata": {"labels": {"other": "x"}}})),
                        ))
                        .unwrap();
                    });
                });
            }
            let count = fresh.metadata.labels.as_ref().map_or(0, |l| l.len());
            Ok::<_, Infallible>(Patches::main(
                json!({"metadata": {"labels": {"seen": count.to_string()}}}),
            ))
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        attempts.load(Ordering::SeqCst),
        2,
        "the conflict must cause exactly one retry"
    );
    let labels = written.metadata.labels.unwrap();
    assert_eq!(labels["other"], "x", "the other writer's change is kept");
    assert_eq!(
        labels["seen"], "2",
        "the change was recomputed from the fresh object"
    );
}

#[tokio::test]
async fn nothing_to_do_writes_nothing() {
    let (_server, nodes) = server_and_node().await;
    let before = nodes.get("n1").await.unwrap().metadata.resource_version;
    let written = writer()
        .write(&nodes, "n1", |_: &Node| Ok::<_, Infallible>(Patches::default()))
        .await
        .unwrap();
    assert!(written.is_none());
    assert_eq!(nodes.get("n1").await.unwrap().metadata.resource_version, before);
}

#[tokio::test]
async fn both_patches_from_one_plan_and_a_plan_error_writes_nothing() {
    let (_server, nodes) = server_and_node().await;
    let planned = AtomicU32::new(0);
    let written = writer()
        .write(&nodes, "n1", |_: &Node| {
            planned.fetch_add(1, Ordering::SeqCst);
            Ok::<_, Infallible>(Patches {
                status: Some(
                    json!({"status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]}}),
                ),
                main: Some(json!({"metadata": {"labels": {"initialized": "yes"}}})),
            })
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(planned.load(Ordering::SeqCst), 1, "planned once, written twice");
    assert_eq!(written.metadata.labels.unwrap()["initialized"], "yes");
    assert_eq!(written.status.unwrap().addresses.unwrap()[0].address, "10.0.0.1");

    let before = nodes.get("n1").await.unwrap().metadata.resource_version;
    let err = writer()
        .write(&nodes, "n1", |_: &Node| Err::<Patches, _>("not yet"))
        .await
        .unwrap_err();
    assert!(matches!(err, WriteError::Plan("not yet")), "{err:?}");
    assert_eq!(nodes.get("n1").await.unwrap().metadata.resource_version, before);
}

#[tokio::test]
async fn no_write_or_delete_once_the_lease_has_run_out() {
    let (_server, nodes) = server_and_node().await;
    let leadership = Leadership::elected();
    leadership.lead_until(Some(Instant::now() + Duration::from_secs(60)));
    let writer = Writer::new("test", leadership.clone());
    let label = |_: &Node| Ok::<_, Infallible>(Patches::main(json!({"metadata": {"labels": {"b": "2"}}})));
    assert!(writer.write(&nodes, "n1", label).await.unwrap().is_some());
    leadership.lead_until(Some(Instant::now()));
    let err = writer.write(&nodes, "n1", label).await.unwrap_err();
    assert!(matches!(err, WriteError::NotLeading), "{err:?}");
    let err = writer.delete(&nodes, "n1", None).await.unwrap_err();
    assert!(matches!(err, WriteError::NotLeading), "{err:?}");
    assert!(nodes.get_opt("n1").await.unwrap().is_some());
}

/// Planned from the watched object, a write costs no GET; a stale copy costs one 409, then a
/// GET and a fresh plan.
#[tokio::test]
async fn a_write_from_the_watched_object_reads_only_after_a_conflict() {
    let (server, nodes) = server_and_node().await;
    let (client, log) =
        test_support::intercept::client(&server, |_, _| test_support::intercept::Intercept::Pass);
    let watched: Api<Node> = Api::all(client);
    let known = nodes.get("n1").await.unwrap();
    let label = |value: &'static str| {
        move |_: &Node| Ok::<_, Infallible>(Patches::main(json!({"metadata": {"labels": {"b": value}}})))
    };

    writer()
        .write_from(&watched, &known, label("1"))
        .await
        .unwrap()
        .unwrap();
    let methods: Vec<_> = log.sent().into_iter().map(|s| s.method.to_string()).collect();
    assert_eq!(methods, ["PATCH"], "no read before the write");

    // `known` is stale now: one conflict, one read, one write.
    let written = writer()
        .write_from(&watched, &known, label("2"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(written.metadata.labels.unwrap()["b"], "2");
    let methods: Vec<_> = log
        .sent()
        .into_iter()
        .skip(1)
        .map(|s| s.method.to_string())
        .collect();
    assert_eq!(methods, ["PATCH", "GET", "PATCH"]);

    // Nothing to do costs nothing.
    let nothing = |_: &Node| Ok::<_, Infallible>(Patches::default());
    assert!(
        writer()
            .write_from(&watched, &known, nothing)
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(log.sent().len(), 4);
}

/// A condition written as a strategic merge patch keeps kubelet's conditions, also when
/// kubelet changed one after the copy the write was planned from (409, then a fresh plan).
#[tokio::test]
async fn a_strategic_status_patch_adds_one_condition_and_keeps_the_others() {
    let (_server, nodes) = server_and_node().await;
    let kubelet = |status: &str| {
        json!({"status": {"conditions": [
            {"type": "Ready", "status": status, "reason": "KubeletReady"},
            {"type": "MemoryPressure", "status": "False"},
        ]}})
    };
    let known = nodes
        .patch_status("n1", &PatchParams::default(), &Patch::Strategic(kubelet("False")))
        .await
        .unwrap();
    // Kubelet reports again after the controller's copy was taken.
    nodes
        .patch_status("n1", &PatchParams::default(), &Patch::Strategic(kubelet("True")))
        .await
        .unwrap();
    let plans = AtomicU32::new(0);
    let written = writer()
        .write_status_strategic_from(&nodes, &known, |_: &Node| {
            plans.fetch_add(1, Ordering::SeqCst);
            Ok::<_, Infallible>(Some(json!({"status": {"conditions": [
                {"type": "NetworkUnavailable", "status": "False", "reason": "RouteCreated"},
            ]}})))
        })
        .await
        .unwrap()
        .expect("written");
    assert_eq!(
        plans.load(Ordering::SeqCst),
        2,
        "the stale copy cost one 409 and a new plan"
    );
    let conditions: Vec<(String, String)> = written
        .status
        .unwrap()
        .conditions
        .unwrap()
        .into_iter()
        .map(|c| (c.type_, c.status))
        .collect();
    for want in [
        ("Ready", "True"),
        ("MemoryPressure", "False"),
        ("NetworkUnavailable", "False"),
    ] {
        assert!(
            conditions.contains(&(want.0.to_owned(), want.1.to_owned())),
            "{want:?} missing from {conditions:?}"
        );
    }
    let nothing = writer()
        .write_status_strategic_from(&nodes, &known, |_: &Node| Ok::<_, Infallible>(None))
        .await
        .unwrap();
    assert!(nothing.is_none());
}
