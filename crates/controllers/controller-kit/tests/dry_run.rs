//! Shadow mode against fake-apiserver: with the controller's own clients in dry-run, no request
//! that writes reaches the API server but those on the dry-run Leases; every write the writers
//! would make is a planned change (logged, counted once, listed), events are dropped, and a write
//! that bypasses the writers is refused and reported.

use std::{collections::BTreeMap, convert::Infallible, time::Duration};

use controller_kit::{
    dry_run::DryRun,
    events::Events,
    kube_client::{self, KubeArgs},
    leader::{LeaderElectionArgs, Leadership, run_as_leader},
    patch::{Patches, Writer},
};
use k8s_openapi::api::{
    coordination::v1::Lease,
    core::v1::{Node, Service},
    events::v1::Event,
};
use kube::{
    Api, Resource,
    api::{ListParams, Patch, PatchParams, PostParams},
};
use serde_json::json;
use side_port::MetricsRegistry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Requests that write, by resource, as the API server counted them (`apiserver_request_total`).
async fn writes(server: &fake_apiserver::RunningServer) -> BTreeMap<String, u64> {
    let mut stream = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).await.unwrap();
    let mut out = BTreeMap::new();
    for line in text.lines().filter(|l| l.starts_with("apiserver_request_total{")) {
        let field = |name: &str| {
            let start = line.find(&format!("{name}=\""))? + name.len() + 2;
            let end = line[start..].find('"')? + start;
            Some(line[start..end].to_owned())
        };
        let verb = field("verb").unwrap_or_default();
        if !["POST", "PUT", "PATCH", "DELETE", "DELETECOLLECTION"].contains(&verb.as_str()) {
            continue;
        }
        let count: u64 = line.rsplit(' ').next().unwrap().parse().unwrap();
        *out.entry(field("resource").unwrap_or_default()).or_default() += count;
    }
    out
}

fn delta(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    after
        .iter()
        .filter_map(|(k, v)| {
            let d = v - before.get(k).copied().unwrap_or(0);
            (d > 0).then(|| (k.clone(), d))
        })
        .collect()
}

async fn dry_run_clients(
    server: &fake_apiserver::RunningServer,
    dir: &tempfile::TempDir,
    dry_run: &DryRun,
) -> kube_client::Clients {
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).unwrap();
    let args = KubeArgs {
        kubeconfig: Some(kubeconfig),
        qps: None,
        burst: 30,
    };
    kube_client::clients_for(&args, dry_run).await.unwrap()
}

async fn seed(server: &fake_apiserver::RunningServer) {
    let client = server.client().unwrap();
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": "n1", "labels": {"a": "1"}},
        "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]}
    }))
    .unwrap();
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &node)
        .await
        .unwrap();
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80, "protocol": "TCP"}]}
    }))
    .unwrap();
    Api::<Service>::namespaced(client, "default")
        .create(&PostParams::default(), &svc)
        .await
        .unwrap();
}

