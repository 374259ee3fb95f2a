//! `cloud-node-controller`: which controller this is; the rest is in the library and the kit.

use cloud_node_controller::{config::Config, controller};
use controller_kit::{
    names::{callers::NODE_CONTROLLER, controllers::CLOUD_NODE},
    runner::{self, Binary, Needs, Replicas},
};

#[tokio::main]
async fn main() {
    let binary = Binary {
        name: CLOUD_NODE,
        about: "Initializes Nodes from the cloud (providerID, addresses, zone/region/instance-type labels) and removes the `node.cloudprovider.kubernetes.io/uninitialized` taint.",
        caller: NODE_CONTROLLER,
        needs: Needs::Instances,
        replicas: Replicas::LeaderElected,
    };
    runner::main::<Config, _, _>(binary, controller::run).await;
}
