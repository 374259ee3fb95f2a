//! Scenario `watches`: the API server expires, closes and restarts the controllers' watches,
//! as a real one does, while changes keep coming; no controller may miss one, and each must
//! resume within 5 s of a restarted server being back.
//!
//! fake-apiserver runs in this process (so that the scenario can reach its storage) and the
//! gateway (simulator) and the four controllers run as processes against it:
//! cloud-node-controller, cloud-node-lifecycle-controller (`--node-monitor-period 1s`),
//! service-lb-controller and node-route-controller (resync 5 min: it works from its watch).
//!
//! Each round injects three faults, each followed (or, for the restart, accompanied) by a batch of
//! changes, one or more for every controller:
//! - **compaction**: a write, then `Db::compact` and `Db::close_watches`: every controller watches
//!   again from the version it saw, which is now compacted, gets `410 Gone` and lists again. The
//!   next list continuation is armed to expire too (`Db::expire_next_continue`):
//!   service-lb-controller lists Services 500 a page (kube-runtime's watcher defaults to client-go's
//!   page size; none of our watchers changes it), and 520 ClusterIP Services in namespace
//!   `filler` make its relist continue, so its second page gets `410 Expired` and it must start
//!   the list over. The other controllers list Nodes (a few dozen): one page, no continuation.
//! - **closing**: `Db::close_watches` alone: every controller resumes from its version.
//! - **restart**: `RunningServer::restart` with the server down 2–4 s; while nothing answers,
//!   the changes are written to the storage directly (as through another server of the control
//!   plane), and the restarted server's new watch cache answers `410 Gone` to a watch from before.
//!
//! A batch of changes: a new Node (uninitialized taint, pod CIDR) that cloud-node-controller must
//! initialize and node-route-controller must route; a Node made NotReady whose instance was
//! terminated, which cloud-node-lifecycle-controller must delete; a new LoadBalancer Service to
//! provision, another one's port changed (its load balancer must listen on the new one) and the
//! oldest one deleted (its load balancer must go, then its finalizer).
//!
//! **Measured**, by polling the storage and the simulator's admin API every ~100 ms (so each
//! figure is an upper bound, late by at most a poll): for each change, when its effect was first
//! seen ("acted"). A change not acted within 30 s of its fault (of the server being back, for a
//! restart) is missed: a violation, and counted in `missing` if still not acted at the end.
//! **Resume time** of a controller after a restart: from `restart` returning (the server
//! accepting connections again) to the first of that controller's outage changes seen acted.
//! It is what an operator sees (watch re-established, relisted, the change reconciled, for the
//! lifecycle controller its next 1 s monitor pass too), not the bare watch reconnection; above
//! 5 s it is a violation.
//!
//! At the end: no load balancer of a Service not alive (`leaked`), every live LoadBalancer
//! Service with its load balancer, and no Node deleted but the lifecycle's victims
//! (`wrong_nodes`). `converged_after`: from the last fault to the last change acted.
//!
//! What it found, fixed with it (each with a regression test next to the code): a kube-runtime
//! `Controller` backing off its trigger stream again, with client-go's 0.8–30 s, on top of our
//! watch's own backoff (cloud-node-controller and service-lb-controller resumed after 11–17 s);
//! a relist's objects passed to the `Controller` before its store held them, so that Services
//! created, re-ported or deleted during an outage were missed until the next relist
//! (`controller_kit::relist`); the watch backoff not starting over at the `410 Gone` that
//! follows a restart, with a 2 s cap (resumes up to 6.8 s: `controller_kit::watch_backoff`);
//! and fake-apiserver's armed continuation expiry, which did not expire when nothing was written
//! between the two pages (`Db::advance_and_compact`).

use std::{
    collections::{BTreeMap, BTreeSet, VecDeque},
    net::SocketAddr,
    sync::{Arc, atomic::Ordering},
    time::Duration,
};

