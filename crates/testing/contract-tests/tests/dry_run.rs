//! Shadow mode at the gateway: write calls in dry-run (the gateway's `--dry-run`, or a request's
//! `cloudgateway-dry-run: true` header) make no write to the simulated cloud, answer the dry-run
//! marker with the woulds, and are logged, counted and listed at `/dry-run`; reads are answered
//! as usual, and a call without the header to a normal gateway writes.

use std::{net::SocketAddr, sync::Arc};

use cloud_gateway::GatewayConfig;
use contract_tests::RunningGateway;
use gateway_api::{DRY_RUN_HEADER, DRY_RUN_WOULDS_HEADER, v1 as pb};
use provider_simulator::{NewInstance, Simulator, SimulatorConfig};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::Request;

const CLUSTER: &str = "test-cluster";

fn sim() -> Arc<Simulator> {
    let sim = Simulator::open(SimulatorConfig {
        durable_writes: false,
        ..Default::default()
    })
    .expect("simulator");
    sim.add_instance(NewInstance::named("node-1")).expect("instance");
    sim
}

async fn gateway(sim: &Arc<Simulator>, dry_run: bool) -> RunningGateway {
    let config = GatewayConfig {
        dry_run,
        ..GatewayConfig::default()
    };
    RunningGateway::start(config, sim.clone(), None).await
}

fn service(port: i32) -> pb::Service {
    pb::Service {
        uid: "uid-web".into(),
        namespace: "default".into(),
        name: "web".into(),
        ports: vec![pb::ServicePort {
            name: "http".into(),
            protocol: pb::Protocol::Tcp.into(),
            port,
            node_port: 30080,
        }],
        ..Default::default()
    }
}

fn ensure(port: i32, dry_header: bool) -> Request<pb::EnsureLoadBalancerRequest> {
    let mut request = Request::new(pb::EnsureLoadBalancerRequest {
        cluster_id: String::new(),
        cluster_name: CLUSTER.into(),
        service: Some(service(port)),
        nodes: vec![pb::LoadBalancerNode {
            name: "node-1".into(),
            ..Default::default()
        }],
    });
    if dry_header {
        request
            .metadata_mut()
            .insert(DRY_RUN_HEADER, "true".parse().unwrap());
    }
    request
}

fn route(dry_header: bool) -> Request<pb::CreateRouteRequest> {
    let mut request = Request::new(pb::CreateRouteRequest {
        cluster_name: CLUSTER.into(),
        name_hint: "uid-node-1".into(),
        route: Some(pb::Route {
            target_node: "node-1".into(),
            destination_cidr: "10.244.1.0/24".into(),
            ..Default::default()
        }),
    });
    if dry_header {
        request
            .metadata_mut()
            .insert(DRY_RUN_HEADER, "true".parse().unwrap());
    }
    request
}

/// The marker of an answer: the count, and the woulds.
fn marker(metadata: &tonic::metadata::MetadataMap) -> Option<(u64, Vec<Value>)> {
    let count = metadata.get(DRY_RUN_HEADER)?.to_str().ok()?.parse().ok()?;
    let woulds = metadata
        .get(DRY_RUN_WOULDS_HEADER)
        .map(|v| serde_json::from_str(v.to_str().unwrap()).unwrap())
        .unwrap_or_default();
    Some((count, woulds))
}

async fn http_get(addr: SocketAddr, path: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.to_owned()
}

async fn dry_run_json(gateway: &RunningGateway) -> Value {
    serde_json::from_str(&http_get(gateway.http_addr, "/dry-run").await).unwrap()
}

