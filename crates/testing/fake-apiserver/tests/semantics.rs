//! Watch, patch, status subresource, finalizers and service allocation semantics, written
//! from the real server's behaviour and exercised through kube-rs.

mod common;

use std::time::Duration;

use common::*;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Node, Service};
use k8s_openapi::api::events::v1::Event as EventV1;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

fn api_err(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}})).unwrap()
}

async fn next_event<K: Clone + for<'de> serde::Deserialize<'de> + std::fmt::Debug>(
    s: &mut (impl futures::Stream<Item = kube::Result<WatchEvent<K>>> + Unpin),
) -> WatchEvent<K> {
    tokio::time::timeout(Duration::from_secs(5), s.next())
        .await
        .expect("event in time")
        .expect("stream open")
        .expect("event")
}

#[tokio::test]
async fn watch_replays_after_a_version_then_streams() {
    let s = start().await;
    let cms: Api<ConfigMap> = Api::namespaced(s.client().unwrap(), "default");
    let a = cms.create(&PostParams::default(), &cm("a")).await.unwrap();
    let rv = a.metadata.resource_version.clone().unwrap();
    cms.create(&PostParams::default(), &cm("b")).await.unwrap();
    cms.delete("a", &DeleteParams::default()).await.unwrap();
    let mut w = cms.watch(&WatchParams::default(), &rv).await.unwrap().boxed();
    match next_event(&mut w).await {
        WatchEvent::Added(c) => assert_eq!(c.metadata.name.as_deref(), Some("b")),
        e => panic!("{e:?}"),
    }
    match next_event(&mut w).await {
        WatchEvent::Deleted(c) => assert_eq!(c.metadata.name.as_deref(), Some("a")),
        e => panic!("{e:?}"),
    }
    cms.create(&PostParams::default(), &cm("c")).await.unwrap();
    match next_event(&mut w).await {
        WatchEvent::Added(c) => assert_eq!(c.metadata.name.as_deref(), Some("c")),
        e => panic!("{e:?}"),
    }
}

#[tokio::test]
async fn watch_bookmarks_and_timeout() {
    let s = start_with(fake_apiserver::Config {
        bookmark_interval: Duration::from_millis(200),
        ..Default::default()
    })
    .await;
    let cms: Api<ConfigMap> = Api::namespaced(s.client().unwrap(), "default");
    let list = cms.list(&ListParams::default()).await.unwrap();
    let rv = list.metadata.resource_version.unwrap();
    let created = cms.create(&PostParams::default(), &cm("a")).await.unwrap();
    let mut w = cms
        .watch(&WatchParams::default().timeout(4), &rv)
        .await
        .unwrap()
        .boxed();
    assert!(matches!(next_event(&mut w).await, WatchEvent::Added(_)));
    match next_event(&mut w).await {
        WatchEvent::Bookmark(b) => {
            let brv: u64 = b.metadata.resource_version.parse().unwrap();
            assert!(brv >= created.metadata.resource_version.unwrap().parse::<u64>().unwrap());
            assert!(
                b.metadata.annotations.is_empty(),
                "initial-events-end only with sendInitialEvents"
            );
        }
        e => panic!("{e:?}"),
    }
    // Without allowWatchBookmarks there are none; timeoutSeconds ends the stream.
    let started = std::time::Instant::now();
    let mut w = cms
        .watch(&WatchParams::default().disable_bookmarks().timeout(1), &rv)
        .await
        .unwrap()
        .boxed();
    let mut n = 0;
    while let Some(ev) = tokio::time::timeout(Duration::from_secs(5), w.next())
        .await
        .expect("stream ends in time")
    {
        assert!(!matches!(ev.unwrap(), WatchEvent::Bookmark(_)));
        n += 1;
    }
    assert_eq!(n, 1);
    assert!(started.elapsed() >= Duration::from_millis(900));
}

#[tokio::test]
async fn watch_from_an_expired_version_gets_410() {
    let s = start_with(fake_apiserver::Config {
        watch_history_size: 3,
        ..Default::default()
    })
    .await;
    let cms: Api<ConfigMap> = Api::namespaced(s.client().unwrap(), "default");
    let first = cms.create(&PostParams::default(), &cm("a")).await.unwrap();
    for i in 0..5 {
        cms.create(&PostParams::default(), &cm(&format!("x{i}")))
            .await
            .unwrap();
    }
    let old = first.metadata.resource_version.unwrap();
    let mut w = cms.watch(&WatchParams::default(), &old).await.unwrap().boxed();
    match next_event(&mut w).await {
        WatchEvent::Error(e) => {
            assert_eq!((e.code, e.reason.as_str()), (410, "Expired"));
            assert!(e.message.starts_with("too old resource version"), "{}", e.message);
        }
        e => panic!("expected 410, got {e:?}"),
    }
}

