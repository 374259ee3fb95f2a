//! The resilience suite (`make chaos`, `make chaos-quick`): the real binaries as processes,
//! faults injected while they work (SIGKILLed replicas and gateways, failing provider calls, an
//! API server expiring, closing and restarting its watches, a vendor swap), then every
//! invariant checked against what the cloud and the API server hold.
//!
//! Each scenario returns an [`Outcome`]: the faults it injected, every violation it saw (an empty
//! list is the pass), the cloud objects leaked or missing, Nodes wrongly deleted, tainted or
//! mis-bound, and how long the system took to converge after the last fault. A scenario is
//! bounded in time: each wait has a deadline, and a missed deadline is a violation, not a hang.

pub mod journal;
pub mod nodes;
#[cfg(feature = "openstack")]
pub mod openstack;
pub mod routes;
pub mod services;
pub mod swap;
#[cfg(feature = "vsphere")]
pub mod vsphere;
pub mod watches;

use std::{collections::BTreeMap, future::Future, time::Duration};

use serde_json::{Value, json};
use tokio::time::Instant;

/// How long each scenario runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    /// A few faults each: part of `make test`, to keep the scenarios working.
    Quick,
    /// The full suite: the fault counts the issue asks for (at least 50 replica kills).
    Full,
}

impl Scale {
    /// `quick` or `full` of something.
    pub fn pick<T>(self, quick: T, full: T) -> T {
        match self {
            Self::Quick => quick,
            Self::Full => full,
        }
    }
}

/// What one scenario did and found.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// The scenario's name.
    pub scenario: String,
    /// Faults injected, by kind (e.g. `service-lb-controller SIGKILL` → 52).
    pub faults: BTreeMap<String, u64>,
    /// Every broken invariant, in words. Empty: the scenario passed.
    pub violations: Vec<String>,
    /// Cloud objects (load balancers, routes) no live Kubernetes object accounts for.
    pub leaked: u64,
    /// Cloud objects a live Kubernetes object needs and the cloud does not have.
    pub missing: u64,
    /// Nodes deleted, tainted or bound to an instance that they should not have been.
    pub wrong_nodes: u64,
    /// From the last fault to everything converged; `None` when it never did.
    pub converged_after: Option<Duration>,
    /// Anything else worth reporting (counts of work done).
    pub notes: BTreeMap<String, String>,
}

impl Outcome {
    /// An empty outcome of `scenario`.
    pub fn new(scenario: &str) -> Self {
        Self {
            scenario: scenario.to_owned(),
            ..Self::default()
        }
    }

    /// Counts one injected fault of `kind`.
    pub fn fault(&mut self, kind: &str) {
        *self.faults.entry(kind.to_owned()).or_default() += 1;
    }

    /// Records a broken invariant.
    pub fn violation(&mut self, what: impl Into<String>) {
        let what = what.into();
        eprintln!("chaos: VIOLATION in {}: {what}", self.scenario);
        self.violations.push(what);
    }

    /// Records a note.
    pub fn note(&mut self, key: &str, value: impl ToString) {
        self.notes.insert(key.to_owned(), value.to_string());
    }

    /// Whether every invariant held.
    pub fn passed(&self) -> bool {
        self.violations.is_empty() && self.leaked == 0 && self.missing == 0 && self.wrong_nodes == 0
    }

    /// The outcome as JSON.
    pub fn to_json(&self) -> Value {
        json!({
            "scenario": self.scenario,
            "faults": self.faults,
            "violations": self.violations,
            "leaked": self.leaked,
            "missing": self.missing,
            "wrong_nodes": self.wrong_nodes,
            "converged_after_s": self.converged_after.map(|d| d.as_secs_f64()),
            "notes": self.notes,
            "passed": self.passed(),
        })
    }
}

