//! End-to-end: node-route-controller as a process against fake-apiserver and cloud-gateway on
//! the simulator.

use std::{collections::BTreeSet, time::Duration};

use e2e::{Cluster, ClusterSpec, counter, http_get, nodes::network_unavailable, wait_for};
use k8s_openapi::api::{core::v1::Node, events::v1::Event};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;

const CLUSTER_CIDR: &str = "10.244.0.0/16,fd00:10::/56";

/// Starts node-route-controller; a long resync period unless `extra` sets one, so that what
/// happens within a test's deadlines follows node changes, not the resync.
fn start(cluster: &mut Cluster, extra: &[&str]) -> usize {
    let mut args = vec!["--cluster-cidr", CLUSTER_CIDR];
    if !extra
        .iter()
        .any(|a| a.starts_with("--route-reconciliation-period"))
    {
        args.extend(["--route-reconciliation-period", "5m"]);
    }
    args.extend_from_slice(extra);
    cluster.start_controller("node-route-controller", "node-route-controller", &args)
}

/// Registers a Ready node and gives it `cidrs` as kube-controller-manager's node IPAM does.
async fn join(cluster: &Cluster, name: &str, cidrs: &[&str]) {
    cluster.register_node(name, true).await;
    let patch = json!({"spec": {"podCIDR": cidrs[0], "podCIDRs": cidrs}});
    cluster
        .nodes()
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("pod CIDRs");
}