#[tokio::test]
async fn send_initial_events_ends_with_an_annotated_bookmark() {
    let s = start().await;
    let cms: Api<ConfigMap> = Api::namespaced(s.client().unwrap(), "default");
    cms.create(&PostParams::default(), &cm("a")).await.unwrap();
    let mut w = cms
        .watch(&WatchParams::streaming_lists(), "")
        .await
        .unwrap()
        .boxed();
    assert!(matches!(next_event(&mut w).await, WatchEvent::Added(_)));
    match next_event(&mut w).await {
        WatchEvent::Bookmark(b) => assert_eq!(
            b.metadata
                .annotations
                .get("k8s.io/initial-events-end")
                .map(String::as_str),
            Some("true")
        ),
        e => panic!("{e:?}"),
    }
}

#[tokio::test]
async fn kube_runtime_watcher_lists_pages_watches_and_relists_after_410() {
    let s = start_with(fake_apiserver::Config {
        watch_history_size: 5,
        bookmark_interval: Duration::from_millis(300),
        ..Default::default()
    })
    .await;
    let cms: Api<ConfigMap> = Api::namespaced(s.client().unwrap(), "default");
    for i in 0..12 {
        cms.create(&PostParams::default(), &cm(&format!("pre{i}")))
            .await
            .unwrap();
    }
    let (reader, writer) = kube::runtime::reflector::store();
    let stream = kube::runtime::reflector(
        writer,
        watcher(cms.clone(), watcher::Config::default().page_size(5).timeout(2)),
    )
    .applied_objects()
    .for_each(|_| async {});
    let task = tokio::spawn(stream);
    eventually(Duration::from_secs(10), || async {
        (reader.len() == 12).then_some(())
    })
    .await;
    for i in 0..20 {
        cms.create(&PostParams::default(), &cm(&format!("post{i}")))
            .await
            .unwrap();
    }
    cms.delete("pre0", &DeleteParams::default()).await.unwrap();
    eventually(Duration::from_secs(15), || async {
        (reader.len() == 31).then_some(())
    })
    .await;
    task.abort();
}

#[tokio::test]
async fn selector_watch_sees_objects_leave_and_enter() {
    let s = start().await;
    let cms: Api<ConfigMap> = Api::namespaced(s.client().unwrap(), "default");
    let mut w = cms
        .watch(&WatchParams::default().labels("app=x"), "0")
        .await
        .unwrap()
        .boxed();
    let labelled: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "a", "labels": {"app": "x"}}})).unwrap();
    cms.create(&PostParams::default(), &labelled).await.unwrap();
    assert!(matches!(next_event(&mut w).await, WatchEvent::Added(_)));
    cms.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "y"}}})),
    )
    .await
    .unwrap();
    assert!(matches!(next_event(&mut w).await, WatchEvent::Deleted(_)));
    cms.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "x"}}})),
    )
    .await
    .unwrap();
    assert!(matches!(next_event(&mut w).await, WatchEvent::Added(_)));
}

