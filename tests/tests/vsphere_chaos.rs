//! The chaos suite's `vsphere` scenario (`e2e::chaos::vsphere`), briefly: Nodes joining on vcsim
//! while the proxy in front of it answers 503s and NotAuthenticated, drops connections and slows
//! answers, vcsim forgets its sessions, VMs are powered off, destroyed and re-created, and the
//! gateway and the node controllers are SIGKILLed. `make test` runs it so that the scenario keeps
//! working; `make chaos` runs it at full scale through `ccm-chaos` (`--only vsphere --seed N
//! --repeat N`). `CHAOS_SEED` replays a fault schedule. Fails with the scenario's violations.

use e2e::chaos::{self, Scale};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_quick_vsphere() {
    let seed = std::env::var("CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed);
    let outcome = chaos::run("vsphere", Scale::Quick, seed).await;
    eprintln!("{}", chaos::table(std::slice::from_ref(&outcome)));
    assert!(outcome.passed(), "vsphere: {:#}", outcome.to_json());
}
