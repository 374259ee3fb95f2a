//! What a real API server does to its clients' watches and lists over time, and what the chaos
//! suite drives the controllers through: compaction (`410 Gone` for a watch from an older
//! version and for a list continuation), watches closed under the clients, restarts.

mod common;

use std::time::Duration;

use common::{assert_status, eventually, get, start};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    Api,
    api::{PostParams, WatchEvent, WatchParams},
    runtime::{WatchStreamExt, watcher},
};
use serde_json::json;

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}})).expect("config map")
}

#[tokio::test]
async fn a_watch_from_before_a_compaction_gets_410_too_old_resource_version() {
    let s = start().await;
    let cms: Api<ConfigMap> = Api::namespaced(s.client().unwrap(), "default");
    let first = cms.create(&PostParams::default(), &cm("a")).await.unwrap();
    cms.create(&PostParams::default(), &cm("b")).await.unwrap();
    let old = first.metadata.resource_version.unwrap();
    s.registry().db.compact();
    let mut w = cms.watch(&WatchParams::default(), &old).await.unwrap().boxed();
    // The watch is accepted, then an ERROR event carries the Status, and the stream ends.
    match w.try_next().await.unwrap() {
        Some(WatchEvent::Error(e)) => {
            assert_eq!((e.code, e.reason.as_str()), (410, "Expired"));
            let current: u64 = cms
                .list(&Default::default())
                .await
                .unwrap()
                .metadata
                .resource_version
                .unwrap()
                .parse()
                .unwrap();
            assert_eq!(e.message, format!("too old resource version: {old} ({current})"));
        }
        other => panic!("expected a 410 ERROR event, got {other:?}"),
    }
    assert!(
        w.try_next().await.unwrap().is_none(),
        "the server closes the watch"
    );
    assert_eq!(
        s.registry()
            .db
            .expired_watches
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
}

#[tokio::test]
async fn a_continuation_after_a_compaction_gets_410_and_a_token_for_the_rest() {
    let s = start().await;
    let cms: Api<ConfigMap> = Api::namespaced(s.client().unwrap(), "default");
    for name in ["a", "b", "c"] {
        cms.create(&PostParams::default(), &cm(name)).await.unwrap();
    }
    let path = "/api/v1/namespaces/default/configmaps";
    let (code, first) = get(&s, &format!("{path}?limit=1")).await;
    assert_eq!(code, 200, "{first}");
    let token = first["metadata"]["continue"].as_str().unwrap().to_owned();
    // Someone writes, and etcd compacts between the pages (a compaction at the very version of
    // the list would leave it readable, as in etcd).
    cms.create(&PostParams::default(), &cm("d")).await.unwrap();
    s.registry().db.expire_next_continue();
    let (code, gone) = get(&s, &format!("{path}?limit=1&continue={token}")).await;
    assert_eq!(code, 410);
    assert_status(&gone, 410, "Expired");
    assert!(
        gone["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("The provided continue parameter is too old")),
        "{gone}"
    );
    // The Status carries a token that continues at the latest version (inconsistent, as the
    // message says): the rest of the list.
    let rest = gone["metadata"]["continue"]
        .as_str()
        .expect("a continue token in the Status");
    let (code, page) = get(&s, &format!("{path}?limit=10&continue={rest}")).await;
    assert_eq!(code, 200, "{page}");
    let names: Vec<&str> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["metadata"]["name"].as_str())
        .collect();
    assert_eq!(names, ["b", "c", "d"]);
    // kube-runtime's watcher starts its list over on such a 410: shown by the chaos suite.
}

#[tokio::test]
async fn an_armed_continuation_expires_even_with_nothing_written_between_the_pages() {
    // What the chaos suite arms under service-lb-controller's relist: the pages come back to
    // back, nothing written between them, and the continuation must expire all the same (a
    // compaction at the very version of the list would leave it readable).
    let s = start().await;
    let cms: Api<ConfigMap> = Api::namespaced(s.client().unwrap(), "default");
    for name in ["a", "b", "c"] {
        cms.create(&PostParams::default(), &cm(name)).await.unwrap();
    }
    let path = "/api/v1/namespaces/default/configmaps";
    let (code, first) = get(&s, &format!("{path}?limit=2")).await;
    assert_eq!(code, 200, "{first}");
    let token = first["metadata"]["continue"].as_str().unwrap().to_owned();
    s.registry().db.expire_next_continue();
    let (code, gone) = get(&s, &format!("{path}?limit=2&continue={token}")).await;
    assert_eq!(code, 410, "{gone}");
    assert_status(&gone, 410, "Expired");
    assert_eq!(
        s.registry()
            .db
            .expired_continues
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    // One-shot: the list started over is served whole.
    let (code, again) = get(&s, &format!("{path}?limit=2")).await;
    assert_eq!(code, 200, "{again}");
    let token = again["metadata"]["continue"].as_str().unwrap().to_owned();
    let (code, rest) = get(&s, &format!("{path}?limit=2&continue={token}")).await;
    assert_eq!(code, 200, "{rest}");
    assert_eq!(rest["items"].as_array().map(Vec::len), Some(1));
}

#[tokio::test]
async fn closed_watches_and_a_restart_miss_no_change_for_a_kube_runtime_watcher() {
    let mut s = start().await;
    let cms: Api<ConfigMap> = Api::namespaced(s.client().unwrap(), "default");
    cms.create(&PostParams::default(), &cm("before")).await.unwrap();
    let (reader, writer) = kube::runtime::reflector::store();
    let watch = kube::runtime::reflector(writer, watcher(cms.clone(), watcher::Config::default()))
        .default_backoff()
        .applied_objects()
        .for_each(|_| async {});
    let task = tokio::spawn(watch);
    eventually(Duration::from_secs(10), || async {
        (reader.len() == 1).then_some(())
    })
    .await;

    // Every watch closed under the client: it watches again from where it was.
    s.registry().db.close_watches();
    cms.create(&PostParams::default(), &cm("after-close"))
        .await
        .unwrap();
    eventually(Duration::from_secs(10), || async {
        (reader.len() == 2).then_some(())
    })
    .await;

    // A restart: nothing answers for a second, the storage changes meanwhile (as through
    // another server of the control plane), and the new watch cache starts after the client's
    // version, so its watch gets 410 and it lists again.
    let registry = s.registry().clone();
    let down = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let def = fake_apiserver::resources::primary(fake_apiserver::resources::Store::ConfigMaps);
        registry
            .create(
                def,
                Some("default"),
                json!({"metadata": {"name": "while-down"}}),
                false,
            )
            .map(|_| ())
    });
    s.restart(Duration::from_secs(1)).await.unwrap();
    down.await.unwrap().unwrap();
    eventually(Duration::from_secs(15), || async {
        (reader.len() == 3).then_some(())
    })
    .await;
    assert!(
        reader
            .get(&kube::runtime::reflector::ObjectRef::new("while-down").within("default"))
            .is_some()
    );
    assert!(
        s.registry()
            .db
            .expired_watches
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 1,
        "the resumed watch was told its version expired"
    );
    task.abort();
}