#[tokio::test]
async fn json_patch_test_op_is_a_precondition() {
    let s = start().await;
    let nodes: Api<Node> = Api::all(s.client().unwrap());
    let n = nodes.create(&PostParams::default(), &node("n1")).await.unwrap();
    let rv = n.metadata.resource_version.clone().unwrap();
    let p: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
        {"op": "add", "path": "/metadata/labels", "value": {"a": "b"}},
        {"op": "add", "path": "/spec/taints", "value": [{"key": "k", "effect": "NoSchedule"}]},
        {"op": "add", "path": "/spec/providerID", "value": "sim://n1"},
    ]))
    .unwrap();
    let patched = nodes
        .patch("n1", &PatchParams::default(), &Patch::<()>::Json(p.clone()))
        .await
        .unwrap();
    assert_eq!(
        patched.spec.as_ref().unwrap().provider_id.as_deref(),
        Some("sim://n1")
    );
    // The same precondition is now stale: 422 Invalid, nothing written.
    let e = api_err(
        nodes
            .patch("n1", &PatchParams::default(), &Patch::<()>::Json(p))
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    // providerID can be set once, not changed.
    let e = api_err(
        nodes
            .patch(
                "n1",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"providerID": "sim://other"}})),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 422);
    assert!(e.message.contains("spec.providerID"), "{}", e.message);
    // remove/replace on labels and taints
    let p: json_patch::Patch = serde_json::from_value(json!([
        {"op": "remove", "path": "/spec/taints/0"},
        {"op": "replace", "path": "/metadata/labels/a", "value": "c"},
    ]))
    .unwrap();
    let patched = nodes
        .patch("n1", &PatchParams::default(), &Patch::<()>::Json(p))
        .await
        .unwrap();
    assert_eq!(patched.metadata.labels.unwrap()["a"], "c");
    assert!(patched.spec.unwrap().taints.is_none_or(|t| t.is_empty()));
    // A merge patch carrying a stale resourceVersion conflicts.
    let e = api_err(
        nodes
            .patch(
                "n1",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"resourceVersion": rv, "labels": {"z": "1"}}})),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 409);
}

/// `(key, value, effect)` of each taint, in order.
fn taints_of(n: &Node) -> Vec<(String, Option<String>, String)> {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|t| (t.key, t.value, t.effect))
        .collect()
}

/// The TaintNodesByCondition admission plugin (on by default since v1.19): every Node created
/// gets `node.kubernetes.io/not-ready:NoSchedule` appended unless it has that key and effect;
/// updates and patches never add it back.
#[tokio::test]
async fn a_new_node_gets_the_not_ready_taint_like_taint_nodes_by_condition() {
    let s = start().await;
    let nodes: Api<Node> = Api::all(s.client().unwrap());
    let t = |k: &str, v: Option<&str>, e: &str| (k.to_owned(), v.map(str::to_owned), e.to_owned());
    let not_ready = || t("node.kubernetes.io/not-ready", None, "NoSchedule");
    let uninit = || {
        t(
            "node.cloudprovider.kubernetes.io/uninitialized",
            Some("true"),
            "NoSchedule",
        )
    };
    let with_taints = |name: &str, taints: serde_json::Value| -> Node {
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"taints": taints}})).unwrap()
    };

    // Created with one taint, it comes back with two: the plugin appends.
    let n = nodes
        .create(
            &PostParams::default(),
            &with_taints(
                "kubelet",
                json!([{"key": "node.cloudprovider.kubernetes.io/uninitialized", "value": "true", "effect": "NoSchedule"}]),
            ),
        )
        .await
        .unwrap();
    assert_eq!(taints_of(&n), [uninit(), not_ready()]);
    assert_eq!(
        taints_of(&nodes.get("kubelet").await.unwrap()),
        [uninit(), not_ready()]
    );
    // Without any spec, and on a dry run (admission runs there too).
    let bare = nodes.create(&PostParams::default(), &node("bare")).await.unwrap();
    assert_eq!(taints_of(&bare), [not_ready()]);
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    assert_eq!(
        taints_of(&nodes.create(&dry, &node("dry")).await.unwrap()),
        [not_ready()]
    );

    // A node already carrying not-ready:NoSchedule (whatever its value) is left as it is; the
    // same key with another effect does not count.
    let carrying = json!([
        {"key": "node.kubernetes.io/not-ready", "value": "x", "effect": "NoSchedule"},
        {"key": "a", "effect": "NoExecute"},
    ]);
    let n = nodes
        .create(&PostParams::default(), &with_taints("carrying", carrying))
        .await
        .unwrap();
    assert_eq!(
        taints_of(&n),
        [
            t("node.kubernetes.io/not-ready", Some("x"), "NoSchedule"),
            t("a", None, "NoExecute")
        ]
    );
    let n = nodes
        .create(
            &PostParams::default(),
            &with_taints(
                "no-execute",
                json!([{"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}]),
            ),
        )
        .await
        .unwrap();
    assert_eq!(
        taints_of(&n),
        [t("node.kubernetes.io/not-ready", None, "NoExecute"), not_ready()]
    );

    // Removing the first taint with a JSON patch leaves one; removing that one too leaves none,
    // and neither patches nor updates bring it back.
    let remove_first: json_patch::Patch =
        serde_json::from_value(json!([{"op": "remove", "path": "/spec/taints/0"}])).unwrap();
    let n = nodes
        .patch(
            "kubelet",
            &PatchParams::default(),
            &Patch::<()>::Json(remove_first.clone()),
        )
        .await
        .unwrap();
    assert_eq!(taints_of(&n), [not_ready()]);
    let n = nodes
        .patch(
            "kubelet",
            &PatchParams::default(),
            &Patch::<()>::Json(remove_first),
        )
        .await
        .unwrap();
    assert_eq!(taints_of(&n), []);
    let n = nodes
        .patch(
            "kubelet",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}})),
        )
        .await
        .unwrap();
    assert_eq!(taints_of(&n), []);
    let n = nodes
        .patch(
            "kubelet",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}})),
        )
        .await
        .unwrap();
    assert_eq!(taints_of(&n), [t("k", None, "NoSchedule")]);
    let mut n = nodes.get("kubelet").await.unwrap();
    n.spec.as_mut().unwrap().taints = None;
    let n = nodes
        .replace("kubelet", &PostParams::default(), &n)
        .await
        .unwrap();
    assert_eq!(taints_of(&n), []);
    let n = nodes
        .replace_status("kubelet", &PostParams::default(), &n)
        .await
        .unwrap();
    assert_eq!(taints_of(&n), []);
}

