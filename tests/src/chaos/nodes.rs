//! Scenario `nodes`: cloud-node-controller and cloud-node-lifecycle-controller under a 50 %
//! provider error storm, with the gateway SIGKILLed and restarted and the controllers SIGKILLed
//! and restarted, while Nodes join and the cloud changes under them (one instance terminated,
//! one stopped). Every Node is NotReady, so the lifecycle controller asks the cloud about each
//! one every half second: a failed call read as "instance gone" would delete a Node.
//!
//! Checked all along (every poll of the Nodes) and at the end:
//! - a Node deleted whose instance is not terminated: wrong;
//! - the shutdown taint on a Node whose instance runs: wrong;
//! - a providerID or zone label that is not its own instance's: mis-bound, wrong.
//!
//! Once the faults stop: every running instance's Node initialized (providerID, zone, addresses,
//! no uninitialized taint), the terminated instance's Node deleted, the stopped one's tainted.
//! Converged-after is measured from the last fault to that state.

use std::{collections::BTreeMap, time::Duration};

use k8s_openapi::api::core::v1::Node;
use kube::{ResourceExt, api::ListParams};
use tokio::time::Instant;

use super::{Dice, Outcome, Scale, injected_errors, services::LEASES, wait_until};
use crate::{Cluster, ClusterSpec};

const UNINITIALIZED: &str = "node.cloudprovider.kubernetes.io/uninitialized";
const SHUTDOWN: &str = "node.cloudprovider.kubernetes.io/shutdown";
const ZONE: &str = "topology.kubernetes.io/zone";

/// What the cloud says of an instance, as the scenario made it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Running,
    Stopped,
    Terminated,
}

#[derive(Debug, Clone)]
struct Machine {
    provider_id: String,
    zone: &'static str,
    fate: Fate,
}

fn has_taint(node: &Node, key: &str) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == key))
}

fn initialized(node: &Node) -> bool {
    !has_taint(node, UNINITIALIZED)
        && node.spec.as_ref().and_then(|s| s.provider_id.as_ref()).is_some()
        && node
            .status
            .as_ref()
            .and_then(|s| s.addresses.as_ref())
            .is_some_and(|a| a.iter().any(|a| a.type_ == "InternalIP"))
}

/// The wrong things a list of Nodes shows, in words; `registered`: the Nodes created so far.
fn wrongs(nodes: &[Node], machines: &BTreeMap<String, Machine>, registered: &[String]) -> Vec<String> {
    let mut found = Vec::new();
    for name in registered {
        let Some(m) = machines.get(name) else { continue };
        let node = nodes.iter().find(|n| n.name_any() == *name);
        match (node, m.fate) {
            (None, Fate::Running | Fate::Stopped) => {
                found.push(format!("{name} deleted while its instance is {:?}", m.fate));
            }
            (Some(node), _) => {
                if m.fate == Fate::Running && has_taint(node, SHUTDOWN) {
                    found.push(format!("{name} tainted shut down while its instance runs"));
                }
                let pid = node.spec.as_ref().and_then(|s| s.provider_id.as_deref());
                if pid.is_some_and(|p| p != m.provider_id) {
                    found.push(format!(
                        "{name} bound to {pid:?}, its instance is {}",
                        m.provider_id
                    ));
                }
                let zone = node.labels().get(ZONE);
                if zone.is_some_and(|z| z != m.zone) {
                    found.push(format!(
                        "{name} labelled in zone {zone:?}, its instance is in {}",
                        m.zone
                    ));
                }
            }
            (None, Fate::Terminated) => {}
        }
    }
    found
}

/// Whether every Node is as the cloud says, once the faults stopped.
fn settled(nodes: &[Node], machines: &BTreeMap<String, Machine>) -> bool {
    machines.iter().all(|(name, m)| {
        let node = nodes.iter().find(|n| n.name_any() == *name);
        match (m.fate, node) {
            (Fate::Terminated, node) => node.is_none(),
            (_, None) => false,
            (Fate::Running, Some(n)) => initialized(n) && !has_taint(n, SHUTDOWN),
            (Fate::Stopped, Some(n)) => initialized(n) && has_taint(n, SHUTDOWN),
        }
    })
}

/// Starts both controllers; short leases (see [`LEASES`]), so that a killed one's successor
/// takes over within seconds and the storm meets working controllers.
fn start_controllers(cluster: &mut Cluster, generation: usize) {
    let mut args = vec!["--node-status-update-frequency", "1s"];
    args.extend(LEASES);
    cluster.start_controller(
        "cloud-node-controller",
        &format!("node-controller-{generation}"),
        &args,
    );
    let mut args = vec!["--node-monitor-period", "500ms"];
    args.extend(LEASES);
    cluster.start_controller(
        "cloud-node-lifecycle-controller",
        &format!("lifecycle-{generation}"),
        &args,
    );
}

async fn set_error_rate(cluster: &Cluster, rate: &str) -> bool {
    cluster
        .try_sim(&["knobs", "set", "--error-rate", &format!("*={rate}")])
        .await
        .is_some()
}

