//! `make chaos-quick`: every resilience scenario, briefly (the full run is `make chaos`). Each
//! test fails with the scenario's violations.

use e2e::chaos::{self, Scale};

async fn quick(name: &str) {
    let seed = std::env::var("CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed);
    let outcome = chaos::run(name, Scale::Quick, seed).await;
    eprintln!("{}", chaos::table(std::slice::from_ref(&outcome)));
    assert!(outcome.passed(), "{name}: {:#}", outcome.to_json());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_quick_services() {
    quick("services").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_quick_nodes() {
    quick("nodes").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_quick_watches() {
    quick("watches").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_quick_vendor_swap() {
    quick("vendor-swap").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_quick_routes() {
    quick("routes").await;
}
