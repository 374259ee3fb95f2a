//! The gateway's policies, measured on the simulator's own counters: the rate limit, fairness
//! between callers, coalescing of lookups, adaptive slowdown (and none for a used-up quota),
//! deadlines, drain, persistence.
//!
//! Nothing here depends on how fast a busy machine runs the tasks: limits are checked as upper
//! bounds over the whole run (admissions happen inside it), queues are filled while the
//! limiter is held and checked once they are full, waits are for conditions with deadlines
//! that the behaviour under test meets by far and its failure never could. The exact figures
//! (turns, batches, waits) are in the scheduler's and the lookups' tests, on paused time; the
//! throughput a live gateway reaches is `make bench-gateway`'s.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use cloud_gateway::{GatewayConfig, lb_reads::LbReadConfig, lookups::LookupConfig, scheduler::Class};
use contract_tests::{Clients, RunningGateway};
use gateway_api::{error::GatewayError, v1 as pb};
use provider::{
    Instances, LoadBalancerNode, LoadBalancerStatus, LoadBalancers, Provider, ProviderError, ProviderLimits,
    Routes, ServiceSpec,
};
use provider_simulator::{Knobs, NewInstance, RateLimit, Simulator, SimulatorConfig};
use token_bucket::Limit;

fn simulator(knobs: Knobs) -> Arc<Simulator> {
    Simulator::open(SimulatorConfig {
        knobs,
        durable_writes: false,
        ..Default::default()
    })
    .expect("simulator")
}

fn config(read: (f64, f64), write: (f64, f64)) -> GatewayConfig {
    GatewayConfig {
        read_limit: Limit::new(read.0, read.1).unwrap(),
        write_limit: Limit::new(write.0, write.1).unwrap(),
        ..GatewayConfig::default()
    }
}

fn service(uid: &str) -> pb::Service {
    pb::Service {
        uid: uid.into(),
        namespace: "default".into(),
        name: "web".into(),
        ports: vec![pb::ServicePort {
            name: "http".into(),
            protocol: pb::Protocol::Tcp as i32,
            port: 80,
            node_port: 30080,
        }],
        ..Default::default()
    }
}

fn get_lb(uid: &str) -> pb::GetLoadBalancerRequest {
    pb::GetLoadBalancerRequest {
        cluster_id: String::new(),
        cluster_name: "policy".into(),
        service: Some(service(uid)),
    }
}

fn node(provider_id: &str) -> pb::InstanceRequest {
    pb::InstanceRequest {
        node: Some(pb::NodeRef {
            name: "n".into(),
            provider_id: provider_id.into(),
        }),
    }
}