/// Runs the scenario.
pub async fn run(scale: Scale, mut dice: Dice) -> Outcome {
    let mut outcome = Outcome::new("nodes");
    let count = scale.pick(8, 24);
    let names: Vec<String> = (0..count).map(|i| format!("worker-{i:02}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut cluster = Cluster::start(ClusterSpec::with_instances(&refs)).await;
    let mut machines = BTreeMap::new();
    for (i, name) in names.iter().enumerate() {
        let zone = if i % 2 == 0 { "sim-east-1a" } else { "sim-east-1b" };
        let id = cluster.instance_id(name).await;
        machines.insert(
            name.clone(),
            Machine {
                provider_id: format!("simulator://{zone}/{id}"),
                zone,
                fate: Fate::Running,
            },
        );
    }
    let mut generation = 0;
    start_controllers(&mut cluster, generation);
    if !set_error_rate(&cluster, "0.5").await {
        outcome.violation("the simulator's knobs could not be set");
    }

    // Half the Nodes join before the storm's faults start, the rest during them.
    let mut registered: Vec<String> = Vec::new();
    let mut pending: Vec<String> = names.clone();
    for _ in 0..count / 2 {
        let name = pending.remove(0);
        cluster.register_node(&name, false).await;
        registered.push(name);
    }
    let run_for = scale.pick(Duration::from_secs(20), Duration::from_secs(120));
    let started = Instant::now();
    let mut last_fault = Instant::now();
    let mut next_fault = started + dice.between(Duration::from_secs(4), Duration::from_secs(8));
    let mut faults = 0u64;
    let mut injected = 0u64;
    let mut worst = 0;
    while started.elapsed() < run_for {
        if let Some(name) = (!pending.is_empty() && dice.chance(0.3)).then(|| pending.remove(0)) {
            cluster.register_node(&name, false).await;
            registered.push(name);
        }
        if started.elapsed() > run_for / 3 && !machines.values().any(|m| m.fate == Fate::Terminated) {
            change_instance(
                &mut cluster,
                &mut machines,
                "worker-00",
                Fate::Terminated,
                &mut outcome,
            )
            .await;
            change_instance(
                &mut cluster,
                &mut machines,
                "worker-01",
                Fate::Stopped,
                &mut outcome,
            )
            .await;
        }
        if Instant::now() >= next_fault {
            faults += 1;
            if faults.is_multiple_of(3) {
                injected += injected_errors(&cluster).await;
                cluster.kill_gateway().await;
                outcome.fault("gateway SIGKILL");
                cluster.start_gateway().await;
                if !set_error_rate(&cluster, "0.5").await {
                    outcome.violation("the simulator's knobs could not be set after a gateway restart");
                }
            } else {
                for label in [
                    format!("node-controller-{generation}"),
                    format!("lifecycle-{generation}"),
                ] {
                    if let Some(p) = cluster.proc_named(&label) {
                        p.kill().await;
                    }
                }
                outcome.fault("node controllers SIGKILL");
                generation += 1;
                start_controllers(&mut cluster, generation);
            }
            last_fault = Instant::now();
            next_fault = last_fault + dice.between(Duration::from_secs(4), Duration::from_secs(8));
        }
        if let Ok(list) = cluster.nodes().list(&ListParams::default()).await {
            let found = wrongs(&list.items, &machines, &registered);
            for w in &found {
                if !outcome.violations.contains(w) {
                    outcome.violation(w.clone());
                }
            }
            worst = worst.max(found.len());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for name in std::mem::take(&mut pending) {
        cluster.register_node(&name, false).await;
        registered.push(name);
    }
    injected += injected_errors(&cluster).await;
    outcome
        .faults
        .insert("provider call failures (50 %)".to_owned(), injected);
    set_error_rate(&cluster, "0").await;
    last_fault = last_fault.max(Instant::now());

    let settled_in = wait_until(
        &mut outcome,
        "every Node as the cloud says",
        Duration::from_secs(60),
        || {
            let nodes = cluster.nodes();
            let machines = &machines;
            async move {
                let list = nodes.list(&ListParams::default()).await.ok()?.items;
                settled(&list, machines).then_some(())
            }
        },
    )
    .await;
    if settled_in.is_some() {
        outcome.converged_after = Some(last_fault.elapsed());
    }
    if let Ok(list) = cluster.nodes().list(&ListParams::default()).await {
        let found = wrongs(&list.items, &machines, &registered);
        worst = worst.max(found.len());
        for w in found {
            if !outcome.violations.contains(&w) {
                outcome.violation(w);
            }
        }
    }
    outcome.wrong_nodes = worst as u64;
    outcome.note("nodes", count);
    cluster.stop().await;
    super::keep_logs(&cluster, &mut outcome, &dice);
    outcome
}

/// Terminates or stops `name`'s instance and marks its fate.
async fn change_instance(
    cluster: &mut Cluster,
    machines: &mut BTreeMap<String, Machine>,
    name: &str,
    fate: Fate,
    outcome: &mut Outcome,
) {
    let verb = match fate {
        Fate::Terminated => "terminate",
        Fate::Stopped => "stop",
        Fate::Running => "start",
    };
    let Some(m) = machines.get_mut(name) else { return };
    let id = m.provider_id.rsplit('/').next().unwrap_or_default().to_owned();
    // The simulator's console: its admin API is never failed by the error knobs.
    if cluster.try_sim(&["instances", verb, &id]).await.is_some() {
        m.fate = fate;
    } else {
        outcome.violation(format!("could not {verb} {name}'s instance"));
    }
}
