//! `cloud-node-lifecycle-controller`: flags and wiring only; the work is in the library.

use clap::Parser;
use cloud_node_lifecycle_controller::{LifecycleArgs, monitor};
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
    lifecycle: LifecycleArgs,
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    if let Err(err) = args.lifecycle.validate() {
        eprintln!("cloud-node-lifecycle-controller: {err}");
        std::process::exit(64);
    }
    let lifecycle = args.lifecycle.clone();
    let result = runner::run(
        CLOUD_NODE_LIFECYCLE,
        NODE_CONTROLLER,
        Needs::Instances,
        args.common,
        move |ctx| monitor::run(ctx, lifecycle),
    )
    .await;
    if let Err(err) = result {
        eprintln!("cloud-node-lifecycle-controller: {err}");
        std::process::exit(err.exit_code());
    }
}
