//! `node-route-controller`: which controller this is; the rest is in the library and the kit.

use controller_kit::{
    names::{callers::ROUTE_CONTROLLER, controllers::NODE_ROUTE},
    runner::{self, Binary, Needs, Replicas},
};
use node_route_controller::{config::Config, controller};

#[tokio::main]
async fn main() {
    let binary = Binary {
        name: NODE_ROUTE,
        about: "Routes in the cloud for each Node's pod CIDRs (upstream's route controller), reconciled on node changes, and the Nodes' NetworkUnavailable condition.",
        caller: ROUTE_CONTROLLER,
        needs: Needs::Routes,
        replicas: Replicas::LeaderElected,
    };
    runner::main::<Config, _, _>(binary, controller::run).await;
}