#[tokio::test]
async fn status_subresource_separates_spec_and_status() {
    let s = start().await;
    let nodes: Api<Node> = Api::all(s.client().unwrap());
    let n: Node = serde_json::from_value(json!({"metadata": {"name": "n1"}, "status": {"conditions": [
        {"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": "False"}
    ], "addresses": [{"type": "Hostname", "address": "n1"}]}}))
    .unwrap();
    // Nodes keep status on create (kubelet registers that way).
    let n = nodes.create(&PostParams::default(), &n).await.unwrap();
    assert_eq!(n.status.as_ref().unwrap().conditions.as_ref().unwrap().len(), 2);
    // Strategic merge on /status: conditions merge by type; addresses by type with $patch: replace honoured.
    let p = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}],
        "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}, {"type": "InternalIP", "address": "10.0.0.2"}, {"$patch": "replace"}]},
        "spec": {"unschedulable": true}});
    let got = nodes
        .patch_status("n1", &PatchParams::default(), &Patch::Strategic(p))
        .await
        .unwrap();
    let st = got.status.unwrap();
    let conds: Vec<(String, String)> = st
        .conditions
        .unwrap()
        .into_iter()
        .map(|c| (c.type_, c.status))
        .collect();
    assert_eq!(
        conds,
        [
            ("MemoryPressure".into(), "False".into()),
            ("Ready".into(), "True".into())
        ]
    );
    let addrs: Vec<String> = st.addresses.unwrap().into_iter().map(|a| a.address).collect();
    assert_eq!(addrs, ["10.0.0.1", "10.0.0.2"]);
    // The spec part of a status write is ignored.
    assert!(got.spec.unwrap_or_default().unschedulable.is_none());
    // A write to the main resource leaves status as it was.
    let got = nodes
        .patch(
            "n1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": true}, "status": {"conditions": null}})),
        )
        .await
        .unwrap();
    assert_eq!(got.spec.unwrap().unschedulable, Some(true));
    assert_eq!(got.status.unwrap().conditions.unwrap().len(), 2);
    // Services: status cleared on create; status.loadBalancer via merge patch on /status only.
    let svcs: Api<Service> = Api::namespaced(s.client().unwrap(), "default");
    let svc: Service = serde_json::from_value(
        json!({"metadata": {"name": "lb"}, "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]},
        "status": {"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}}}),
    )
    .unwrap();
    let svc = svcs.create(&PostParams::default(), &svc).await.unwrap();
    assert!(svc.status.unwrap().load_balancer.unwrap().ingress.is_none());
    let lb = json!({"status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.10"}]}}});
    let got = svcs
        .patch("lb", &PatchParams::default(), &Patch::Merge(&lb))
        .await
        .unwrap();
    assert!(
        got.status.unwrap().load_balancer.unwrap().ingress.is_none(),
        "main resource ignores status"
    );
    let got = svcs
        .patch_status("lb", &PatchParams::default(), &Patch::Merge(&lb))
        .await
        .unwrap();
    assert_eq!(
        got.status.unwrap().load_balancer.unwrap().ingress.unwrap()[0]
            .ip
            .as_deref(),
        Some("192.0.2.10")
    );
    let bad = json!({"status": {"loadBalancer": {"ingress": [{"ip": "not-an-ip"}]}}});
    assert_eq!(
        api_err(
            svcs.patch_status("lb", &PatchParams::default(), &Patch::Merge(&bad))
                .await
                .unwrap_err()
        )
        .code,
        422
    );
}

