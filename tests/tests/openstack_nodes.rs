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

use std::{
    hash::{DefaultHasher, Hash, Hasher},
    time::Duration,
};

use e2e::{Cluster, ClusterSpec, binary, wait_for};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams, PostParams};
use openstack_fixture::{TestCloud, User};
use provider_openstack::client::{Client, Service};
use serde_json::{Value, json};

const UNINITIALIZED: &str = "node.cloudprovider.kubernetes.io/uninitialized";
const SHUTDOWN: &str = "node.cloudprovider.kubernetes.io/shutdown";

#[derive(Debug, Clone)]
struct Server {
    id: String,
    name: String,
    ipv4: String,
}

async fn boot(cloud: &TestCloud, client: &Client, prefix: &str) -> Server {
    let name = cloud.unique_name(prefix);
    let id = cloud.boot_server(client, &name, "m1.tiny", "private").await;
    let ports: Value = client
        .get(Service::Network, "/ports")
        .query(&[("device_id", id.as_str())])
        .send_json()
        .await
        .expect("the server's ports");
    let ipv4 = ports["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|p| p["fixed_ips"].as_array().cloned().unwrap_or_default())
        .filter_map(|ip| ip["ip_address"].as_str().map(str::to_owned))
        .find(|ip| !ip.contains(':'))
        .unwrap_or_else(|| panic!("server {name} has no IPv4 address: {ports}"));
    Server { id, name, ipv4 }
}

/// Deletes the servers still listed when dropped (the test's runtime may be gone: its own).
struct Cleanup(Vec<String>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let ids = std::mem::take(&mut self.0);
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async {
                let client = TestCloud::shared().client(User::Ccm).await;
                for id in ids {
                    let _ = client
                        .delete(Service::Compute, &format!("/servers/{id}"))
                        .send_empty()
                        .await;
                }
            });
        })
        .join();
    }
}

fn label<'a>(node: &'a Node, key: &str) -> Option<&'a str> {
    node.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

fn has_taint(node: &Node, key: &str) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == key))
}

fn provider_id(node: &Node) -> &str {
    node.spec
        .as_ref()
        .and_then(|s| s.provider_id.as_deref())
        .unwrap_or_default()
}

fn initialized(node: Node) -> Option<Node> {
    let has_addresses = node
        .status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .is_some_and(|a| a.iter().any(|a| a.type_ == "InternalIP"));
    (!has_taint(&node, UNINITIALIZED) && !provider_id(&node).is_empty() && has_addresses).then_some(node)
}

