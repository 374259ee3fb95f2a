//! End-to-end: cloud-node-controller and cloud-node-lifecycle-controller as processes against
//! fake-apiserver and cloud-gateway on the simulator.

use std::{collections::BTreeMap, time::Duration};

use e2e::{
    Cluster, ClusterSpec, http_get,
    nodes::{TAINT_UNINITIALIZED, has_taint},
    wait_for,
};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Node;
use kube::{
    Api, ResourceExt,
    runtime::{WatchStreamExt, watcher},
};

const SHUTDOWN: &str = "node.cloudprovider.kubernetes.io/shutdown";

/// Initialization is done: the taint is gone, the providerID set, and the cloud's addresses in
/// (the node is patched first and its status right after, as upstream does).
fn initialized(node: &Node) -> bool {
    let addressed = node
        .status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .is_some_and(|a| a.iter().any(|a| a.type_ == "InternalIP"));
    !has_taint(node, TAINT_UNINITIALIZED)
        && node.spec.as_ref().and_then(|s| s.provider_id.as_ref()).is_some()
        && addressed
}

async fn get(nodes: &Api<Node>, name: &str) -> Option<Node> {
    nodes.get_opt(name).await.ok().flatten()
}

fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registered_nodes_end_up_initialized_from_the_cloud() {
    let names = names("worker", 6);
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut cluster = Cluster::start(ClusterSpec::with_instances(&refs)).await;
    cluster.start_controller(
        "cloud-node-controller",
        "node-controller",
        &["--concurrent-node-syncs", "3"],
    );
    for name in &names {
        cluster.register_node(name, true).await;
    }
    let nodes = cluster.nodes();
    for (i, name) in names.iter().enumerate() {
        let node = wait_for(&format!("{name} initialized"), Duration::from_secs(60), || {
            let nodes = nodes.clone();
            async move { get(&nodes, name).await.filter(initialized) }
        })
        .await;
        let zone = if i % 2 == 0 { "sim-east-1a" } else { "sim-east-1b" };
        let id = cluster.instance_id(name).await;
        assert_eq!(
            node.spec.as_ref().unwrap().provider_id.as_deref(),
            Some(format!("simulator://{zone}/{id}").as_str())
        );
        let labels = node.labels();
        let want: BTreeMap<&str, &str> = [
            ("node.kubernetes.io/instance-type", "sim.medium"),
            ("beta.kubernetes.io/instance-type", "sim.medium"),
            ("topology.kubernetes.io/zone", zone),
            ("failure-domain.beta.kubernetes.io/zone", zone),
            ("topology.kubernetes.io/region", "sim-east-1"),
            ("failure-domain.beta.kubernetes.io/region", "sim-east-1"),
            ("kubernetes.io/hostname", name.as_str()),
        ]
        .into();
        for (k, v) in want {
            assert_eq!(labels.get(k).map(String::as_str), Some(v), "{name}: label {k}");
        }
        let addresses = node
            .status
            .as_ref()
            .and_then(|s| s.addresses.clone())
            .unwrap_or_default();
        let internal = format!("10.0.0.{}", i + 10);
        assert!(
            addresses
                .iter()
                .any(|a| a.type_ == "InternalIP" && a.address == internal),
            "{name}: {addresses:?} lacks InternalIP {internal}"
        );
        assert!(
            addresses
                .iter()
                .any(|a| a.type_ == "Hostname" && a.address == *name),
            "{name}: {addresses:?}"
        );
        // kubelet's Ready condition survives the controller's writes.
        let ready = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default();
        assert!(
            ready.iter().any(|c| c.type_ == "Ready" && c.status == "True"),
            "{name}: conditions lost"
        );
    }
    // A Synced event per node, in namespace default.
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(cluster.client.clone(), "default");
    wait_for("Synced events", Duration::from_secs(20), || {
        let events = events.clone();
        let count = names.len();
        async move {
            let list = events.list(&Default::default()).await.ok()?;
            (list
                .items
                .iter()
                .filter(|e| e.reason.as_deref() == Some("Synced"))
                .count()
                >= count)
                .then_some(())
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_without_an_instance_stays_tainted_until_one_appears() {
    let mut cluster = Cluster::start(ClusterSpec::with_instances(&["worker-0"])).await;
    cluster.start_controller("cloud-node-controller", "node-controller", &[]);
    cluster.register_node("late-node", true).await;
    let nodes = cluster.nodes();
    // Give the controller a few attempts: the node must stay tainted without an instance.
    wait_for("a failed sync attempt", Duration::from_secs(20), || {
        let log = cluster.procs[2].log();
        async move { log.contains("late-node").then_some(()) }
    })
    .await;
    assert!(has_taint(
        &get(&nodes, "late-node").await.unwrap(),
        TAINT_UNINITIALIZED
    ));
    cluster
        .sim(&["instances", "add", "--name", "late-node", "--type", "sim.large"])
        .await;
    let node = wait_for("late-node initialized", Duration::from_secs(60), || {
        let nodes = nodes.clone();
        async move { get(&nodes, "late-node").await.filter(initialized) }
    })
    .await;
    assert_eq!(
        node.labels()
            .get("node.kubernetes.io/instance-type")
            .map(String::as_str),
        Some("sim.large")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle_deletes_gone_instances_and_taints_stopped_ones() {
    let mut cluster = Cluster::start(ClusterSpec::with_instances(&["gone", "stopped", "running"])).await;
    cluster.start_controller("cloud-node-controller", "node-controller", &[]);
    cluster.start_controller(
        "cloud-node-lifecycle-controller",
        "lifecycle",
        &["--node-monitor-period", "500ms"],
    );
    let nodes = cluster.nodes();
    for name in ["gone", "stopped", "running"] {
        cluster.register_node(name, true).await;
    }
    for name in ["gone", "stopped", "running"] {
        wait_for(&format!("{name} initialized"), Duration::from_secs(60), || {
            let nodes = nodes.clone();
            async move { get(&nodes, name).await.filter(initialized) }
        })
        .await;
    }
    let gone = cluster.instance_id("gone").await;
    let stopped = cluster.instance_id("stopped").await;
    cluster.sim(&["instances", "terminate", &gone]).await;
    cluster.sim(&["instances", "stop", &stopped]).await;
    for name in ["gone", "stopped", "running"] {
        cluster.set_ready(name, false).await;
    }
    wait_for(
        "the node of the terminated instance deleted",
        Duration::from_secs(30),
        || {
            let nodes = nodes.clone();
            async move { get(&nodes, "gone").await.is_none().then_some(()) }
        },
    )
    .await;
    wait_for(
        "the node of the stopped instance tainted",
        Duration::from_secs(30),
        || {
            let nodes = nodes.clone();
            async move { get(&nodes, "stopped").await.filter(|n| has_taint(n, SHUTDOWN)) }
        },
    )
    .await;
    // A NotReady node whose instance runs is neither deleted nor tainted.
    let running = get(&nodes, "running").await.expect("the running node is kept");
    assert!(!has_taint(&running, SHUTDOWN));
    // Ready again: the taint goes.
    cluster.sim(&["instances", "start", &stopped]).await;
    cluster.set_ready("stopped", true).await;
    wait_for("the shutdown taint removed", Duration::from_secs(30), || {
        let nodes = nodes.clone();
        async move { get(&nodes, "stopped").await.filter(|n| !has_taint(n, SHUTDOWN)) }
    })
    .await;
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(cluster.client.clone(), "default");
    let list = events.list(&Default::default()).await.unwrap();
    assert!(
        list.items
            .iter()
            .any(|e| e.reason.as_deref() == Some("DeletingNode")),
        "no DeletingNode event"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_flaky_cloud_no_node_is_deleted_and_all_are_initialized() {
    let names = names("flaky", 8);
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut spec = ClusterSpec::with_instances(&refs);
    spec.gateway_args = vec!["--simulator-error-rate".into(), "*=0.5".into()];
    let mut cluster = Cluster::start(spec).await;
    let nodes = cluster.nodes();
    // Record every deletion from the start.
    let deleted = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let recorder = tokio::spawn({
        let nodes = nodes.clone();
        let deleted = deleted.clone();
        async move {
            let mut stream = watcher(nodes, watcher::Config::default())
                .default_backoff()
                .boxed();
            while let Ok(Some(event)) = stream.try_next().await {
                if let watcher::Event::Delete(node) = event {
                    deleted.lock().unwrap().push(node.name_any());
                }
            }
        }
    });
    cluster.start_controller(
        "cloud-node-controller",
        "node-controller",
        &["--concurrent-node-syncs", "4"],
    );
    cluster.start_controller(
        "cloud-node-lifecycle-controller",
        "lifecycle",
        &["--node-monitor-period", "300ms"],
    );
    // Half the nodes are NotReady: the lifecycle controller checks them every pass while the
    // cloud fails half its calls. None may be deleted.
    for (i, name) in names.iter().enumerate() {
        cluster.register_node(name, i % 2 == 0).await;
    }
    for name in &names {
        wait_for(
            &format!("{name} initialized despite errors"),
            Duration::from_secs(90),
            || {
                let nodes = nodes.clone();
                async move { get(&nodes, name).await.filter(initialized) }
            },
        )
        .await;
    }
    // Let the lifecycle controller check the NotReady nodes at least ten more times while the
    // cloud keeps failing (counted on the gateway: one batch lookup per pass).
    let gateway = cluster.gateway_http;
    let baseline = batch_lookups(gateway).await;
    wait_for(
        "ten more lifecycle passes",
        Duration::from_secs(60),
        || async move { (batch_lookups(gateway).await >= baseline + 10.0).then_some(()) },
    )
    .await;
    let (_, metrics) = http_get(gateway, "/metrics").await.expect("gateway metrics");
    let injected = metrics
        .lines()
        .any(|l| l.starts_with("cloudgateway_provider_calls_total") && l.contains("outcome=\"unavailable\""));
    assert!(injected, "the cloud was supposed to fail calls:\n{metrics}");
    for name in &names {
        assert!(get(&nodes, name).await.is_some(), "{name} was deleted");
    }
    recorder.abort();
    assert!(
        deleted.lock().unwrap().is_empty(),
        "nodes deleted: {:?}",
        deleted.lock().unwrap()
    );
}

/// BatchLookupInstances calls the gateway has served to the node controllers, all outcomes.
async fn batch_lookups(gateway: std::net::SocketAddr) -> f64 {
    let Some((200, metrics)) = http_get(gateway, "/metrics").await else {
        return 0.0;
    };
    metrics
        .lines()
        .filter(|l| {
            l.starts_with("cloudgateway_grpc_calls_total{") && l.contains("method=\"BatchLookupInstances\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The periodic refresh brings addresses back in line with the cloud (here after someone
/// rewrote them), every `--node-status-update-frequency`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_periodic_refresh_restores_the_clouds_addresses() {
    let mut cluster = Cluster::start(ClusterSpec::with_instances(&["refreshed"])).await;
    cluster.start_controller(
        "cloud-node-controller",
        "node-controller",
        &["--node-status-update-frequency", "1s"],
    );
    cluster.register_node("refreshed", true).await;
    let nodes = cluster.nodes();
    let internal_ip = |node: &Node| {
        node.status
            .as_ref()
            .and_then(|s| s.addresses.as_ref())
            .and_then(|a| a.iter().find(|a| a.type_ == "InternalIP"))
            .map(|a| a.address.clone())
    };
    let initialized_node = wait_for("refreshed initialized", Duration::from_secs(60), || {
        let nodes = nodes.clone();
        async move { get(&nodes, "refreshed").await.filter(initialized) }
    })
    .await;
    let cloud_ip = internal_ip(&initialized_node).expect("the cloud's InternalIP");
    let wrong = serde_json::json!({ "status": { "addresses": [
        { "type": "InternalIP", "address": "192.168.99.99" },
        { "type": "Hostname", "address": "refreshed" },
    ]}});
    nodes
        .patch_status(
            "refreshed",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&wrong),
        )
        .await
        .unwrap();
    wait_for(
        "the refresh to restore the cloud's address",
        Duration::from_secs(30),
        || {
            let (nodes, cloud_ip) = (nodes.clone(), cloud_ip.clone());
            async move {
                let node = get(&nodes, "refreshed").await?;
                (internal_ip(&node).as_deref() == Some(cloud_ip.as_str())).then_some(())
            }
        },
    )
    .await;
}
