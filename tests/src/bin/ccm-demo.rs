//! `make demo`: the whole system on one machine, with no cloud account and no cluster.
//!
//! Starts fake-apiserver, cloud-gateway on the simulated cloud (seeded from
//! `examples/simulator-inventory.yaml`) and the controllers; registers the inventory's machines
//! as Nodes the way kubelet `--cloud-provider=external` does; and prints the Nodes before and
//! after the controllers did their work. Then two replicas of service-lb-controller provision
//! LoadBalancer Services (shown as `kubectl get svc` would, beside the simulator's load
//! balancers), and a deleted Service takes its load balancer with it. Then the Nodes get pod
//! CIDRs and node-route-controller routes each in the simulated cloud (shown beside the Nodes'
//! `NetworkUnavailable` condition). Then it keeps running
//! (Ctrl-C or SIGTERM stops everything it started) so you can look around with `kubectl` and
//! `cloud-sim`; `--exit` stops at once (CI smoke test).

use std::{collections::BTreeMap, path::PathBuf, time::Duration};

use e2e::{Cluster, ClusterSpec, ingress_ips, wait_for};
use k8s_openapi::api::core::v1::{Node, Service};
use kube::{
    ResourceExt,
    api::{DeleteParams, Patch, PatchParams},
};
use serde_json::{Value, json};

const UNINITIALIZED: &str = "node.cloudprovider.kubernetes.io/uninitialized";
const SHUTDOWN: &str = "node.cloudprovider.kubernetes.io/shutdown";

struct Options {
    inventory: PathBuf,
    exit: bool,
}

fn options() -> Result<Options, String> {
    let mut opts = Options {
        inventory: PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../examples/simulator-inventory.yaml"
        )),
        exit: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--exit" => opts.exit = true,
            "--inventory" => opts.inventory = args.next().ok_or("--inventory needs a path")?.into(),
            "-h" | "--help" => {
                println!("usage: ccm-demo [--inventory FILE] [--exit]");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?} (try --help)")),
        }
    }
    Ok(opts)
}

fn label<'a>(node: &'a Node, key: &str) -> &'a str {
    node.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .map_or("<none>", String::as_str)
}

fn status(node: &Node) -> &'static str {
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True");
    if ready { "Ready" } else { "NotReady" }
}

fn taints(node: &Node) -> String {
    let keys: Vec<&str> = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .map(|t| {
            t.iter()
                .map(|t| t.key.rsplit('/').next().unwrap_or(&t.key))
                .collect()
        })
        .unwrap_or_default();
    if keys.is_empty() {
        "<none>".into()
    } else {
        keys.join(",")
    }
}

fn address(node: &Node, kind: &str) -> String {
    node.status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .and_then(|a| a.iter().find(|a| a.type_ == kind))
        .map_or("<none>".into(), |a| a.address.clone())
}

/// Prints `rows` under `header` in columns, as kubectl does.
fn print_table<const N: usize>(header: [&str; N], rows: &[[String; N]]) {
    let mut widths = header.map(str::len);
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let line = |cells: Vec<&str>| {
        cells
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_owned()
    };
    println!("{}", line(header.to_vec()));
    for row in rows {
        println!("{}", line(row.iter().map(String::as_str).collect()));
    }
}

/// A `kubectl get nodes -o wide`-like table, with the cloud's labels.
fn print_nodes(title: &str, nodes: &[Node]) {
    println!("\n== {title} ==");
    let rows: Vec<[String; 8]> = nodes
        .iter()
        .map(|n| {
            [
                n.name_any(),
                status(n).into(),
                taints(n),
                n.spec
                    .as_ref()
                    .and_then(|s| s.provider_id.clone())
                    .unwrap_or_else(|| "<none>".into()),
                address(n, "InternalIP"),
                address(n, "ExternalIP"),
                label(n, "node.kubernetes.io/instance-type").into(),
                format!(
                    "{}/{}",
                    label(n, "topology.kubernetes.io/region"),
                    label(n, "topology.kubernetes.io/zone")
                ),
            ]
        })
        .collect();
    let header = [
        "NAME",
        "STATUS",
        "TAINTS",
        "PROVIDER-ID",
        "INTERNAL-IP",
        "EXTERNAL-IP",
        "INSTANCE-TYPE",
        "REGION/ZONE",
    ];
    print_table(header, &rows);
    let extra: BTreeMap<String, Vec<String>> = nodes
        .iter()
        .filter_map(|n| {
            let labels: Vec<String> = n
                .labels()
                .iter()
                .filter(|(k, _)| !k.contains("kubernetes.io/"))
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            (!labels.is_empty()).then(|| (n.name_any(), labels))
        })
        .collect();
    for (node, labels) in extra {
        println!("  {node}: extra labels from the cloud: {}", labels.join(", "));
    }
}

