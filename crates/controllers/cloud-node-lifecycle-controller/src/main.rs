//! `cloud-node-lifecycle-controller`: flags and wiring only; the work is in the library.

use clap::Parser;
use cloud_node_lifecycle_controller::{config::Config, controller};
use controller_kit::{
    names::{callers::NODE_CONTROLLER, controllers::CLOUD_NODE_LIFECYCLE},
    runner::{self, CommonArgs, Needs},
};

/// Deletes Nodes whose cloud instance no longer exists and taints Nodes whose instance is shut
/// down (`node.cloudprovider.kubernetes.io/shutdown:NoSchedule`).
#[derive(Parser)]
#[command(name = "cloud-node-lifecycle-controller", version)]
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
        eprintln!("cloud-node-lifecycle-controller: {err}");
        std::process::exit(64);
    }
    let needs = Needs::Instances;
    let result = runner::run(CLOUD_NODE_LIFECYCLE, NODE_CONTROLLER, needs, common, |runtime| {
        controller::run(runtime, config)
    })
    .await;
    if let Err(err) = result {
        eprintln!("cloud-node-lifecycle-controller: {err}");
        std::process::exit(err.exit_code());
    }
}