use fake_apiserver::{
    FakeApiServer, Registry, RunningServer,
    registry::{DeleteOpts, PatchType},
    resources::{Store, primary},
};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::{Dice, Outcome, Scale};
use crate::{Cluster, ClusterSpec, Procs, binary, free_port, http_get, spawn, wait_for};

/// Where the scenario's LoadBalancer Services live.
const NAMESPACE: &str = "default";
/// ClusterIP Services enough to make a relist take two pages of 500.
const FILLER: usize = 520;
const CLUSTER_CIDR: &str = "10.244.0.0/16";
const TAINT_UNINITIALIZED: &str = "node.cloudprovider.kubernetes.io/uninitialized";
/// The bound on a controller's resume after a restart (the issue's).
const RESUME_BOUND: Duration = Duration::from_secs(5);
/// How long a change may take before it counts as missed.
const ACT_DEADLINE: Duration = Duration::from_secs(30);
/// Nodes that stay for the whole scenario, and the first lifecycle victim.
const BASE_NODES: [&str; 3] = ["base-0", "base-1", "spare-0"];
/// New Nodes per round (one per fault).
const NODES_PER_ROUND: usize = 3;

/// The controller a change is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Controller {
    Node,
    Lifecycle,
    ServiceLb,
    Route,
}

impl Controller {
    fn name(self) -> &'static str {
        match self {
            Self::Node => "cloud-node-controller",
            Self::Lifecycle => "cloud-node-lifecycle-controller",
            Self::ServiceLb => "service-lb-controller",
            Self::Route => "node-route-controller",
        }
    }
}

/// The effect a change must have.
#[derive(Debug, Clone)]
enum Want {
    /// A new Node initialized: a simulator providerID, the uninitialized taint gone.
    Initialized { node: String },
    /// A new Node's pod CIDR routed to it.
    Routed { node: String, cidr: String },
    /// A NotReady Node whose instance is terminated, deleted.
    NodeDeleted { node: String },
    /// A new LoadBalancer Service's load balancer in the cloud and its address in the status.
    Provisioned { service: String, uid: String },
    /// A Service's load balancer listening on its new port.
    Listening { service: String, uid: String, port: u16 },
    /// A deleted Service gone (finalizer removed) and its load balancer with it.
    Released { service: String, uid: String },
}

impl Want {
    fn controller(&self) -> Controller {
        match self {
            Self::Initialized { .. } => Controller::Node,
            Self::Routed { .. } => Controller::Route,
            Self::NodeDeleted { .. } => Controller::Lifecycle,
            Self::Provisioned { .. } | Self::Listening { .. } | Self::Released { .. } => {
                Controller::ServiceLb
            }
        }
    }

    fn describe(&self) -> String {
        match self {
            Self::Initialized { node } => format!("Node {node} initialized"),
            Self::Routed { node, cidr } => format!("route {cidr} to {node}"),
            Self::NodeDeleted { node } => format!("Node {node} (instance terminated, NotReady) deleted"),
            Self::Provisioned { service, .. } => format!("Service {service} provisioned"),
            Self::Listening { service, port, .. } => {
                format!("Service {service}'s load balancer on port {port}")
            }
            Self::Released { service, .. } => format!("Service {service} and its load balancer deleted"),
        }
    }
}

/// One change and when its effect was seen.
#[derive(Debug, Clone)]
struct Change {
    want: Want,
    /// The fault it came with (`round 2 restart`).
    fault: String,
    acted: Option<Instant>,
}

/// What the cloud holds, from the simulator's admin API.
struct Cloud {
    /// Load balancers of the `kubernetes` cluster.
    lbs: Vec<Value>,
    routes: Vec<Value>,
}

impl Cloud {
    fn lb_of(&self, uid: &str) -> Option<&Value> {
        self.lbs.iter().find(|lb| lb["service_uid"] == uid)
    }
}

