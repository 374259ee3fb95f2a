//! Scenario `vendor-swap`: the gateway is swapped for another vendor's under running
//! controllers, while service-lb-controller replicas are SIGKILLed and replaced and Services
//! come and go; nothing may leak at either provider.
//!
//! The cluster runs on the simulator (the old vendor), with cloud-node-controller and two
//! service-lb-controller replicas sharing the Services through shard leases (short leases, as in
//! `services`). Services are provisioned there, some deleted (their load balancers must go before
//! the swap). Then the simulator's gateway is stopped (SIGTERM, as a rollout does) and, while no
//! gateway answers, a replica is SIGKILLed and replaced, Services are created and a provisioned
//! one deleted; then the Python example gateway (provider `pycloud`, its own in-memory cloud)
//! takes the same address, and for a while replicas keep being killed and replaced while
//! Services are created and deleted.
//!
//! Why pycloud and not a second simulator on another state file: the controllers tell vendors
//! apart by the provider name in the gateway's answers. A second simulator is "simulator" too:
//! to the controllers, the same cloud having lost its state, not a swap; they would re-create
//! load balancers there and never report what the first one still holds. pycloud is another
//! vendor and needs no moto.
//!
//! What "nothing leaked at either provider" means, given the documented behaviour (docs/gateway.md,
//! "Swapping the vendor"): what the old vendor holds is reported, never deleted or re-created
//! behind the operator's back. So, once converged:
//! - **new provider**: every live LoadBalancer Service created after the swap began has exactly
//!   one load balancer at pycloud (named after its UID), its status shows that load balancer's
//!   address and the Service records `pycloud` as its provider; no pycloud load balancer belongs
//!   to anything else (`leaked`), none was created twice (the gateway's log), none is missing
//!   (`missing`). A Service provisioned before the swap gets none there.
//! - **old provider** (read after the scenario through a simulator gateway on its state file):
//!   it holds exactly what it held at the swap: nothing created after it (its
//!   `load_balancers_created` unchanged), nothing deleted behind the operator's back (a Service
//!   still alive keeps its load balancer, `missing` otherwise), and nothing of a Service deleted
//!   before the swap (`leaked`). The load balancers of Services deleted after the swap stay there
//!   by design: each must be reported (a Warning `LoadBalancerOrphaned` on its Service), and a
//!   live Service provisioned before the swap must be reported too (`LoadBalancerAtFormerProvider`)
//!   and keep its status; one left unreported is a violation (it would be a silent leak).
//!
//! `converged_after`: from the last fault (kill, or the swap) to all of the above holding.
//!
//! What it found, fixed with it: a replica went on believing the provider of the last answer it
//! had, from before the swap, while no gateway answered. A Service created during the handover
//! was recorded at the old vendor while its load balancer was made at the new one (then
//! reported as the former vendor's, never updated, and left at the new vendor when deleted; or,
//! the replica killed in between, never provisioned anywhere), and a Service provisioned before
//! the swap, deleted during it, was "cleaned up" at the new vendor and let go with no report of
//! the load balancer left at the old one. service-lb-controller now asks the gateway which
//! provider it serves before an ensure or a cleanup.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::SocketAddr,
    path::PathBuf,
    time::Duration,
};

use k8s_openapi::api::{core::v1::Service, events::v1::Event};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, ListParams},
};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::{Dice, Outcome, Scale};
use crate::{Cluster, ClusterSpec, binary, free_port, http_get, ingress_ips, spawn};

/// Lease timings shortened so that a killed replica's shards are taken over within the scenario.
const LEASES: [&str; 6] = [
    "--leader-elect-lease-duration",
    "4s",
    "--leader-elect-renew-deadline",
    "3s",
    "--leader-elect-retry-period",
    "1s",
];
const NAMESPACE: &str = "default";
const REPLICAS: usize = 2;
const ANNOTATION_PROVIDER: &str = "service.cloudgateway.io/load-balancer-provider";
const NEW_PROVIDER: &str = "pycloud";
const OLD_PROVIDER: &str = "simulator";

/// Upstream's default load-balancer name, which both vendors use: "a" and the UID without
/// dashes, at most 32 characters.
fn lb_name(uid: &str) -> String {
    let mut name = String::from("a");
    name.extend(uid.chars().filter(|c| *c != '-'));
    name.truncate(32);
    name
}

