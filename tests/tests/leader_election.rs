//! End-to-end: two replicas of a controller with leader election never act at once, and a
//! standby takes over when the leader stops renewing.

use std::{net::SocketAddr, time::Duration};

use e2e::{Cluster, ClusterSpec, http_get, wait_for};
use k8s_openapi::api::{coordination::v1::Lease, core::v1::Node};
use kube::Api;
use tokio::time::Instant;

const LEASE: &[&str] = &[
    "--leader-elect-lease-duration",
    "3s",
    "--leader-elect-renew-deadline",
    "2s",
    "--leader-elect-retry-period",
    "250ms",
];

/// The replica's `leader_election_master_status`, or `None` when it does not answer.
async fn leading(addr: SocketAddr) -> Option<bool> {
    let (status, body) = http_get(addr, "/metrics").await?;
    if status != 200 {
        return None;
    }
    body.lines()
        .find(|l| l.starts_with("leader_election_master_status "))
        .map(|l| l.ends_with(" 1"))
}

fn initialized(node: &Node) -> bool {
    node.spec.as_ref().and_then(|s| s.provider_id.as_ref()).is_some()
        && !node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|t| {
                t.iter()
                    .any(|t| t.key == "node.cloudprovider.kubernetes.io/uninitialized")
            })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_never_act_at_once_and_a_standby_takes_over() {
    let mut cluster = Cluster::start(ClusterSpec::with_instances(&["n-0", "n-1", "n-2", "n-3"])).await;
    let mut args = LEASE.to_vec();
    args.extend(["--leader-elect-identity", "replica-a"]);
    let a = cluster.start_controller("cloud-node-controller", "replica-a", &args);
    let mut args = LEASE.to_vec();
    args.extend(["--leader-elect-identity", "replica-b"]);
    let b = cluster.start_controller("cloud-node-controller", "replica-b", &args);
    let (addr_a, addr_b) = (cluster.procs[a].http.unwrap(), cluster.procs[b].http.unwrap());

    // Exactly one leads; watch for 2 s that they never both claim it.
    let (leader, standby) = wait_for("one leader", Duration::from_secs(20), || async move {
        match (leading(addr_a).await, leading(addr_b).await) {
            (Some(true), Some(false)) => Some((a, b)),
            (Some(false), Some(true)) => Some((b, a)),
            _ => None,
        }
    })
    .await;
    let watch_until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < watch_until {
        let both = leading(addr_a).await == Some(true) && leading(addr_b).await == Some(true);
        assert!(!both, "both replicas claim the lease");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let leases: Api<Lease> = Api::namespaced(cluster.client.clone(), "kube-system");
    let holder = leases
        .get("cloud-node-controller")
        .await
        .unwrap()
        .spec
        .unwrap()
        .holder_identity
        .unwrap();
    assert_eq!(
        holder, cluster.procs[leader].name,
        "the lease names the replica that says it leads"
    );

    // Work goes to the leader only.
    let nodes = cluster.nodes();
    for name in ["n-0", "n-1"] {
        cluster.register_node(name, true).await;
    }
    for name in ["n-0", "n-1"] {
        wait_for(&format!("{name} initialized"), Duration::from_secs(30), || {
            let nodes = nodes.clone();
            async move { nodes.get_opt(name).await.ok().flatten().filter(initialized) }
        })
        .await;
    }
    assert!(
        !cluster.procs[standby].log().contains("initializing node"),
        "the standby acted"
    );

    // Freeze the leader: it can neither renew nor act. The standby takes over only once the
    // lease has gone unrenewed for its whole duration.
    cluster.procs[leader].signal("STOP").await;
    let frozen_at = Instant::now();
    cluster.register_node("n-2", true).await;
    let standby_addr = cluster.procs[standby].http.unwrap();
    wait_for(
        "the standby to take over",
        Duration::from_secs(30),
        || async move { (leading(standby_addr).await == Some(true)).then_some(()) },
    )
    .await;
    assert!(
        frozen_at.elapsed() >= Duration::from_secs(2),
        "took over after {:?}, before the lease could expire",
        frozen_at.elapsed()
    );
    wait_for(
        "n-2 initialized by the new leader",
        Duration::from_secs(30),
        || {
            let nodes = nodes.clone();
            async move { nodes.get_opt("n-2").await.ok().flatten().filter(initialized) }
        },
    )
    .await;

    // Thawed, the old leader finds the lease gone and stops without acting.
    cluster.procs[leader].signal("CONT").await;
    cluster.register_node("n-3", true).await;
    let status = wait_for("the old leader to exit", Duration::from_secs(30), || {
        let exited = cluster.procs[leader].exited();
        async move { exited }
    })
    .await;
    assert!(
        !status.success(),
        "losing the lease must exit with an error so the pod restarts"
    );
    let old_log = cluster.procs[leader].log();
    assert!(old_log.contains("lost the leader lease"), "{old_log}");
    for late in ["n-2", "n-3"] {
        let acted = old_log
            .lines()
            .any(|l| l.contains("successfully initialized") && l.contains(&format!("node={late}")));
        assert!(
            !acted,
            "the old leader acted on {late} after losing the lease:\n{old_log}"
        );
    }
    wait_for(
        "n-3 initialized by the new leader",
        Duration::from_secs(30),
        || {
            let nodes = nodes.clone();
            async move { nodes.get_opt("n-3").await.ok().flatten().filter(initialized) }
        },
    )
    .await;
}