/// `kubectl get svc`: the Services with their EXTERNAL-IP.
fn print_services(title: &str, services: &[Service]) {
    println!("\n== {title} ==");
    let rows: Vec<[String; 5]> = services
        .iter()
        .map(|s| {
            let spec = s.spec.clone().unwrap_or_default();
            let ports: Vec<String> = spec
                .ports
                .unwrap_or_default()
                .iter()
                .map(|p| match p.node_port {
                    Some(node_port) => format!(
                        "{}:{node_port}/{}",
                        p.port,
                        p.protocol.as_deref().unwrap_or("TCP")
                    ),
                    None => format!("{}/{}", p.port, p.protocol.as_deref().unwrap_or("TCP")),
                })
                .collect();
            let external = match (spec.type_.as_deref(), ingress_ips(s)) {
                (Some("LoadBalancer"), ips) if ips.is_empty() => "<pending>".to_owned(),
                (_, ips) if ips.is_empty() => "<none>".to_owned(),
                (_, ips) => ips.join(","),
            };
            [
                s.name_any(),
                spec.type_.unwrap_or_default(),
                spec.cluster_ip.unwrap_or_else(|| "<none>".into()),
                external,
                ports.join(","),
            ]
        })
        .collect();
    print_table(["NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)"], &rows);
}

/// `cloud-sim load-balancers list`: the simulated cloud's load balancers.
fn print_load_balancers(title: &str, lbs: &[Value]) {
    println!("\n== {title} ==");
    let rows: Vec<[String; 4]> = lbs
        .iter()
        .map(|lb| {
            let backends: Vec<&str> = lb["backends"]
                .as_array()
                .map(|b| b.iter().filter_map(|b| b["node_name"].as_str()).collect())
                .unwrap_or_default();
            [
                lb["name"].as_str().unwrap_or_default().to_owned(),
                format!(
                    "{}/{}",
                    lb["service_namespace"].as_str().unwrap_or_default(),
                    lb["service_name"].as_str().unwrap_or_default()
                ),
                lb["ip"].as_str().unwrap_or_default().to_owned(),
                backends.join(","),
            ]
        })
        .collect();
    if rows.is_empty() {
        println!("(none)");
    } else {
        print_table(["LOAD-BALANCER", "SERVICE", "IP", "BACKENDS"], &rows);
    }
}

async fn service_list(cluster: &Cluster) -> Vec<Service> {
    let mut services = cluster
        .services("default")
        .list(&Default::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    services.sort_by_key(ResourceExt::name_any);
    services
}

async fn node_list(cluster: &Cluster) -> Vec<Node> {
    let mut nodes = cluster
        .nodes()
        .list(&Default::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    nodes.sort_by_key(ResourceExt::name_any);
    nodes
}

#[tokio::main]
async fn main() {
    let opts = match options() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("ccm-demo: {e}");
            std::process::exit(64);
        }
    };
    let inventory = match std::fs::read_to_string(&opts.inventory) {
        Ok(text) => text,
        Err(e) => {
            eprintln!("ccm-demo: cannot read {}: {e}", opts.inventory.display());
            std::process::exit(64);
        }
    };
    // Listening from the start: a SIGTERM while the demo starts up stops it too (the default
    // action would kill this process alone and leave its children running).
    let shutdown = telemetry::shutdown_signal();
    tokio::pin!(shutdown);
    let mut cluster = tokio::select! {
        biased;
        () = &mut shutdown => {
            // Dropping the unfinished demo kills and reaps what it started (`Procs` on drop).
            println!("stopping");
            return;
        }
        cluster = demo(&opts, inventory) => cluster,
    };
    if !opts.exit {
        println!(
            "\nEverything keeps running; try:\n  kubectl --kubeconfig {} get nodes,svc -o wide\n  {}/cloud-sim --admin-url http://{} instances list\n  {}/cloud-sim --admin-url http://{} instances add --name worker-9   # then register a Node named worker-9\n  {}/cloud-sim --admin-url http://{} routes list\n  curl http://{}/metrics\nLogs are in {}. Ctrl-C stops everything.",
            cluster.kubeconfig.display(),
            e2e::bin_dir().display(),
            cluster.gateway_http,
            e2e::bin_dir().display(),
            cluster.gateway_http,
            e2e::bin_dir().display(),
            cluster.gateway_http,
            cluster.gateway_http,
            cluster.dir.path().display(),
        );
        shutdown.await;
        println!("stopping");
    }
    cluster.stop().await;
}

