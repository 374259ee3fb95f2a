//! `make chaos`: the resilience suite (see `e2e::chaos`). Runs every scenario (or those named
//! with `--only`), prints a table of faults injected and invariants broken, writes it as JSON
//! (`--json PATH`) and exits 1 when any invariant broke.
//!
//! `--quick` runs each scenario briefly (what `make test` runs); `--seed N` replays a fault
//! schedule; `--repeat N` runs the scenarios N times in a row, the first time from `--seed` (or
//! the clock) and each further time from a fresh seed, every seed in the table. A failed run
//! keeps its processes' logs (see `chaos::keep_logs`).
//!
//! Scenario `openstack` runs on the OpenStack test cloud in `$OPENSTACK_TEST_CLOUD` (else
//! `target/openstack`), started there when none answers (`scripts/openstack/install.sh` first).
//! Scenario `vsphere` starts a vcsim of its own (`scripts/vsphere/install.sh` first).

use std::{path::PathBuf, process::ExitCode};

use e2e::chaos::{self, SCENARIOS, Scale};
use serde_json::Value;

struct Args {
    scale: Scale,
    json: Option<PathBuf>,
    only: Vec<String>,
    seed: u64,
    repeat: u32,
}

/// A seed from the clock.
fn fresh_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1)
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        scale: Scale::Full,
        json: None,
        only: Vec::new(),
        seed: fresh_seed(),
        repeat: 1,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--quick" => args.scale = Scale::Quick,
            "--json" => args.json = Some(it.next().ok_or("--json needs a path")?.into()),
            "--only" => {
                let names = it.next().ok_or("--only needs scenario names")?;
                for name in names.split(',') {
                    if !SCENARIOS.contains(&name) {
                        return Err(format!("no scenario {name:?}; known: {}", SCENARIOS.join(", ")));
                    }
                    args.only.push(name.to_owned());
                }
            }
            "--seed" => {
                let seed = it.next().ok_or("--seed needs a number")?;
                args.seed = seed
                    .parse()
                    .map_err(|_| format!("--seed {seed:?} is not a number"))?;
            }
            "--repeat" => {
                let n = it.next().ok_or("--repeat needs a number")?;
                args.repeat = n
                    .parse()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| format!("--repeat {n:?} is not a positive number"))?;
            }
            "-h" | "--help" => {
                return Err(format!(
                    "usage: ccm-chaos [--quick] [--json PATH] [--only {}] [--seed N] [--repeat N]",
                    SCENARIOS.join(",")
                ));
            }
            other => return Err(format!("unknown argument {other:?} (see --help)")),
        }
    }
    Ok(args)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(64);
        }
    };
    let names: Vec<&str> = if args.only.is_empty() {
        SCENARIOS.to_vec()
    } else {
        args.only.iter().map(String::as_str).collect()
    };
    let mut outcomes = Vec::new();
    for round in 0..args.repeat {
        let seed = if round == 0 { args.seed } else { fresh_seed() };
        for (i, name) in names.iter().enumerate() {
            let seed = seed.wrapping_add(i as u64);
            eprintln!(
                "chaos: scenario {name} ({:?}, seed {seed}, run {} of {})",
                args.scale,
                round + 1,
                args.repeat
            );
            let outcome = chaos::run(name, args.scale, seed).await;
            eprintln!("chaos: {name}: {}", outcome.to_json());
            outcomes.push(outcome);
        }
    }
    println!("{}", chaos::table(&outcomes));
    for o in &outcomes {
        for v in &o.violations {
            println!("- {}: {v}", o.scenario);
        }
    }
    if let Some(path) = &args.json {
        let json = Value::Array(outcomes.iter().map(chaos::Outcome::to_json).collect());
        if let Err(e) = std::fs::write(path, serde_json::to_string_pretty(&json).unwrap_or_default()) {
            eprintln!("cannot write {}: {e}", path.display());
            return ExitCode::from(1);
        }
    }
    if outcomes.iter().all(chaos::Outcome::passed) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
