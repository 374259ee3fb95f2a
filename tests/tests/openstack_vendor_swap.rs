//! End-to-end: the gateway is swapped from the simulator to OpenStack at the same address while
//! every controller runs (`vendor_swap.rs` swaps to AWS and to a Python gateway). The OpenStack
//! gateway is `cloud-gateway --provider openstack --cloud-config cloud.conf` over the real test
//! cloud (`openstack-fixture`; shared, so everything is named uniquely), with `[Route] router-id
//! = router1`.
//!
//! Before: two simulator machines are Nodes, one with a pod CIDR routed at the simulator, and a
//! Service has a simulator load balancer. After the swap, with no controller restarted:
//! - servers booted in OpenStack join: `a` by name (kubelet without `--provider-id`), `b` with
//!   its providerID; both initialize as OCCM initializes them (providerID `openstack:///<id>`,
//!   instance type, zone and region labels, InternalIP of their port), and their pod CIDRs
//!   become routes on `router1` via their addresses;
//! - the simulator's nodes are "not mine" for OpenStack: a NotReady one is kept, and nothing is
//!   routed on `router1` for them;
//! - the Service at the simulator is reported as held by the former provider, its status kept
//!   (nothing is made, updated or deleted for it at OpenStack, not even when the node set
//!   changes);
//! - a Service created while OpenStack serves gets an Octavia load balancer named as OCCM names
//!   it, with the OpenStack servers as members (not the simulator's nodes) and a floating IP as
//!   its address; its backends follow the node set; deleted, its load balancer and floating IP
//!   go;
//! - `b`'s server deleted: its Node is deleted and its route leaves `router1`;
//! - every controller reports the provider it now talks to (`gateway_provider_info`), keeps its
//!   PID, and no Service sync fails visibly (`SyncLoadBalancerFailed`, `UpdateLoadBalancerFailed`).
//!
//! Then vSphere takes over at the same address, still with no controller restarted
//! (`cloud-gateway --provider vsphere --cloud-config vsphere.conf` on vcsim, `vsphere-fixture`):
//! - VMs join, `c` by name, `d` with its providerID, and initialize as CPI initializes them
//!   (providerID `vsphere://<BIOS UUID>`, CPI's instance type, Hostname and InternalIP from what
//!   VMware Tools report);
//! - the former vendors' nodes are "not mine" for vSphere: the simulator's NotReady ones are
//!   kept while `d`'s VM, destroyed, has its Node deleted in the same passes;
//! - vSphere serves no load balancers and no routes: nothing fails visibly for the Service the
//!   simulator holds, and the route controller stays idle.
//!
//! Then the simulator is swapped back in: the simulator's own Service is no longer reported as
//! held elsewhere.

mod openstack_support;

use std::time::{Duration, Instant};

use e2e::{
    Cluster, ClusterSpec, binary, ingress_ips,
    nodes::{
        TAINT_UNINITIALIZED, initialized, label, network_unavailable, provider_id, set_pod_cidr, wait_gone,
    },
    wait_for, wait_ingress_ip,
};
use k8s_openapi::api::{
    core::v1::{Namespace, Node, Service},
    events::v1::Event,
};
use openstack_fixture::{TestCloud, User};
use openstack_support::{
    Leftovers, boot, check_openstack_node, create_node_with_provider_id, gateway_args, nexthops, spread,
    wait_openstack_node, wait_routed, write_cloud_conf,
};
use serde_json::json;
use vsphere_fixture::Vm;

const ANNOTATION_PROVIDER: &str = "service.cloudgateway.io/load-balancer-provider";
const FINALIZER_LB_CLEANUP: &str = "service.kubernetes.io/load-balancer-cleanup";

