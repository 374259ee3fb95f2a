//! Scenario `vsphere`: the `nodes` scenario on vcsim (`vsphere_fixture`, a vcsim of its own).
//! `cloud-gateway --provider vsphere` reaches vcsim through the fault-injecting proxy
//! (`vsphere_fixture::proxy::VcsimProxy`: 503s, NotAuthenticated faults, connections dropped
//! before or after the call, slow answers), with cloud-node-controller and
//! cloud-node-lifecycle-controller (`--node-monitor-period 1s`). Nodes join, some with their
//! providerID (kubelet `--provider-id`), some by name, while the gateway and the controllers are
//! SIGKILLed and restarted, vcsim forgets every session (its admin API terminates them, the
//! ContainerViews with them), and VMs are powered off, destroyed, or destroyed and made again
//! under the same name with a new BIOS UUID (whose kubelet registers the Node again once the
//! old one is gone). Every Node is NotReady, so the lifecycle controller asks about each one
//! every second: a failed call read as "VM gone" would delete a Node.
//!
//! Checked on every poll of the Nodes and at the end:
//! - a Node deleted whose VM exists (powered on or off): wrongly deleted;
//! - the shutdown taint on a Node whose VM is powered on: wrongly tainted;
//! - a providerID other than the BIOS UUID of the VM the Node was registered for: another
//!   VM's (a re-created VM's new Node bound to the old UUID included).
//!
//! Once the faults stop, within a deadline: every existing VM's Node initialized with its own
//! providerID, destroyed VMs' Nodes deleted (a re-created one's replaced by a Node of the new
//! VM), powered-off VMs' Nodes tainted shut down. Converged-after is measured from the last
//! fault to that state.

use std::{collections::BTreeMap, time::Duration};

use k8s_openapi::api::core::v1::Node;
use kube::{
    ResourceExt,
    api::{ListParams, PostParams},
};
use serde_json::json;
use tokio::time::Instant;
use vsphere_fixture::{
    Guest, Vcsim, Vm,
    proxy::{Faults, VcsimProxy},
};

use super::{Dice, Outcome, Scale, services::LEASES};
use crate::{
    Cluster, ClusterSpec, binary,
    nodes::{TAINT_UNINITIALIZED, has_taint, initialized, provider_id},
};

const SHUTDOWN: &str = "node.cloudprovider.kubernetes.io/shutdown";

/// What the proxy injects while the faults run: about one SOAP call in three meets one.
const FAULTS: Faults = Faults {
    unavailable: 8,
    not_authenticated: 8,
    dropped: 8,
    slow: 8,
    slow_for: (Duration::from_secs(1), Duration::from_secs(4)),
};

/// What the scenario did to a VM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// Powered on (a re-created VM's new incarnation included).
    Running,
    /// Powered off.
    Off,
    /// Destroyed, not made again.
    Destroyed,
}

/// A change the scenario makes to a VM whose Node is initialized.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    PowerOff,
    Destroy,
    Recreate,
}

impl Change {
    fn fault(self) -> &'static str {
        match self {
            Self::PowerOff => "VM powered off",
            Self::Destroy => "VM destroyed",
            Self::Recreate => "VM destroyed and re-created (new UUID)",
        }
    }
}

/// A VM and its Node, as the scenario made them.
#[derive(Debug, Clone)]
struct Machine {
    /// The current incarnation.
    vm: Vm,
    moref: String,
    /// The BIOS UUID of every incarnation, the current one last.
    uuids: Vec<String>,
    fate: Fate,
    /// Its kubelet registers with `--provider-id` (else by name only).
    by_provider_id: bool,
    /// The incarnation (index in `uuids`) the Node now registered was registered for.
    node_for: Option<usize>,
}

impl Machine {
    fn current(&self) -> usize {
        self.uuids.len() - 1
    }

    fn provider_id(&self, incarnation: usize) -> String {
        format!("vsphere://{}", self.uuids[incarnation])
    }
}