/// The cloud's load balancers and routes; `None` when the gateway does not answer.
async fn cloud(gateway: SocketAddr) -> Option<Cloud> {
    let get = |path: &'static str| async move {
        let (status, body) = http_get(gateway, path).await?;
        (status == 200).then_some(())?;
        serde_json::from_str::<Value>(&body).ok()?.as_array().cloned()
    };
    let ours = |items: Vec<Value>| -> Vec<Value> {
        items
            .into_iter()
            .filter(|i| i["cluster"] == "kubernetes")
            .collect()
    };
    Some(Cloud {
        lbs: ours(get("/simulator/v1/load-balancers").await?),
        routes: ours(get("/simulator/v1/routes").await?),
    })
}

fn node(reg: &Registry, name: &str) -> Option<Value> {
    reg.get(primary(Store::Nodes), None, name).ok()
}

fn service(reg: &Registry, name: &str) -> Option<Value> {
    reg.get(primary(Store::Services), Some(NAMESPACE), name).ok()
}

/// Whether the change's effect is there.
fn acted(reg: &Registry, cloud: &Cloud, want: &Want) -> bool {
    match want {
        Want::Initialized { node: name } => node(reg, name).is_some_and(|n| {
            let initialized = n["spec"]["providerID"]
                .as_str()
                .is_some_and(|id| id.starts_with("simulator://"));
            let tainted = n["spec"]["taints"]
                .as_array()
                .is_some_and(|t| t.iter().any(|t| t["key"] == TAINT_UNINITIALIZED));
            initialized && !tainted
        }),
        Want::Routed { node, cidr } => cloud
            .routes
            .iter()
            .any(|r| r["target_node"] == node.as_str() && r["destination_cidr"] == cidr.as_str()),
        Want::NodeDeleted { node: name } => node(reg, name).is_none(),
        Want::Provisioned { service: name, uid } => {
            let ip = service(reg, name).and_then(|s| {
                s["status"]["loadBalancer"]["ingress"][0]["ip"]
                    .as_str()
                    .map(str::to_owned)
            });
            ip.is_some_and(|ip| cloud.lb_of(uid).is_some_and(|lb| lb["ip"] == ip.as_str()))
        }
        Want::Listening { uid, port, .. } => cloud.lb_of(uid).is_some_and(|lb| {
            let ports: Vec<u64> = lb["listeners"]
                .as_array()
                .map(|l| l.iter().filter_map(|l| l["port"].as_u64()).collect())
                .unwrap_or_default();
            ports == [u64::from(*port)]
        }),
        Want::Released { service: name, uid } => service(reg, name).is_none() && cloud.lb_of(uid).is_none(),
    }
}

/// A live LoadBalancer Service of the scenario.
#[derive(Debug, Clone)]
struct Lb {
    name: String,
    uid: String,
    port: u16,
}

/// What the scenario made so far.
#[derive(Default)]
struct World {
    /// The next new Node's number (`w-<n>`, an instance of the inventory).
    next_node: usize,
    /// Initialized Nodes the lifecycle may take (never the base ones).
    victims: VecDeque<String>,
    /// New Nodes not known initialized yet.
    joining: Vec<String>,
    /// Nodes deleted on purpose.
    deleted: BTreeSet<String>,
    /// Every Node made.
    nodes: Vec<String>,
    next_service: usize,
    /// Live LoadBalancer Services, oldest first.
    services: VecDeque<Lb>,
    next_port: u16,
}

/// Registers a Node as kubelet `--cloud-provider=external` does, with a pod CIDR as
/// kube-controller-manager's IPAM gives it: written to the storage directly.
fn add_node(reg: &Registry, name: &str, cidr: &str) -> Result<(), String> {
    let body = json!({
        "metadata": { "name": name, "labels": { "kubernetes.io/hostname": name } },
        "spec": {
            "podCIDR": cidr,
            "podCIDRs": [cidr],
            "taints": [{ "key": TAINT_UNINITIALIZED, "value": "true", "effect": "NoSchedule" }],
        },
    });
    reg.create(primary(Store::Nodes), None, body, false)
        .map_err(|e| format!("create Node {name}: {e}"))?;
    let status = json!({ "status": {
        "conditions": [ready_condition(true)],
        "addresses": [{ "type": "Hostname", "address": name }],
    }});
    patch_status(reg, name, &status)
}

