//! `cloud-sim`: the simulated cloud's console; the work is in [`provider_simulator::console`].

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    provider_simulator::console::main().await
}
