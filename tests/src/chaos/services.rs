//! Scenario `services`: three service-lb-controller replicas sharing the Services through shard
//! leases, under churn (Services created, deleted, retyped to ClusterIP and back, re-ported),
//! while replicas are SIGKILLed and replaced, the gateway is SIGKILLed and restarted, and 20 % of
//! provider calls fail. New load balancers stay `Provisioning` for a second, so a load balancer
//! is in the cloud for a while before its Service's status can be patched: every few kills, all
//! replicas are killed at once while some Service is in exactly that window (counted as its own
//! fault kind only when the window was seen in the cloud and the API server at the kill).
//!
//! Then the faults stop and the invariants are checked:
//! - every live `LoadBalancer` Service has exactly one load balancer, with its ports, and its
//!   status shows that load balancer's address (missing otherwise);
//! - no load balancer without a live `LoadBalancer` Service (leaked), no deleted Service left
//!   behind by a finalizer;
//! - no more load balancers created than Services became `LoadBalancer` (created twice);
//! - no Service synced by two replicas at once (from the replicas' JSON logs: each sync's start
//!   and end, a killed replica's open sync ending at its kill).

use std::{
    collections::{BTreeMap, BTreeSet},
    time::Duration,
};

use k8s_openapi::{api::core::v1::Service, jiff::Timestamp};
use kube::{
    ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams},
};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::{Dice, Outcome, Scale, injected_errors, journal::Journal, wait_until};
use crate::{Cluster, ClusterSpec, ingress_ips};

/// Lease timings shortened so that a takeover fits the scenario (the mechanism is the same).
pub const LEASES: [&str; 6] = [
    "--leader-elect-lease-duration",
    "4s",
    "--leader-elect-renew-deadline",
    "3s",
    "--leader-elect-retry-period",
    "1s",
];

/// Starts a service-lb-controller replica named `name` with JSON logs (what [`work_of`] reads)
/// and the short [`LEASES`]; its index in the cluster's processes.
pub fn start_replica(cluster: &mut Cluster, name: &str) -> usize {
    start_replica_with(cluster, name, &[])
}

/// [`start_replica`] with more flags (`--cluster-name`).
pub fn start_replica_with(cluster: &mut Cluster, name: &str, extra: &[String]) -> usize {
    let mut args = vec!["--log-format", "json", "--leader-elect-identity", name];
    args.extend(LEASES);
    args.extend(extra.iter().map(String::as_str));
    cluster.start_controller("service-lb-controller", name, &args)
}

const NAMESPACE: &str = "chaos";
const REPLICAS: usize = 3;

/// One replica's work on one Service: from "service sync started" to "service sync finished"
/// (or to the replica's kill when it died in between).
#[derive(Debug, Clone)]
pub struct Work {
    /// The replica.
    pub replica: String,
    /// When the sync started.
    pub start: Timestamp,
    /// When it finished, or the replica died.
    pub end: Timestamp,
    /// What it set out to do (`Ensure`, `UpdateHosts`, `Cleanup`).
    pub decision: String,
    /// Whether it succeeded; `None` when the replica died during it.
    pub ok: Option<bool>,
}

/// The syncs a replica's JSON log records, by Service. `Err` when the log shows a sync started
/// twice at once, or never finished by a replica that was not killed.
pub fn work_of(
    replica: &str,
    log: &str,
    killed_at: Option<Timestamp>,
) -> Result<BTreeMap<String, Vec<Work>>, String> {
    let mut open: BTreeMap<String, (Timestamp, String)> = BTreeMap::new();
    let mut done: BTreeMap<String, Vec<Work>> = BTreeMap::new();
    for line in log.lines() {
        let Ok(entry) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let (Some(message), Some(service), Some(at)) = (
            entry["message"].as_str(),
            entry["service"].as_str(),
            entry["timestamp"]
                .as_str()
                .and_then(|t| t.parse::<Timestamp>().ok()),
        ) else {
            continue;
        };
        let decision = entry["decision"].as_str().unwrap_or_default().to_owned();
        match message {
            "service sync started" if open.insert(service.to_owned(), (at, decision)).is_some() => {
                return Err(format!("{replica} started {service} twice at once"));
            }
            "service sync finished" => {
                let (start, decision) = open
                    .remove(service)
                    .ok_or_else(|| format!("{replica} finished a sync of {service} it never started"))?;
                done.entry(service.to_owned()).or_default().push(Work {
                    replica: replica.to_owned(),
                    start,
                    end: at,
                    decision,
                    ok: entry["ok"].as_bool(),
                });
            }
            _ => {}
        }
    }
    for (service, (start, decision)) in open {
        let end = killed_at.ok_or_else(|| format!("{replica} never finished its sync of {service}"))?;
        done.entry(service).or_default().push(Work {
            replica: replica.to_owned(),
            start,
            end,
            decision,
            ok: None,
        });
    }
    Ok(done)
}

