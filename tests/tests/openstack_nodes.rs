//! OpenStack nodes end to end, through the real binaries: fake-apiserver, `cloud-gateway
//! --provider openstack --cloud-config cloud.conf` on the real test cloud (`openstack-fixture`),
//! cloud-node-controller, cloud-node-lifecycle-controller and node-route-controller.
//!
//! Four servers booted as the CCM's user on `private` (unique names: the cloud is shared):
//! - `a` registers with its providerID (kubelet `--provider-id`), `b` and `c` without (the node
//!   controller finds them by name); all three initialize as OCCM initializes them: providerID
//!   `openstack:///<id>`, instance type, zone and region labels (GA and beta), InternalIP from
//!   their ports, no uninitialized taint. Pod CIDRs of `a` and `b` become routes on `router1`.
//! - `d` registers NotReady by name only and without the uninitialized taint (so nothing sets its
//!   providerID): while its server runs the lifecycle controller keeps it.
//! - `c` stopped: its NotReady Node gets the shutdown taint.
//! - `a` (providerID) and `d` (none) deleted: both Nodes deleted, `a`'s route goes with its Node.

mod openstack_support;

use std::time::Duration;

use e2e::{
    Cluster, ClusterSpec, binary,
    nodes::{has_taint, provider_id, set_pod_cidr, wait_gone},
    wait_for,
};
use k8s_openapi::api::core::v1::Node;
use kube::api::PostParams;
use openstack_fixture::{TestCloud, User};
use openstack_support::{
    Leftovers, boot, create_node_with_provider_id, gateway_args, nexthops, spread, wait_openstack_node,
    wait_routed, write_cloud_conf,
};
use serde_json::json;

const SHUTDOWN: &str = "node.cloudprovider.kubernetes.io/shutdown";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_join_as_nodes_get_routes_and_leave_with_their_servers() {
    let cloud = TestCloud::shared();
    let client = cloud.client(User::Ccm).await;
    let (a, b, c, d) = tokio::join!(
        boot(cloud, &client, "e2e-a", "m1.tiny"),
        boot(cloud, &client, "e2e-b", "m1.tiny"),
        boot(cloud, &client, "e2e-c", "m1.tiny"),
        boot(cloud, &client, "e2e-d", "m1.tiny"),
    );
    let mut leftovers = Leftovers::servers([&a, &b, &c, &d]);
    let router = cloud.info.ids.router1.clone();
    let cluster_name = cloud.unique_name("e2e-os");
    // Pod CIDRs of this test only (router1 is shared): 10.<150..199>.<x>.0/24 and the next one.
    let h = spread(&cluster_name);
    let (second, third) = (150 + h % 50, (h >> 8) % 127 * 2);
    let cluster_cidr = format!("10.{second}.0.0/16");
    let cidr_a = format!("10.{second}.{third}.0/24");
    let cidr_b = format!("10.{second}.{}.0/24", third + 1);

    let mut cluster = Cluster::start(ClusterSpec::with_instances(&[])).await;
    let conf = write_cloud_conf(cloud, cluster.dir.path(), None);
    cluster
        .swap_gateway(&binary("cloud-gateway"), &gateway_args(&conf), &[])
        .await;

    // a: kubelet --cloud-provider=external --provider-id=openstack:///<id>
    let nodes = cluster.nodes();
    create_node_with_provider_id(&nodes, &a).await;
    cluster.set_ready(&a.name, true).await;
    // b, c: kubelet --cloud-provider=external, no providerID
    cluster.register_node(&b.name, true).await;
    cluster.register_node(&c.name, true).await;
    // d: a Node by name only, no uninitialized taint (nothing sets its providerID), NotReady
    let node_d: Node = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": { "name": d.name, "labels": { "kubernetes.io/hostname": d.name } },
    }))
    .unwrap();
    nodes
        .create(&PostParams::default(), &node_d)
        .await
        .expect("node d");
    cluster.set_ready(&d.name, false).await;
    for (server, cidr) in [(&a, &cidr_a), (&b, &cidr_b)] {
        set_pod_cidr(&nodes, &server.name, cidr).await;
    }

    cluster.start_controller("cloud-node-controller", "cloud-node-controller", &[]);
    cluster.start_controller(
        "cloud-node-lifecycle-controller",
        "lifecycle",
        &["--node-monitor-period", "1s"],
    );
    cluster.start_controller(
        "node-route-controller",
        "node-route-controller",
        &[
            "--cluster-name",
            &cluster_name,
            "--cluster-cidr",
            &cluster_cidr,
            "--route-reconciliation-period",
            "2s",
        ],
    );

    for server in [&a, &b, &c] {
        wait_openstack_node(&nodes, server).await;
    }

    // Pod CIDRs become routes on router1 to the nodes' InternalIPs.
    for (server, cidr) in [(&a, &cidr_a), (&b, &cidr_b)] {
        let hops = wait_for(
            &format!("a route to {cidr} via {}", server.name),
            Duration::from_secs(60),
            || {
                let client = client.clone();
                let (router, cidr) = (router.clone(), cidr.clone());
                async move {
                    let hops = nexthops(&client, &router, &cidr).await;
                    (!hops.is_empty()).then_some(hops)
                }
            },
        )
        .await;
        assert_eq!(hops, vec![server.ipv4.clone()], "route to {cidr}");
    }

    // d: NotReady, found by name while its server runs: kept, still without providerID.
    let node = nodes.get(&d.name).await.expect("d is kept while its server runs");
    assert_eq!(provider_id(&node), "", "nothing set d's providerID");
    assert!(!has_taint(&node, SHUTDOWN), "d's server runs");

    // c stopped: its NotReady Node gets the shutdown taint.
    cloud.stop_server(&client, &c.id).await;
    cluster.set_ready(&c.name, false).await;
    wait_for("c's Node tainted shut down", Duration::from_secs(60), || {
        let nodes = nodes.clone();
        let name = c.name.clone();
        async move { nodes.get(&name).await.ok().filter(|n| has_taint(n, SHUTDOWN)) }
    })
    .await;

    // a (with providerID) and d (without) deleted: both Nodes go, and a's route with a's Node.
    cloud.delete_server(&client, &a.id).await;
    cloud.delete_server(&client, &d.id).await;
    leftovers.deleted(&a);
    leftovers.deleted(&d);
    cluster.set_ready(&a.name, false).await;
    wait_gone(&nodes, &a.name, "a's Node deleted (server deleted, providerID)").await;
    wait_gone(
        &nodes,
        &d.name,
        "d's Node deleted (server deleted, no providerID)",
    )
    .await;
    wait_routed(&client, &router, &cidr_a, &[], "a's route removed").await;
    // b runs on, untouched.
    let node = nodes.get(&b.name).await.expect("b stays");
    assert!(!has_taint(&node, SHUTDOWN));
    assert_eq!(nexthops(&client, &router, &cidr_b).await, vec![b.ipv4.clone()]);

    // Leave router1 clean: b's Node goes, its route with it.
    nodes
        .delete(&b.name, &Default::default())
        .await
        .expect("delete b's Node");
    wait_routed(&client, &router, &cidr_b, &[], "b's route removed").await;
    cluster.stop().await;
}