/// The wrong things a list of Nodes shows, in words.
fn wrongs(nodes: &[Node], machines: &BTreeMap<String, Machine>) -> Vec<String> {
    let mut found = Vec::new();
    for (name, m) in machines {
        let Some(k) = m.node_for else { continue };
        let current = k == m.current();
        match nodes.iter().find(|n| n.name_any() == *name) {
            None if current && m.fate != Fate::Destroyed => {
                found.push(format!("{name} deleted while its VM exists ({:?})", m.fate));
            }
            None => {}
            Some(node) => {
                if current && m.fate == Fate::Running && has_taint(node, SHUTDOWN) {
                    found.push(format!("{name} tainted shut down while its VM is powered on"));
                }
                let pid = provider_id(node);
                if !pid.is_empty() && pid != m.provider_id(k) {
                    found.push(format!(
                        "{name} bound to {pid}, the VM it was registered for is {}",
                        m.provider_id(k)
                    ));
                }
            }
        }
    }
    found
}

/// Whether every Node is as vCenter says, once the faults stopped.
fn settled(nodes: &[Node], machines: &BTreeMap<String, Machine>) -> bool {
    machines
        .iter()
        .all(|(name, m)| settled_one(nodes.iter().find(|n| n.name_any() == *name), m))
}

/// Whether `m`'s Node (`node`, by its name) is as vCenter says.
fn settled_one(node: Option<&Node>, m: &Machine) -> bool {
    match (m.fate, node) {
        (Fate::Destroyed, node) => node.is_none(),
        (_, None) => false,
        (fate, Some(n)) => {
            m.node_for == Some(m.current())
                && provider_id(n) == m.provider_id(m.current())
                && initialized(n.clone()).is_some()
                && has_taint(n, SHUTDOWN) == (fate == Fate::Off)
        }
    }
}

/// Whether the Node of `m` is initialized as its current VM's, and that VM runs: a VM the
/// scenario may change (a Node never initialized is looked up by name, and only a lookup by
/// providerID reports a VM gone).
fn changeable(nodes: &[Node], name: &str, m: &Machine) -> bool {
    m.fate == Fate::Running
        && m.node_for == Some(m.current())
        && nodes.iter().any(|n| {
            n.name_any() == name
                && provider_id(n) == m.provider_id(m.current())
                && initialized(n.clone()).is_some()
        })
}

/// Registers `m`'s Node for its current VM, as kubelet `--cloud-provider=external` does, NotReady.
async fn register(cluster: &Cluster, name: &str, m: &mut Machine) {
    if m.by_provider_id {
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": { "name": name, "labels": { "kubernetes.io/hostname": name } },
            "spec": {
                "providerID": m.provider_id(m.current()),
                "taints": [{ "key": TAINT_UNINITIALIZED, "value": "true", "effect": "NoSchedule" }],
            },
        }))
        .expect("a Node");
        cluster
            .nodes()
            .create(&PostParams::default(), &node)
            .await
            .expect("create node");
        cluster.set_ready(name, false).await;
    } else {
        cluster.register_node(name, false).await;
    }
    m.node_for = Some(m.current());
}

/// Registers again the Node of every re-created VM whose old Node is gone (its kubelet, on the
/// new VM, registers as soon as the name is free).
async fn register_again(cluster: &Cluster, nodes: &[Node], machines: &mut BTreeMap<String, Machine>) {
    for (name, m) in machines.iter_mut() {
        let old = m.node_for.is_some_and(|k| k < m.current());
        if old && !nodes.iter().any(|n| n.name_any() == *name) {
            register(cluster, name, m).await;
        }
    }
}

/// The node controllers: binary, label prefix and flags (with the short [`LEASES`], so that a
/// killed one's successor takes over within seconds).
const CONTROLLERS: [(&str, &str, &[&str]); 2] = [
    (
        "cloud-node-controller",
        "node-controller",
        &["--node-status-update-frequency", "1s"],
    ),
    (
        "cloud-node-lifecycle-controller",
        "lifecycle",
        &["--node-monitor-period", "1s"],
    ),
];

fn label(which: usize, generation: usize) -> String {
    format!("{}-{generation}", CONTROLLERS[which].1)
}