/// A Service of the scenario.
#[derive(Debug, Clone)]
struct Tracked {
    uid: String,
    /// Created before the swap began (provisioned at the old vendor).
    before_swap: bool,
    /// Deleted, and when: before the swap or after it began.
    deleted: Option<bool>,
    /// Its address at the old vendor, for one provisioned there.
    old_ip: Option<String>,
}

struct Replicas {
    running: Vec<String>,
    started: usize,
}

impl Replicas {
    fn start(&mut self, cluster: &mut Cluster) {
        self.started += 1;
        let name = format!("slb-{}", self.started);
        let mut args = vec!["--leader-elect-identity", &name];
        args.extend(LEASES);
        cluster.start_controller("service-lb-controller", &name, &args);
        self.running.push(name);
    }

    async fn kill(&mut self, cluster: &mut Cluster, name: &str) {
        if let Some(p) = cluster.procs.iter_mut().rev().find(|p| p.name == name) {
            p.kill().await;
        }
        self.running.retain(|n| n != name);
    }
}

/// Creates LoadBalancer Service `name`; its UID, `None` when the API server refused it.
async fn create(cluster: &Cluster, name: &str) -> Option<String> {
    let service = json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": { "name": name, "namespace": NAMESPACE },
        "spec": {
            "type": "LoadBalancer",
            "selector": { "app": name },
            "ports": [{ "name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP" }],
        },
    });
    let service: Service = serde_json::from_value(service).ok()?;
    let created = cluster
        .services(NAMESPACE)
        .create(&Default::default(), &service)
        .await
        .ok()?;
    created.uid()
}

/// The scenario's Services in the API server, by name.
async fn services(cluster: &Cluster) -> Option<BTreeMap<String, Service>> {
    let list = cluster
        .services(NAMESPACE)
        .list(&ListParams::default())
        .await
        .ok()?;
    Some(
        list.items
            .into_iter()
            .filter(|s| s.name_any() != "kubernetes")
            .map(|s| (s.name_any(), s))
            .collect(),
    )
}

/// `(reason, Service name)` of every Warning about the scenario's Services.
async fn warnings(cluster: &Cluster) -> Option<BTreeSet<(String, String)>> {
    let events: Api<Event> = Api::namespaced(cluster.client.clone(), NAMESPACE);
    let list = events.list(&ListParams::default()).await.ok()?;
    Some(
        list.items
            .into_iter()
            .filter(|e| e.type_.as_deref() == Some("Warning"))
            .filter_map(|e| Some((e.reason?, e.regarding?.name?)))
            .collect(),
    )
}

/// pycloud's load balancers of the `kubernetes` cluster, by name.
async fn new_vendor(admin: SocketAddr) -> Option<BTreeMap<String, Value>> {
    let (status, body) = http_get(admin, "/admin/state").await?;
    (status == 200).then_some(())?;
    let state: Value = serde_json::from_str(&body).ok()?;
    Some(
        state["load_balancers"]
            .as_array()?
            .iter()
            .filter(|lb| lb["cluster"] == "kubernetes")
            .map(|lb| (lb["name"].as_str().unwrap_or_default().to_owned(), lb.clone()))
            .collect(),
    )
}

/// The simulator's load balancers of the `kubernetes` cluster by name, and how many it ever
/// created, through its admin API at `http`.
async fn old_vendor(http: SocketAddr) -> Option<(BTreeMap<String, Value>, u64)> {
    let (status, body) = http_get(http, "/simulator/v1/load-balancers").await?;
    (status == 200).then_some(())?;
    let lbs: Value = serde_json::from_str(&body).ok()?;
    let lbs = lbs
        .as_array()?
        .iter()
        .filter(|lb| lb["cluster"] == "kubernetes")
        .map(|lb| (lb["name"].as_str().unwrap_or_default().to_owned(), lb.clone()))
        .collect();
    let (_, info) = http_get(http, "/simulator/v1/info").await?;
    let info: Value = serde_json::from_str(&info).ok()?;
    Some((lbs, info["load_balancers_created"].as_u64()?))
}

/// What differs from converged, in words, with the leaked and missing counts.
#[derive(Debug, Default)]
struct Findings {
    differences: Vec<String>,
    leaked: u64,
    missing: u64,
}