/// Pairs of syncs of one Service by two replicas that overlap in time.
pub fn overlaps(work: &BTreeMap<String, Vec<Work>>) -> Vec<String> {
    let mut found = Vec::new();
    for (service, items) in work {
        for (i, a) in items.iter().enumerate() {
            for b in &items[i + 1..] {
                let apart = a.end <= b.start || b.end <= a.start;
                if a.replica != b.replica && !apart {
                    found.push(format!(
                        "{service} synced by {} and {} at once: {a:?} {b:?}",
                        a.replica, b.replica
                    ));
                }
            }
        }
    }
    found
}

/// A Service as the scenario wants it.
#[derive(Debug, Clone)]
struct Wanted {
    load_balancer: bool,
    port: u16,
}

/// The service-lb-controller replicas of a scenario (shared with the `openstack` scenario).
#[derive(Default)]
pub(super) struct Replicas {
    /// Labels of the running replicas.
    pub(super) running: Vec<String>,
    /// Every replica ever started, with the time it was killed.
    pub(super) all: Vec<(String, Option<Timestamp>)>,
    started: usize,
    /// Flags every replica gets beyond [`start_replica`]'s.
    pub(super) extra: Vec<String>,
}

impl Replicas {
    /// No replica yet; each gets `extra` flags (the `openstack` scenario's cluster name).
    #[cfg(feature = "openstack")]
    pub(super) fn with_flags(extra: Vec<String>) -> Self {
        Self {
            extra,
            ..Self::default()
        }
    }

    pub(super) fn start(&mut self, cluster: &mut Cluster) {
        self.started += 1;
        let name = format!("slb-{}", self.started);
        start_replica_with(cluster, &name, &self.extra);
        self.running.push(name.clone());
        self.all.push((name, None));
    }

    pub(super) async fn kill(&mut self, cluster: &mut Cluster, name: &str) {
        if let Some(p) = cluster.proc_named(name) {
            p.kill().await;
        }
        let at = Timestamp::now();
        self.running.retain(|n| n != name);
        if let Some(entry) = self.all.iter_mut().find(|(n, _)| n == name) {
            entry.1 = Some(at);
        }
    }
}

/// The cloud's load balancers, by Service UID; `None` while the gateway does not answer.
async fn cloud(cluster: &Cluster) -> Option<BTreeMap<String, Value>> {
    let list = cluster.try_sim(&["load-balancers", "list"]).await?;
    let list = list.get("load_balancers").cloned().unwrap_or(list);
    Some(
        list.as_array()?
            .iter()
            .map(|lb| {
                (
                    lb["service_uid"].as_str().unwrap_or_default().to_owned(),
                    lb.clone(),
                )
            })
            .collect(),
    )
}

/// The scenario's Services in the API server.
async fn services(cluster: &Cluster) -> Option<Vec<Service>> {
    Some(
        cluster
            .services(NAMESPACE)
            .list(&ListParams::default())
            .await
            .ok()?
            .items,
    )
}

fn is_load_balancer(s: &Service) -> bool {
    s.spec.as_ref().and_then(|s| s.type_.as_deref()) == Some("LoadBalancer")
}

/// Whether some Service's load balancer is in the cloud while its status does not show it yet.
async fn in_write_window(cluster: &Cluster) -> bool {
    let (Some(lbs), Some(live)) = (cloud(cluster).await, services(cluster).await) else {
        return false;
    };
    live.iter().any(|s| {
        is_load_balancer(s)
            && s.metadata.deletion_timestamp.is_none()
            && s.uid().and_then(|u| lbs.get(&u)).is_some()
            && ingress_ips(s).is_empty()
    })
}