/// `router1`'s routes to `cidr`, as Neutron lists them: their nexthops.
async fn nexthops(client: &Client, router: &str, cidr: &str) -> Vec<String> {
    let body: Value = client
        .get(Service::Network, &format!("/routers/{router}"))
        .send_json()
        .await
        .expect("router GET");
    body["router"]["routes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["destination"].as_str() == Some(cidr))
        .filter_map(|r| r["nexthop"].as_str().map(str::to_owned))
        .collect()
}

async fn wait_gone(nodes: &Api<Node>, name: &str, why: &str) {
    wait_for(why, Duration::from_secs(90), || {
        let nodes = nodes.clone();
        async move { matches!(nodes.get_opt(name).await, Ok(None)).then_some(()) }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_join_as_nodes_get_routes_and_leave_with_their_servers() {
    let cloud = TestCloud::shared();
    let client = cloud.client(User::Ccm).await;
    let (a, b, c, d) = tokio::join!(
        boot(cloud, &client, "e2e-a"),
        boot(cloud, &client, "e2e-b"),
        boot(cloud, &client, "e2e-c"),
        boot(cloud, &client, "e2e-d"),
    );
    let mut cleanup = Cleanup(vec![a.id.clone(), b.id.clone(), c.id.clone(), d.id.clone()]);
    let router = cloud.info.ids.router1.clone();
    let cluster_name = cloud.unique_name("e2e-os");
    // Pod CIDRs of this test only (router1 is shared): 10.<150..199>.<x>.0/24 and the next one.
    let mut h = DefaultHasher::new();
    cluster_name.hash(&mut h);
    let h = h.finish();
    let (second, third) = (150 + h % 50, (h >> 8) % 127 * 2);
    let cluster_cidr = format!("10.{second}.0.0/16");
    let cidr_a = format!("10.{second}.{third}.0/24");
    let cidr_b = format!("10.{second}.{}.0/24", third + 1);

    let mut cluster = Cluster::start(ClusterSpec::with_instances(&[])).await;
    let conf = cluster.dir.path().join("cloud.conf");
    let text = std::fs::read_to_string(cloud.dir.join("cloud.conf")).expect("cloud.conf");
    std::fs::write(&conf, format!("{text}\n[Route]\nrouter-id = {router}\n")).expect("write cloud.conf");
    let args: Vec<String> = [
        "--insecure-plaintext",
        "--provider",
        "openstack",
        "--cloud-config",
        &conf.display().to_string(),
        "--instance-cache-ttl",
        "0s",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    cluster.swap_gateway(&binary("cloud-gateway"), &args, &[]).await;

    // a: kubelet --cloud-provider=external --provider-id=openstack:///<id>
    let nodes = cluster.nodes();
    let node_a: Node = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": { "name": a.name, "labels": { "kubernetes.io/hostname": a.name } },
        "spec": {
            "providerID": format!("openstack:///{}", a.id),
            "taints": [{ "key": UNINITIALIZED, "value": "true", "effect": "NoSchedule" }],
        },
    }))
    .unwrap();
    nodes
        .create(&PostParams::default(), &node_a)
        .await
        .expect("node a");
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
        let cidrs = json!({"spec": {"podCIDR": cidr, "podCIDRs": [cidr]}});
        nodes
            .patch(&server.name, &PatchParams::default(), &Patch::Merge(&cidrs))
            .await
            .expect("pod CIDRs");
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
        let node = wait_for(
            &format!("{} initialized from OpenStack", server.name),
            Duration::from_secs(90),
            || {
                let nodes = nodes.clone();
                let name = server.name.clone();
                async move { nodes.get(&name).await.ok().and_then(initialized) }
            },
        )
        .await;
        assert_eq!(provider_id(&node), format!("openstack:///{}", server.id));
        for (key, want) in [
            ("node.kubernetes.io/instance-type", "m1.tiny"),
            ("beta.kubernetes.io/instance-type", "m1.tiny"),
            ("topology.kubernetes.io/zone", "nova"),
            ("failure-domain.beta.kubernetes.io/zone", "nova"),
            ("topology.kubernetes.io/region", "RegionOne"),
            ("failure-domain.beta.kubernetes.io/region", "RegionOne"),
        ] {
            assert_eq!(label(&node, key), Some(want), "{}: label {key}", server.name);
        }
        let addresses = node.status.as_ref().unwrap().addresses.clone().unwrap();
        assert!(
            addresses
                .iter()
                .any(|x| x.type_ == "InternalIP" && x.address == server.ipv4),
            "{}: InternalIP {} from its port: {addresses:?}",
            server.name,
            server.ipv4
        );
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
    cleanup.0.retain(|id| *id != a.id && *id != d.id);
    cluster.set_ready(&a.name, false).await;
    wait_gone(&nodes, &a.name, "a's Node deleted (server deleted, providerID)").await;
    wait_gone(
        &nodes,
        &d.name,
        "d's Node deleted (server deleted, no providerID)",
    )
    .await;
    wait_for("a's route removed", Duration::from_secs(60), || {
        let client = client.clone();
        let (router, cidr) = (router.clone(), cidr_a.clone());
        async move { nexthops(&client, &router, &cidr).await.is_empty().then_some(()) }
    })
    .await;
    // b runs on, untouched.
    let node = nodes.get(&b.name).await.expect("b stays");
    assert!(!has_taint(&node, SHUTDOWN));
    assert_eq!(nexthops(&client, &router, &cidr_b).await, vec![b.ipv4.clone()]);

    // Leave router1 clean: b's Node goes, its route with it.
    nodes
        .delete(&b.name, &Default::default())
        .await
        .expect("delete b's Node");
    wait_for("b's route removed", Duration::from_secs(60), || {
        let client = client.clone();
        let (router, cidr) = (router.clone(), cidr_b.clone());
        async move { nexthops(&client, &router, &cidr).await.is_empty().then_some(()) }
    })
    .await;
    cluster.stop().await;
}