/// Starts everything, registers the inventory's machines as Nodes and prints them before and
/// after the controllers.
async fn demo(opts: &Options, inventory: String) -> Cluster {
    println!(
        "Starting fake-apiserver and cloud-gateway on the simulated cloud ({})...",
        opts.inventory.display()
    );
    let mut cluster = Cluster::start(ClusterSpec {
        inventory,
        gateway_args: Vec::new(),
        apiserver_args: Vec::new(),
    })
    .await;
    let instances = cluster.sim(&["instances", "list"]).await;
    let instances = instances.get("instances").cloned().unwrap_or(instances);
    let machines: Vec<(String, String)> = instances
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|i| {
                    Some((
                        i["name"].as_str()?.to_owned(),
                        i["state"].as_str().unwrap_or("running").to_owned(),
                    ))
                })
                .collect()
        })
        .unwrap_or_default();

    // Kubelet registers each machine; a powered-off or deleted machine's kubelet stops
    // reporting, so its Node is NotReady.
    for (name, state) in &machines {
        cluster.register_node(name, state == "running").await;
    }
    print_nodes(
        "Nodes as kubelet registered them (before the controllers)",
        &node_list(&cluster).await,
    );

    println!("\nStarting cloud-node-controller and cloud-node-lifecycle-controller...");
    cluster.start_controller(
        "cloud-node-controller",
        "cloud-node-controller",
        &["--concurrent-node-syncs", "4"],
    );
    cluster.start_controller(
        "cloud-node-lifecycle-controller",
        "cloud-node-lifecycle-controller",
        &["--node-monitor-period", "1s"],
    );
    let nodes = cluster.nodes();
    let expected = machines.clone();
    wait_for("every node to be handled", Duration::from_secs(60), || {
        let nodes = nodes.clone();
        let expected = expected.clone();
        async move {
            for (name, state) in &expected {
                let node = nodes.get_opt(name).await.ok()?;
                let done = match (state.as_str(), node) {
                    ("terminated", None) => true,
                    ("terminated", Some(_)) => false,
                    (_, None) => false,
                    (state, Some(node)) => {
                        let t = taints(&node);
                        // Initialized: the taint is gone and the cloud's addresses are in
                        // (the node is patched first, its status right after).
                        let addressed = node
                            .status
                            .as_ref()
                            .and_then(|s| s.addresses.as_ref())
                            .is_some_and(|a| a.iter().any(|a| a.type_ == "InternalIP"));
                        !t.contains(UNINITIALIZED.rsplit('/').next()?)
                            && addressed
                            && (state != "stopped" || t.contains(SHUTDOWN.rsplit('/').next()?))
                    }
                };
                if !done {
                    return None;
                }
            }
            Some(())
        }
    })
    .await;
    print_nodes(
        "Nodes after the controllers (initialized from the cloud)",
        &node_list(&cluster).await,
    );
    for (name, state) in &machines {
        match state.as_str() {
            "terminated" => {
                println!("  {name}: instance terminated -> Node deleted by cloud-node-lifecycle-controller")
            }
            "stopped" => println!("  {name}: instance stopped -> Node kept, tainted shutdown:NoSchedule"),
            _ => {}
        }
    }

    load_balancers(&mut cluster).await;
    routes(&mut cluster).await;
    cluster
}

/// The pod network's range the demo's Nodes get their pod CIDRs from.
const CLUSTER_CIDR: &str = "10.244.0.0/16";

/// The node's `NetworkUnavailable` condition as `status/reason`.
fn network_unavailable(node: &Node) -> Option<String> {
    e2e::nodes::network_unavailable(node).map(|(status, reason)| format!("{status}/{reason}"))
}

/// Each Node gets a pod CIDR (as kube-controller-manager's node IPAM assigns them) and
/// node-route-controller routes it in the cloud.
async fn routes(cluster: &mut Cluster) {
    println!(
        "\nAssigning each Node a pod CIDR from {CLUSTER_CIDR} (as kube-controller-manager's node IPAM does)..."
    );
    let nodes = cluster.nodes();
    let mut assigned = BTreeMap::new();
    for (i, node) in node_list(cluster).await.iter().enumerate() {
        let cidr = format!("10.244.{}.0/24", i + 1);
        let patch = json!({"spec": {"podCIDR": cidr, "podCIDRs": [cidr]}});
        let _ = nodes
            .patch(&node.name_any(), &PatchParams::default(), &Patch::Merge(&patch))
            .await;
        assigned.insert(node.name_any(), cidr);
    }
    println!("Starting node-route-controller (--cluster-cidr {CLUSTER_CIDR})...");
    cluster.start_controller(
        "node-route-controller",
        "node-route-controller",
        &["--cluster-cidr", CLUSTER_CIDR],
    );
    let expected = assigned.clone();
    wait_for("every Node's route", Duration::from_secs(60), || {
        let nodes = nodes.clone();
        let expected = expected.clone();
        let cluster = &*cluster;
        async move {
            let routes = route_list(cluster).await;
            for (name, cidr) in &expected {
                let node = nodes.get(name).await.ok()?;
                let routed = routes
                    .iter()
                    .any(|r| r["target_node"] == name.as_str() && r["destination_cidr"] == cidr.as_str());
                if !routed || network_unavailable(&node).as_deref() != Some("False/RouteCreated") {
                    return None;
                }
            }
            Some(())
        }
    })
    .await;
    print_routes(
        "Pod CIDRs and their routes in the simulated cloud",
        &node_list(cluster).await,
        &route_list(cluster).await,
    );
}