fn ready_condition(ready: bool) -> Value {
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    json!({
        "type": "Ready",
        "status": if ready { "True" } else { "False" },
        "reason": if ready { "KubeletReady" } else { "KubeletNotReady" },
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    })
}

fn patch_status(reg: &Registry, name: &str, status: &Value) -> Result<(), String> {
    let bytes = serde_json::to_vec(status).map_err(|e| e.to_string())?;
    reg.patch(
        primary(Store::Nodes),
        None,
        name,
        PatchType::Merge,
        &bytes,
        true,
        false,
    )
    .map(|_| ())
    .map_err(|e| format!("patch Node {name} status: {e}"))
}

fn lb_service(name: &str, port: u16) -> Value {
    json!({
        "metadata": { "name": name },
        "spec": {
            "type": "LoadBalancer",
            "selector": { "app": name },
            "ports": [{ "name": "http", "port": port, "targetPort": 8080, "protocol": "TCP" }],
        },
    })
}

impl World {
    fn port(&mut self) -> u16 {
        self.next_port = if (80..99).contains(&self.next_port) {
            self.next_port + 1
        } else {
            80
        };
        self.next_port
    }

    fn new_node(&mut self, reg: &Registry, name: &str, cidr: &str) -> Result<Vec<Want>, String> {
        add_node(reg, name, cidr)?;
        self.nodes.push(name.to_owned());
        self.joining.push(name.to_owned());
        Ok(vec![
            Want::Initialized {
                node: name.to_owned(),
            },
            Want::Routed {
                node: name.to_owned(),
                cidr: cidr.to_owned(),
            },
        ])
    }

    fn new_service(&mut self, reg: &Registry) -> Result<Want, String> {
        let name = format!("lb-{}", self.next_service);
        self.next_service += 1;
        let port = self.port();
        let created = reg
            .create(
                primary(Store::Services),
                Some(NAMESPACE),
                lb_service(&name, port),
                false,
            )
            .map_err(|e| format!("create Service {name}: {e}"))?;
        let uid = created["metadata"]["uid"].as_str().unwrap_or_default().to_owned();
        self.services.push_back(Lb {
            name: name.clone(),
            uid: uid.clone(),
            port,
        });
        Ok(Want::Provisioned { service: name, uid })
    }

