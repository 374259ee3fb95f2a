//! Shadow mode on the simulated cloud: in a `provider::dry_run` scope every write call is
//! planned on a copy of the state, recorded as a "would" when it changes the cloud, and not made.

use std::sync::Arc;

use provider::{
    LoadBalancerNode, Protocol, Provider, Route, ServicePort, ServiceSpec, default_load_balancer_name,
    dry_run,
};
use provider_simulator::{NewInstance, Simulator, SimulatorConfig};

const CLUSTER: &str = "test-cluster";

fn sim() -> Arc<Simulator> {
    Simulator::open(SimulatorConfig::default()).unwrap()
}

fn service(port: u16) -> ServiceSpec {
    ServiceSpec {
        uid: "uid-1".into(),
        namespace: "default".into(),
        name: "web".into(),
        ports: vec![ServicePort {
            name: "http".into(),
            protocol: Protocol::Tcp,
            port,
            node_port: 30080,
        }],
        ..ServiceSpec::default()
    }
}

fn nodes(names: &[&str]) -> Vec<LoadBalancerNode> {
    names
        .iter()
        .map(|n| LoadBalancerNode {
            name: (*n).into(),
            provider_id: format!("simulator://zone-a/{n}"),
            ..LoadBalancerNode::default()
        })
        .collect()
}

fn route(target: &str, cidr: &str) -> Route {
    Route {
        target_node: target.into(),
        destination_cidr: cidr.into(),
        ..Route::default()
    }
}

#[tokio::test]
async fn a_dry_run_ensure_records_what_it_would_create_and_creates_nothing() {
    let sim = sim();
    let lbs = sim.load_balancers().len();
    let lb_api = Provider::load_balancers(&*sim).unwrap();
    let (answer, woulds) =
        dry_run::scope(lb_api.ensure_load_balancer(CLUSTER, &service(80), &nodes(&["n1"]))).await;
    let status = answer.expect("answered as if made");
    assert_eq!(status.ingress.len(), 1, "the address it would get: {status:?}");
    assert_eq!(woulds.len(), 1, "{woulds:?}");
    let would = &woulds[0];
    assert_eq!(
        (would.provider.as_str(), would.call.as_str()),
        ("simulator", "ensure_load_balancer")
    );
    assert_eq!(would.target, default_load_balancer_name("uid-1"));
    assert!(would.request.contains("\"port\":80"), "{}", would.request);
    assert_eq!(sim.load_balancers().len(), lbs, "nothing was created");
    assert_eq!(sim.info().load_balancers_created, 0);
    assert!(
        lb_api
            .get_load_balancer(CLUSTER, &service(80))
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn an_unchanged_service_would_change_nothing_and_a_changed_port_exactly_that() {
    let sim = sim();
    let lb_api = Provider::load_balancers(&*sim).unwrap();
    lb_api
        .ensure_load_balancer(CLUSTER, &service(80), &nodes(&["n1", "n2"]))
        .await
        .unwrap();
    let before = sim.load_balancers();

    let (answer, woulds) =
        dry_run::scope(lb_api.ensure_load_balancer(CLUSTER, &service(80), &nodes(&["n1", "n2"]))).await;
    answer.unwrap();
    assert!(woulds.is_empty(), "converged: {woulds:?}");

    let (answer, woulds) =
        dry_run::scope(lb_api.ensure_load_balancer(CLUSTER, &service(8080), &nodes(&["n1", "n2"]))).await;
    answer.unwrap();
    assert_eq!(woulds.len(), 1, "{woulds:?}");
    assert!(
        woulds[0].request.contains("\"port\":8080"),
        "{}",
        woulds[0].request
    );
    // The same change planned again is described by the same text.
    let (_, again) =
        dry_run::scope(lb_api.ensure_load_balancer(CLUSTER, &service(8080), &nodes(&["n1", "n2"]))).await;
    assert_eq!(again, woulds);

    let (answer, woulds) =
        dry_run::scope(lb_api.update_load_balancer(CLUSTER, &service(80), &nodes(&["n1"]))).await;
    answer.unwrap();
    assert_eq!(woulds.len(), 1);
    assert_eq!(woulds[0].call, "update_load_balancer");

    let (answer, woulds) = dry_run::scope(lb_api.ensure_load_balancer_deleted(CLUSTER, &service(80))).await;
    answer.unwrap();
    assert_eq!(woulds.len(), 1);
    assert!(
        woulds[0].request.contains("null"),
        "removed: {}",
        woulds[0].request
    );

    assert_eq!(sim.load_balancers(), before, "no dry-run call changed the cloud");
}

#[tokio::test]
async fn dry_run_routes_are_recorded_not_made_and_existing_ones_need_nothing() {
    let sim = sim();
    sim.add_instance(NewInstance::named("n1")).unwrap();
    let routes = Provider::routes(&*sim).unwrap();
    let (answer, woulds) =
        dry_run::scope(routes.create_route(CLUSTER, "uid-n1", &route("n1", "10.244.1.0/24"))).await;
    answer.unwrap();
    assert_eq!(woulds.len(), 1);
    assert_eq!(
        (woulds[0].call.as_str(), woulds[0].target.as_str()),
        ("create_route", "10.244.1.0/24")
    );
    assert!(sim.routes().is_empty());

    routes
        .create_route(CLUSTER, "uid-n1", &route("n1", "10.244.1.0/24"))
        .await
        .unwrap();
    let (_, woulds) =
        dry_run::scope(routes.create_route(CLUSTER, "uid-n1", &route("n1", "10.244.1.0/24"))).await;
    assert!(woulds.is_empty(), "already routed: {woulds:?}");
    let (answer, woulds) = dry_run::scope(routes.delete_route(CLUSTER, &route("n1", "10.244.1.0/24"))).await;
    answer.unwrap();
    assert_eq!(woulds.len(), 1);
    assert_eq!(woulds[0].call, "delete_route");
    assert_eq!(sim.routes().len(), 1, "still there");
    // Deleting what does not exist would change nothing.
    let (_, woulds) = dry_run::scope(routes.delete_route(CLUSTER, &route("n9", "10.244.9.0/24"))).await;
    assert!(woulds.is_empty());
}
