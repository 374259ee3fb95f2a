//! Guarded merge patches against fake-apiserver: a stale resourceVersion is a 409 the helper
//! retries with a fresh read, so concurrent writers never lose each other's changes.

use std::sync::atomic::{AtomicU32, Ordering};

use controller_kit::patch::{Target, guarded_merge_patch};
use k8s_openapi::api::core::v1::Node;
use kube::{
    Api,
    api::{Patch, PatchParams, PostParams},
};
use serde_json::json;

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
    let written = guarded_merge_patch(&nodes, "n1", Target::Main, "test", |fresh| {
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
        Some(json!({"metadata": {"labels": {"seen": count.to_string()}}}))
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
    let written = guarded_merge_patch(&nodes, "n1", Target::Main, "test", |_| None)
        .await
        .unwrap();
    assert!(written.is_none());
    assert_eq!(nodes.get("n1").await.unwrap().metadata.resource_version, before);
}