    /// One batch of changes, written to the storage (and the lifecycle victim's instance
    /// terminated in the cloud).
    async fn changes(&mut self, reg: &Registry, gateway: SocketAddr) -> Result<Vec<Want>, String> {
        let mut wants = Vec::new();
        // A new Node to initialize and route.
        let n = self.next_node;
        self.next_node += 1;
        wants.extend(self.new_node(
            reg,
            &format!("w-{n}"),
            &format!("10.244.{}.0/24", n + BASE_NODES.len()),
        )?);
        // A Node whose machine is gone, NotReady: the lifecycle deletes it.
        if let Some(victim) = self.victims.pop_front() {
            let id = node(reg, &victim)
                .and_then(|n| n["spec"]["providerID"].as_str().map(str::to_owned))
                .and_then(|id| id.rsplit('/').next().map(str::to_owned))
                .ok_or_else(|| format!("Node {victim} has no providerID"))?;
            match crate::http_request(
                gateway,
                "POST",
                &format!("/simulator/v1/instances/{id}/terminate"),
            )
            .await
            .map(|(status, _)| status)
            {
                Some(200) => {}
                other => return Err(format!("terminate {id} of {victim}: {other:?}")),
            }
            patch_status(
                reg,
                &victim,
                &json!({ "status": { "conditions": [ready_condition(false)] } }),
            )?;
            self.deleted.insert(victim.clone());
            wants.push(Want::NodeDeleted { node: victim });
        }
        // A new LoadBalancer Service.
        wants.push(self.new_service(reg)?);
        // The oldest one deleted.
        if self.services.len() >= 3
            && let Some(gone) = self.services.pop_front()
        {
            reg.delete(
                primary(Store::Services),
                Some(NAMESPACE),
                &gone.name,
                &DeleteOpts::default(),
            )
            .map_err(|e| format!("delete Service {}: {e}", gone.name))?;
            wants.push(Want::Released {
                service: gone.name,
                uid: gone.uid,
            });
        }
        // The next one re-ported.
        let port = self.port();
        if let Some(lb) = self.services.front_mut() {
            lb.port = port;
            let patch = json!({"spec": {"ports": [{ "name": "http", "port": port, "targetPort": 8080, "protocol": "TCP" }]}});
            let bytes = serde_json::to_vec(&patch).map_err(|e| e.to_string())?;
            reg.patch(
                primary(Store::Services),
                Some(NAMESPACE),
                &lb.name,
                PatchType::Merge,
                &bytes,
                false,
                false,
            )
            .map_err(|e| format!("patch Service {}: {e}", lb.name))?;
            wants.push(Want::Listening {
                service: lb.name.clone(),
                uid: lb.uid.clone(),
                port,
            });
        }
        Ok(wants)
    }

    /// New Nodes seen initialized become possible victims.
    fn settle(&mut self, changes: &[Change]) {
        let initialized: BTreeSet<&str> = changes
            .iter()
            .filter(|c| c.acted.is_some())
            .filter_map(|c| match &c.want {
                Want::Initialized { node } => Some(node.as_str()),
                _ => None,
            })
            .collect();
        let (ready, still): (Vec<String>, Vec<String>) = self
            .joining
            .drain(..)
            .partition(|n| initialized.contains(n.as_str()));
        self.victims.extend(ready);
        self.joining = still;
    }
}

