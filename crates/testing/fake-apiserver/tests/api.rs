//! CRUD, errors, resourceVersions, selectors and pagination, written from what the real
//! kube-apiserver answers, checked with kube-rs (a client written by others) and raw HTTP.

mod common;

use common::*;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Secret, Service};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

fn api_err(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test]
async fn create_get_list_update_delete_node() {
    let s = start().await;
    let nodes: Api<Node> = Api::all(s.client().unwrap());
    let created = nodes.create(&PostParams::default(), &node("n1")).await.unwrap();
    let uid = created.metadata.uid.clone().unwrap();
    assert!(created.metadata.creation_timestamp.is_some());
    assert!(created.metadata.resource_version.is_some());
    let got = nodes.get("n1").await.unwrap();
    assert_eq!(got.metadata.uid.as_deref(), Some(uid.as_str()));
    let list = nodes.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    let mut upd = got.clone();
    upd.metadata.labels = Some([("a".to_string(), "b".to_string())].into());
    let upd = nodes.replace("n1", &PostParams::default(), &upd).await.unwrap();
    assert_eq!(upd.metadata.labels.unwrap()["a"], "b");
    // Nodes answer a delete with a Status naming the object.
    let del = nodes.delete("n1", &DeleteParams::default()).await.unwrap();
    let status = del.right().expect("a Status");
    assert_eq!(status.details.unwrap().uid, uid);
    assert_eq!(api_err(nodes.get("n1").await.unwrap_err()).code, 404);
}

#[tokio::test]
async fn errors_are_status_objects_with_code_and_reason() {
    let s = start().await;
    let (c, v) = get(&s, "/api/v1/nodes/missing").await;
    assert_eq!(c, 404);
    assert_status(&v, 404, "NotFound");
    assert_eq!(v["message"], "nodes \"missing\" not found");
    assert_eq!(v["details"], json!({"name": "missing", "kind": "nodes"}));
    let (c, _, v) = raw(
        &s,
        "GET",
        "/apis/coordination.k8s.io/v1/namespaces/default/leases/x",
        "",
        "",
    )
    .await;
    assert_eq!(c, 404);
    assert_eq!(v["message"], "leases.coordination.k8s.io \"x\" not found");
    assert_eq!(v["details"]["group"], "coordination.k8s.io");
    // Unknown resources are a plain 404 Status.
    let (c, v) = get(&s, "/api/v1/pods").await;
    assert_eq!(c, 404);
    assert_status(&v, 404, "NotFound");
    // AlreadyExists
    let body = r#"{"metadata":{"name":"n1"}}"#;
    assert_eq!(
        raw(&s, "POST", "/api/v1/nodes", "application/json", body).await.0,
        201
    );
    let (c, _, v) = raw(&s, "POST", "/api/v1/nodes", "application/json", body).await;
    assert_eq!(c, 409);
    assert_status(&v, 409, "AlreadyExists");
    assert_eq!(v["message"], "nodes \"n1\" already exists");
    // Garbage JSON is a 400, not a crash.
    let (c, _, v) = raw(&s, "POST", "/api/v1/nodes", "application/json", "{not json").await;
    assert_eq!(c, 400);
    assert_status(&v, 400, "BadRequest");
    // Wrongly typed field: 400 like the Go decoder.
    let (c, _, v) = raw(
        &s,
        "POST",
        "/api/v1/nodes",
        "application/json",
        r#"{"metadata":{"name":"n2"},"spec":{"unschedulable":"yes"}}"#,
    )
    .await;
    assert_eq!(c, 400, "{v}");
    // Invalid object: 422 with causes.
    let (c, _, v) = raw(
        &s,
        "POST",
        "/api/v1/nodes",
        "application/json",
        r#"{"metadata":{"labels":{"a":"b c"}}}"#,
    )
    .await;
    assert_eq!(c, 422);
    assert_status(&v, 422, "Invalid");
    let fields: Vec<&str> = v["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["field"].as_str().unwrap())
        .collect();
    assert!(
        fields.contains(&"metadata.name") && fields.contains(&"metadata.labels"),
        "{v}"
    );
    assert_eq!(v["details"]["kind"], "Node");
    // Unsupported patch type: 415.
    let (c, _, v) = raw(
        &s,
        "PATCH",
        "/api/v1/nodes/n1",
        "application/apply-patch+yaml",
        "metadata: {}",
    )
    .await;
    assert_eq!(c, 415);
    assert_status(&v, 415, "UnsupportedMediaType");
    let (c, _, _) = raw(&s, "PATCH", "/api/v1/nodes/n1", "text/plain", "{}").await;
    assert_eq!(c, 415);
    // Setting resourceVersion on create is refused.
    let (c, _, _) = raw(
        &s,
        "POST",
        "/api/v1/nodes",
        "application/json",
        r#"{"metadata":{"name":"n3","resourceVersion":"5"}}"#,
    )
    .await;
    assert_eq!(c, 500);
    // Body name must match the URL on update.
    let (c, _, v) = raw(
        &s,
        "PUT",
        "/api/v1/nodes/n1",
        "application/json",
        r#"{"metadata":{"name":"other"}}"#,
    )
    .await;
    assert_eq!(c, 400, "{v}");
}

#[tokio::test]
async fn strict_field_validation_rejects_unknown_fields() {
    let s = start().await;
    let body = r#"{"metadata":{"name":"n1"},"spec":{"bogus":1}}"#;
    let (c, _, v) = raw(
        &s,
        "POST",
        "/api/v1/nodes?fieldValidation=Strict",
        "application/json",
        body,
    )
    .await;
    assert_eq!(c, 400, "{v}");
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("unknown field \"spec.bogus\""),
        "{v}"
    );
    // The default (Warn) accepts, drops the field, and warns.
    let (c, head, v) = raw(&s, "POST", "/api/v1/nodes", "application/json", body).await;
    assert_eq!(c, 201);
    assert!(v["spec"].get("bogus").is_none());
    assert!(head.to_lowercase().contains("warning: 299"), "{head}");
}