/// Waits until `check` answers `Some`, polling every 100 ms, for at most `timeout`; `None` (and
/// a violation recorded) when the deadline passes. The chaos suite's wait: a missed deadline is a
/// finding, not a panic.
pub async fn wait_until<T, F, Fut>(
    outcome: &mut Outcome,
    what: &str,
    timeout: Duration,
    mut check: F,
) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return Some(v);
        }
        if Instant::now() >= deadline {
            outcome.violation(format!("{what}: not within {timeout:?}"));
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A small deterministic random source (xorshift64*): a scenario's fault schedule is reproducible
/// from its seed, printed with the outcome.
#[derive(Debug, Clone)]
pub struct Dice {
    state: u64,
    seed: u64,
}

impl Dice {
    /// Seeded dice; a zero seed is replaced (xorshift never leaves zero).
    pub fn new(seed: u64) -> Self {
        Self {
            state: seed.max(1),
            seed,
        }
    }

    /// The seed the dice started from.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The next raw value.
    pub fn roll(&mut self) -> u64 {
        let mut x = self.state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.state = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A value in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.roll() % n.max(1)
    }

    /// A duration uniformly in `[lo, hi]`.
    pub fn between(&mut self, lo: Duration, hi: Duration) -> Duration {
        let span = hi.saturating_sub(lo).as_millis() as u64;
        lo + Duration::from_millis(self.below(span + 1))
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        (self.roll() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }
}

/// Provider calls the simulator failed on purpose since the gateway started (0 when it does not
/// answer).
pub async fn injected_errors(cluster: &crate::Cluster) -> u64 {
    cluster
        .try_sim(&["stats"])
        .await
        .and_then(|s| s["injected_errors_total"].as_u64())
        .unwrap_or(0)
}

/// Keeps a scenario run's process logs: always with `CHAOS_LOGS=DIR`, and for a failed run
/// also without it (in `target/chaos-logs`), so a failure can be read without a rerun. They go
/// to `<scenario>-<seed>/` there (the cluster's own directory goes with it), noted in the
/// outcome as `logs`.
pub fn keep_logs(cluster: &crate::Cluster, outcome: &mut Outcome, dice: &Dice) {
    let root = match std::env::var_os("CHAOS_LOGS") {
        Some(dir) => std::path::PathBuf::from(dir),
        None if !outcome.passed() => {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/chaos-logs")
        }
        None => return,
    };
    let dir = root.join(format!("{}-{}", outcome.scenario, dice.seed()));
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("chaos: cannot keep the logs in {}: {e}", dir.display());
        return;
    }
    for (i, proc) in cluster.procs.iter().enumerate() {
        let _ = std::fs::write(dir.join(format!("{i:02}-{}.log", proc.name)), proc.log());
    }
    let dir = dir.canonicalize().unwrap_or(dir);
    outcome.note("logs", dir.display());
}

/// Every scenario, by name, in the order `make chaos` runs them; `openstack` (on the OpenStack
/// test cloud) and `vsphere` (on vcsim) when built with their features.
pub const SCENARIOS: &[&str] = &[
    "services",
    "nodes",
    "watches",
    "vendor-swap",
    "routes",
    #[cfg(feature = "openstack")]
    "openstack",
    #[cfg(feature = "vsphere")]
    "vsphere",
];

/// Runs scenario `name` at `scale` with dice seeded by `seed`.
pub async fn run(name: &str, scale: Scale, seed: u64) -> Outcome {
    let dice = Dice::new(seed);
    let started = Instant::now();
    let mut outcome = match name {
        "services" => services::run(scale, dice).await,
        "nodes" => nodes::run(scale, dice).await,
        "watches" => watches::run(scale, dice).await,
        "vendor-swap" => swap::run(scale, dice).await,
        "routes" => routes::run(scale, dice).await,
        #[cfg(feature = "openstack")]
        "openstack" => openstack::run(scale, dice).await,
        #[cfg(feature = "vsphere")]
        "vsphere" => vsphere::run(scale, dice).await,
        other => {
            let mut o = Outcome::new(other);
            o.violation(format!("no scenario {other:?}; known: {}", SCENARIOS.join(", ")));
            o
        }
    };
    outcome.note("seed", seed);
    outcome.note("ran_for_s", format!("{:.1}", started.elapsed().as_secs_f64()));
    outcome
}

/// The outcomes as a table: scenario, seed, faults, violations, leaked / missing, wrong Nodes,
/// time to converge after the last fault.
pub fn table(outcomes: &[Outcome]) -> String {
    let header = [
        "scenario",
        "seed",
        "faults injected",
        "violations",
        "leaked / missing",
        "wrong Nodes",
        "converged after last fault",
    ];
    let rows: Vec<[String; 7]> = outcomes
        .iter()
        .map(|o| {
            [
                o.scenario.clone(),
                o.notes.get("seed").cloned().unwrap_or_default(),
                o.faults
                    .iter()
                    .map(|(k, v)| format!("{v} {k}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                o.violations.len().to_string(),
                format!("{} / {}", o.leaked, o.missing),
                o.wrong_nodes.to_string(),
                o.converged_after
                    .map(|d| format!("{:.1} s", d.as_secs_f64()))
                    .unwrap_or_else(|| "never".to_owned()),
            ]
        })
        .collect();
    let mut out = format!("| {} |\n|{}\n", header.join(" | "), "---|".repeat(header.len()));
    for row in rows {
        out.push_str(&format!("| {} |\n", row.join(" | ")));
    }
    out
}
