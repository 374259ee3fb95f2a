//! `cloud-node-lifecycle-controller`: which controller this is; the rest is in the library and the kit.

use cloud_node_lifecycle_controller::{config::Config, controller};
use controller_kit::{
    names::{callers::NODE_CONTROLLER, controllers::CLOUD_NODE_LIFECYCLE},
    runner::{self, Binary, Needs, Replicas},
};

#[tokio::main]
async fn main() {
    let binary = Binary {
        name: CLOUD_NODE_LIFECYCLE,
        about: "Deletes Nodes whose cloud instance no longer exists and taints Nodes whose instance is shut down (`node.cloudprovider.kubernetes.io/shutdown:NoSchedule`).",
        caller: NODE_CONTROLLER,
        needs: Needs::Instances,
        replicas: Replicas::LeaderElected,
    };
    runner::main::<Config, _, _>(binary, controller::run).await;
}
