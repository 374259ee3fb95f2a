//! The chaos suite's `openstack` scenario (`e2e::chaos::openstack`), briefly: LoadBalancer
//! Services on the OpenStack test cloud created, edited and deleted while service-lb-controller
//! replicas and the gateway are SIGKILLed and the proxy in front of the cloud fails Octavia's and
//! Neutron's writes. `make test` runs it so that the scenario keeps working; `make chaos` runs it
//! at full scale through `ccm-chaos` (`--only openstack --seed N --repeat N`). `CHAOS_SEED`
//! replays a fault schedule. Fails with the scenario's violations.

use e2e::chaos::{self, Scale};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_quick_openstack() {
    let seed = std::env::var("CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed);
    let outcome = chaos::run("openstack", Scale::Quick, seed).await;
    eprintln!("{}", chaos::table(std::slice::from_ref(&outcome)));
    assert!(outcome.passed(), "openstack: {:#}", outcome.to_json());
}
