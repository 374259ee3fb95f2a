//! vSphere nodes end to end, through the real binaries: fake-apiserver, `cloud-gateway
//! --provider vsphere --cloud-config vsphere.conf` on vcsim (`vsphere-fixture`),
//! cloud-node-controller and cloud-node-lifecycle-controller.
//!
//! Three VMs with unique names and UUIDs (vcsim is shared):
//! - `a` registers with its providerID (`vsphere://<BIOS UUID>`), `b` by name only (found by
//!   its tools hostname), `c` by name; all initialize as CPI initializes them: providerID,
//!   instance type `vsphere-vm.cpu-2.mem-4gb.os-ubuntu`, Hostname and InternalIP from
//!   `guest.net`, no uninitialized taint.
//! - `d` registers under its IP address (found by `guest.ipAddress`, as CPI's FindByIp).
//! - `c` powered off: its NotReady Node gets the shutdown taint.
//! - `a` destroyed: its NotReady Node is deleted. `b` stays.
//! - A login failure deletes nothing (CPI #642, #680): `b` destroyed while the gateway's
//!   password is refused, its NotReady Node stays through the lifecycle controller's failed
//!   lookups; with the password right again it is deleted.
//!
//! And with `[Labels]`: a Node's zone and region labels from the tags on its VM's cluster and
//! datacenter.

use std::time::Duration;

use e2e::{
    Cluster, ClusterSpec, binary,
    nodes::{TAINT_UNINITIALIZED, has_taint, initialized, label, provider_id, wait_gone},
    wait_for,
};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, PostParams};
use serde_json::json;
use vsphere_fixture::{Vcsim, Vm, unique};

const SHUTDOWN: &str = "node.cloudprovider.kubernetes.io/shutdown";

async fn wait_initialized(nodes: &Api<Node>, vm: &Vm) -> Node {
    wait_initialized_as(nodes, &vm.name, vm).await
}