fn start_controller(cluster: &mut Cluster, which: usize, generation: usize) {
    let (binary, _, flags) = CONTROLLERS[which];
    let mut args = flags.to_vec();
    args.extend(LEASES);
    cluster.start_controller(binary, &label(which, generation), &args);
}

fn start_controllers(cluster: &mut Cluster, generation: usize) {
    for which in 0..CONTROLLERS.len() {
        start_controller(cluster, which, generation);
    }
}

/// Starts again a controller of this generation that exited because another process took its
/// health port between `free_port` and its bind (the machine is shared with other runs); any
/// other exit is a violation.
fn keep_controllers(cluster: &mut Cluster, generation: usize, outcome: &mut Outcome) {
    for which in 0..CONTROLLERS.len() {
        let label = label(which, generation);
        let Some(proc) = cluster.proc_named(&label) else {
            continue;
        };
        let Some(status) = proc.exited() else {
            continue;
        };
        if proc.log().contains("Address already in use") {
            start_controller(cluster, which, generation);
            let again = outcome.notes.get("controllers_started_again_port_taken");
            let n = again.and_then(|n| n.parse::<u64>().ok()).unwrap_or(0) + 1;
            outcome.note("controllers_started_again_port_taken", n);
        } else {
            let what = format!("{label} exited on its own ({status})");
            if !outcome.violations.contains(&what) {
                outcome.violation(what);
            }
        }
    }
}

/// A vcsim of the scenario's own (its sessions are terminated: a shared one's other clients
/// would meet that too), stopped when dropped.
struct OwnVcsim(Vcsim);

impl Drop for OwnVcsim {
    fn drop(&mut self) {
        self.0.stop();
    }
}

/// Runs a blocking call of the fixture (curl) without holding up the runtime's other tasks.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

/// Makes `change` to `m`'s VM.
fn change_vm(vcsim: &Vcsim, m: &mut Machine, change: Change) {
    match change {
        Change::PowerOff => {
            blocking(|| vcsim.vm_action(&m.moref, "power-off"));
            m.fate = Fate::Off;
        }
        Change::Destroy => {
            blocking(|| vcsim.vm_action(&m.moref, "destroy"));
            m.fate = Fate::Destroyed;
        }
        Change::Recreate => {
            blocking(|| vcsim.vm_action(&m.moref, "destroy"));
            // A new VM (its own UUID and address) under the old name and hostname.
            let fresh = Vm::ubuntu("chaos", &vcsim.unique_ipv4());
            let vm = Vm {
                name: m.vm.name.clone(),
                guest: Guest {
                    host_name: m.vm.guest.host_name.clone(),
                    ..fresh.guest.clone()
                },
                ..fresh
            };
            m.moref = blocking(|| vcsim.create_vm(&vm));
            m.uuids.push(vm.uuid.clone());
            m.vm = vm;
        }
    }
}