/// Hammers GetLoadBalancer from `callers` tasks for `period`.
async fn hammer(gateway: &RunningGateway, callers: usize, period: Duration) {
    let deadline = Instant::now() + period;
    let mut tasks = Vec::new();
    for i in 0..callers {
        let mut c = gateway.clients(&format!("hammer-{i}")).await;
        tasks.push(tokio::spawn(async move {
            while Instant::now() < deadline {
                let _ = c
                    .load_balancers
                    .get_load_balancer(get_lb("5e0a1c3e-0000-4000-8000-000000000001"))
                    .await;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_provider_never_sees_more_than_the_gateway_allows() {
    // The gateway allows itself 40/s with bursts of 8; ten callers ask as fast as they can.
    let sim = simulator(Knobs::default());
    let gateway = RunningGateway::start(config((40.0, 8.0), (40.0, 8.0)), sim.clone(), None).await;
    let started = Instant::now();
    hammer(&gateway, 10, Duration::from_secs(2)).await;
    let elapsed = started.elapsed();
    // Every call the provider saw was admitted within the run, so the bucket bounds them all,
    // however the calls were scheduled.
    let calls = sim.stats().accepted_at.len();
    let bound = (40.0 * elapsed.as_secs_f64() + 8.0).floor() as usize;
    assert!(
        calls <= bound,
        "{calls} calls in {elapsed:?}; the gateway allows {bound}"
    );
    // Calls beyond the limit waited for their turn rather than failing.
    assert_eq!(
        metric(
            &gateway,
            "cloudgateway_grpc_calls_total",
            &[("method", "GetLoadBalancer")]
        ),
        metric(
            &gateway,
            "cloudgateway_grpc_calls_total",
            &[("method", "GetLoadBalancer"), ("code", "Ok")]
        ),
        "every call was answered"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttling_by_the_cloud_slows_the_gateway_down() {
    // The gateway thinks it may do 200/s; the cloud allows 20/s.
    let sim = simulator(Knobs {
        rate_limit: Some(RateLimit::new(20.0, 5.0)),
        ..Default::default()
    });
    let gateway = RunningGateway::start(config((200.0, 20.0), (200.0, 20.0)), sim.clone(), None).await;
    let started = Instant::now();
    hammer(&gateway, 10, Duration::from_secs(1)).await;
    assert!(
        sim.stats().throttled_total > 0,
        "the cloud should have throttled the first burst"
    );
    // The first "throttled" halved the rate; it regains 5 % of the configured rate per second
    // since, so it is below this whatever the timing.
    let since = started.elapsed().as_secs_f64();
    let rate = gateway.handles.scheduler.current_rate(Class::Read);
    let bound = 200.0 * (0.5 + 0.05 * since);
    assert!(
        rate <= bound + 1e-9,
        "the read rate should have been halved: {rate}/s, at most {bound}/s"
    );
    assert_eq!(
        gateway.handles.scheduler.current_rate(Class::Write),
        200.0,
        "only the throttled class slows down"
    );
    assert!(metric(&gateway, "cloudgateway_provider_throttled_total", &[]) > 0.0);
    assert!(
        metric(
            &gateway,
            "cloudgateway_rate_limit_calls_per_second",
            &[("class", "read")]
        ) <= bound + 1e-9
    );
}

/// A cloud account whose load balancer quota is used up: every ensure is refused for it.
#[derive(Default)]
struct FullAccount {
    ensures: AtomicUsize,
}

const QUOTA_MESSAGE: &str =
    "CreateLoadBalancer: TooManyLoadBalancers: Exceeded quota of account 123456789012";

#[async_trait::async_trait]
impl LoadBalancers for FullAccount {
    async fn get_load_balancer(
        &self,
        _cluster: &str,
        _service: &ServiceSpec,
    ) -> provider::Result<Option<LoadBalancerStatus>> {
        Ok(None)
    }

    async fn ensure_load_balancer(
        &self,
        _cluster: &str,
        _service: &ServiceSpec,
        _nodes: &[LoadBalancerNode],
    ) -> provider::Result<LoadBalancerStatus> {
        self.ensures.fetch_add(1, Ordering::SeqCst);
        Err(ProviderError::QuotaExceeded(QUOTA_MESSAGE.into()))
    }

    async fn update_load_balancer(
        &self,
        _cluster: &str,
        _service: &ServiceSpec,
        _nodes: &[LoadBalancerNode],
    ) -> provider::Result<()> {
        Ok(())
    }

    async fn ensure_load_balancer_deleted(
        &self,
        _cluster: &str,
        _service: &ServiceSpec,
    ) -> provider::Result<()> {
        Ok(())
    }
}

impl Provider for FullAccount {
    fn name(&self) -> &str {
        "full"
    }
    fn limits(&self) -> ProviderLimits {
        ProviderLimits::default()
    }
    fn instances(&self) -> Option<&dyn Instances> {
        None
    }
    fn load_balancers(&self) -> Option<&dyn LoadBalancers> {
        Some(self)
    }
    fn routes(&self) -> Option<&dyn Routes> {
        None
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_used_up_quota_is_typed_and_does_not_slow_the_gateway_down() {
    // The contrast to the throttling test above: calling less often frees no quota, so the
    // gateway passes the answer on, typed, and keeps its rate.
    let cloud = Arc::new(FullAccount::default());
    let gateway = RunningGateway::start(config((200.0, 20.0), (200.0, 20.0)), cloud.clone(), None).await;
    let mut c = gateway.clients("service-controller").await;
    let ensures = 30;
    for _ in 0..ensures {
        let status = c
            .load_balancers
            .ensure_load_balancer(pb::EnsureLoadBalancerRequest {
                cluster_id: String::new(),
                cluster_name: "policy".into(),
                service: Some(service("5e0a1c3e-0000-4000-8000-000000000010")),
                nodes: vec![pb::LoadBalancerNode {
                    name: "n".into(),
                    ..Default::default()
                }],
            })
            .await
            .unwrap_err();
        assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
        assert_eq!(
            GatewayError::from(status),
            GatewayError::QuotaExceeded(QUOTA_MESSAGE.into())
        );
    }
    assert_eq!(
        cloud.ensures.load(Ordering::SeqCst),
        ensures,
        "each call reached the cloud"
    );
    for class in [Class::Write, Class::Read] {
        assert_eq!(
            gateway.handles.scheduler.current_rate(class),
            200.0,
            "a quota is no reason to slow down ({class:?})"
        );
    }
    assert_eq!(
        metric(&gateway, "cloudgateway_provider_throttled_total", &[]),
        0.0
    );
    assert_eq!(
        metric(
            &gateway,
            "cloudgateway_provider_calls_total",
            &[
                ("operation", "ensure_load_balancer"),
                ("outcome", "quota_exceeded")
            ]
        ),
        ensures as f64
    );
    assert_eq!(
        metric(
            &gateway,
            "cloudgateway_rate_limit_calls_per_second",
            &[("class", "write")]
        ),
        200.0
    );
}

/// Caller B makes one instance lookup after another, one per provider ID; fails the test if
/// they are not all answered within `deadline`.
async fn caller_b_lookups(gateway: &RunningGateway, provider_ids: &[String], deadline: Duration) {
    let mut b = gateway.clients("node-controller").await;
    let lookups = async {
        for id in provider_ids {
            let found = b
                .instances
                .instance_exists(node(id))
                .await
                .expect("lookup")
                .into_inner();
            assert!(found.exists);
        }
    };
    tokio::time::timeout(deadline, lookups)
        .await
        .unwrap_or_else(|_| panic!("B's lookups were not answered within {deadline:?}"));
}

fn launch(sim: &Simulator, count: usize) -> Vec<String> {
    (0..count)
        .map(|i| {
            sim.add_instance(NewInstance::named(format!("n-{i}")))
                .unwrap()
                .provider_id()
        })
        .collect()
}

/// The sum of the samples of metric `name` (as the gateway exports it) whose labels include every
/// `key="value"` of `labels`; 0 while no such series exists.
fn metric(gateway: &RunningGateway, name: &str, labels: &[(&str, &str)]) -> f64 {
    let wanted: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    gateway
        .handles
        .metrics
        .render()
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let labels = series.strip_prefix(name)?;
            let matches = (labels.is_empty() || labels.starts_with('{'))
                && wanted.iter().all(|w| labels.contains(w.as_str()));
            matches.then(|| value.parse::<f64>().ok()).flatten()
        })
        .sum()
}

/// Polls `condition` until it holds; fails the test naming `what` if it does not within `timeout`.
async fn wait_until(what: &str, timeout: Duration, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !condition() {
        assert!(
            Instant::now() < deadline,
            "waited {timeout:?} in vain until {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Caller `caller` starts `n` calls of `class` at once; `call` makes the i-th. Returns once every
/// call has reached the gateway's queue for `class` (is waiting there, or already had its turn).
async fn flood<F, Fut>(
    gateway: &RunningGateway,
    caller: &str,
    class: Class,
    n: usize,
    call: F,
) -> Vec<tokio::task::JoinHandle<()>>
where
    F: Fn(Clients, usize) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let clients = gateway.clients(caller).await;
    let flood = (0..n).map(|i| tokio::spawn(call(clients.clone(), i))).collect();
    // Nobody else calls before then, so every call waiting in `class` is one of the flood's.
    let class = class.label();
    wait_until(
        &format!("{caller}'s {n} {class} calls are queued"),
        Duration::from_secs(30),
        || {
            let waiting = metric(gateway, "cloudgateway_queue_depth", &[("class", class)]);
            let had_their_turn = metric(
                gateway,
                "cloudgateway_queue_wait_seconds_count",
                &[("class", class), ("caller", caller)],
            );
            waiting + had_their_turn >= n as f64
        },
    )
    .await;
    flood
}

/// How many calls of the flood are still waiting; stops them.
fn still_queued(flood: Vec<tokio::task::JoinHandle<()>>) -> usize {
    let unfinished = flood.iter().filter(|t| !t.is_finished()).count();
    flood.iter().for_each(tokio::task::JoinHandle::abort);
    unfinished
}

fn no_cache() -> LookupConfig {
    LookupConfig {
        cache_ttl: Duration::ZERO,
        ..LookupConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_load_balancer_updates_does_not_starve_node_lookups() {
    let sim = simulator(Knobs::default());
    let ids = launch(&sim, 20);
    // Writes get one token, then one every 1000 s: A's flood stays queued for the whole test.
    let mut cfg = config((50.0, 5.0), (0.001, 1.0));
    cfg.lookups = no_cache();
    let gateway = RunningGateway::start(cfg, sim.clone(), None).await;
    // Caller A: 1000 UpdateLoadBalancer calls at once.
    let flood = flood(
        &gateway,
        "service-controller",
        Class::Write,
        1000,
        |mut a, i| async move {
            let req = pb::UpdateLoadBalancerRequest {
                cluster_id: String::new(),
                cluster_name: "policy".into(),
                service: Some(service(&format!("5e0a1c3e-0000-4000-8000-{i:012}"))),
                nodes: vec![],
            };
            let _ = a.load_balancers.update_load_balancer(req).await;
        },
    )
    .await;
    // Caller B: 20 lookups one after another. Reads have their own bucket, so they are answered
    // while every write but the first still waits (behind the flood, they never would be).
    caller_b_lookups(&gateway, &ids, Duration::from_secs(30)).await;
    let unfinished = still_queued(flood);
    assert!(unfinished >= 999, "A's flood is still queued ({unfinished} left)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_reads_leaves_another_caller_its_fair_share() {
    let sim = simulator(Knobs::default());
    let ids = launch(&sim, 20);
    let mut cfg = config((10.0, 1.0), (10.0, 1.0));
    cfg.lookups = no_cache();
    // Each get a provider call of its own (not merged into batched reads).
    cfg.lb_reads = LbReadConfig { batch_size: 1 };
    let gateway = RunningGateway::start(cfg, sim.clone(), None).await;
    // Caller A: 1000 GetLoadBalancer calls at once, in the same read bucket as B: 100 s of
    // work at 10/s.
    let flood = flood(
        &gateway,
        "service-controller",
        Class::Read,
        1000,
        |mut a, _| async move {
            let _ = a
                .load_balancers
                .get_load_balancer(get_lb("5e0a1c3e-0000-4000-8000-000000000002"))
                .await;
        },
    )
    .await;
    // With two callers contending, B gets every other token: its 20 lookups need about 4 s.
    // First in, first out, B would wait behind A's 100 s backlog: the 30 s deadline tells the
    // two apart by far, however slowly the machine runs.
    caller_b_lookups(&gateway, &ids, Duration::from_secs(30)).await;
    let unfinished = still_queued(flood);
    assert!(unfinished > 0, "A's flood is still queued ({unfinished} left)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_lookups_are_coalesced_into_few_provider_calls() {
    let sim = simulator(Knobs::default());
    let ids = launch(&sim, 201);
    let batch = 50;
    let mut cfg = config((20.0, 1.0), (1000.0, 1000.0));
    cfg.lookups = LookupConfig {
        batch_size: batch,
        cache_ttl: Duration::ZERO,
        coalesce: true,
    };
    let gateway = RunningGateway::start(cfg, sim.clone(), None).await;
    let c = gateway.clients("node-controller").await;
    // The limiter is held (its rate almost nothing) and a first lookup takes the one token the
    // bucket has: no more come while 200 lookups arrive, however slowly they do.
    gateway.handles.scheduler.set_share(1e-9);
    c.clone()
        .instances
        .instance_metadata(node(&ids[200]))
        .await
        .expect("metadata");
    sim.reset_stats();
    let lookups: Vec<_> = ids[..200]
        .iter()
        .cloned()
        .map(|id| {
            let mut c = c.clone();
            tokio::spawn(async move {
                let m = c
                    .instances
                    .instance_metadata(node(&id))
                    .await
                    .expect("metadata")
                    .into_inner();
                assert_eq!(
                    m.metadata.expect("metadata").provider_id,
                    id,
                    "each lookup gets its own answer"
                );
            })
        })
        .collect();
    // Every lookup is counted as it joins a pending batch (under one lock), so once 201 are
    // counted, all 200 wait in batches of 50.
    wait_until("the 200 lookups wait", Duration::from_secs(30), || {
        metric(&gateway, "cloudgateway_instance_cache_misses_total", &[]) >= 201.0
    })
    .await;
    assert_eq!(
        sim.stats().calls_total,
        0,
        "nothing went out while the limiter was held"
    );
    // Released: a token every 50 ms, each carrying a full batch.
    gateway.handles.scheduler.set_share(1.0);
    for l in lookups {
        l.await.unwrap();
    }
    let calls = sim
        .stats()
        .operations
        .get("describe_instances")
        .map_or(0, |o| o.calls);
    assert_eq!(
        calls,
        200_u64.div_ceil(batch as u64),
        "provider calls for 200 lookups"
    );
    assert_eq!(
        metric(&gateway, "cloudgateway_instance_batch_size_sum", &[]),
        201.0,
        "every node asked once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cache_answers_repeated_lookups_without_the_provider() {
    let sim = simulator(Knobs::default());
    let ids = launch(&sim, 1);
    let gateway = RunningGateway::start(config((1000.0, 1000.0), (1000.0, 1000.0)), sim.clone(), None).await;
    let mut c = gateway.clients("node-controller").await;
    for _ in 0..5 {
        c.instances.instance_exists(node(&ids[0])).await.expect("lookup");
    }
    let calls = sim
        .stats()
        .operations
        .get("describe_instances")
        .map_or(0, |o| o.calls);
    assert_eq!(calls, 1);
    assert!(
        gateway
            .handles
            .metrics
            .render()
            .contains("cloudgateway_instance_cache_hits_total 4")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_ends_a_call_stuck_in_the_cloud_or_in_the_queue() {
    // The cloud takes a minute to answer; after the bucket's one token, the next comes in 1000 s.
    let sim = simulator(Knobs {
        latency: Duration::from_secs(60),
        ..Default::default()
    });
    let gateway = RunningGateway::start(config((0.001, 1.0), (0.001, 1.0)), sim.clone(), None).await;
    let mut c = gateway.clients("node-controller").await;
    // Stuck in the cloud: only the client's 300 ms deadline can end it.
    let mut req = tonic::Request::new(get_lb("5e0a1c3e-0000-4000-8000-000000000003"));
    req.set_timeout(Duration::from_millis(300));
    let err = GatewayError::from(c.load_balancers.get_load_balancer(req).await.unwrap_err());
    assert!(matches!(err, GatewayError::DeadlineExceeded(_)), "{err:?}");
    // Stuck in the queue: likewise.
    let mut req = tonic::Request::new(get_lb("5e0a1c3e-0000-4000-8000-000000000004"));
    req.set_timeout(Duration::from_millis(300));
    let err = GatewayError::from(c.load_balancers.get_load_balancer(req).await.unwrap_err());
    assert!(matches!(err, GatewayError::DeadlineExceeded(_)), "{err:?}");
    // The abandoned call never reached the cloud.
    assert_eq!(
        sim.stats()
            .operations
            .get("read_load_balancers")
            .map_or(0, |o| o.calls),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_drains_calls_in_flight() {
    let sim = simulator(Knobs {
        latency: Duration::from_millis(800),
        ..Default::default()
    });
    let gateway = RunningGateway::start(config((100.0, 10.0), (100.0, 10.0)), sim.clone(), None).await;
    let mut c = gateway.clients("node-controller").await;
    let in_flight = tokio::spawn(async move {
        c.load_balancers
            .get_load_balancer(get_lb("5e0a1c3e-0000-4000-8000-000000000005"))
            .await
    });
    // In flight: the call has reached the cloud, which takes 800 ms to answer.
    wait_until(
        "the call reaches the simulated cloud",
        Duration::from_secs(30),
        || {
            sim.stats()
                .operations
                .get("read_load_balancers")
                .is_some_and(|o| o.calls >= 1)
        },
    )
    .await;
    let endpoint = gateway.endpoint();
    gateway.stop().await;
    let answer = in_flight.await.unwrap();
    assert!(answer.is_ok(), "the call in flight must finish: {answer:?}");
    // After the drain nothing is served.
    let channel = tonic::transport::Channel::from_shared(endpoint)
        .unwrap()
        .connect()
        .await;
    assert!(
        channel.is_err(),
        "the gateway still accepts connections after shutdown"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_simulated_cloud_survives_a_gateway_restart() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("cloud.json");
    let open = || {
        Simulator::open(SimulatorConfig {
            state_file: Some(state.clone()),
            ..Default::default()
        })
        .unwrap()
    };
    let sim = open();
    let id = sim
        .add_instance(NewInstance::named("persisted-node"))
        .unwrap()
        .provider_id();
    let gateway = RunningGateway::start(config((100.0, 10.0), (100.0, 10.0)), sim.clone(), None).await;
    let mut c = gateway.clients("service-controller").await;
    let ensure = pb::EnsureLoadBalancerRequest {
        cluster_id: String::new(),
        cluster_name: "policy".into(),
        service: Some(service("5e0a1c3e-0000-4000-8000-000000000006")),
        nodes: vec![],
    };
    let before = c
        .load_balancers
        .ensure_load_balancer(ensure.clone())
        .await
        .unwrap()
        .into_inner()
        .status;
    gateway.stop().await;
    drop(sim);

    let sim = open();
    let gateway = RunningGateway::start(config((100.0, 10.0), (100.0, 10.0)), sim.clone(), None).await;
    let mut c = gateway.clients("service-controller").await;
    let got = c
        .load_balancers
        .get_load_balancer(get_lb("5e0a1c3e-0000-4000-8000-000000000006"))
        .await
        .unwrap()
        .into_inner();
    assert!(got.exists);
    assert_eq!(
        got.status, before,
        "same load balancer, same IP after the restart"
    );
    assert!(
        c.instances
            .instance_exists(node(&id))
            .await
            .unwrap()
            .into_inner()
            .exists
    );
    assert_eq!(sim.load_balancers().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateway_replicas_together_keep_the_providers_limit() {
    // One cloud, two gateway replicas that know each other's side ports; each is configured
    // with the whole limit (20/s, bursts of 2) and must take half of it.
    let sim = simulator(Knobs::default());
    let grpc = [
        tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
        tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
    ];
    let http = [
        tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
        tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
    ];
    let peers: Vec<String> = http.iter().map(|l| l.local_addr().unwrap().to_string()).collect();
    let replica_config = || GatewayConfig {
        peers: Some(cloud_gateway::peers::PeerConfig {
            targets: peers.clone(),
            interval: Duration::from_millis(200),
        }),
        ..config((20.0, 2.0), (20.0, 2.0))
    };
    let [grpc_a, grpc_b] = grpc;
    let [http_a, http_b] = http;
    let (a, b) = tokio::join!(
        RunningGateway::start_on(replica_config(), sim.clone(), None, grpc_a, http_a),
        RunningGateway::start_on(replica_config(), sim.clone(), None, grpc_b, http_b),
    );
    // Both count two replicas, each taking half of the limit, before they serve.
    for gateway in [&a, &b] {
        wait_until("two replicas share the limit", Duration::from_secs(5), || {
            let metrics = gateway.handles.metrics.render();
            metrics.contains("cloudgateway_replicas 2")
                && metrics.contains("cloudgateway_rate_limit_calls_per_second{class=\"read\"} 10")
        })
        .await;
    }
    sim.reset_stats();
    let started = Instant::now();
    tokio::join!(
        hammer(&a, 5, Duration::from_secs(2)),
        hammer(&b, 5, Duration::from_secs(2))
    );
    let elapsed = started.elapsed();
    // Every call was admitted within the run by one of the two buckets of 10/s, bursts of 1
    // (half of 20/s and 2 each): together they allow no more than the whole limit.
    let calls = sim.stats().accepted_at.len();
    let bound = (20.0 * elapsed.as_secs_f64() + 2.0).floor() as usize;
    assert!(
        calls <= bound,
        "{calls} calls in {elapsed:?}; the limit of both together allows {bound}"
    );

    // One replica goes: the other takes the whole limit within a probe interval or two.
    a.stop().await;
    wait_until(
        "the remaining replica takes the whole limit",
        Duration::from_secs(5),
        || {
            let metrics = b.handles.metrics.render();
            metrics.contains("cloudgateway_replicas 1")
                && metrics.contains("cloudgateway_rate_limit_calls_per_second{class=\"read\"} 20")
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controllers_spread_their_calls_over_the_gateway_replicas() {
    use controller_kit::gateway_balance::Balanced;
    use gateway_api::v1::identity_client::IdentityClient;
    use tonic::transport::Endpoint;

    let sim = simulator(Knobs::default());
    let a = RunningGateway::start(GatewayConfig::default(), sim.clone(), None).await;
    let b = RunningGateway::start(GatewayConfig::default(), sim.clone(), None).await;
    let addresses = vec![a.grpc_addr, b.grpc_addr];
    let dial = |address: std::net::SocketAddr| {
        Endpoint::from_shared(format!("http://{address}"))
            .unwrap()
            .connect_lazy()
    };
    // What a headless Service name resolves to: one address per replica.
    let balanced = Balanced::over(
        dial(a.grpc_addr),
        move || {
            let addresses = addresses.clone();
            Box::pin(async move { addresses })
        },
        dial,
    );
    wait_until("both replicas resolved", Duration::from_secs(5), || {
        balanced.replicas() == 2
    })
    .await;
    let mut identity = IdentityClient::new(balanced);
    for _ in 0..20 {
        identity
            .get_capabilities(pb::GetCapabilitiesRequest {})
            .await
            .unwrap();
    }
    for gateway in [&a, &b] {
        let calls: u64 = gateway
            .handles
            .metrics
            .render()
            .lines()
            .filter(|l| l.starts_with("cloudgateway_grpc_calls_total{method=\"GetCapabilities\""))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum();
        assert_eq!(calls, 10, "each replica answers every other call");
    }
}