/// The simulator's routes of the demo's cluster (`cloud-sim routes list`).
async fn route_list(cluster: &Cluster) -> Vec<Value> {
    let list = cluster.sim(&["routes", "list"]).await;
    list.as_array()
        .map(|routes| {
            routes
                .iter()
                .filter(|r| r["cluster"] == "kubernetes")
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

/// Each Node's pod CIDRs beside the cloud's route to them and the Node's condition.
fn print_routes(title: &str, nodes: &[Node], routes: &[Value]) {
    println!("\n== {title} ==");
    let mut rows: Vec<[String; 5]> = Vec::new();
    for node in nodes {
        let cidrs = node
            .spec
            .as_ref()
            .and_then(|s| s.pod_cidrs.clone())
            .unwrap_or_default();
        for cidr in cidrs {
            let route = routes.iter().find(|r| {
                r["target_node"] == node.name_any().as_str() && r["destination_cidr"] == cidr.as_str()
            });
            let text = |key: &str| route.and_then(|r| r[key].as_str()).unwrap_or("<none>").to_owned();
            let state = match route {
                Some(r) if r["blackhole"] == true => "blackhole".to_owned(),
                Some(_) => "active".to_owned(),
                None => "<none>".to_owned(),
            };
            rows.push([
                node.name_any(),
                cidr,
                text("name"),
                state,
                network_unavailable(node).unwrap_or_else(|| "<none>".into()),
            ]);
        }
    }
    print_table(
        ["NODE", "POD-CIDR", "ROUTE", "ROUTE-STATE", "NETWORK-UNAVAILABLE"],
        &rows,
    );
}

/// Two service-lb-controller replicas provision LoadBalancer Services; deleting one removes
/// its load balancer from the cloud.
async fn load_balancers(cluster: &mut Cluster) {
    println!("\nStarting two replicas of service-lb-controller (they split the Services by shard leases)...");
    for replica in ["service-lb-controller-0", "service-lb-controller-1"] {
        cluster.start_controller(
            "service-lb-controller",
            replica,
            &["--leader-elect-identity", replica],
        );
    }
    let web = json!({"spec": {"ports": [
        { "name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP" },
        { "name": "https", "port": 443, "targetPort": 8443, "protocol": "TCP" },
    ]}});
    cluster.create_lb_service("default", "web", web).await;
    let dns =
        json!({"spec": {"ports": [{ "name": "dns", "port": 53, "targetPort": 53, "protocol": "UDP" }]}});
    cluster.create_lb_service("default", "dns", dns).await;
    let services = cluster.services("default");
    for name in ["web", "dns"] {
        let services = services.clone();
        wait_for(
            &format!("{name} to get an EXTERNAL-IP"),
            Duration::from_secs(60),
            || {
                let services = services.clone();
                async move {
                    services
                        .get_opt(name)
                        .await
                        .ok()
                        .flatten()
                        .filter(|s| !ingress_ips(s).is_empty())
                }
            },
        )
        .await;
    }
    print_services(
        "LoadBalancer Services (kubectl get svc)",
        &service_list(cluster).await,
    );
    print_load_balancers(
        "Load balancers in the simulated cloud",
        &cluster.load_balancers().await,
    );

    println!(
        "\nDeleting Service dns: its load balancer goes first, then the finalizer lets the Service go..."
    );
    let _ = services.delete("dns", &DeleteParams::default()).await;
    wait_for("dns to be gone", Duration::from_secs(60), || {
        let services = services.clone();
        async move { services.get_opt("dns").await.ok()?.is_none().then_some(()) }
    })
    .await;
    print_services("Services after deleting dns", &service_list(cluster).await);
    print_load_balancers(
        "Load balancers in the simulated cloud",
        &cluster.load_balancers().await,
    );
}
