//! `make bench-gateway`: calls per second and the latency the gateway adds over calling the
//! provider in-process, on loopback, with the simulator (no simulated latency, no limits).
//!
//! Scenarios, each with `CONCURRENCY` callers for `DURATION`:
//! - in-process: `Provider` calls straight on the simulator (the floor);
//! - GetLoadBalancer through the gateway (a read: admission, metrics, gRPC);
//! - InstanceMetadata through the gateway with the cache off (lookups batched per caller);
//! - InstanceMetadata through the gateway with the cache on (repeated lookups).

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use cloud_gateway::{GatewayConfig, lookups::LookupConfig};
use gateway_api::v1::{
    self as pb, instances_client::InstancesClient, load_balancers_client::LoadBalancersClient,
};
use provider::{NodeRef, Provider, ServiceSpec};
use provider_simulator::{NewInstance, Simulator, SimulatorConfig};
use token_bucket::Limit;
use tokio::net::TcpListener;

const CONCURRENCY: usize = 16;
const DURATION: Duration = Duration::from_secs(3);

struct Row {
    scenario: &'static str,
    calls_per_second: f64,
    p50: Duration,
    p99: Duration,
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

/// Runs `call` from `CONCURRENCY` tasks for `DURATION`; collects every call's latency.
async fn measure<F, Fut>(scenario: &'static str, call: F) -> Row
where
    F: Fn(usize) -> Fut + Send + Sync + Clone + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let started = Instant::now();
    let deadline = started + DURATION;
    let tasks: Vec<_> = (0..CONCURRENCY)
        .map(|worker| {
            let call = call.clone();
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                let mut i = worker;
                while Instant::now() < deadline {
                    let t = Instant::now();
                    call(i).await;
                    latencies.push(t.elapsed());
                    i += CONCURRENCY;
                }
                latencies
            })
        })
        .collect();
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("worker"));
    }
    let elapsed = started.elapsed();
    all.sort();
    Row {
        scenario,
        calls_per_second: all.len() as f64 / elapsed.as_secs_f64(),
        p50: percentile(&all, 0.50),
        p99: percentile(&all, 0.99),
    }
}

fn service() -> ServiceSpec {
    ServiceSpec {
        uid: "bench-0000".into(),
        namespace: "default".into(),
        name: "bench".into(),
        ..Default::default()
    }
}

async fn start_gateway(
    sim: Arc<Simulator>,
    cache_ttl: Duration,
) -> (String, tokio::sync::oneshot::Sender<()>) {
    let unlimited = Limit::new(1e9, 1e9).expect("limit");
    let config = GatewayConfig {
        read_limit: unlimited,
        write_limit: unlimited,
        lookups: LookupConfig {
            cache_ttl,
            ..LookupConfig::default()
        },
        ..GatewayConfig::default()
    };
    let grpc = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let http = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = grpc.local_addr().expect("addr");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(cloud_gateway::serve(config, sim, None, grpc, http, async {
        let _ = stopped.await;
    }));
    (format!("http://{addr}"), stop)
}

#[tokio::main]
async fn main() {
    let sim = Simulator::open(SimulatorConfig {
        durable_writes: false,
        ..Default::default()
    })
    .expect("simulator");
    let ids: Arc<Vec<String>> = Arc::new(
        (0..256)
            .map(|i| {
                sim.add_instance(NewInstance::named(format!("n{i}")))
                    .expect("add")
                    .provider_id()
            })
            .collect(),
    );

    let mut rows = Vec::new();
    {
        let sim1 = sim.clone();
        let ids = ids.clone();
        rows.push(
            measure("in-process provider lookup", move |i| {
                let sim = sim1.clone();
                let node = NodeRef::new("n", ids[i % ids.len()].clone());
                async move {
                    let instances = Provider::instances(sim.as_ref()).expect("instances");
                    let _ = instances.lookup_instances(std::slice::from_ref(&node)).await;
                }
            })
            .await,
        );
        let sim2 = sim.clone();
        rows.push(
            measure("in-process provider get_load_balancer", move |_| {
                let sim = sim2.clone();
                async move {
                    let lbs = Provider::load_balancers(sim.as_ref()).expect("lbs");
                    let _ = lbs.get_load_balancer("bench", &service()).await;
                }
            })
            .await,
        );
    }

    for (label_lb, label_lookup, ttl) in [
        (
            "gateway GetLoadBalancer",
            "gateway InstanceMetadata (cache off)",
            Duration::ZERO,
        ),
        ("", "gateway InstanceMetadata (cache on)", Duration::from_secs(60)),
    ] {
        let (endpoint, stop) = start_gateway(sim.clone(), ttl).await;
        let channel = tonic::transport::Channel::from_shared(endpoint)
            .expect("uri")
            .connect()
            .await
            .expect("connect");
        if !label_lb.is_empty() {
            let lbs = LoadBalancersClient::new(channel.clone());
            rows.push(
                measure(label_lb, move |_| {
                    let mut lbs = lbs.clone();
                    async move {
                        let req = pb::GetLoadBalancerRequest {
                            cluster_id: String::new(),
                            cluster_name: "bench".into(),
                            service: Some(pb::Service {
                                uid: "bench-0000".into(),
                                namespace: "default".into(),
                                name: "bench".into(),
                                ..Default::default()
                            }),
                        };
                        lbs.get_load_balancer(req).await.expect("get");
                    }
                })
                .await,
            );
        }
        let instances = InstancesClient::new(channel);
        let ids = ids.clone();
        rows.push(
            measure(label_lookup, move |i| {
                let mut instances = instances.clone();
                let id = ids[i % ids.len()].clone();
                async move {
                    let req = pb::InstanceRequest {
                        node: Some(pb::NodeRef {
                            name: "n".into(),
                            provider_id: id,
                        }),
                    };
                    instances.instance_metadata(req).await.expect("metadata");
                }
            })
            .await,
        );
        let _ = stop.send(());
    }

    let base_lookup = rows[0].p50;
    let base_get = rows[1].p50;
    println!(
        "gateway benchmark: {CONCURRENCY} concurrent callers, {DURATION:?} per scenario, simulator without latency"
    );
    println!(
        "{:<44} {:>12} {:>10} {:>10} {:>14}",
        "scenario", "calls/s", "p50", "p99", "added p50"
    );
    for row in &rows {
        let base = if row.scenario.contains("LoadBalancer") || row.scenario.contains("load_balancer") {
            base_get
        } else {
            base_lookup
        };
        let added = if row.scenario.starts_with("in-process") {
            Duration::ZERO
        } else {
            row.p50.saturating_sub(base)
        };
        println!(
            "{:<44} {:>12.0} {:>10.3?} {:>10.3?} {:>14.3?}",
            row.scenario, row.calls_per_second, row.p50, row.p99, added
        );
    }
}
