//! `service-lb-controller`: which controller this is; the rest is in the library and the kit.

use controller_kit::{
    names::{callers::SERVICE_CONTROLLER, controllers::SERVICE_LB},
    runner::{self, Binary, Needs, Replicas},
};
use service_lb_controller::{config::Config, controller};

#[tokio::main]
async fn main() {
    let binary = Binary {
        name: SERVICE_LB,
        about: "Cloud load balancers for `type: LoadBalancer` Services (upstream's service controller); replicas share the Services through shard leases.",
        caller: SERVICE_CONTROLLER,
        needs: Needs::LoadBalancers,
        replicas: Replicas::Sharded,
    };
    runner::main::<Config, _, _>(binary, controller::run).await;
}