#[tokio::test]
async fn one_resource_version_across_kinds_and_stale_updates_conflict() {
    let s = start().await;
    let c = s.client().unwrap();
    let nodes: Api<Node> = Api::all(c.clone());
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), "default");
    let n = nodes.create(&PostParams::default(), &node("n1")).await.unwrap();
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "c"}})).unwrap();
    let cm = cms.create(&PostParams::default(), &cm).await.unwrap();
    let rv = |v: &Option<String>| v.as_deref().unwrap().parse::<u64>().unwrap();
    assert!(rv(&cm.metadata.resource_version) > rv(&n.metadata.resource_version));
    let list = nodes.list(&ListParams::default()).await.unwrap();
    assert!(rv(&list.metadata.resource_version) >= rv(&cm.metadata.resource_version));
    // Update with the current version succeeds; then the old version is stale.
    let mut n2 = n.clone();
    n2.metadata.labels = Some([("x".to_string(), "1".to_string())].into());
    let n3 = nodes.replace("n1", &PostParams::default(), &n2).await.unwrap();
    assert!(rv(&n3.metadata.resource_version) > rv(&n.metadata.resource_version));
    let e = api_err(
        nodes
            .replace("n1", &PostParams::default(), &n2)
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));
    assert!(
        e.message.contains("the object has been modified"),
        "{}",
        e.message
    );
    // A no-op update writes nothing: same resourceVersion.
    let same = nodes.replace("n1", &PostParams::default(), &n3).await.unwrap();
    assert_eq!(same.metadata.resource_version, n3.metadata.resource_version);
    // A non-integer resourceVersion on a list is rejected.
    let (code, v) = get(&s, "/api/v1/nodes?resourceVersion=abc").await;
    assert_eq!(code, 400, "{v}");
}

#[tokio::test]
async fn list_shape_matches_the_real_server() {
    let s = start().await;
    let nodes: Api<Node> = Api::all(s.client().unwrap());
    nodes.create(&PostParams::default(), &node("n1")).await.unwrap();
    let (c, v) = get(&s, "/api/v1/nodes").await;
    assert_eq!(c, 200);
    assert_eq!(v["kind"], "NodeList");
    assert_eq!(v["apiVersion"], "v1");
    assert!(v["metadata"]["resourceVersion"].is_string());
    // Items of typed lists carry no kind/apiVersion.
    assert!(v["items"][0].get("kind").is_none());
    let (_, g) = get(&s, "/api/v1/nodes/n1").await;
    assert_eq!(g["kind"], "Node");
    // resourceVersion=0 means "any": served.
    assert_eq!(get(&s, "/api/v1/nodes?resourceVersion=0").await.0, 200);
}