/// The simulator's machines, at addresses outside the test cloud's networks (10.0.0.0/24,
/// 172.24.4.0/24): nothing of OpenStack's may ever be taken for them.
const INVENTORY: &str = "\
region: sim-east-1
zones: [sim-east-1a, sim-east-1b]
instance_subnet: 10.20.0.0/16
instances:
  - {name: sim-a, type: sim.medium, zone: sim-east-1a, private_ip: 10.20.1.10}
  - {name: sim-b, type: sim.medium, zone: sim-east-1b, private_ip: 10.20.2.10}
";

const CONTROLLERS: [&str; 4] = [
    "cloud-node-controller",
    "cloud-node-lifecycle-controller",
    "service-lb-controller",
    "node-route-controller",
];

/// The provider the Service records as holding its load balancer.
fn recorded_provider(service: &Service) -> Option<&str> {
    service
        .metadata
        .annotations
        .as_ref()?
        .get(ANNOTATION_PROVIDER)
        .map(String::as_str)
}

fn has_finalizer(service: &Service) -> bool {
    service
        .metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == FINALIZER_LB_CLEANUP)
}

/// Waits for an event about Service `name` with one of `reasons`.
async fn wait_event(cluster: &Cluster, reasons: &[&str], name: &str) -> Event {
    wait_for(
        &format!("a {reasons:?} event about {name}"),
        Duration::from_secs(30),
        || async move {
            cluster.events("default").await.into_iter().find(|e| {
                reasons.contains(&e.reason.as_deref().unwrap_or_default())
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
            })
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_is_swapped_from_the_simulator_to_openstack_under_running_controllers() {
    // The OpenStack side first: the servers of the nodes to come.
    let cloud = TestCloud::shared();
    // It makes a load balancer: Octavia's turn, as every test that does (`TestCloud::octavia_turn`).
    let _turn = cloud.octavia_turn().await;
    let client = cloud.client(User::Ccm).await;
    let (a, b) = tokio::join!(
        boot(cloud, &client, "swap-a", "m1.tiny"),
        boot(cloud, &client, "swap-b", "m1.small"),
    );
    let mut leftovers = Leftovers::servers([&a, &b]);
    let router = cloud.info.ids.router1.clone();
    // router1 is shared: the cluster name tags our routes, the pod CIDRs are this test's.
    let cluster_name = cloud.unique_name("swap");
    leftovers.cluster = Some(cluster_name.clone());
    let h = spread(&cluster_name);
    let (second, third) = (150 + h % 50, (h >> 8) % 80 * 3);
    let cluster_cidr = format!("10.{second}.0.0/16");
    let cidr = |i: u64| format!("10.{second}.{}.0/24", third + i);
    let (cidr_sim_a, cidr_a, cidr_b) = (cidr(0), cidr(1), cidr(2));

    // The cluster, on the simulator, with every controller running.
    let mut cluster = Cluster::start(ClusterSpec {
        inventory: INVENTORY.into(),
        gateway_args: Vec::new(),
        apiserver_args: Vec::new(),
    })
    .await;
    let nodes = cluster.nodes();
    let services = cluster.services("default");
    for node in ["sim-a", "sim-b"] {
        cluster.register_node(node, true).await;
    }
    set_pod_cidr(&nodes, "sim-a", &cidr_sim_a).await;
    let name_flag = ["--cluster-name", cluster_name.as_str()];
    cluster.start_controller("cloud-node-controller", "cloud-node-controller", &name_flag);
    cluster.start_controller(
        "cloud-node-lifecycle-controller",
        "cloud-node-lifecycle-controller",
        &[&name_flag[..], &["--node-monitor-period", "1s"]].concat(),
    );
    cluster.start_controller("service-lb-controller", "service-lb-controller", &name_flag);
    cluster.start_controller(
        "node-route-controller",
        "node-route-controller",
        &[
            &name_flag[..],
            &[
                "--cluster-cidr",
                &cluster_cidr,
                "--route-reconciliation-period",
                "2s",
            ],
        ]
        .concat(),
    );
    let pids = cluster.pids(&CONTROLLERS);
    for node in ["sim-a", "sim-b"] {
        wait_for(
            &format!("{node} initialized by the simulator"),
            Duration::from_secs(60),
            || {
                let nodes = nodes.clone();
                async move {
                    let node = nodes.get(node).await.ok().and_then(initialized)?;
                    provider_id(&node).starts_with("simulator://").then_some(())
                }
            },
        )
        .await;
    }
    wait_for("sim-a routed at the simulator", Duration::from_secs(60), || {
        let nodes = nodes.clone();
        async move {
            let node = nodes.get("sim-a").await.ok()?;
            (network_unavailable(&node)? == ("False".into(), "RouteCreated".into())).then_some(())
        }
    })
    .await;
    cluster.create_lb_service("default", "before", json!({})).await;
    let before = wait_ingress_ip(&services, "before", "before provisioned by the simulator").await;
    let before_ips = ingress_ips(&before);

    // The swap: the simulator's gateway goes (SIGTERM, as a rollout), OpenStack's comes at the
    // same address with the operator's cloud.conf.
    let handover = Instant::now();
    let conf = write_cloud_conf(cloud, cluster.dir.path(), None);
    cluster
        .swap_gateway(&binary("cloud-gateway"), &gateway_args(&conf), &[])
        .await;

    // OpenStack's servers join: a as kubelet --cloud-provider=external registers it (found by
    // name), b with --provider-id.
    cluster.register_node(&a.name, true).await;
    create_node_with_provider_id(&nodes, &b).await;
    cluster.set_ready(&b.name, true).await;
    for (server, cidr) in [(&a, &cidr_a), (&b, &cidr_b)] {
        set_pod_cidr(&nodes, &server.name, cidr).await;
    }
    for server in [&a, &b] {
        wait_openstack_node(&nodes, server).await;
    }

    // Their pod CIDRs become routes on router1 via their ports' addresses.
    for (server, cidr) in [(&a, &cidr_a), (&b, &cidr_b)] {
        wait_routed(
            &client,
            &router,
            cidr,
            &[server.ipv4.as_str()],
            &format!("a route to {cidr} via {} on router1", server.name),
        )
        .await;
    }
    // The simulator's node is not OpenStack's: nothing routes its pod CIDR on router1 (the route
    // controller has made its creates by now: the two above are there).
    assert_eq!(
        nexthops(&client, &router, &cidr_sim_a).await,
        Vec::<String>::new(),
        "sim-a is no OpenStack server: no route on router1 for it"
    );

    // The Service at the simulator is reported as held by the former provider; its status stays.
    wait_event(&cluster, &["LoadBalancerAtFormerProvider"], "before").await;
    assert_eq!(ingress_ips(&services.get("before").await.unwrap()), before_ips);

    // A Service created while OpenStack serves: an Octavia load balancer as OCCM builds it, the
    // OpenStack servers its members, a floating IP its address.
    cluster.create_lb_service("default", "served", json!({})).await;
    let served = wait_ingress_ip(&services, "served", "served provisioned by Octavia").await;
    assert_eq!(recorded_provider(&served), Some("openstack"));
    assert!(has_finalizer(&served));
    let lb_name = format!("kube_service_{cluster_name}_default_served");
    let lb = octavia_load_balancer(&client, &lb_name)
        .await
        .expect("the Octavia load balancer");
    assert_eq!(
        members(&client, &lb).await,
        sorted(vec![a.ipv4.clone(), b.ipv4.clone()])
    );
    // Tagged with the cluster's identity, the kube-system Namespace's UID, which the service
    // controller sends.
    let kube_system = kube::Api::<Namespace>::all(cluster.client.clone())
        .get("kube-system")
        .await
        .expect("kube-system");
    let identity = format!("kube_cluster_id_{}", kube_system.metadata.uid.expect("a UID"));
    assert!(
        lb["tags"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t == identity.as_str())),
        "{identity} on {lb}"
    );
    let served_ip = ingress_ips(&served).remove(0);
    let fip = floating_ip(&client, &served_ip)
        .await
        .expect("the Service's address is a floating IP");
    assert_eq!(
        fip["port_id"].as_str(),
        lb["vip_port_id"].as_str(),
        "on the VIP port"
    );
    let lb_metrics = cluster.metrics_of("service-lb-controller").await;
    assert!(
        lb_metrics.contains(
            "service_lb_controller_load_balancer_at_former_provider{namespace=\"default\",name=\"before\",provider=\"simulator\"} 1"
        ),
        "{lb_metrics}"
    );

    // Lifecycle: sim-b (a former vendor's node) goes NotReady, then b's server is deleted and its
    // Node goes NotReady. b's Node is deleted, its route with it; sim-b, judged in the same
    // passes, is kept: OpenStack answers "not mine", never "not found", for a simulator ID.
    cluster.set_ready("sim-b", false).await;
    cloud.delete_server(&client, &b.id).await;
    leftovers.deleted(&b);
    cluster.set_ready(&b.name, false).await;
    wait_gone(&nodes, &b.name, "b's Node deleted (its server is gone)").await;
    wait_routed(&client, &router, &cidr_b, &[], "b's route removed from router1").await;
    assert!(
        nodes.get_opt("sim-b").await.unwrap().is_some(),
        "a former vendor's NotReady node was deleted"
    );
    let node = nodes.get(&a.name).await.expect("a stays");
    check_openstack_node(&node, &a);
    assert_eq!(nexthops(&client, &router, &cidr_a).await, vec![a.ipv4.clone()]);
    // b left the node set: only a stays a member of served's load balancer.
    wait_for("b no longer a member", Duration::from_secs(60), || {
        let (client, lb) = (&client, &lb);
        let want = vec![a.ipv4.clone()];
        async move { (members(client, lb).await == want).then_some(()) }
    })
    .await;

    // Every controller has called the gateway since (the lifecycle controller only for NotReady
    // nodes), and follows the provider it serves now.
    for name in CONTROLLERS {
        let metrics = cluster.metrics_of(name).await;
        for (provider, value) in [("openstack", 1), ("simulator", 0)] {
            let series = format!("gateway_provider_info{{provider=\"{provider}\"}} {value}");
            assert!(metrics.contains(&series), "{name}: no {series}:\n{metrics}");
        }
    }

    // No controller restarted, none exited, and no sync failed visibly through the handover.
    cluster.assert_not_restarted(&CONTROLLERS, &pids);
    // (The node-set changes above sent the simulator's load balancer to OpenStack once:
    // `UpdateLoadBalancerFailed … not implemented`.)
    let failed = failures(&cluster).await;
    assert!(
        failed.is_empty(),
        "a sync failed visibly during the handover ({:?} ago): {failed:?}",
        handover.elapsed()
    );

    // served deleted while OpenStack serves: its load balancer and floating IP go, then the
    // finalizer.
    services
        .delete("served", &Default::default())
        .await
        .expect("delete served");
    wait_for("served gone", Duration::from_secs(120), || {
        let services = services.clone();
        async move { services.get_opt("served").await.unwrap().is_none().then_some(()) }
    })
    .await;
    assert!(
        octavia_load_balancer(&client, &lb_name).await.is_none(),
        "served's load balancer deleted"
    );
    assert!(
        floating_ip(&client, &served_ip).await.is_none(),
        "served's floating IP deleted"
    );

    // Leave router1 clean: a's Node goes, its route with it.
    nodes
        .delete(&a.name, &Default::default())
        .await
        .expect("delete a's Node");
    wait_routed(&client, &router, &cidr_a, &[], "a's route removed from router1").await;

    // vSphere at the address, with the simulator's nodes still there (sim-b NotReady).
    let vcsim = vsphere_fixture::Vcsim::shared();
    let (c, d) = (
        Vm::ubuntu("swap-c", &vcsim.unique_ipv4()),
        Vm::ubuntu("swap-d", &vcsim.unique_ipv4()),
    );
    vcsim.create_vm(&c);
    let moref_d = vcsim.create_vm(&d);
    let conf = cluster.dir.path().join("vsphere.conf");
    std::fs::write(&conf, vcsim.conf("")).expect("vsphere.conf");
    let conf = conf.display().to_string();
    let vsphere_args: Vec<String> = [
        "--insecure-plaintext",
        "--provider",
        "vsphere",
        "--cloud-config",
        &conf,
        "--instance-cache-ttl",
        "0s",
    ]
    .map(str::to_owned)
    .to_vec();
    cluster
        .swap_gateway(&binary("cloud-gateway"), &vsphere_args, &[])
        .await;
    cluster.register_node(&c.name, true).await;
    let node_d: Node = serde_json::from_value(json!({
        "metadata": { "name": d.name, "labels": { "kubernetes.io/hostname": d.name } },
        "spec": {
            "providerID": format!("vsphere://{}", d.uuid),
            "taints": [{ "key": TAINT_UNINITIALIZED, "value": "true", "effect": "NoSchedule" }],
        },
    }))
    .expect("a Node");
    nodes
        .create(&Default::default(), &node_d)
        .await
        .expect("d's Node");
    cluster.set_ready(&d.name, true).await;
    for vm in [&c, &d] {
        wait_vsphere_node(&nodes, vm).await;
    }
    // d's VM destroyed and sim-a NotReady: d's Node goes, the simulator's stay.
    cluster.set_ready("sim-a", false).await;
    vcsim.vm_action(&moref_d, "destroy");
    cluster.set_ready(&d.name, false).await;
    wait_gone(&nodes, &d.name, "d's Node deleted (its VM is gone)").await;
    for former in ["sim-a", "sim-b"] {
        assert!(
            nodes.get_opt(former).await.unwrap().is_some(),
            "a former vendor's NotReady node ({former}) was deleted by vSphere's gateway"
        );
    }
    for name in ["cloud-node-controller", "cloud-node-lifecycle-controller"] {
        let metrics = cluster.metrics_of(name).await;
        let series = "gateway_provider_info{provider=\"vsphere\"} 1";
        assert!(metrics.contains(series), "{name}: no {series}:\n{metrics}");
    }
    cluster.assert_not_restarted(&CONTROLLERS, &pids);
    let failed = failures(&cluster).await;
    assert!(
        failed.is_empty(),
        "a sync failed visibly while vSphere served: {failed:?}"
    );
    assert_eq!(ingress_ips(&services.get("before").await.unwrap()), before_ips);
    nodes
        .delete(&c.name, &Default::default())
        .await
        .expect("delete c's Node");

    // The simulator back at the address (same state): its own Service is no longer reported as
    // held elsewhere.
    cluster.stop_gateway().await;
    cluster.start_gateway().await;
    wait_for(
        "before no longer reported as held by a former provider",
        Duration::from_secs(30),
        || {
            let cluster = &cluster;
            async move {
                let metrics = cluster.metrics_of("service-lb-controller").await;
                (!metrics.contains("service_lb_controller_load_balancer_at_former_provider{namespace=\"default\",name=\"before\",provider=\"simulator\"} 1"))
                    .then_some(())
            }
        },
    )
    .await;
    assert_eq!(ingress_ips(&services.get("before").await.unwrap()), before_ips);
    let failed = failures(&cluster).await;
    assert!(
        failed.is_empty(),
        "a sync failed visibly after the swap back: {failed:?}"
    );
    cluster.stop().await;
    drop(leftovers);
}

/// The load balancer named `name` in Octavia (not being deleted), if any.
async fn octavia_load_balancer(
    client: &provider_openstack::client::Client,
    name: &str,
) -> Option<serde_json::Value> {
    use provider_openstack::client::Service as Api;
    let lbs: serde_json::Value = client
        .get(Api::LoadBalancer, "/lbaas/loadbalancers")
        .query(&[("name", name)])
        .send_json()
        .await
        .expect("list load balancers");
    lbs["loadbalancers"]
        .as_array()?
        .iter()
        .find(|lb| {
            !matches!(
                lb["provisioning_status"].as_str(),
                Some("DELETED" | "PENDING_DELETE")
            )
        })
        .cloned()
}

/// The member addresses of every pool of `lb`, sorted.
async fn members(client: &provider_openstack::client::Client, lb: &serde_json::Value) -> Vec<String> {
    use provider_openstack::client::Service as Api;
    let id = lb["id"].as_str().unwrap_or_default();
    let pools: serde_json::Value = client
        .get(Api::LoadBalancer, "/lbaas/pools")
        .query(&[("loadbalancer_id", id)])
        .send_json()
        .await
        .expect("pools");
    let mut addresses = Vec::new();
    for pool in pools["pools"].as_array().into_iter().flatten() {
        let path = format!("/lbaas/pools/{}/members", pool["id"].as_str().unwrap_or_default());
        let members: serde_json::Value = client
            .get(Api::LoadBalancer, &path)
            .send_json()
            .await
            .expect("members");
        addresses.extend(
            members["members"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|m| m["address"].as_str().map(str::to_owned)),
        );
    }
    sorted(addresses)
}

/// The floating IP with `address`, if the project has it.
async fn floating_ip(
    client: &provider_openstack::client::Client,
    address: &str,
) -> Option<serde_json::Value> {
    use provider_openstack::client::Service as Api;
    let fips: serde_json::Value = client
        .get(Api::Network, "/floatingips")
        .query(&[("floating_ip_address", address)])
        .send_json()
        .await
        .expect("floating IPs");
    fips["floatingips"].as_array()?.first().cloned()
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

/// The Service syncs that failed visibly: `SyncLoadBalancerFailed` (ensure, cleanup) and
/// `UpdateLoadBalancerFailed` (backends update), as `name: note`.
async fn failures(cluster: &Cluster) -> Vec<String> {
    cluster
        .events("default")
        .await
        .into_iter()
        .filter(|e| {
            matches!(
                e.reason.as_deref(),
                Some("SyncLoadBalancerFailed" | "UpdateLoadBalancerFailed")
            )
        })
        .map(|e| format!("{:?}: {:?}", e.regarding.and_then(|r| r.name), e.note))
        .collect()
}

/// Waits for `vm`'s Node to be initialized as CPI initializes it: providerID `vsphere://<BIOS
/// UUID>`, CPI's instance type, Hostname and InternalIP from what VMware Tools report.
async fn wait_vsphere_node(nodes: &kube::Api<Node>, vm: &Vm) {
    let node = wait_for(
        &format!("{} initialized from vSphere", vm.name),
        Duration::from_secs(90),
        || {
            let nodes = nodes.clone();
            let name = vm.name.clone();
            async move { nodes.get(&name).await.ok().and_then(initialized) }
        },
    )
    .await;
    assert_eq!(provider_id(&node), format!("vsphere://{}", vm.uuid));
    assert_eq!(
        label(&node, "node.kubernetes.io/instance-type"),
        Some("vsphere-vm.cpu-2.mem-4gb.os-ubuntu")
    );
    let addresses: Vec<(String, String)> = node
        .status
        .and_then(|s| s.addresses)
        .unwrap_or_default()
        .into_iter()
        .map(|a| (a.type_, a.address))
        .collect();
    for want in [
        ("Hostname".to_owned(), vm.guest.host_name.clone()),
        ("InternalIP".to_owned(), vm.guest.ip_address.clone()),
    ] {
        assert!(addresses.contains(&want), "{}: {addresses:?}", vm.name);
    }
}