/// Runs the scenario.
pub async fn run(scale: Scale, mut dice: Dice) -> Outcome {
    let mut outcome = Outcome::new("vsphere");
    let count = scale.pick(6, 16);
    let mut cluster = Cluster::start(ClusterSpec::with_instances(&[])).await;
    let dir = cluster.dir.path().join("vcsim");
    let vcsim = match tokio::task::spawn_blocking(move || Vcsim::start(&dir)).await {
        Ok(v) => OwnVcsim(v),
        Err(e) => {
            outcome.violation(format!("vcsim did not start: {e}"));
            return outcome;
        }
    };
    let vcsim = &vcsim.0;
    let proxy = VcsimProxy::start(vcsim, cluster.dir.path()).await;
    let conf = cluster.dir.path().join("vsphere.conf");
    std::fs::write(&conf, proxy.conf(vcsim, "")).expect("vsphere.conf");
    // No answer cache: every lookup of the lifecycle controller's reaches vCenter through the
    // proxy (the gateway's default 10 s cache would answer most of them, and hide the faults).
    let gateway = crate::vsphere_gateway_args(&conf);

    let vms: Vec<Vm> = (0..count)
        .map(|_| Vm::ubuntu("chaos", &vcsim.unique_ipv4()))
        .collect();
    let morefs = blocking(|| vcsim.create_vms(&vms));
    let mut machines: BTreeMap<String, Machine> = vms
        .into_iter()
        .zip(morefs)
        .enumerate()
        .map(|(i, (vm, moref))| {
            let m = Machine {
                uuids: vec![vm.uuid.clone()],
                vm,
                moref,
                fate: Fate::Running,
                by_provider_id: i % 2 == 0,
                node_for: None,
            };
            (m.vm.name.clone(), m)
        })
        .collect();
    let names: Vec<String> = machines.keys().cloned().collect();

    cluster
        .swap_gateway(&binary("cloud-gateway"), &gateway, &[])
        .await;
    let mut generation = 0;
    start_controllers(&mut cluster, generation);
    proxy.faults(FAULTS, dice.seed());

    // Half the Nodes join before the process kills start, the rest during them.
    let mut pending: Vec<String> = names.clone();
    for _ in 0..count / 2 {
        let name = pending.remove(0);
        if let Some(m) = machines.get_mut(&name) {
            register(&cluster, &name, m).await;
        }
    }
    let run_for = scale.pick(Duration::from_secs(14), Duration::from_secs(80));
    let pace = scale.pick(
        (Duration::from_secs(2), Duration::from_secs(4)),
        (Duration::from_secs(2), Duration::from_secs(5)),
    );
    // The VM changes, in a random order, spread over the run.
    let mut changes: Vec<Change> = scale.pick(
        vec![Change::PowerOff, Change::Destroy, Change::Recreate],
        vec![
            Change::PowerOff,
            Change::PowerOff,
            Change::Destroy,
            Change::Destroy,
            Change::Recreate,
            Change::Recreate,
            Change::Recreate,
        ],
    );
    for i in (1..changes.len()).rev() {
        changes.swap(i, dice.below(i as u64 + 1) as usize);
    }
    let change_every = run_for / (changes.len() as u32 + 1);
    let started = Instant::now();
    let mut next_change = started + change_every;
    let mut last_fault = Instant::now();
    let mut next_fault = started + dice.between(pace.0, pace.1);
    let mut worst = 0;
    let mut last_list: Vec<Node> = Vec::new();
    while started.elapsed() < run_for {
        if !pending.is_empty() && dice.chance(0.3) {
            let name = pending.remove(0);
            if let Some(m) = machines.get_mut(&name) {
                register(&cluster, &name, m).await;
            }
        }
        if Instant::now() >= next_change && !changes.is_empty() {
            let candidates: Vec<String> = machines
                .iter()
                .filter(|(name, m)| changeable(&last_list, name, m))
                .map(|(name, _)| name.clone())
                .collect();
            if !candidates.is_empty() {
                let name = &candidates[dice.below(candidates.len() as u64) as usize];
                let change = changes.remove(0);
                if let Some(m) = machines.get_mut(name) {
                    change_vm(vcsim, m, change);
                }
                outcome.fault(change.fault());
                last_fault = Instant::now();
                next_change = last_fault + change_every;
            }
        }
        if Instant::now() >= next_fault {
            match dice.below(7) {
                // A killed controller's successor waits out its lease (4 s), asking nothing
                // meanwhile: kills are the rarer fault, so that the proxy's faults meet calls.
                0 | 1 => {
                    cluster.kill_gateway().await;
                    outcome.fault("gateway SIGKILL");
                    cluster
                        .swap_gateway(&binary("cloud-gateway"), &gateway, &[])
                        .await;
                }
                2..=4 => {
                    blocking(|| vcsim.terminate_sessions());
                    outcome.fault("vCenter sessions terminated");
                }
                _ => {
                    for which in 0..CONTROLLERS.len() {
                        if let Some(p) = cluster.proc_named(&label(which, generation)) {
                            p.kill().await;
                        }
                    }
                    outcome.fault("node controllers SIGKILL");
                    generation += 1;
                    start_controllers(&mut cluster, generation);
                }
            }
            last_fault = Instant::now();
            next_fault = last_fault + dice.between(pace.0, pace.1);
        }
        keep_controllers(&mut cluster, generation, &mut outcome);
        if let Ok(list) = cluster.nodes().list(&ListParams::default()).await {
            worst = worst.max(record(&mut outcome, &list.items, &machines));
            register_again(&cluster, &list.items, &mut machines).await;
            last_list = list.items;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    for name in std::mem::take(&mut pending) {
        if let Some(m) = machines.get_mut(&name) {
            register(&cluster, &name, m).await;
        }
    }
    if !changes.is_empty() {
        outcome.violation(format!(
            "{} VM changes not made: no VM with an initialized Node to make them to",
            changes.len()
        ));
    }
    proxy.faults(Faults::default(), 0);
    for (kind, n) in proxy.counts() {
        outcome.faults.insert(kind.to_owned(), n);
    }
    last_fault = last_fault.max(Instant::now());

    // Converge: the Nodes polled (and re-created VMs' Nodes registered again) until all are as
    // vCenter says.
    let deadline = Instant::now() + scale.pick(Duration::from_secs(40), Duration::from_secs(60));
    loop {
        keep_controllers(&mut cluster, generation, &mut outcome);
        if let Ok(list) = cluster.nodes().list(&ListParams::default()).await {
            worst = worst.max(record(&mut outcome, &list.items, &machines));
            register_again(&cluster, &list.items, &mut machines).await;
            if settled(&list.items, &machines) {
                outcome.converged_after = Some(last_fault.elapsed());
                break;
            }
            if Instant::now() >= deadline {
                for (name, m) in &machines {
                    let node = list.items.iter().find(|n| n.name_any() == *name);
                    if !settled_one(node, m) {
                        outcome.violation(format!(
                            "{name} ({:?}, UUID {}) not as vCenter says after the faults stopped: {}",
                            m.fate,
                            m.uuids[m.current()],
                            describe(node)
                        ));
                    }
                }
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    outcome.wrong_nodes = worst as u64;
    outcome.note("nodes", count);
    outcome.note("soap_calls_through_proxy", proxy.calls());
    cluster.stop().await;
    super::keep_logs(&cluster, &mut outcome, &dice);
    outcome
}

/// Records the wrongs a list shows as violations (each once); how many there are.
fn record(outcome: &mut Outcome, nodes: &[Node], machines: &BTreeMap<String, Machine>) -> usize {
    let found = wrongs(nodes, machines);
    for w in &found {
        if !outcome.violations.contains(w) {
            outcome.violation(w.clone());
        }
    }
    found.len()
}

/// A Node in a few words, for a violation.
fn describe(node: Option<&Node>) -> String {
    let Some(n) = node else {
        return "no Node".into();
    };
    let taints: Vec<&str> = n
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .map(|t| t.iter().map(|t| t.key.as_str()).collect())
        .unwrap_or_default();
    format!(
        "providerID {:?}, taints {taints:?}, initialized {}",
        provider_id(n),
        initialized(n.clone()).is_some()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine(fate: Fate, uuids: &[&str], node_for: Option<usize>) -> Machine {
        Machine {
            vm: Vm::ubuntu("m", "10.0.0.1"),
            moref: "vm-1".into(),
            uuids: uuids.iter().map(|u| (*u).to_owned()).collect(),
            fate,
            by_provider_id: false,
            node_for,
        }
    }

    fn node(name: &str, pid: &str, taints: &[&str], internal_ip: bool) -> Node {
        let taints: Vec<_> = taints
            .iter()
            .map(|k| json!({"key": k, "effect": "NoSchedule"}))
            .collect();
        let addresses: Vec<_> = internal_ip
            .then(|| json!({"type": "InternalIP", "address": "10.0.0.1"}))
            .into_iter()
            .collect();
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"providerID": pid, "taints": taints},
            "status": {"addresses": addresses},
        }))
        .unwrap()
    }

    fn one(m: Machine) -> BTreeMap<String, Machine> {
        BTreeMap::from([("a".to_owned(), m)])
    }

    #[test]
    fn wrongs_are_deletions_of_live_vms_taints_of_running_ones_and_other_vms_ids() {
        let ok = node("a", "vsphere://u1", &[], true);
        let cases: Vec<(&str, Machine, Vec<Node>, usize)> = vec![
            (
                "running, right",
                machine(Fate::Running, &["u1"], Some(0)),
                vec![ok.clone()],
                0,
            ),
            (
                "not registered yet",
                machine(Fate::Running, &["u1"], None),
                vec![],
                0,
            ),
            (
                "running, deleted",
                machine(Fate::Running, &["u1"], Some(0)),
                vec![],
                1,
            ),
            ("off, deleted", machine(Fate::Off, &["u1"], Some(0)), vec![], 1),
            (
                "destroyed, deleted",
                machine(Fate::Destroyed, &["u1"], Some(0)),
                vec![],
                0,
            ),
            (
                "running, tainted shut down",
                machine(Fate::Running, &["u1"], Some(0)),
                vec![node("a", "vsphere://u1", &[SHUTDOWN], true)],
                1,
            ),
            (
                "off, tainted shut down",
                machine(Fate::Off, &["u1"], Some(0)),
                vec![node("a", "vsphere://u1", &[SHUTDOWN], true)],
                0,
            ),
            (
                "another VM's providerID",
                machine(Fate::Running, &["u1"], Some(0)),
                vec![node("a", "vsphere://u9", &[], true)],
                1,
            ),
            // Re-created: the old Node (for incarnation 0) may stay a while, and go.
            (
                "re-created, old Node",
                machine(Fate::Running, &["u1", "u2"], Some(0)),
                vec![ok.clone()],
                0,
            ),
            (
                "re-created, old Node gone",
                machine(Fate::Running, &["u1", "u2"], Some(0)),
                vec![],
                0,
            ),
            (
                "re-created, new Node bound to the old VM",
                machine(Fate::Running, &["u1", "u2"], Some(1)),
                vec![ok.clone()],
                1,
            ),
            (
                "re-created, new Node deleted",
                machine(Fate::Running, &["u1", "u2"], Some(1)),
                vec![],
                1,
            ),
        ];
        for (what, m, nodes, want) in cases {
            assert_eq!(wrongs(&nodes, &one(m)).len(), want, "{what}");
        }
    }

    #[test]
    fn settled_is_every_node_as_its_current_vm_says() {
        let cases: Vec<(&str, Machine, Vec<Node>, bool)> = vec![
            (
                "running, initialized",
                machine(Fate::Running, &["u1"], Some(0)),
                vec![node("a", "vsphere://u1", &[], true)],
                true,
            ),
            (
                "running, uninitialized",
                machine(Fate::Running, &["u1"], Some(0)),
                vec![node("a", "vsphere://u1", &[TAINT_UNINITIALIZED], true)],
                false,
            ),
            (
                "running, no address",
                machine(Fate::Running, &["u1"], Some(0)),
                vec![node("a", "vsphere://u1", &[], false)],
                false,
            ),
            (
                "off, not tainted",
                machine(Fate::Off, &["u1"], Some(0)),
                vec![node("a", "vsphere://u1", &[], true)],
                false,
            ),
            (
                "off, tainted",
                machine(Fate::Off, &["u1"], Some(0)),
                vec![node("a", "vsphere://u1", &[SHUTDOWN], true)],
                true,
            ),
            (
                "destroyed, Node left",
                machine(Fate::Destroyed, &["u1"], Some(0)),
                vec![node("a", "vsphere://u1", &[], true)],
                false,
            ),
            (
                "destroyed, Node gone",
                machine(Fate::Destroyed, &["u1"], Some(0)),
                vec![],
                true,
            ),
            (
                "re-created, old Node left",
                machine(Fate::Running, &["u1", "u2"], Some(0)),
                vec![node("a", "vsphere://u1", &[], true)],
                false,
            ),
            (
                "re-created, new Node initialized",
                machine(Fate::Running, &["u1", "u2"], Some(1)),
                vec![node("a", "vsphere://u2", &[], true)],
                true,
            ),
            (
                "never registered",
                machine(Fate::Running, &["u1"], None),
                vec![],
                false,
            ),
        ];
        for (what, m, nodes, want) in cases {
            assert_eq!(settled(&nodes, &one(m)), want, "{what}");
        }
    }
}