/// The simulator's routes of the `kubernetes` cluster as `target destination`.
async fn routes(cluster: &Cluster) -> BTreeSet<String> {
    let list = cluster.sim(&["routes", "list"]).await;
    list.as_array()
        .map(|routes| {
            routes
                .iter()
                .filter(|r| r["cluster"] == "kubernetes")
                .map(|r| {
                    format!(
                        "{} {}",
                        r["target_node"].as_str().unwrap_or_default(),
                        r["destination_cidr"].as_str().unwrap_or_default()
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

async fn wait_routes(cluster: &Cluster, want: &[&str], what: &str) {
    let want: BTreeSet<String> = want.iter().map(|s| (*s).to_owned()).collect();
    wait_for(what, Duration::from_secs(60), || {
        let want = want.clone();
        async move { (routes(cluster).await == want).then_some(()) }
    })
    .await;
}

/// Waits until the node's condition is `status`/`reason`; returns the node.
async fn wait_condition(cluster: &Cluster, name: &str, status: &str, reason: &str) -> Node {
    let nodes = cluster.nodes();
    wait_for(
        &format!("{name}: NetworkUnavailable={status}/{reason}"),
        Duration::from_secs(60),
        || {
            let nodes = nodes.clone();
            async move {
                let node = nodes.get_opt(name).await.ok()??;
                (network_unavailable(&node) == Some((status.into(), reason.into()))).then_some(node)
            }
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_get_routes_that_follow_them_and_strays_inside_the_cluster_cidr_go() {
    let mut cluster = Cluster::start(ClusterSpec::with_instances(&["n1", "n2", "n3", "spare"])).await;
    join(&cluster, "n1", &["10.244.1.0/24"]).await;
    join(&cluster, "n2", &["10.244.2.0/24", "fd00:10:0:2::/64"]).await;
    // Out of band: a route inside the cluster CIDR to a machine with no Node, one outside.
    for destination in ["10.244.99.0/24", "192.168.50.0/24"] {
        cluster
            .sim(&["routes", "add", "--target", "spare", "--destination", destination])
            .await;
    }
    let controller = start(&mut cluster, &[]);

    wait_routes(
        &cluster,
        &[
            "n1 10.244.1.0/24",
            "n2 10.244.2.0/24",
            "n2 fd00:10:0:2::/64",
            "spare 192.168.50.0/24",
        ],
        "the nodes' routes, the stray inside the cluster CIDR gone, the one outside kept",
    )
    .await;
    let n1 = wait_condition(&cluster, "n1", "False", "RouteCreated").await;
    let kept: Vec<&str> = n1
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .map(|c| c.iter().map(|c| c.type_.as_str()).collect())
        .unwrap_or_default();
    assert!(
        kept.contains(&"Ready"),
        "kubelet's Ready condition is kept: {kept:?}"
    );
    wait_condition(&cluster, "n2", "False", "RouteCreated").await;

    // A node joining is routed at once, long before the 5-minute resync.
    join(&cluster, "n3", &["10.244.3.0/24"]).await;
    wait_condition(&cluster, "n3", "False", "RouteCreated").await;
    assert!(routes(&cluster).await.contains("n3 10.244.3.0/24"));

    // A node deleted loses its route.
    cluster
        .nodes()
        .delete("n1", &DeleteParams::default())
        .await
        .expect("delete n1");
    wait_routes(
        &cluster,
        &[
            "n2 10.244.2.0/24",
            "n2 fd00:10:0:2::/64",
            "n3 10.244.3.0/24",
            "spare 192.168.50.0/24",
        ],
        "n1's route gone with its node",
    )
    .await;

    let http = cluster.procs[controller].http.expect("health address");
    let (_, metrics) = http_get(http, "/metrics").await.expect("metrics");
    let syncs = counter(&metrics, "route_controller_route_sync_total", &[]);
    assert!(
        (1..=8).contains(&syncs),
        "a reconcile per burst of node changes, not per period: {syncs}\n{metrics}"
    );
    assert_eq!(
        counter(
            &metrics,
            "node_route_controller_route_operations_total",
            &[("operation", "create"), ("result", "success")]
        ),
        4
    );
}

async fn reasons(cluster: &Cluster, node: &str) -> Vec<String> {
    let events: kube::Api<Event> = kube::Api::namespaced(cluster.client.clone(), "default");
    let list = events.list(&ListParams::default()).await.expect("events");
    list.items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(node))
        .filter_map(|e| e.reason)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_route_calls_say_no_route_created_until_the_cloud_recovers() {
    let mut cluster = Cluster::start(ClusterSpec::with_instances(&["n1", "n2", "n3"])).await;
    join(&cluster, "n1", &["10.244.1.0/24"]).await;
    start(&mut cluster, &["--route-reconciliation-period", "10s"]);
    wait_condition(&cluster, "n1", "False", "RouteCreated").await;

    // Creates fail: a node joining gets no route, says so, and a Warning says why.
    cluster
        .sim(&[
            "knobs",
            "set",
            "--error-rate",
            "create_route=1",
            "--error-rate",
            "delete_route=1",
        ])
        .await;
    join(&cluster, "n2", &["10.244.2.0/24"]).await;
    wait_condition(&cluster, "n2", "True", "NoRouteCreated").await;
    wait_for(
        "a FailedToCreateRoute event on n2",
        Duration::from_secs(30),
        || {
            let cluster = &cluster;
            async move {
                reasons(cluster, "n2")
                    .await
                    .contains(&"FailedToCreateRoute".to_owned())
                    .then_some(())
            }
        },
    )
    .await;

    // Every route call fails, the list too: a new node is not routed, the routed one keeps
    // its condition.
    cluster
        .sim(&["knobs", "set", "--error-rate", "list_routes=1"])
        .await;
    join(&cluster, "n3", &["10.244.3.0/24"]).await;
    wait_condition(&cluster, "n3", "True", "NoRouteCreated").await;
    let n1 = cluster.nodes().get("n1").await.expect("n1");
    assert_eq!(
        network_unavailable(&n1),
        Some(("False".into(), "RouteCreated".into()))
    );
    assert_eq!(
        routes(&cluster).await,
        BTreeSet::from(["n1 10.244.1.0/24".to_owned()])
    );

    // The cloud recovers: the retries route both nodes without any node change.
    cluster.sim(&["knobs", "set", "--clear-error-rates"]).await;
    wait_condition(&cluster, "n2", "False", "RouteCreated").await;
    wait_condition(&cluster, "n3", "False", "RouteCreated").await;
    wait_routes(
        &cluster,
        &["n1 10.244.1.0/24", "n2 10.244.2.0/24", "n3 10.244.3.0/24"],
        "every node routed once the cloud answers again",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switched_off_or_on_a_provider_without_routes_it_stays_up_ready_and_idle() {
    let mut spec = ClusterSpec::with_instances(&["n1"]);
    spec.gateway_args = vec!["--simulator-disable".into(), "routes".into()];
    let mut cluster = Cluster::start(spec).await;
    join(&cluster, "n1", &["10.244.1.0/24"]).await;
    let without = start(&mut cluster, &[]);
    let off = cluster.start_controller(
        "node-route-controller",
        "node-route-controller-off",
        &["--configure-cloud-routes=false"],
    );
    for (index, says) in [
        (without, "provider does not implement routes"),
        (off, "--configure-cloud-routes=false"),
    ] {
        let http = cluster.procs[index].http.expect("health address");
        wait_for(
            &format!("{} ready, saying why it is idle", cluster.procs[index].name),
            Duration::from_secs(30),
            || {
                let log = cluster.procs[index].log();
                async move {
                    let ready = matches!(http_get(http, "/readyz").await, Some((200, _)));
                    (ready && log.contains(says)).then_some(())
                }
            },
        )
        .await;
        assert!(cluster.procs[index].exited().is_none());
    }
    let n1 = cluster.nodes().get("n1").await.expect("n1");
    assert_eq!(network_unavailable(&n1), None, "nothing written while idle");

    // Routes on but no --cluster-cidr: a configuration error naming the flag (exit 64).
    let bad = cluster.start_controller("node-route-controller", "node-route-controller-bad", &[]);
    let status = wait_for(
        "the misconfigured controller to exit",
        Duration::from_secs(30),
        || {
            let status = cluster.procs[bad].exited();
            async move { status }
        },
    )
    .await;
    assert_eq!(status.code(), Some(64));
    assert!(
        cluster.procs[bad].log().contains("--cluster-cidr is required"),
        "{}",
        cluster.procs[bad].log()
    );
}