#[tokio::test]
async fn label_and_field_selectors() {
    let s = start().await;
    let nodes: Api<Node> = Api::all(s.client().unwrap());
    for (name, labels, unsched) in [
        ("a", json!({"env": "prod", "tier": "web"}), false),
        ("b", json!({"env": "dev"}), true),
        ("c", json!({"tier": "db"}), false),
    ] {
        let n: Node = serde_json::from_value(
            json!({"metadata": {"name": name, "labels": labels}, "spec": {"unschedulable": unsched}}),
        )
        .unwrap();
        nodes.create(&PostParams::default(), &n).await.unwrap();
    }
    let names = |l: kube::core::ObjectList<Node>| {
        l.items
            .into_iter()
            .map(|n| n.metadata.name.unwrap())
            .collect::<Vec<_>>()
    };
    let cases = [
        ("env=prod", vec!["a"]),
        ("env!=prod", vec!["b", "c"]),
        ("env in (prod,dev)", vec!["a", "b"]),
        ("env notin (prod)", vec!["b", "c"]),
        ("tier", vec!["a", "c"]),
        ("!tier", vec!["b"]),
        ("env=prod,tier=web", vec!["a"]),
    ];
    for (sel, want) in cases {
        let got = names(nodes.list(&ListParams::default().labels(sel)).await.unwrap());
        assert_eq!(got, want, "labelSelector {sel}");
    }
    let got = names(
        nodes
            .list(&ListParams::default().fields("metadata.name=b"))
            .await
            .unwrap(),
    );
    assert_eq!(got, vec!["b"]);
    let got = names(
        nodes
            .list(&ListParams::default().fields("spec.unschedulable=false"))
            .await
            .unwrap(),
    );
    assert_eq!(got, vec!["a", "c"]);
    // Fields a kind does not support are a 400, as upstream.
    let e = api_err(
        nodes
            .list(&ListParams::default().fields("metadata.namespace=x"))
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (400, "BadRequest"));
    assert_eq!(e.message, "field label not supported: metadata.namespace");
    let e = api_err(
        nodes
            .list(&ListParams::default().labels("env in prod"))
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 400);
    // Services support spec.type and spec.clusterIP.
    let svcs: Api<Service> = Api::all(s.client().unwrap());
    let l = svcs
        .list(&ListParams::default().fields("spec.type=ClusterIP,metadata.namespace=default"))
        .await
        .unwrap();
    assert_eq!(l.items.len(), 1, "the default/kubernetes service");
}

#[tokio::test]
async fn limit_and_continue_give_a_consistent_snapshot() {
    let s = start().await;
    let cms: Api<ConfigMap> = Api::namespaced(s.client().unwrap(), "default");
    for i in 0..7 {
        let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": format!("cm{i}")}})).unwrap();
        cms.create(&PostParams::default(), &cm).await.unwrap();
    }
    let p1 = cms.list(&ListParams::default().limit(3)).await.unwrap();
    assert_eq!(p1.items.len(), 3);
    assert_eq!(p1.metadata.remaining_item_count, Some(4));
    let token = p1.metadata.continue_.clone().unwrap();
    // Changes after the first page do not show up in later pages of the same list.
    cms.delete("cm5", &DeleteParams::default()).await.unwrap();
    let extra: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "cm9"}})).unwrap();
    cms.create(&PostParams::default(), &extra).await.unwrap();
    let p2 = cms
        .list(&ListParams::default().limit(3).continue_token(&token))
        .await
        .unwrap();
    let p3 = cms
        .list(
            &ListParams::default()
                .limit(3)
                .continue_token(p2.metadata.continue_.as_deref().unwrap()),
        )
        .await
        .unwrap();
    let mut all: Vec<String> = p1
        .items
        .iter()
        .chain(&p2.items)
        .chain(&p3.items)
        .map(|c| c.metadata.name.clone().unwrap())
        .collect();
    all.sort();
    assert_eq!(all, (0..7).map(|i| format!("cm{i}")).collect::<Vec<_>>());
    assert!(p3.metadata.continue_.is_none());
    assert_eq!(p1.metadata.resource_version, p3.metadata.resource_version);
    // A token whose version left the history is 410 Expired.
    let s2 = start_with(fake_apiserver::Config {
        watch_history_size: 2,
        ..Default::default()
    })
    .await;
    let cms2: Api<ConfigMap> = Api::namespaced(s2.client().unwrap(), "default");
    for i in 0..3 {
        let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": format!("cm{i}")}})).unwrap();
        cms2.create(&PostParams::default(), &cm).await.unwrap();
    }
    let p1 = cms2.list(&ListParams::default().limit(1)).await.unwrap();
    for i in 3..6 {
        let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": format!("cm{i}")}})).unwrap();
        cms2.create(&PostParams::default(), &cm).await.unwrap();
    }
    let e = api_err(
        cms2.list(
            &ListParams::default()
                .limit(1)
                .continue_token(p1.metadata.continue_.as_deref().unwrap()),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (410, "Expired"));
}