/// What the old vendor held at the swap.
struct AtSwap {
    lbs: BTreeSet<String>,
    created: u64,
}

/// The new provider and the API server, against what the scenario did.
async fn check_new(cluster: &Cluster, tracked: &BTreeMap<String, Tracked>) -> Option<Findings> {
    let lbs = new_vendor(cluster.gateway_http).await?;
    let live = services(cluster).await?;
    let reported = warnings(cluster).await?;
    let mut f = Findings::default();
    let mut owned = BTreeSet::new();
    for (name, t) in tracked {
        let service = live.get(name);
        match (t.deleted, service) {
            (Some(_), Some(s)) => f.differences.push(format!(
                "{name} was deleted but is still there (finalizers {:?})",
                s.metadata.finalizers
            )),
            (Some(before), None) => {
                // Deleted after the swap began, provisioned at the old vendor: its load balancer
                // stays there, reported.
                if t.before_swap
                    && !before
                    && t.old_ip.is_some()
                    && !reported.contains(&("LoadBalancerOrphaned".to_owned(), name.clone()))
                {
                    f.differences.push(format!(
                        "{name}, deleted after the swap, left its load balancer at {OLD_PROVIDER} unreported (no LoadBalancerOrphaned)"
                    ));
                }
            }
            (None, None) => f
                .differences
                .push(format!("{name} is missing from the API server")),
            (None, Some(s)) => {
                let recorded = s
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(ANNOTATION_PROVIDER))
                    .cloned()
                    .unwrap_or_default();
                if t.before_swap {
                    if lbs.contains_key(&lb_name(&t.uid)) {
                        f.differences.push(format!(
                            "{name}, provisioned at {OLD_PROVIDER}, got another load balancer at {NEW_PROVIDER}"
                        ));
                    }
                    if recorded != OLD_PROVIDER {
                        f.differences.push(format!(
                            "{name}, provisioned at {OLD_PROVIDER}, records {recorded:?}"
                        ));
                    }
                    if t.old_ip.as_ref().is_some_and(|ip| ingress_ips(s) != [ip.clone()]) {
                        f.differences.push(format!(
                            "{name}'s status {:?} lost its {OLD_PROVIDER} address {:?}",
                            ingress_ips(s),
                            t.old_ip
                        ));
                    }
                    if !reported.contains(&("LoadBalancerAtFormerProvider".to_owned(), name.clone())) {
                        f.differences
                            .push(format!("{name} is not reported as held by the former provider"));
                    }
                    continue;
                }
                owned.insert(lb_name(&t.uid));
                let Some(lb) = lbs.get(&lb_name(&t.uid)) else {
                    f.missing += 1;
                    f.differences
                        .push(format!("{name} has no load balancer at {NEW_PROVIDER}"));
                    continue;
                };
                if ingress_ips(s) != [lb["ip"].as_str().unwrap_or_default().to_owned()] {
                    f.differences.push(format!(
                        "{name}'s status {:?} is not its load balancer's {}",
                        ingress_ips(s),
                        lb["ip"]
                    ));
                }
                if recorded != NEW_PROVIDER {
                    f.differences.push(format!(
                        "{name}'s load balancer is at {NEW_PROVIDER} but the Service records {recorded:?}"
                    ));
                }
            }
        }
    }
    for (name, lb) in &lbs {
        if !owned.contains(name) {
            f.leaked += 1;
            f.differences.push(format!(
                "load balancer {name} at {NEW_PROVIDER} (for {}) of no live Service created after the swap",
                lb["service"]
            ));
        }
    }
    Some(f)
}

/// Where the Python example gateway's launcher is, when it is set up.
fn python_gateway() -> Result<(PathBuf, PathBuf), String> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let venv = std::env::var_os("PYTHON_GATEWAY_VENV")
        .map_or_else(|| root.join(".venv-python-gateway"), PathBuf::from);
    if !venv.join("bin/python").exists() {
        return Err(format!(
            "the Python example gateway is not set up in {}: run scripts/python-gateway/setup.sh (make test-deps)",
            venv.display()
        ));
    }
    Ok((
        root.join("scripts/python-gateway/run.sh"),
        root.join("examples/python-gateway/inventory.yaml"),
    ))
}