#[tokio::test]
async fn finalizers_hold_deletion_and_watchers_see_modified_then_deleted() {
    let s = start().await;
    let svcs: Api<Service> = Api::namespaced(s.client().unwrap(), "default");
    let svc: Service = serde_json::from_value(
        json!({"metadata": {"name": "s", "finalizers": ["service.kubernetes.io/load-balancer-cleanup"]},
        "spec": {"type": "NodePort", "ports": [{"port": 80}]}}),
    )
    .unwrap();
    let svc = svcs.create(&PostParams::default(), &svc).await.unwrap();
    let mut w = svcs
        .watch(
            &WatchParams::default().fields("metadata.name=s"),
            svc.metadata.resource_version.as_deref().unwrap(),
        )
        .await
        .unwrap()
        .boxed();
    // Preconditions: a wrong uid is a 409.
    let e = api_err(
        svcs.delete(
            "s",
            &DeleteParams {
                preconditions: Some(kube::api::Preconditions {
                    uid: Some("nope".into()),
                    resource_version: None,
                }),
                ..Default::default()
            },
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(e.code, 409);
    assert!(e.message.contains("Precondition failed"), "{}", e.message);
    let held = svcs
        .delete("s", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .expect("object while finalizers remain");
    assert!(held.metadata.deletion_timestamp.is_some());
    assert!(svcs.get("s").await.is_ok());
    match next_event(&mut w).await {
        WatchEvent::Modified(o) => assert!(o.metadata.deletion_timestamp.is_some()),
        e => panic!("{e:?}"),
    }
    // Finalizers can be removed but not added while deleting (here: removed by JSON patch).
    let p: json_patch::Patch =
        serde_json::from_value(json!([{"op": "remove", "path": "/metadata/finalizers"}])).unwrap();
    svcs.patch("s", &PatchParams::default(), &Patch::<()>::Json(p))
        .await
        .unwrap();
    match next_event(&mut w).await {
        WatchEvent::Deleted(o) => assert_eq!(o.metadata.name.as_deref(), Some("s")),
        e => panic!("{e:?}"),
    }
    assert_eq!(api_err(svcs.get("s").await.unwrap_err()).code, 404);
    // Its node port went back to the pool: a new service may take it.
    let np = svc.spec.unwrap().ports.unwrap()[0].node_port.unwrap();
    let again: Service = serde_json::from_value(json!({"metadata": {"name": "t"}, "spec": {"type": "NodePort", "ports": [{"port": 80, "nodePort": np}]}})).unwrap();
    svcs.create(&PostParams::default(), &again).await.unwrap();
}

#[tokio::test]
async fn services_allocate_cluster_ips_and_unique_node_ports() {
    let s = start().await;
    let svcs: Api<Service> = Api::namespaced(s.client().unwrap(), "default");
    let mk = |name: &str, spec: serde_json::Value| -> Service {
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
    };
    let a = svcs.create(&PostParams::default(), &mk("a", json!({"type": "LoadBalancer", "externalTrafficPolicy": "Local", "ports": [{"name": "http", "port": 80}, {"name": "https", "port": 443}]}))).await.unwrap();
    let spec = a.spec.clone().unwrap();
    let ip: std::net::Ipv4Addr = spec.cluster_ip.as_deref().unwrap().parse().unwrap();
    assert!(
        ipnet::Ipv4Net::new([10, 96, 0, 0].into(), 12)
            .unwrap()
            .contains(&ip)
    );
    assert_eq!(spec.cluster_ips.as_deref(), Some(&[ip.to_string()][..]));
    assert_eq!(spec.ip_families.as_deref(), Some(&["IPv4".to_string()][..]));
    assert_eq!(spec.ip_family_policy.as_deref(), Some("SingleStack"));
    assert_eq!(spec.internal_traffic_policy.as_deref(), Some("Cluster"));
    assert_eq!(spec.session_affinity.as_deref(), Some("None"));
    let ports: Vec<i32> = spec
        .ports
        .as_ref()
        .unwrap()
        .iter()
        .map(|p| p.node_port.unwrap())
        .collect();
    assert!(ports.iter().all(|p| (30000..=32767).contains(p)));
    assert_ne!(ports[0], ports[1]);
    let hc = spec.health_check_node_port.unwrap();
    assert!(!ports.contains(&hc));
    // Kept across an update that omits them (kubectl apply of the original manifest).
    let upd = mk(
        "a",
        json!({"type": "LoadBalancer", "externalTrafficPolicy": "Local", "ports": [{"name": "http", "port": 80}, {"name": "https", "port": 443}], "selector": {"app": "x"}}),
    );
    let u = svcs.replace("a", &PostParams::default(), &upd).await.unwrap();
    let uspec = u.spec.unwrap();
    assert_eq!(uspec.cluster_ip, spec.cluster_ip);
    assert_eq!(
        uspec
            .ports
            .unwrap()
            .iter()
            .map(|p| p.node_port.unwrap())
            .collect::<Vec<_>>(),
        ports
    );
    assert_eq!(uspec.health_check_node_port, Some(hc));
    // A taken node port or cluster IP is refused.
    let e = api_err(
        svcs.create(
            &PostParams::default(),
            &mk(
                "b",
                json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": ports[0]}]}),
            ),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    assert!(
        e.message.contains("provided port is already allocated"),
        "{}",
        e.message
    );
    let e = api_err(
        svcs.create(
            &PostParams::default(),
            &mk("c", json!({"clusterIP": ip.to_string(), "ports": [{"port": 80}]})),
        )
        .await
        .unwrap_err(),
    );
    assert!(
        e.message.contains("provided IP is already allocated"),
        "{}",
        e.message
    );
    let e = api_err(
        svcs.create(
            &PostParams::default(),
            &mk(
                "d",
                json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": 80}]}),
            ),
        )
        .await
        .unwrap_err(),
    );
    assert!(
        e.message.contains("provided port is not in the valid range"),
        "{}",
        e.message
    );
    let e = api_err(
        svcs.create(&PostParams::default(), &mk("e", json!({"ports": [{"port": 0}]})))
            .await
            .unwrap_err(),
    );
    assert!(e.message.contains("spec.ports[0].port"), "{}", e.message);
    // Switching to ClusterIP releases the node ports.
    let to_cip = mk(
        "a",
        json!({"type": "ClusterIP", "ports": [{"name": "http", "port": 80}, {"name": "https", "port": 443}]}),
    );
    let mut to_cip = to_cip;
    to_cip.spec.as_mut().unwrap().cluster_ip = spec.cluster_ip.clone();
    let c = svcs.replace("a", &PostParams::default(), &to_cip).await.unwrap();
    assert!(
        c.spec
            .unwrap()
            .ports
            .unwrap()
            .iter()
            .all(|p| p.node_port.is_none())
    );
    svcs.create(
        &PostParams::default(),
        &mk(
            "b",
            json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": ports[0]}]}),
        ),
    )
    .await
    .unwrap();
    // clusterIP is immutable.
    let mut moved = c_clone(&svcs, "a").await;
    moved.spec.as_mut().unwrap().cluster_ip = Some("10.96.0.200".into());
    moved.spec.as_mut().unwrap().cluster_ips = Some(vec!["10.96.0.200".into()]);
    assert_eq!(
        api_err(
            svcs.replace("a", &PostParams::default(), &moved)
                .await
                .unwrap_err()
        )
        .code,
        422
    );
}

async fn c_clone(api: &Api<Service>, name: &str) -> Service {
    api.get(name).await.unwrap()
}

#[tokio::test]
async fn service_finalizers_via_merge_and_strategic_patch() {
    let s = start().await;
    let svcs: Api<Service> = Api::namespaced(s.client().unwrap(), "default");
    let svc: Service = serde_json::from_value(
        json!({"metadata": {"name": "s", "finalizers": ["a.io/x"]}, "spec": {"ports": [{"port": 80}]}}),
    )
    .unwrap();
    svcs.create(&PostParams::default(), &svc).await.unwrap();
    // Strategic merge: finalizers merge as a set (patchStrategy merge).
    let got = svcs
        .patch(
            "s",
            &PatchParams::default(),
            &Patch::Strategic(json!({"metadata": {"finalizers": ["b.io/y"]}})),
        )
        .await
        .unwrap();
    assert_eq!(got.metadata.finalizers.unwrap(), ["b.io/y", "a.io/x"]);
    // Merge patch: lists replace.
    let got = svcs
        .patch(
            "s",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["c.io/z"]}})),
        )
        .await
        .unwrap();
    assert_eq!(got.metadata.finalizers.unwrap(), ["c.io/z"]);
    // Service ports merge by port under strategic merge.
    let got = svcs
        .patch(
            "s",
            &PatchParams::default(),
            &Patch::Strategic(
                json!({"spec": {"ports": [{"port": 443, "name": "https"}, {"port": 80, "name": "http"}]}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(got.spec.unwrap().ports.unwrap().len(), 2);
}

#[tokio::test]
async fn events_recorder_writes_events_k8s_io_for_nodes_in_default() {
    let s = start().await;
    let client = s.client().unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    let n = nodes.create(&PostParams::default(), &node("n1")).await.unwrap();
    let reference = kube::Resource::object_ref(&n, &());
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "cloud-node-controller".into(),
            instance: Some("pod-1".into()),
        },
    );
    let ev = Event {
        type_: EventType::Normal,
        reason: "Synced".into(),
        note: Some("hello".into()),
        action: "Sync".into(),
        secondary: None,
    };
    recorder.publish(&ev, &reference).await.unwrap();
    // The second publish of the same event patches the series.
    recorder.publish(&ev, &reference).await.unwrap();
    let evs: Api<EventV1> = Api::namespaced(client.clone(), "default");
    let list = evs
        .list(&ListParams::default().fields("regarding.name=n1"))
        .await
        .unwrap();
    assert_eq!(list.items.len(), 1);
    assert_eq!(list.items[0].series.as_ref().map(|s| s.count), Some(2));
    // The same event through core/v1.
    let core: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client, "default");
    let list = core
        .list(
            &ListParams::default().fields("involvedObject.name=n1,reportingComponent=cloud-node-controller"),
        )
        .await
        .unwrap();
    assert_eq!(list.items[0].message.as_deref(), Some("hello"));
    // events.k8s.io requires eventTime etc.
    let bad: EventV1 = serde_json::from_value(json!({"metadata": {"name": "x"}, "regarding": {"kind": "Node", "name": "n1"}, "reason": "R", "type": "Normal"})).unwrap();
    assert_eq!(
        api_err(evs.create(&PostParams::default(), &bad).await.unwrap_err()).code,
        422
    );
}

#[tokio::test]
async fn many_writers_and_watchers_keep_per_object_order() {
    let s = start().await;
    let cms: Api<ConfigMap> = Api::namespaced(s.client().unwrap(), "default");
    let rv = cms
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut watchers = Vec::new();
    for _ in 0..5 {
        let w = cms
            .watch(&WatchParams::default().timeout(60), &rv)
            .await
            .unwrap()
            .boxed();
        watchers.push(w);
    }
    const OBJS: usize = 4;
    const UPDATES: usize = 25;
    let mut writers = Vec::new();
    for o in 0..OBJS {
        let cms = cms.clone();
        writers.push(tokio::spawn(async move {
            let name = format!("o{o}");
            cms.create(&PostParams::default(), &cm(&name)).await.unwrap();
            for i in 0..UPDATES {
                cms.patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"data": {"i": i.to_string()}})),
                )
                .await
                .unwrap();
            }
        }));
    }
    for w in writers {
        w.await.unwrap();
    }
    for mut w in watchers {
        let mut last: std::collections::HashMap<String, (u64, i64)> = Default::default();
        let mut seen = 0;
        while seen < OBJS * (UPDATES + 1) {
            let ev = next_event(&mut w).await;
            let (WatchEvent::Added(c) | WatchEvent::Modified(c)) = ev else {
                panic!("unexpected {ev:?}")
            };
            let rv: u64 = c.metadata.resource_version.unwrap().parse().unwrap();
            let i: i64 = c
                .data
                .as_ref()
                .and_then(|d| d.get("i"))
                .map_or(-1, |v| v.parse().unwrap());
            let name = c.metadata.name.unwrap();
            if let Some((prv, pi)) = last.get(&name) {
                assert!(rv > *prv && i == pi + 1, "{name}: {pi}@{prv} then {i}@{rv}");
            }
            last.insert(name, (rv, i));
            seen += 1;
        }
    }
    let _ = cms
        .list(&ListParams::default())
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.metadata.name)
        .collect::<Vec<_>>();
    let _ = futures::stream::iter(Vec::<kube::Result<()>>::new())
        .try_collect::<Vec<_>>()
        .await;
}