#[tokio::test]
async fn metadata_is_server_set() {
    let s = start().await;
    let nodes: Api<Node> = Api::all(s.client().unwrap());
    let n: Node = serde_json::from_value(
        json!({"metadata": {"name": "n1", "uid": "mine", "creationTimestamp": "2000-01-01T00:00:00Z"}}),
    )
    .unwrap();
    let c = nodes.create(&PostParams::default(), &n).await.unwrap();
    assert_ne!(c.metadata.uid.as_deref(), Some("mine"));
    assert_ne!(
        c.metadata.creation_timestamp.as_ref().map(|t| t.0.to_string()),
        Some("2000-01-01T00:00:00Z".to_string())
    );
    // Nodes carry no generation in the real server, and clients cannot set one on update.
    assert_eq!(c.metadata.generation, None);
    let mut u = c.clone();
    u.metadata.generation = Some(7);
    u.spec = Some(serde_json::from_value(json!({"unschedulable": true})).unwrap());
    let u = nodes.replace("n1", &PostParams::default(), &u).await.unwrap();
    assert_eq!(u.metadata.generation, None);
    // uid and name are immutable.
    let mut bad = u.clone();
    bad.metadata.uid = Some("other".into());
    let e = api_err(
        nodes
            .replace("n1", &PostParams::default(), &bad)
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 422);
    // generateName
    let g: Node = serde_json::from_value(json!({"metadata": {"generateName": "gen-"}})).unwrap();
    let g = nodes.create(&PostParams::default(), &g).await.unwrap();
    let name = g.metadata.name.unwrap();
    assert!(name.starts_with("gen-") && name.len() == 9, "{name}");
}