/// How far the cluster is from converged.
struct Differences {
    /// Every difference in words; empty when converged.
    all: Vec<String>,
    /// The Service UIDs of the load balancers no live LoadBalancer Service accounts for.
    leaked: Vec<String>,
    /// The names of the LoadBalancer Services without a load balancer.
    missing: Vec<String>,
    /// The names of the Services with any difference, in the order found.
    named: Vec<String>,
    /// The scenario's Services in the API server.
    live: Vec<Service>,
}

/// What converged looks like, against what the cloud and the API server hold now.
async fn differences(cluster: &Cluster, wanted: &BTreeMap<String, Wanted>) -> Option<Differences> {
    let lbs = cloud(cluster).await?;
    let live = services(cluster).await?;
    let mut diffs: Vec<String> = Vec::new();
    let (mut leaked, mut missing, mut named) = (Vec::new(), Vec::new(), Vec::new());
    let mut uids = BTreeSet::new();
    for s in &live {
        let name = s.name_any();
        let before = diffs.len();
        check_service(s, wanted, &lbs, &mut diffs, &mut missing, &mut uids);
        if diffs.len() > before {
            named.push(name);
        }
    }
    for name in wanted.keys() {
        if !live.iter().any(|s| s.name_any() == *name) {
            diffs.push(format!("{name} is missing from the API server"));
        }
    }
    for (uid, lb) in &lbs {
        if !uids.contains(uid) {
            leaked.push(uid.clone());
            diffs.push(format!(
                "load balancer {} of no live LoadBalancer Service",
                lb["name"]
            ));
        }
    }
    Some(Differences {
        all: diffs,
        leaked,
        missing,
        named,
        live,
    })
}

/// The differences of one live Service from what the scenario wants (its UID goes to `uids`
/// when it should have a load balancer).
fn check_service(
    s: &Service,
    wanted: &BTreeMap<String, Wanted>,
    lbs: &BTreeMap<String, Value>,
    diffs: &mut Vec<String>,
    missing: &mut Vec<String>,
    uids: &mut BTreeSet<String>,
) {
    let name = s.name_any();
    let Some(w) = wanted.get(&name) else {
        diffs.push(format!(
            "{name} was deleted but is still there: {:?}",
            s.metadata.finalizers
        ));
        return;
    };
    let uid = s.uid().unwrap_or_default();
    if !w.load_balancer {
        if !ingress_ips(s).is_empty() {
            diffs.push(format!(
                "{name} is ClusterIP but its status still shows a load balancer"
            ));
        }
        return;
    }
    uids.insert(uid.clone());
    let Some(lb) = lbs.get(&uid) else {
        missing.push(name.clone());
        diffs.push(format!("{name} has no load balancer"));
        return;
    };
    let ports: Vec<u64> = lb["listeners"]
        .as_array()
        .map(|l| l.iter().filter_map(|l| l["port"].as_u64()).collect())
        .unwrap_or_default();
    if ports != [u64::from(w.port)] {
        diffs.push(format!(
            "{name}'s load balancer listens on {ports:?}, not {}",
            w.port
        ));
    }
    if ingress_ips(s) != [lb["ip"].as_str().unwrap_or_default().to_owned()] {
        diffs.push(format!(
            "{name}'s status {:?} is not its load balancer {}",
            ingress_ips(s),
            lb["ip"]
        ));
    }
}

/// Sets the fault knobs; the gateway forgets them when it restarts.
async fn set_knobs(cluster: &Cluster, error_rate: &str) -> bool {
    cluster
        .try_sim(&[
            "knobs",
            "set",
            "--error-rate",
            &format!("*={error_rate}"),
            "--lb-provision-delay",
            "1s",
        ])
        .await
        .is_some()
}