#[tokio::test]
async fn a_gateway_in_dry_run_makes_no_write_and_says_what_it_would_have_done() {
    let sim = sim();
    let gateway = gateway(&sim, true).await;
    let mut clients = gateway.clients("service-controller").await;

    let caps = clients
        .identity
        .get_capabilities(pb::GetCapabilitiesRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(caps.dry_run, "the gateway says it honours dry-run");

    let answer = clients
        .load_balancers
        .ensure_load_balancer(ensure(80, false))
        .await
        .unwrap();
    let (count, woulds) = marker(answer.metadata()).expect("a dry-run answer carries the marker");
    assert_eq!(count, 1);
    assert_eq!(woulds[0]["provider"], "simulator");
    assert_eq!(woulds[0]["call"], "ensure_load_balancer");
    let status = answer.into_inner().status.expect("answered as if made");
    assert_eq!(status.ingress.len(), 1);
    assert!(sim.load_balancers().is_empty(), "nothing was created");

    let answer = clients.routes.create_route(route(false)).await.unwrap();
    assert_eq!(marker(answer.metadata()).unwrap().0, 1);
    assert!(sim.routes().is_empty());

    // Reads are answered from the cloud as it is.
    let read = clients
        .load_balancers
        .get_load_balancer(pb::GetLoadBalancerRequest {
            cluster_id: String::new(),
            cluster_name: CLUSTER.into(),
            service: Some(service(80)),
        })
        .await
        .unwrap();
    assert!(!read.get_ref().exists);
    assert!(
        marker(read.metadata()).is_none(),
        "a read is not a dry-run answer"
    );

    let listed = dry_run_json(&gateway).await;
    assert_eq!(listed["dry_run"], true);
    assert_eq!(listed["total"], 2);
    assert_eq!(listed["woulds"][0]["call"], "ensure_load_balancer");
    assert_eq!(listed["woulds"][0]["caller"], "service-controller");
    assert_eq!(listed["woulds"][1]["call"], "create_route");
    let metrics = gateway.handles.metrics.render();
    assert!(
        metrics.contains(
            "cloudgateway_dry_run_woulds_total{provider=\"simulator\",call=\"ensure_load_balancer\"} 1"
        ),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_normal_gateway_honours_the_header_per_call_and_writes_without_it() {
    let sim = sim();
    let gateway = gateway(&sim, false).await;
    let mut clients = gateway.clients("service-controller").await;
    assert!(
        clients
            .identity
            .get_capabilities(pb::GetCapabilitiesRequest {})
            .await
            .unwrap()
            .into_inner()
            .dry_run
    );

    let answer = clients
        .load_balancers
        .ensure_load_balancer(ensure(80, true))
        .await
        .unwrap();
    assert_eq!(marker(answer.metadata()).unwrap().0, 1);
    assert!(
        sim.load_balancers().is_empty(),
        "the header kept the write off the cloud"
    );

    // Without the header: a real write, and no marker.
    let answer = clients
        .load_balancers
        .ensure_load_balancer(ensure(80, false))
        .await
        .unwrap();
    assert!(marker(answer.metadata()).is_none());
    assert_eq!(sim.load_balancers().len(), 1);
    let before = sim.load_balancers();

    // Converged: a dry-run call answers 0 woulds and no list.
    let answer = clients
        .load_balancers
        .ensure_load_balancer(ensure(80, true))
        .await
        .unwrap();
    assert_eq!(marker(answer.metadata()), Some((0, vec![])));
    // One port changed: exactly that change, and still nothing written.
    let answer = clients
        .load_balancers
        .ensure_load_balancer(ensure(8080, true))
        .await
        .unwrap();
    let (count, woulds) = marker(answer.metadata()).unwrap();
    assert_eq!(count, 1);
    assert!(
        woulds[0]["request"].as_str().unwrap().contains("\"port\":8080"),
        "{woulds:?}"
    );
    let mut delete = Request::new(pb::EnsureLoadBalancerDeletedRequest {
        cluster_id: String::new(),
        cluster_name: CLUSTER.into(),
        service: Some(service(80)),
    });
    delete
        .metadata_mut()
        .insert(DRY_RUN_HEADER, "true".parse().unwrap());
    let answer = clients
        .load_balancers
        .ensure_load_balancer_deleted(delete)
        .await
        .unwrap();
    assert_eq!(marker(answer.metadata()).unwrap().0, 1);
    assert_eq!(sim.load_balancers(), before, "no dry-run call changed the cloud");

    let listed = dry_run_json(&gateway).await;
    assert_eq!(listed["dry_run"], false);
    assert_eq!(listed["calls"], 4, "four calls were answered in dry-run");
    assert_eq!(listed["total"], 3, "with three woulds");
}

/// A provider that never heard of dry-run: the simulator's capabilities, without saying it
/// intercepts its writes.
struct UnawareVendor(Arc<Simulator>);

impl provider::Provider for UnawareVendor {
    fn name(&self) -> &str {
        "unaware"
    }
    fn limits(&self) -> provider::ProviderLimits {
        provider::Provider::limits(&*self.0)
    }
    fn instances(&self) -> Option<&dyn provider::Instances> {
        provider::Provider::instances(&*self.0)
    }
    fn load_balancers(&self) -> Option<&dyn provider::LoadBalancers> {
        provider::Provider::load_balancers(&*self.0)
    }
    fn routes(&self) -> Option<&dyn provider::Routes> {
        provider::Provider::routes(&*self.0)
    }
}

#[tokio::test]
async fn a_provider_that_cannot_dry_run_gets_no_write_in_dry_run() {
    let sim = sim();
    let gateway = RunningGateway::start(
        GatewayConfig::default(),
        Arc::new(UnawareVendor(sim.clone())),
        None,
    )
    .await;
    let mut clients = gateway.clients("service-controller").await;
    let caps = clients
        .identity
        .get_capabilities(pb::GetCapabilitiesRequest {})
        .await
        .expect("capabilities")
        .into_inner();
    assert!(!caps.dry_run, "it does not say it honours the header");
    let refused = clients
        .load_balancers
        .ensure_load_balancer(ensure(80, true))
        .await
        .expect_err("a dry write to a provider that cannot dry-run");
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition, "{refused:?}");
    assert!(refused.message().contains("cannot dry-run"), "{refused:?}");
    assert!(sim.load_balancers().is_empty(), "nothing was created");
    // Without the header it writes as usual.
    clients
        .load_balancers
        .ensure_load_balancer(ensure(80, false))
        .await
        .expect("a real write");
    assert_eq!(sim.load_balancers().len(), 1);
}