#[tokio::test]
async fn namespace_lifecycle() {
    let s = start().await;
    let c = s.client().unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), "nope");
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "c"}})).unwrap();
    let e = api_err(cms.create(&PostParams::default(), &cm).await.unwrap_err());
    assert_eq!(
        (e.code, e.message.as_str()),
        (404, "namespaces \"nope\" not found")
    );
    let nss: Api<Namespace> = Api::all(c.clone());
    let names: Vec<String> = nss
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|n| n.metadata.name.unwrap())
        .collect();
    assert_eq!(
        names,
        ["default", "kube-node-lease", "kube-public", "kube-system"]
    );
    let e = api_err(nss.delete("default", &DeleteParams::default()).await.unwrap_err());
    assert_eq!(e.code, 403);
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "team"}})).unwrap();
    let ns = nss.create(&PostParams::default(), &ns).await.unwrap();
    assert_eq!(ns.spec.unwrap().finalizers.unwrap(), vec!["kubernetes"]);
    assert_eq!(ns.metadata.labels.unwrap()["kubernetes.io/metadata.name"], "team");
    let in_team: Api<ConfigMap> = Api::namespaced(c.clone(), "team");
    in_team.create(&PostParams::default(), &cm).await.unwrap();
    let deleted = nss
        .delete("team", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .expect("the namespace");
    assert_eq!(deleted.status.unwrap().phase.as_deref(), Some("Terminating"));
    // The namespace controller empties it, then it goes.
    eventually(std::time::Duration::from_secs(5), || async {
        matches!(nss.get("team").await, Err(kube::Error::Api(s)) if s.code == 404).then_some(())
    })
    .await;
    assert!(
        in_team
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
}

#[tokio::test]
async fn leases_for_leader_election() {
    let s = start().await;
    let leases: Api<Lease> = Api::namespaced(s.client().unwrap(), "kube-system");
    let l: Lease = serde_json::from_value(
        json!({"metadata": {"name": "ccm"}, "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}}),
    )
    .unwrap();
    let l = leases.create(&PostParams::default(), &l).await.unwrap();
    let mut again = l.clone();
    again.metadata.resource_version = None;
    let e = api_err(leases.create(&PostParams::default(), &again).await.unwrap_err());
    assert_eq!(e.reason, "AlreadyExists");
    let mut a = l.clone();
    a.spec.as_mut().unwrap().holder_identity = Some("a2".into());
    let mut b = l.clone();
    b.spec.as_mut().unwrap().holder_identity = Some("b".into());
    leases.replace("ccm", &PostParams::default(), &a).await.unwrap();
    // The second writer used the same (now stale) version: exactly one wins.
    let e = api_err(
        leases
            .replace("ccm", &PostParams::default(), &b)
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 409);
    let bad: Lease =
        serde_json::from_value(json!({"metadata": {"name": "bad"}, "spec": {"leaseDurationSeconds": 0}}))
            .unwrap();
    assert_eq!(
        api_err(leases.create(&PostParams::default(), &bad).await.unwrap_err()).code,
        422
    );
}

#[tokio::test]
async fn secrets_default_and_string_data() {
    let s = start().await;
    let secrets: Api<Secret> = Api::namespaced(s.client().unwrap(), "default");
    let sec: Secret =
        serde_json::from_value(json!({"metadata": {"name": "s"}, "stringData": {"k": "hi"}})).unwrap();
    let got = secrets.create(&PostParams::default(), &sec).await.unwrap();
    assert_eq!(got.type_.as_deref(), Some("Opaque"));
    assert_eq!(got.data.unwrap()["k"].0, b"hi");
    assert!(got.string_data.is_none());
    let l = secrets
        .list(&ListParams::default().fields("type=Opaque"))
        .await
        .unwrap();
    assert_eq!(l.items.len(), 1);
}

#[tokio::test]
async fn discovery_documents() {
    let s = start().await;
    let (c, v) = get(&s, "/version").await;
    assert_eq!((c, v["major"].as_str()), (200, Some("1")));
    let (_, v) = get(&s, "/api").await;
    assert_eq!(v["versions"], json!(["v1"]));
    let (_, v) = get(&s, "/api/v1").await;
    let names: Vec<&str> = v["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    for want in [
        "nodes",
        "nodes/status",
        "services",
        "services/status",
        "namespaces",
        "events",
        "configmaps",
        "secrets",
    ] {
        assert!(names.contains(&want), "{want} in {names:?}");
    }
    let (_, v) = get(&s, "/apis").await;
    let groups: Vec<&str> = v["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap())
        .collect();
    assert_eq!(groups, ["coordination.k8s.io", "events.k8s.io"]);
    let (_, v) = get(&s, "/apis/coordination.k8s.io/v1").await;
    assert_eq!(v["resources"][0]["name"], "leases");
    assert_eq!(get(&s, "/apis/apps/v1").await.0, 404);
    // kube-rs discovery works against it.
    let d = kube::Discovery::new(s.client().unwrap()).run().await.unwrap();
    assert!(d.has_group("coordination.k8s.io"));
}

#[tokio::test]
async fn dry_run_does_not_persist() {
    let s = start().await;
    let nodes: Api<Node> = Api::all(s.client().unwrap());
    nodes
        .create(
            &PostParams {
                dry_run: true,
                ..Default::default()
            },
            &node("n1"),
        )
        .await
        .unwrap();
    assert_eq!(api_err(nodes.get("n1").await.unwrap_err()).code, 404);
    let _ = Patch::Merge(json!({})); // keep the import set small and explicit
    let _ = PatchParams::default();
}

/// A real kube-apiserver (v1.20 on, APF on by default) answers every request with the
/// FlowSchema and PriorityLevel it classified it into; clients turn their own limit off on it.
#[tokio::test]
async fn every_response_carries_the_priority_and_fairness_headers() {
    let s = start().await;
    for (method, path, body) in [
        ("GET", "/version", ""),
        ("GET", "/api/v1/nodes", ""),
        ("GET", "/api/v1/nodes/missing", ""),
        ("POST", "/api/v1/nodes", r#"{"metadata":{"name":"n1"}}"#),
        ("GET", "/apis/not.a.group/v1/things", ""),
    ] {
        let (_, head, _) = raw(&s, method, path, "application/json", body).await;
        let head = head.to_ascii_lowercase();
        for header in [
            "x-kubernetes-pf-flowschema-uid:",
            "x-kubernetes-pf-prioritylevel-uid:",
        ] {
            assert!(head.contains(header), "{method} {path}: no {header}\n{head}");
        }
    }
}