/// Polls until every change from `first` on is acted or `deadline` passes; records when each
/// was first seen acted.
async fn watch_changes(
    changes: &mut [Change],
    first: usize,
    reg: &Registry,
    gateway: SocketAddr,
    deadline: Instant,
) {
    loop {
        if let Some(cloud) = cloud(gateway).await {
            let seen = Instant::now();
            for change in changes[first..].iter_mut().filter(|c| c.acted.is_none()) {
                if acted(reg, &cloud, &change.want) {
                    change.acted = Some(seen);
                }
            }
        }
        if changes[first..].iter().all(|c| c.acted.is_some()) || Instant::now() >= deadline {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Starts the gateway on the simulator against the in-process API server, as
/// [`Cluster::start`] does against a fake-apiserver process.
async fn start_cluster(server: &RunningServer, spec: &ClusterSpec) -> Cluster {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    let inventory = dir.path().join("inventory.yaml");
    std::fs::write(&inventory, &spec.inventory).expect("inventory");
    let gateway_grpc: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let gateway_http: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let mut gateway_args: Vec<String> = vec![
        "--grpc-listen".into(),
        gateway_grpc.to_string(),
        "--http-listen".into(),
        gateway_http.to_string(),
        "--simulator-inventory".into(),
        inventory.display().to_string(),
        "--simulator-state".into(),
        dir.path().join("cloud-state.json").display().to_string(),
        "--simulator-no-fsync".into(),
        "--insecure-plaintext".into(),
        "--instance-cache-ttl".into(),
        "0s".into(),
    ];
    gateway_args.extend(spec.gateway_args.iter().cloned());
    let gateway = spawn(
        dir.path(),
        "cloud-gateway",
        &binary("cloud-gateway"),
        &gateway_args,
    );
    let cluster = Cluster {
        procs: Procs(vec![gateway]),
        kubeconfig,
        client: server.client().expect("client"),
        gateway_grpc,
        gateway_http,
        gateway_args,
        dir,
    };
    wait_for(
        "the gateway to be ready",
        Duration::from_secs(30),
        || async move { matches!(http_get(gateway_http, "/readyz").await, Some((200, _))).then_some(()) },
    )
    .await;
    cluster
}

/// Whether nothing accepts connections at `addr`.
async fn refused(addr: SocketAddr) -> bool {
    matches!(
        tokio::time::timeout(Duration::from_secs(1), tokio::net::TcpStream::connect(addr)).await,
        Ok(Err(_))
    )
}

/// The faults of a round, in order.
#[derive(Debug, Clone, Copy)]
enum Fault {
    Compaction,
    Closing,
    Restart,
}

/// Runs the scenario.
pub async fn run(scale: Scale, mut dice: Dice) -> Outcome {
    let mut outcome = Outcome::new("watches");
    let rounds = scale.pick(2, 10);
    let mut server = FakeApiServer::start(fake_apiserver::Config::default())
        .await
        .expect("fake-apiserver");
    let reg: Arc<Registry> = server.registry().clone();
    let addr = server.addr();

    // Enough Services that a relist of them takes two pages.
    reg.create(
        primary(Store::Namespaces),
        None,
        json!({"metadata": {"name": "filler"}}),
        false,
    )
    .expect("namespace filler");
    for i in 0..FILLER {
        let body = json!({"metadata": {"name": format!("f-{i:04}")}, "spec": {"ports": [{"port": 80, "protocol": "TCP"}]}});
        reg.create(primary(Store::Services), Some("filler"), body, false)
            .expect("filler Service");
    }

    let instances: Vec<String> = BASE_NODES
        .iter()
        .map(|n| (*n).to_owned())
        .chain((0..rounds * NODES_PER_ROUND).map(|n| format!("w-{n}")))
        .collect();
    let names: Vec<&str> = instances.iter().map(String::as_str).collect();
    let mut cluster = start_cluster(&server, &ClusterSpec::with_instances(&names)).await;
    let gateway = cluster.gateway_http;
    cluster.start_controller("cloud-node-controller", "cloud-node-controller", &[]);
    cluster.start_controller(
        "cloud-node-lifecycle-controller",
        "cloud-node-lifecycle-controller",
        &["--node-monitor-period", "1s"],
    );
    cluster.start_controller("service-lb-controller", "service-lb-controller", &[]);
    cluster.start_controller(
        "node-route-controller",
        "node-route-controller",
        &[
            "--cluster-cidr",
            CLUSTER_CIDR,
            "--route-reconciliation-period",
            "5m",
        ],
    );

    // The cluster before any fault: its Nodes initialized and routed, two load balancers.
    let mut world = World::default();
    let mut changes: Vec<Change> = Vec::new();
    let mut setup = Vec::new();
    for (i, name) in BASE_NODES.iter().enumerate() {
        setup.extend(
            world
                .new_node(&reg, name, &format!("10.244.{i}.0/24"))
                .expect("base Node"),
        );
    }
    for _ in 0..2 {
        setup.push(world.new_service(&reg).expect("Service"));
    }
    changes.extend(setup.into_iter().map(|want| Change {
        want,
        fault: "setup".into(),
        acted: None,
    }));
    watch_changes(
        &mut changes,
        0,
        &reg,
        gateway,
        Instant::now() + Duration::from_secs(60),
    )
    .await;
    for c in changes.iter().filter(|c| c.acted.is_none()) {
        outcome.violation(format!("before any fault: {} not within 60 s", c.want.describe()));
    }
    world.joining.retain(|n| n == "spare-0");
    world.settle(&changes);
    let setup_changes = changes.len();

    let mut last_fault = Instant::now();
    // Resume after each restart, per controller.
    let mut resumes: BTreeMap<Controller, Vec<Duration>> = BTreeMap::new();
    // Time to act after a compaction or a closing (no outage).
    let mut after_fault: BTreeMap<&'static str, Duration> = BTreeMap::new();
    for round in 1..=rounds {
        for fault in [Fault::Compaction, Fault::Closing, Fault::Restart] {
            let label = format!("round {round} {fault:?}").to_lowercase();
            let first = changes.len();
            let continues = reg.db.expired_continues.load(Ordering::Relaxed);
            let from;
            match fault {
                Fault::Compaction | Fault::Closing => {
                    if matches!(fault, Fault::Compaction) {
                        // A write first, so that every watcher's version is older than the
                        // compaction; the relist's second page will find its version compacted.
                        let tick = json!({"metadata": {"name": format!("tick-{round}")}});
                        let _ = reg.create(primary(Store::ConfigMaps), Some("default"), tick, false);
                        reg.db.expire_next_continue();
                        reg.db.compact();
                        outcome.fault("watch compactions");
                    }
                    reg.db.close_watches();
                    outcome.fault("watches closed");
                    from = Instant::now();
                    match world.changes(&reg, gateway).await {
                        Ok(wants) => changes.extend(wants.into_iter().map(|want| Change {
                            want,
                            fault: label.clone(),
                            acted: None,
                        })),
                        Err(e) => outcome.violation(format!("{label}: {e}")),
                    }
                }
                Fault::Restart => {
                    let down_for = dice.between(Duration::from_secs(2), Duration::from_secs(4));
                    let outage = async {
                        // Written only once nothing answers: no watch can have delivered them.
                        let down_by = Instant::now() + Duration::from_secs(5);
                        while !refused(addr).await {
                            if Instant::now() >= down_by {
                                return Err("the server still answered 5 s into its restart".to_owned());
                            }
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                        let wants = world.changes(&reg, gateway).await?;
                        if !refused(addr).await {
                            return Err(
                                "the server answered again before the outage's changes were written".into(),
                            );
                        }
                        Ok(wants)
                    };
                    let (restarted, wants) = tokio::join!(server.restart(down_for), outage);
                    from = Instant::now();
                    if let Err(e) = restarted {
                        outcome.violation(format!("{label}: the server did not come back: {e}"));
                    }
                    outcome.fault("server restarts");
                    match wants {
                        Ok(wants) => changes.extend(wants.into_iter().map(|want| Change {
                            want,
                            fault: label.clone(),
                            acted: None,
                        })),
                        Err(e) => outcome.violation(format!("{label}: {e}")),
                    }
                }
            }
            last_fault = from;
            watch_changes(&mut changes, first, &reg, gateway, from + ACT_DEADLINE).await;
            if matches!(fault, Fault::Compaction) {
                if wait_until_counted(&reg, continues).await {
                    outcome.fault("list continuations expired");
                } else {
                    // Disarmed: the next continuation is nobody's fault.
                    reg.db.take_continue_expiry();
                    outcome.violation(format!(
                        "{label}: service-lb-controller's relist of {FILLER} Services never continued a page, so no continuation expired"
                    ));
                }
            }
            let batch = &changes[first..];
            for c in batch.iter().filter(|c| c.acted.is_none()) {
                outcome.violation(format!(
                    "{label}: missed: {} not within {ACT_DEADLINE:?}",
                    c.want.describe()
                ));
            }
            match fault {
                Fault::Restart => {
                    let mut by: BTreeMap<Controller, Duration> = BTreeMap::new();
                    for c in batch {
                        if let Some(at) = c.acted {
                            let took = at.saturating_duration_since(from);
                            let first_seen = by.entry(c.want.controller()).or_insert(took);
                            *first_seen = (*first_seen).min(took);
                        }
                    }
                    for (controller, took) in by {
                        if took > RESUME_BOUND {
                            outcome.violation(format!(
                                "{label}: {} resumed {:.1} s after the server was back (bound {RESUME_BOUND:?})",
                                controller.name(),
                                took.as_secs_f64()
                            ));
                        }
                        resumes.entry(controller).or_default().push(took);
                    }
                }
                Fault::Compaction | Fault::Closing => {
                    let kind = if matches!(fault, Fault::Compaction) {
                        "compaction"
                    } else {
                        "closing"
                    };
                    for c in batch {
                        if let Some(at) = c.acted {
                            let took = at.saturating_duration_since(from);
                            let max = after_fault.entry(kind).or_default();
                            *max = (*max).max(took);
                        }
                    }
                }
            }
            world.settle(&changes[first..]);
        }
    }

    // The end: what is still not acted is missing; nothing leaked; no Node wrongly deleted.
    let unacted: Vec<&Change> = changes.iter().filter(|c| c.acted.is_none()).collect();
    let mut missing = unacted.len() as u64;
    if !unacted.is_empty() {
        let list: Vec<String> = unacted
            .iter()
            .map(|c| format!("{} ({})", c.want.describe(), c.fault))
            .collect();
        outcome.note("never acted", list.join("; "));
    }
    match cloud(gateway).await {
        Some(cloud) => {
            let live: BTreeMap<&str, &Lb> = world.services.iter().map(|s| (s.uid.as_str(), s)).collect();
            for lb in &cloud.lbs {
                let uid = lb["service_uid"].as_str().unwrap_or_default();
                if !live.contains_key(uid) {
                    outcome.leaked += 1;
                    outcome.violation(format!(
                        "load balancer {} of Service {} left in the cloud",
                        lb["name"], lb["service_name"]
                    ));
                }
            }
            for s in world.services.iter().filter(|s| cloud.lb_of(&s.uid).is_none()) {
                // Counted once: a Service never provisioned is an unacted change already.
                let counted = unacted
                    .iter()
                    .any(|c| matches!(&c.want, Want::Provisioned { uid, .. } if *uid == s.uid));
                if !counted {
                    missing += 1;
                    outcome.violation(format!("Service {} lost its load balancer", s.name));
                }
            }
        }
        None => outcome.violation("the gateway did not answer at the end"),
    }
    outcome.missing = missing;
    for name in world.nodes.iter().filter(|n| !world.deleted.contains(*n)) {
        if node(&reg, name).is_none() {
            outcome.wrong_nodes += 1;
            outcome.violation(format!("Node {name} was deleted though its instance runs"));
        }
    }
    if unacted.is_empty() {
        let done = changes.iter().filter_map(|c| c.acted).max().unwrap_or(last_fault);
        outcome.converged_after = Some(done.saturating_duration_since(last_fault));
    }

    let all: Vec<Duration> = resumes.values().flatten().copied().collect();
    if let Some(max) = all.iter().max() {
        outcome.note("resume_max_s", format!("{:.1}", max.as_secs_f64()));
    }
    for (controller, took) in &resumes {
        let max = took.iter().max().copied().unwrap_or_default();
        outcome.note(
            &format!("resume_max_s {}", controller.name()),
            format!("{:.1}", max.as_secs_f64()),
        );
    }
    for (kind, max) in &after_fault {
        outcome.note(
            &format!("acted_after_{kind}_max_s"),
            format!("{:.1}", max.as_secs_f64()),
        );
    }
    outcome.note("changes", changes.len() - setup_changes);
    outcome.note(
        "watches_expired (410 to a watch)",
        reg.db.expired_watches.load(Ordering::Relaxed),
    );
    outcome.note(
        "continuations_expired (410 to a continue)",
        reg.db.expired_continues.load(Ordering::Relaxed),
    );
    cluster.stop().await;
    super::keep_logs(&cluster, &mut outcome, &dice);
    server.shutdown().await;
    outcome
}

/// Waits (at most 15 s) until the server has told a client its list continuation expired since
/// it had counted `before`.
async fn wait_until_counted(reg: &Registry, before: u64) -> bool {
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline {
        if reg.db.expired_continues.load(Ordering::Relaxed) > before {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}