/// Runs the scenario.
pub async fn run(scale: Scale, mut dice: Dice) -> Outcome {
    let mut outcome = Outcome::new("services");
    let nodes = ["node-a", "node-b", "node-c"];
    let spec = ClusterSpec::with_instances(&nodes).with_gateway_limits(500);
    let mut cluster = Cluster::start(spec).await;
    for node in nodes {
        cluster.register_node(node, true).await;
    }
    let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}});
    let _ = kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(cluster.client.clone())
        .create(
            &Default::default(),
            &serde_json::from_value(namespace).expect("namespace"),
        )
        .await;
    let mut replicas = Replicas::default();
    for _ in 0..REPLICAS {
        replicas.start(&mut cluster);
    }
    if !set_knobs(&cluster, "0.2").await {
        outcome.violation("the simulator's knobs could not be set");
    }

    let run_for = scale.pick(Duration::from_secs(20), Duration::from_secs(200));
    let max_services = scale.pick(16, 48);
    let api = cluster.services(NAMESPACE);
    let mut wanted: BTreeMap<String, Wanted> = BTreeMap::new();
    let mut journal = Journal::default();
    let mut became_lb = 0u64;
    let mut created = 0usize;
    let started = Instant::now();
    let mut next_kill = started + dice.between(Duration::from_millis(1500), Duration::from_secs(4));
    let mut next_gateway_kill = started + scale.pick(Duration::from_secs(10), Duration::from_secs(20));
    let mut kills = 0u64;
    // Provider calls failed on purpose, summed over the gateway's lives.
    let mut injected = 0u64;
    let mut last_fault = Instant::now();
    while started.elapsed() < run_for {
        // One change of the churn.
        let roll = dice.below(10);
        let names: Vec<String> = wanted.keys().cloned().collect();
        let pick = |dice: &mut Dice| names.get(dice.below(names.len() as u64) as usize).cloned();
        if names.len() < max_services && (roll < 4 || names.is_empty()) {
            created += 1;
            let name = format!("svc-{created:04}");
            let port = 80 + dice.below(20) as u16;
            let body = json!({"spec": {"ports": [{"name": "http", "port": port, "targetPort": 8080, "protocol": "TCP"}]}});
            if let Some(made) = create(&cluster, &name, body).await {
                journal.record(&name, "created", Some(&made));
                wanted.insert(
                    name,
                    Wanted {
                        load_balancer: true,
                        port,
                    },
                );
                became_lb += 1;
            }
        } else if roll < 6 {
            if let Some(name) = pick(&mut dice)
                && let Ok(answer) = api.delete(&name, &DeleteParams::default()).await
            {
                journal.record(&name, "deleted", answer.left().as_ref());
                wanted.remove(&name);
            }
        } else if roll < 8 {
            if let Some(name) = pick(&mut dice) {
                let w = wanted[&name].clone();
                let to = if w.load_balancer {
                    "ClusterIP"
                } else {
                    "LoadBalancer"
                };
                let patch = json!({"spec": {"type": to}});
                if let Ok(answer) = api
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    journal.record(&name, format!("retyped to {to}"), Some(&answer));
                    if !w.load_balancer {
                        became_lb += 1;
                    }
                    wanted.insert(
                        name,
                        Wanted {
                            load_balancer: !w.load_balancer,
                            ..w
                        },
                    );
                }
            }
        } else if let Some(name) = pick(&mut dice) {
            let w = wanted[&name].clone();
            let port = if w.port >= 99 { 80 } else { w.port + 1 };
            let patch = json!({"spec": {"ports": [{"name": "http", "port": port, "targetPort": 8080, "protocol": "TCP"}]}});
            if let Ok(answer) = api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                journal.record(&name, format!("re-ported to {port}"), Some(&answer));
                wanted.insert(name, Wanted { port, ..w });
            }
        }

        let now = Instant::now();
        if now >= next_kill {
            kills += 1;
            if kills.is_multiple_of(5) {
                // All replicas at once, while a load balancer is written and its status not.
                let deadline = Instant::now() + Duration::from_secs(5);
                let mut seen = in_write_window(&cluster).await;
                while !seen && Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    seen = in_write_window(&cluster).await;
                }
                for name in replicas.running.clone() {
                    replicas.kill(&mut cluster, &name).await;
                    outcome.fault("service-lb-controller SIGKILL");
                }
                if seen && in_write_window(&cluster).await {
                    outcome.fault("all replicas SIGKILLed between a cloud write and its status patch");
                }
                for _ in 0..REPLICAS {
                    replicas.start(&mut cluster);
                }
            } else {
                let victim = replicas.running[dice.below(replicas.running.len() as u64) as usize].clone();
                replicas.kill(&mut cluster, &victim).await;
                outcome.fault("service-lb-controller SIGKILL");
                replicas.start(&mut cluster);
            }
            last_fault = Instant::now();
            next_kill = last_fault + dice.between(Duration::from_millis(1500), Duration::from_secs(4));
        }
        if now >= next_gateway_kill {
            injected += injected_errors(&cluster).await;
            cluster.kill_gateway().await;
            outcome.fault("gateway SIGKILL");
            cluster.start_gateway().await;
            if !set_knobs(&cluster, "0.2").await {
                outcome.violation("the simulator's knobs could not be set after a gateway restart");
            }
            last_fault = Instant::now();
            next_gateway_kill = last_fault + scale.pick(Duration::from_secs(10), Duration::from_secs(20));
        }
        tokio::time::sleep(dice.between(Duration::from_millis(50), Duration::from_millis(250))).await;
    }
    injected += injected_errors(&cluster).await;
    outcome
        .faults
        .insert("provider call failures (20 %)".to_owned(), injected);
    set_knobs(&cluster, "0").await;
    last_fault = last_fault.max(Instant::now());

    // Converged: every Service as wanted, nothing leaked, nothing missing.
    let converged = wait_until(
        &mut outcome,
        "every Service converged",
        scale.pick(Duration::from_secs(90), Duration::from_secs(180)),
        || {
            let cluster = &cluster;
            let wanted = &wanted;
            async move {
                let differences = differences(cluster, wanted).await?;
                differences.all.is_empty().then_some(())
            }
        },
    )
    .await;
    // Who synced what, from the replicas' logs: for the overlap check and the stories below.
    let mut work: BTreeMap<String, Vec<Work>> = BTreeMap::new();
    for (name, killed) in &replicas.all {
        let log = cluster.proc_named(name).map(|p| p.log()).unwrap_or_default();
        match work_of(name, &log, *killed) {
            Ok(items) => {
                for (service, mut w) in items {
                    work.entry(service).or_default().append(&mut w);
                }
            }
            Err(e) => outcome.violation(e),
        }
    }
    if converged.is_some() {
        outcome.converged_after = Some(last_fault.elapsed());
    } else if let Some(found) = differences(&cluster, &wanted).await {
        outcome.leaked = found.leaked.len() as u64;
        outcome.missing = found.missing.len() as u64;
        for d in found.all.iter().take(20) {
            outcome.violation(d.clone());
        }
        // The story of each leaked load balancer's Service and of each Service found wrong
        // (missing its load balancer, a wrong status or ports), so the run explains itself.
        let leaked = found.leaked.iter().map(|uid| {
            journal.name_of(uid).map_or_else(
                || format!("(a Service with UID {uid} the scenario did not make)"),
                str::to_owned,
            )
        });
        for name in leaked.chain(found.named.iter().cloned()).take(20) {
            let live = found.live.iter().find(|s| s.name_any() == name);
            let syncs = work.get(&format!("{NAMESPACE}/{name}"));
            outcome.violation(format!("story of {}", journal.explain(&name, live, syncs)));
        }
    }
    if let Some(info) = cluster.try_sim(&["info"]).await {
        let made = info["load_balancers_created"].as_u64().unwrap_or(0);
        outcome.note("load_balancers_created", made);
        if made > became_lb {
            outcome.violation(format!(
                "{made} load balancers created for {became_lb} Services becoming LoadBalancer: one was created twice"
            ));
        }
    }

    // No Service synced by two replicas at once.
    for overlap in overlaps(&work) {
        outcome.violation(overlap);
    }
    outcome.note("services_created", created);
    outcome.note("syncs", work.values().map(Vec::len).sum::<usize>());
    cluster.stop().await;
    super::keep_logs(&cluster, &mut outcome, &dice);
    outcome
}

/// Creates a `LoadBalancer` Service in the scenario's namespace; `None` when the API server
/// refused it.
async fn create(cluster: &Cluster, name: &str, extra: Value) -> Option<Service> {
    let mut service = json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": { "name": name, "namespace": NAMESPACE },
        "spec": { "type": "LoadBalancer", "selector": { "app": name } },
    });
    json_patch::merge(&mut service, &extra);
    let service = serde_json::from_value::<Service>(service).ok()?;
    cluster
        .services(NAMESPACE)
        .create(&Default::default(), &service)
        .await
        .ok()
}
