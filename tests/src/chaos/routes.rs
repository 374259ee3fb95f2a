//! Scenario `routes`: node-route-controller SIGKILLed again and again while it creates the
//! routes of Nodes joining with pod CIDRs (each cloud call takes 100 ms, so creation is spread
//! over seconds), with Nodes leaving meanwhile. A kill is counted as "during route creation" when
//! the cloud had fewer routes than the Nodes need at the moment of the kill.
//!
//! Once the kills stop: the cloud's routes are exactly one per pod CIDR of each live Node (none
//! leaked, none missing, none twice), and every live Node's NetworkUnavailable condition is
//! False. Converged-after is measured from the last kill to that state.

use std::{
    collections::{BTreeMap, BTreeSet},
    time::Duration,
};

use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::json;
use tokio::time::Instant;

use super::{Dice, Outcome, Scale, services::LEASES, wait_until};
use crate::{Cluster, ClusterSpec};

const CLUSTER_CIDR: &str = "10.244.0.0/16";

/// The simulator's routes of the `kubernetes` cluster as `target destination`, with repeats.
async fn routes(cluster: &Cluster) -> Option<Vec<String>> {
    let list = cluster.try_sim(&["routes", "list"]).await?;
    Some(
        list.as_array()?
            .iter()
            .filter(|r| r["cluster"] == "kubernetes")
            .map(|r| {
                format!(
                    "{} {}",
                    r["target_node"].as_str().unwrap_or_default(),
                    r["destination_cidr"].as_str().unwrap_or_default()
                )
            })
            .collect(),
    )
}

/// Starts the controller; short leases (see [`LEASES`]), so that a killed one's successor takes
/// over within seconds.
fn start(cluster: &mut Cluster, generation: usize) {
    let mut args = vec![
        "--cluster-cidr",
        CLUSTER_CIDR,
        "--route-reconciliation-period",
        "10s",
    ];
    args.extend(LEASES);
    cluster.start_controller(
        "node-route-controller",
        &format!("node-route-controller-{generation}"),
        &args,
    );
}

async fn join(cluster: &Cluster, name: &str, cidr: &str) -> bool {
    cluster.register_node(name, true).await;
    let patch = json!({"spec": {"podCIDR": cidr, "podCIDRs": [cidr]}});
    cluster
        .nodes()
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .is_ok()
}

/// Whether every wanted Node's NetworkUnavailable condition is False.
async fn networks_available(cluster: &Cluster, wanted: &BTreeMap<String, String>) -> bool {
    for name in wanted.keys() {
        let Ok(Some(node)) = cluster.nodes().get_opt(name).await else {
            return false;
        };
        let available = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "NetworkUnavailable"))
            .is_some_and(|c| c.status == "False");
        if !available {
            return false;
        }
    }
    true
}

/// Runs the scenario.
pub async fn run(scale: Scale, mut dice: Dice) -> Outcome {
    let mut outcome = Outcome::new("routes");
    let count = scale.pick(10, 40);
    let names: Vec<String> = (0..count).map(|i| format!("node-{i:02}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut cluster = Cluster::start(ClusterSpec::with_instances(&refs)).await;
    if cluster
        .try_sim(&["knobs", "set", "--latency", "100ms"])
        .await
        .is_none()
    {
        outcome.violation("the simulator's knobs could not be set");
    }
    let mut generation = 0;
    start(&mut cluster, generation);

    // Nodes join in waves; each wave's routes are being created when the controller is killed.
    let mut wanted: BTreeMap<String, String> = BTreeMap::new();
    let mut last_fault = Instant::now();
    let waves = scale.pick(3, 8);
    let per_wave = count / waves;
    let mut joined = 0;
    for wave in 0..waves {
        let upto = if wave + 1 == waves {
            count
        } else {
            joined + per_wave
        };
        for (i, name) in names.iter().enumerate().take(upto).skip(joined) {
            let cidr = format!("10.244.{i}.0/24");
            if join(&cluster, name, &cidr).await {
                wanted.insert(name.clone(), format!("{name} {cidr}"));
            }
        }
        joined = upto;
        // A Node leaves now and then: its route must go, even across kills.
        if wave % 2 == 1
            && let Some(name) = wanted
                .keys()
                .nth(dice.below(wanted.len() as u64) as usize)
                .cloned()
            && cluster
                .nodes()
                .delete(&name, &DeleteParams::default())
                .await
                .is_ok()
        {
            wanted.remove(&name);
        }
        // Kill it while it works: each kill a random moment into the creation.
        for _ in 0..scale.pick(2, 4) {
            tokio::time::sleep(dice.between(Duration::from_millis(200), Duration::from_millis(1200))).await;
            let have = routes(&cluster).await.unwrap_or_default().len();
            if let Some(p) = cluster.proc_named(&format!("node-route-controller-{generation}")) {
                p.kill().await;
            }
            outcome.fault("node-route-controller SIGKILL");
            if have < wanted.len() {
                outcome.fault("node-route-controller SIGKILL during route creation");
            }
            generation += 1;
            start(&mut cluster, generation);
            last_fault = Instant::now();
        }
    }

    let want: BTreeSet<String> = wanted.values().cloned().collect();
    let converged = wait_until(
        &mut outcome,
        "the routes exactly those of the live Nodes",
        Duration::from_secs(90),
        || {
            let cluster = &cluster;
            let want = &want;
            let wanted = &wanted;
            async move {
                let have = routes(cluster).await?;
                let set: BTreeSet<String> = have.iter().cloned().collect();
                (set == *want && have.len() == set.len() && networks_available(cluster, wanted).await)
                    .then_some(())
            }
        },
    )
    .await;
    if converged.is_some() {
        outcome.converged_after = Some(last_fault.elapsed());
    }
    let have = routes(&cluster).await.unwrap_or_default();
    let set: BTreeSet<String> = have.iter().cloned().collect();
    outcome.leaked = (set.difference(&want).count() + (have.len() - set.len())) as u64;
    outcome.missing = want.difference(&set).count() as u64;
    for r in set.difference(&want) {
        outcome.violation(format!("route {r} of no live Node"));
    }
    for r in want.difference(&set) {
        outcome.violation(format!("route {r} missing"));
    }
    if have.len() != set.len() {
        outcome.violation(format!("{} routes created twice", have.len() - set.len()));
    }
    outcome.note("routes", want.len());
    cluster.stop().await;
    super::keep_logs(&cluster, &mut outcome, &dice);
    outcome
}
