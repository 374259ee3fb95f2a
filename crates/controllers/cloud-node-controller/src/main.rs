//! `cloud-node-controller`: flags and wiring only; the work is in the library.

use clap::Parser;
use cloud_node_controller::{config::Config, controller};
use controller_kit::{
    names::{callers::NODE_CONTROLLER, controllers::CLOUD_NODE},
    runner::{self, CommonArgs, Needs},
};

/// Initializes Nodes from the cloud (providerID, addresses, zone/region/instance-type labels) and
/// removes the `node.cloudprovider.kubernetes.io/uninitialized` taint.
#[derive(Parser)]
#[command(name = "cloud-node-controller", version)]
struct Args {
    #[command(flatten)]
    common: CommonArgs,
    #[command(flatten)]
    config: Config,
}

#[tokio::main]
async fn main() {
    let Args { common, config } = Args::parse();
    if let Err(err) = config.validate() {
        eprintln!("cloud-node-controller: {err}");
        std::process::exit(64);
    }
    let needs = Needs::Instances;
    let result = runner::run(CLOUD_NODE, NODE_CONTROLLER, needs, common, |runtime| {
        controller::run(runtime, config)
    })
    .await;
    if let Err(err) = result {
        eprintln!("cloud-node-controller: {err}");
        std::process::exit(err.exit_code());
    }
}