/// [`wait_initialized`] for `vm` registered as the Node `node_name`.
async fn wait_initialized_as(nodes: &Api<Node>, node_name: &str, vm: &Vm) -> Node {
    let node = wait_for(
        &format!("{node_name} initialized from vSphere"),
        Duration::from_secs(90),
        || {
            let nodes = nodes.clone();
            let name = node_name.to_owned();
            async move { nodes.get(&name).await.ok().and_then(initialized) }
        },
    )
    .await;
    assert_eq!(
        provider_id(&node),
        format!("vsphere://{}", vm.uuid),
        "{}",
        vm.name
    );
    assert_eq!(
        label(&node, "node.kubernetes.io/instance-type"),
        Some("vsphere-vm.cpu-2.mem-4gb.os-ubuntu")
    );
    let addresses: Vec<(String, String)> = node
        .status
        .as_ref()
        .and_then(|s| s.addresses.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|a| (a.type_, a.address))
        .collect();
    assert!(
        addresses.contains(&("Hostname".into(), vm.guest.host_name.clone())),
        "{addresses:?}"
    );
    assert!(
        addresses.contains(&("InternalIP".into(), vm.guest.ip_address.clone())),
        "{addresses:?}"
    );
    node
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vms_join_as_nodes_are_tainted_when_off_and_leave_when_destroyed() {
    let vcsim = Vcsim::shared();
    let a = Vm::ubuntu("e2e-a", &vcsim.unique_ipv4());
    let b = Vm::ubuntu("e2e-b", &vcsim.unique_ipv4());
    let c = Vm::ubuntu("e2e-c", &vcsim.unique_ipv4());
    let moref_a = vcsim.create_vm(&a);
    let moref_b = vcsim.create_vm(&b);
    let moref_c = vcsim.create_vm(&c);
    let d = Vm::ubuntu("e2e-d", &vcsim.unique_ipv4());
    vcsim.create_vm(&d);

    let mut cluster = Cluster::start(ClusterSpec::with_instances(&[])).await;
    let conf = cluster.dir.path().join("vsphere.conf");
    std::fs::write(&conf, vcsim.conf("")).expect("vsphere.conf");
    let args = e2e::vsphere_gateway_args(&conf);
    cluster.swap_gateway(&binary("cloud-gateway"), &args, &[]).await;

    let nodes: Api<Node> = cluster.nodes();
    // a: kubelet --cloud-provider=external --provider-id=vsphere://<uuid>
    let node_a: Node = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": { "name": a.name, "labels": { "kubernetes.io/hostname": a.name } },
        "spec": {
            "providerID": format!("vsphere://{}", a.uuid),
            "taints": [{ "key": TAINT_UNINITIALIZED, "value": "true", "effect": "NoSchedule" }],
        },
    }))
    .unwrap();
    nodes
        .create(&PostParams::default(), &node_a)
        .await
        .expect("node a");
    cluster.set_ready(&a.name, true).await;
    // b, c: by name only (the node name is the tools hostname)
    cluster.register_node(&b.name, true).await;
    cluster.register_node(&c.name, true).await;
    // d: under its IP address
    cluster.register_node(&d.guest.ip_address, true).await;

    cluster.start_controller("cloud-node-controller", "cloud-node-controller", &[]);
    cluster.start_controller(
        "cloud-node-lifecycle-controller",
        "lifecycle",
        &["--node-monitor-period", "1s"],
    );
    for vm in [&a, &b, &c] {
        wait_initialized(&nodes, vm).await;
    }
    wait_initialized_as(&nodes, &d.guest.ip_address, &d).await;

    // c powered off: tainted shut down.
    vcsim.vm_action(&moref_c, "power-off");
    cluster.set_ready(&c.name, false).await;
    wait_for("c's Node tainted shut down", Duration::from_secs(60), || {
        let nodes = nodes.clone();
        let name = c.name.clone();
        async move { nodes.get(&name).await.ok().filter(|n| has_taint(n, SHUTDOWN)) }
    })
    .await;

    // a destroyed: its Node deleted; b untouched.
    vcsim.vm_action(&moref_a, "destroy");
    cluster.set_ready(&a.name, false).await;
    wait_gone(&nodes, &a.name, "a's Node deleted (VM destroyed)").await;
    let node = nodes.get(&b.name).await.expect("b stays");
    assert!(!has_taint(&node, SHUTDOWN));
    assert!(nodes.get(&c.name).await.is_ok(), "c (off) stays");

    // A password vCenter refuses: every lookup fails, and b's Node stays although its VM is
    // gone, through several of the lifecycle controller's passes.
    let refused = vcsim.conf("").replace(
        &format!("password = \"{}\"", vcsim.info.password),
        "password = \"not-the-password\"",
    );
    assert_ne!(refused, vcsim.conf(""), "the password was replaced");
    std::fs::write(&conf, refused).expect("vsphere.conf");
    cluster.swap_gateway(&binary("cloud-gateway"), &args, &[]).await;
    vcsim.vm_action(&moref_b, "destroy");
    cluster.set_ready(&b.name, false).await;
    let failed_lookups = || async {
        let metrics = cluster.metrics_of("lifecycle").await;
        metrics
            .lines()
            .find(|l| {
                l.starts_with(
                    "cloud_node_lifecycle_controller_reconcile_errors_total{error=\"cloud_lookup\"}",
                )
            })
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let before = failed_lookups().await;
    wait_for(
        "three failed lookups (login refused)",
        Duration::from_secs(60),
        || async { (failed_lookups().await >= before + 3.0).then_some(()) },
    )
    .await;
    assert!(
        nodes.get(&b.name).await.is_ok(),
        "b's Node stays while vCenter cannot be asked"
    );

    // The password right again: b's VM is found gone, and its Node deleted.
    std::fs::write(&conf, vcsim.conf("")).expect("vsphere.conf");
    cluster.swap_gateway(&binary("cloud-gateway"), &args, &[]).await;
    wait_gone(&nodes, &b.name, "b's Node deleted once vCenter answers").await;
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_takes_its_zone_and_region_from_the_tags_above_its_vm() {
    let vcsim = Vcsim::shared();
    let vm = Vm::ubuntu("e2e-zone", &vcsim.unique_ipv4());
    let moref = vcsim.create_vm(&vm);
    let placed = vcsim.placement(&moref);
    let (zones, regions) = (unique("k8s-zone"), unique("k8s-region"));
    let zone = vcsim.create_tag(&vcsim.create_category(&zones), "zone-a");
    let region = vcsim.create_tag(&vcsim.create_category(&regions), "region-1");
    vcsim.attach_tag(&zone, &placed["cluster"]);
    vcsim.attach_tag(&region, &placed["datacenter"]);

    let mut cluster = Cluster::start(ClusterSpec::with_instances(&[])).await;
    let conf = cluster.dir.path().join("vsphere.conf");
    let labels = format!("[Labels]\nzone = \"{zones}\"\nregion = \"{regions}\"\n");
    std::fs::write(&conf, vcsim.conf(&labels)).expect("vsphere.conf");
    let args: Vec<String> = [
        "--insecure-plaintext",
        "--provider",
        "vsphere",
        "--cloud-config",
        &conf.display().to_string(),
    ]
    .map(str::to_owned)
    .to_vec();
    cluster.swap_gateway(&binary("cloud-gateway"), &args, &[]).await;
    cluster.register_node(&vm.name, true).await;
    cluster.start_controller("cloud-node-controller", "cloud-node-controller", &[]);
    let node = wait_initialized(&cluster.nodes(), &vm).await;
    assert_eq!(label(&node, "topology.kubernetes.io/zone"), Some("zone-a"));
    assert_eq!(label(&node, "topology.kubernetes.io/region"), Some("region-1"));
    cluster.stop().await;
}