#[tokio::test]
async fn in_dry_run_no_write_reaches_the_api_server_and_each_change_is_planned_once() {
    let server = fake_apiserver::FakeApiServer::start(fake_apiserver::Config::default())
        .await
        .unwrap();
    seed(&server).await;
    let dir = tempfile::tempdir().unwrap();
    let metrics = MetricsRegistry::new();
    let dry = DryRun::on("test-controller", &metrics);
    let clients = dry_run_clients(&server, &dir, &dry).await;
    let before = writes(&server).await;

    let writer = Writer::new("test-controller", Leadership::unconditional()).with_dry_run(dry.clone());
    let nodes: Api<Node> = Api::all(clients.limited.clone());
    let node = nodes.get("n1").await.unwrap();
    let label_and_address = |_: &Node| {
        Ok::<_, Infallible>(Patches {
            main: Some(json!({"metadata": {"labels": {"b": "2"}}})),
            status: Some(json!({"status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.9"}]}})),
        })
    };
    let written = writer
        .write_from(&nodes, &node, label_and_address)
        .await
        .unwrap()
        .expect("answered as written");
    // The object the write would have returned: the sync goes on from it.
    assert_eq!(written.metadata.labels.as_ref().unwrap()["b"], "2");
    assert_eq!(written.status.unwrap().addresses.unwrap()[0].address, "10.0.0.9");
    // A resync plans the same again: not a new change.
    writer.write_from(&nodes, &node, label_and_address).await.unwrap();
    assert!(
        writer
            .delete(&nodes, "n1", node.meta().uid.clone())
            .await
            .unwrap()
    );

    let services: Api<Service> = Api::namespaced(clients.limited.clone(), "default");
    let svc = services.get("web").await.unwrap();
    writer
        .write_from(&services, &svc, |_| {
            Ok::<_, Infallible>(Patches::main(json!({
                "metadata": {"finalizers": ["service.kubernetes.io/load-balancer-cleanup"]}
            })))
        })
        .await
        .unwrap();
    writer
        .write_from(&services, &svc, |_| {
            Ok::<_, Infallible>(Patches::status(
                json!({"status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.1"}]}}}),
            ))
        })
        .await
        .unwrap();

    Events::new(clients.limited.clone(), "test-controller", None)
        .with_dry_run(dry.clone())
        .normal(
            &svc.object_ref(&()),
            "EnsuredLoadBalancer",
            "EnsureLoadBalancer",
            "done".into(),
        )
        .await;

    // A write past the writers is refused by the clients themselves, and reported.
    let bypass = nodes
        .patch(
            "n1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"c": "3"}}})),
        )
        .await;
    assert!(bypass.is_err(), "{bypass:?}");

    // Leases: only the dry-run names may be written, on either client.
    let leases: Api<Lease> = Api::namespaced(clients.elector.clone(), "default");
    let lease =
        |name: &str| -> Lease { serde_json::from_value(json!({"metadata": {"name": name}})).unwrap() };
    assert!(
        leases
            .create(&PostParams::default(), &lease("cloud-node-controller"))
            .await
            .is_err()
    );
    leases
        .create(&PostParams::default(), &lease("cloud-node-controller-dry-run"))
        .await
        .unwrap();

    let after = writes(&server).await;
    assert_eq!(
        delta(&before, &after),
        BTreeMap::from([("leases".to_owned(), 1)]),
        "the one write that reached the server is the dry-run lease"
    );
    // The server's objects are as they were.
    let client = server.client().unwrap();
    let node = Api::<Node>::all(client.clone()).get("n1").await.unwrap();
    assert_eq!(
        node.metadata.labels.unwrap(),
        BTreeMap::from([("a".to_owned(), "1".to_owned())])
    );
    let svc = Api::<Service>::namespaced(client.clone(), "default")
        .get("web")
        .await
        .unwrap();
    assert!(svc.metadata.finalizers.is_none());
    let events = Api::<Event>::all(client)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(events.items.is_empty(), "events are not written");

    let listed = dry.to_json();
    let kinds: Vec<(&str, &str)> = listed["planned"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["kind"].as_str().unwrap(), p["object"].as_str().unwrap()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("node_patch", "Node/n1"),
            ("node_status", "Node/n1"),
            ("node_delete", "Node/n1"),
            ("finalizer", "Service/default/web"),
            ("service_status", "Service/default/web"),
            ("unguarded_write", "/api/v1/nodes/n1"),
            // the create of the real controller's lease, refused
            (
                "unguarded_write",
                "/apis/coordination.k8s.io/v1/namespaces/default/leases"
            ),
        ]
    );
    assert_eq!(listed["total"], 7);
    assert_eq!(
        listed["planned"][0]["times_planned"], 2,
        "planned twice, counted once"
    );
    assert_eq!(
        listed["planned"][0]["change"]["patch"],
        json!({"metadata": {"labels": {"b": "2"}}}),
        "the patch as it would have been sent (no resourceVersion)"
    );
    let text = metrics.render();
    for (kind, count) in [("node_patch", 1), ("finalizer", 1), ("unguarded_write", 2)] {
        let series = format!(
            "ccm_dry_run_planned_changes_total{{controller=\"test-controller\",kind=\"{kind}\"}} {count}"
        );
        assert!(text.contains(&series), "{series} in {text}");
    }
    assert_eq!(listed["controller"], "test-controller");
}

#[tokio::test]
async fn a_dry_run_replica_leads_on_its_own_lease_only() {
    let server = fake_apiserver::FakeApiServer::start(fake_apiserver::Config::default())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let dry = DryRun::on("ctrl", &MetricsRegistry::new());
    let clients = dry_run_clients(&server, &dir, &dry).await;
    let args = LeaderElectionArgs {
        enabled: true,
        lease_duration: Duration::from_secs(30),
        renew_deadline: Duration::from_secs(20),
        retry_period: Duration::from_millis(200),
        resource_name: Some(dry.lease_name("ctrl")),
        resource_namespace: "default".into(),
        identity: Some("me".into()),
    };
    let leadership = Leadership::elected();
    let (led_tx, led_rx) = tokio::sync::oneshot::channel::<()>();
    let election = run_as_leader(
        clients.elector.clone(),
        &args,
        "ctrl",
        &leadership,
        async move {
            let _ = led_tx.send(());
            std::future::pending::<()>().await;
        },
        std::future::pending(),
    );
    tokio::select! {
        result = election => panic!("the election ended: {result:?}"),
        led = tokio::time::timeout(Duration::from_secs(20), led_rx) => led.expect("leads within 20 s").unwrap(),
    }
    let leases: Api<Lease> = Api::namespaced(server.client().unwrap(), "default");
    let names: Vec<String> = leases
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|l| l.metadata.name)
        .collect();
    assert_eq!(names, ["ctrl-dry-run"]);
}