/// Runs the scenario.
pub async fn run(scale: Scale, mut dice: Dice) -> Outcome {
    let mut outcome = Outcome::new("vendor-swap");
    let (python, inventory) = match python_gateway() {
        Ok(found) => found,
        Err(e) => {
            outcome.violation(e);
            return outcome;
        }
    };
    let nodes = ["node-a", "node-b", "node-c"];
    let spec = ClusterSpec::with_instances(&nodes).with_gateway_limits(200);
    let mut cluster = Cluster::start(spec).await;
    for node in nodes {
        cluster.register_node(node, true).await;
    }
    cluster.start_controller("cloud-node-controller", "cloud-node-controller", &[]);
    let mut replicas = Replicas {
        running: Vec::new(),
        started: 0,
    };
    for _ in 0..REPLICAS {
        replicas.start(&mut cluster);
    }
    // The shards split between the two: through the handover, each has Services of its own.
    super::wait_until(
        &mut outcome,
        "the shards split between the replicas",
        Duration::from_secs(30),
        || {
            let cluster = &cluster;
            async move {
                let mut owned = Vec::new();
                for proc in cluster.procs.iter().filter(|p| p.name.starts_with("slb-")) {
                    let metrics = crate::measure::process_metrics(proc).await;
                    let line = metrics
                        .lines()
                        .find(|l| l.starts_with("service_lb_controller_shards_owned "))?;
                    owned.push(line.rsplit(' ').next()?.parse::<u32>().ok()?);
                }
                (owned.len() == REPLICAS && owned.iter().sum::<u32>() == 16 && owned.iter().all(|n| *n >= 4))
                    .then_some(())
            }
        },
    )
    .await;

    // At the old vendor: Services provisioned, some deleted again, all settled.
    let before = scale.pick(6, 16);
    let deleted_before = scale.pick(2, 4);
    let mut tracked: BTreeMap<String, Tracked> = BTreeMap::new();
    for i in 0..before {
        let name = format!("pre-{i}");
        if let Some(uid) = create(&cluster, &name).await {
            tracked.insert(
                name,
                Tracked {
                    uid,
                    before_swap: true,
                    deleted: None,
                    old_ip: None,
                },
            );
        } else {
            outcome.violation(format!("the API server refused Service {name}"));
        }
    }
    let provisioned = super::wait_until(
        &mut outcome,
        "every Service provisioned at the old vendor",
        Duration::from_secs(60),
        || {
            let cluster = &cluster;
            async move {
                let live = services(cluster).await?;
                let ips: BTreeMap<String, String> = live
                    .iter()
                    .filter_map(|(n, s)| Some((n.clone(), ingress_ips(s).first()?.clone())))
                    .collect();
                (ips.len() == before).then_some(ips)
            }
        },
    )
    .await;
    let Some(ips) = provisioned else {
        cluster.stop().await;
        return outcome;
    };
    for (name, ip) in ips {
        if let Some(t) = tracked.get_mut(&name) {
            t.old_ip = Some(ip);
        }
    }
    let api = cluster.services(NAMESPACE);
    for i in 0..deleted_before {
        let name = format!("pre-{i}");
        if api.delete(&name, &DeleteParams::default()).await.is_ok()
            && let Some(t) = tracked.get_mut(&name)
        {
            t.deleted = Some(true);
        }
    }
    let wanted: BTreeSet<String> = tracked
        .values()
        .filter(|t| t.deleted.is_none())
        .map(|t| lb_name(&t.uid))
        .collect();
    let settled = super::wait_until(
        &mut outcome,
        "the Services deleted before the swap gone, with their load balancers",
        Duration::from_secs(60),
        || {
            let cluster = &cluster;
            let wanted = &wanted;
            async move {
                let live = services(cluster).await?;
                let (lbs, created) = old_vendor(cluster.gateway_http).await?;
                let names: BTreeSet<String> = lbs.keys().cloned().collect();
                (live.len() == before - deleted_before && names == *wanted)
                    .then_some(AtSwap { lbs: names, created })
            }
        },
    )
    .await;
    let Some(at_swap) = settled else {
        cluster.stop().await;
        return outcome;
    };
    if at_swap.created > before as u64 {
        outcome.violation(format!(
            "{} load balancers created at {OLD_PROVIDER} for {before} Services before the swap",
            at_swap.created
        ));
    }

    // The swap: the old gateway goes; while none answers, a replica dies, Services come and
    // one goes; then pycloud answers at the same address.
    let state_file = cluster.dir.path().join("cloud-state.json");
    let old_inventory = cluster.dir.path().join("inventory.yaml");
    cluster.stop_gateway().await;
    outcome.fault("gateway swapped (simulator → pycloud)");
    let mut created = 0usize;
    for _ in 0..3 {
        create_new(&cluster, &mut tracked, &mut created).await;
    }
    let mut deleted_after = u64::from(delete_one(&cluster, &mut tracked, &mut dice, true).await);
    // The replicas are at those changes (no gateway answers them); one dies at it, the other
    // goes on believing the old vendor is there until an answer says otherwise.
    let victim = replicas.running[dice.below(replicas.running.len() as u64) as usize].clone();
    replicas.kill(&mut cluster, &victim).await;
    outcome.fault("service-lb-controller SIGKILL");
    replicas.start(&mut cluster);
    cluster
        .swap_gateway_with(
            &python,
            ["--listen", "--admin-listen"],
            &["--inventory".to_owned(), inventory.display().to_string()],
            &[],
        )
        .await;
    let mut last_fault = Instant::now();

    // Under the new vendor: kills, creations and deletions for a while.
    let run_for = scale.pick(Duration::from_secs(12), Duration::from_secs(60));
    let started = Instant::now();
    let mut next_kill = started + dice.between(Duration::from_secs(2), Duration::from_secs(4));
    while started.elapsed() < run_for {
        let roll = dice.below(10);
        let live_new = tracked
            .values()
            .filter(|t| !t.before_swap && t.deleted.is_none())
            .count();
        if roll < 5 && live_new < 30 {
            create_new(&cluster, &mut tracked, &mut created).await;
        } else if roll < 8 && delete_one(&cluster, &mut tracked, &mut dice, false).await {
            deleted_after += 1;
        }
        if Instant::now() >= next_kill {
            let victim = replicas.running[dice.below(replicas.running.len() as u64) as usize].clone();
            replicas.kill(&mut cluster, &victim).await;
            outcome.fault("service-lb-controller SIGKILL");
            replicas.start(&mut cluster);
            last_fault = Instant::now();
            next_kill = last_fault + dice.between(Duration::from_secs(2), Duration::from_secs(4));
        }
        tokio::time::sleep(dice.between(Duration::from_millis(200), Duration::from_millis(800))).await;
    }
    outcome.note("services_created_after_swap", created);
    outcome.note("services_deleted_after_swap", deleted_after);

    // Converged at the new vendor.
    let deadline = Instant::now() + scale.pick(Duration::from_secs(60), Duration::from_secs(120));
    let mut findings;
    loop {
        findings = check_new(&cluster, &tracked).await;
        if findings.as_ref().is_some_and(|f| f.differences.is_empty()) {
            outcome.converged_after = Some(last_fault.elapsed());
            break;
        }
        if Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    match findings {
        Some(f) => {
            outcome.leaked += f.leaked;
            outcome.missing += f.missing;
            for d in f.differences.into_iter().take(20) {
                outcome.violation(d);
            }
        }
        None => outcome.violation("the new vendor's gateway or the API server did not answer at the end"),
    }
    // Created twice at the new vendor: its log says each creation.
    let log = cluster
        .procs
        .iter()
        .rev()
        .find(|p| p.name == "cloud-gateway")
        .map(|p| p.log())
        .unwrap_or_default();
    let mut creations: BTreeMap<String, u64> = BTreeMap::new();
    for line in log.lines() {
        if let Some(rest) = line.split("created load balancer ").nth(1)
            && let Some(name) = rest.split_whitespace().next()
        {
            *creations.entry(name.to_owned()).or_default() += 1;
        }
    }
    for (name, n) in creations.iter().filter(|(_, n)| **n > 1) {
        outcome.violation(format!(
            "load balancer {name} created {n} times at {NEW_PROVIDER}"
        ));
    }
    outcome.note(
        "load_balancers_created_at_new_vendor",
        creations.values().sum::<u64>(),
    );

    // The old vendor as it is now, through a gateway on its state file (the operator's view).
    check_old(
        &mut cluster,
        &mut outcome,
        &state_file,
        &old_inventory,
        &at_swap,
        &tracked,
    )
    .await;
    outcome.note(
        "left_at_old_vendor_by_design_reported",
        tracked
            .values()
            .filter(|t| t.before_swap && t.deleted == Some(false))
            .count(),
    );
    cluster.stop().await;
    super::keep_logs(&cluster, &mut outcome, &dice);
    outcome
}

/// Creates Service `post-<n>`, tracked as made after the swap began.
async fn create_new(cluster: &Cluster, tracked: &mut BTreeMap<String, Tracked>, created: &mut usize) {
    *created += 1;
    let name = format!("post-{created}");
    if let Some(uid) = create(cluster, &name).await {
        tracked.insert(
            name,
            Tracked {
                uid,
                before_swap: false,
                deleted: None,
                old_ip: None,
            },
        );
    }
}

/// Deletes a random live Service (`pre_only`: one provisioned before the swap); whether it did.
async fn delete_one(
    cluster: &Cluster,
    tracked: &mut BTreeMap<String, Tracked>,
    dice: &mut Dice,
    pre_only: bool,
) -> bool {
    let live: Vec<String> = tracked
        .iter()
        .filter(|(_, t)| t.deleted.is_none() && (t.before_swap || !pre_only))
        .map(|(n, _)| n.clone())
        .collect();
    if live.is_empty() {
        return false;
    }
    let name = &live[dice.below(live.len() as u64) as usize];
    if cluster
        .services(NAMESPACE)
        .delete(name, &DeleteParams::default())
        .await
        .is_err()
    {
        return false;
    }
    if let Some(t) = tracked.get_mut(name) {
        t.deleted = Some(false);
    }
    true
}

/// The old vendor: exactly what it held at the swap (nothing created since, nothing deleted
/// behind the operator's back, nothing of a Service deleted before the swap).
async fn check_old(
    cluster: &mut Cluster,
    outcome: &mut Outcome,
    state_file: &std::path::Path,
    inventory: &std::path::Path,
    at_swap: &AtSwap,
    tracked: &BTreeMap<String, Tracked>,
) {
    let http: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let args: Vec<String> = vec![
        "--grpc-listen".into(),
        format!("127.0.0.1:{}", free_port()),
        "--http-listen".into(),
        http.to_string(),
        "--simulator-state".into(),
        state_file.display().to_string(),
        "--simulator-inventory".into(),
        inventory.display().to_string(),
        "--simulator-no-fsync".into(),
        "--insecure-plaintext".into(),
    ];
    let console = spawn(
        cluster.dir.path(),
        "old-vendor-console",
        &binary("cloud-gateway"),
        &args,
    );
    cluster.procs.push(console);
    let now = super::wait_until(
        outcome,
        "the old vendor's state readable",
        Duration::from_secs(30),
        || async move { old_vendor(http).await },
    )
    .await;
    let Some((lbs, created)) = now else {
        return;
    };
    if created != at_swap.created {
        outcome.violation(format!(
            "{} load balancers created at {OLD_PROVIDER} after the swap",
            created.saturating_sub(at_swap.created)
        ));
    }
    let names: BTreeSet<String> = lbs.keys().cloned().collect();
    for extra in names.difference(&at_swap.lbs) {
        outcome.leaked += 1;
        outcome.violation(format!(
            "load balancer {extra} appeared at {OLD_PROVIDER} after the swap"
        ));
    }
    for gone in at_swap.lbs.difference(&names) {
        outcome.missing += 1;
        outcome.violation(format!(
            "load balancer {gone} deleted at {OLD_PROVIDER} behind the operator's back"
        ));
    }
    // Of a Service deleted before the swap, nothing (already checked at the swap; again now).
    for (name, t) in tracked.iter().filter(|(_, t)| t.deleted == Some(true)) {
        if names.contains(&lb_name(&t.uid)) {
            outcome.leaked += 1;
            outcome.violation(format!(
                "{name}, deleted before the swap, left its load balancer at {OLD_PROVIDER}"
            ));
        }
    }
    outcome.note("load_balancers_at_old_vendor", names.len());
}
