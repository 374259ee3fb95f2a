//! `make bench-aws`: the AWS calls a load-balancer sync costs, ours beside cloud-provider-aws's.
//!
//! Starts moto with a VPC laid out as cloud-provider-aws clusters are, a recording proxy in
//! front of it, and the real `cloud-gateway --provider aws` on the proxy; then asks the gateway
//! over gRPC, as the service controller does, and counts every AWS call the proxy saw:
//!
//! - per unchanged Service sync (the Service converged, then ensured again), for a Classic ELB,
//!   a one-port NLB, and an NLB with `externalTrafficPolicy: Local` and TLS on one of two ports;
//!   each with the gateway's default (a sync reads the load balancer and its tags, and everything
//!   only after the verify period) and with `--aws-load-balancer-verify-period 0s` (everything,
//!   every sync, as upstream reads);
//! - 50 unchanged Services ensured once more right after the gateway restarted;
//! - 1000 unchanged Services, Classic ELBs and NLBs mixed, ensured at once right after the
//!   gateway restarted: their reads batched across Services (one DescribeLoadBalancers and one
//!   DescribeTags per 20 load balancers of a type);
//! - then 50 nodes join with those 1000 load balancers present: each load balancer's backends
//!   updated once (UpdateLoadBalancer per Service): the AWS reads (the load balancers described
//!   in batches across the updates, an NLB's target health per target group), and the writes per
//!   load balancer (target: 1, the register; no tag, as the fingerprint does not cover members).
//!
//! Upstream's figures are cloud-provider-aws's own call sequence for the same syncs
//! (`../shared/reference/cloud-provider-aws.md` §8, read from its code at v1.36): a Classic ELB
//! makes 9 reads and a ModifyLoadBalancerAttributes (whose DeepEqual never matches) plus its
//! re-describe; an NLB makes 10 reads plus one DescribeTargetHealth per listener, and per
//! HTTP-checked target group a ModifyTargetGroup and a DescribeTargetGroups, and per TLS listener
//! without a policy annotation a ModifyListener.
//!
//! Prints a table and writes it as JSON (`--json PATH`).

use std::{
    net::SocketAddr,
    path::PathBuf,
    process::Stdio,
    sync::Arc,
    time::{Duration, Instant},
};

use aws_fixture::{Cloud, FaultProxy, Instance, Network};
use e2e::{binary, free_port, http_get, start_moto, wait_for};
use gateway_api::v1 as pb;
use serde_json::{Value, json};
use tokio::process::{Child, Command};

const CLUSTER: &str = "bench";
/// An IAM server certificate (moto checks ACM certificates exist, not IAM ones).
const CERT: &str = "arn:aws:iam::123456789012:server-certificate/web";
/// Each Classic ELB adds a rule to the nodes' group, whose default quota (AWS and moto) is 60.
const SERVICES_AFTER_RESTART: usize = 50;
/// Services of the mixed restart row (half Classic ELBs, half NLBs). Their nodes' rules are off
/// (cloud-config `DisableSecurityGroupIngress`), else the nodes' group quota above caps the
/// Classic ELBs; the reads measured do not touch rules.
const MIXED_AFTER_RESTART: usize = 1000;
/// Nodes that join with the mixed row's load balancers present.
const JOINING_NODES: usize = 50;

/// A gateway process on the proxy.
struct Gateway {
    child: Child,
    grpc: SocketAddr,
}

impl Gateway {
    async fn start(proxy: &str, vpc: &str, extra: &[&str], log: &std::path::Path) -> Self {
        let grpc: SocketAddr = ([127, 0, 0, 1], free_port()).into();
        let http: SocketAddr = ([127, 0, 0, 1], free_port()).into();
        let file = std::fs::File::create(log).expect("gateway log");
        let mut args = vec![
            "--insecure-plaintext".to_owned(),
            "--grpc-listen".into(),
            grpc.to_string(),
            "--http-listen".into(),
            http.to_string(),
            "--provider".into(),
            "aws".into(),
            "--aws-region".into(),
            "us-east-1".into(),
            "--aws-endpoint-url".into(),
            proxy.into(),
            "--aws-vpc-id".into(),
            vpc.into(),
            "--aws-max-attempts".into(),
            "1".into(),
            // The cloud's limits are not what is measured here.
            "--write-rate".into(),
            "1000".into(),
            "--write-burst".into(),
            "1000".into(),
            "--read-rate".into(),
            "1000".into(),
            "--read-burst".into(),
            "1000".into(),
        ];
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        let child = Command::new(binary("cloud-gateway"))
            .args(&args)
            .env("AWS_ACCESS_KEY_ID", "testing")
            .env("AWS_SECRET_ACCESS_KEY", "testing")
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("log"))
            .stderr(file)
            .kill_on_drop(true)
            .spawn()
            .expect("start cloud-gateway (cargo build --release -p cloud-gateway)");
        wait_for(
            "the gateway to be ready",
            Duration::from_secs(60),
            || async move { matches!(http_get(http, "/readyz").await, Some((200, _))).then_some(()) },
        )
        .await;
        Self { child, grpc }
    }

    async fn client(&self) -> pb::load_balancers_client::LoadBalancersClient<tonic::transport::Channel> {
        pb::load_balancers_client::LoadBalancersClient::connect(format!("http://{}", self.grpc))
            .await
            .expect("connect to the gateway")
    }

    async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

fn service(n: usize, annotations: &[(&str, &str)], ports: &[(u16, u16)], local: bool) -> pb::Service {
    pb::Service {
        uid: format!("be0c{n:04x}-1b2c-4d5e-8f90-0123456789ab"),
        namespace: "default".into(),
        name: format!("svc-{n}"),
        ports: ports
            .iter()
            .map(|(port, node_port)| pb::ServicePort {
                name: format!("p{port}"),
                protocol: pb::Protocol::Tcp as i32,
                port: i32::from(*port),
                node_port: i32::from(*node_port),
            })
            .collect(),
        external_traffic_policy: if local {
            pb::ExternalTrafficPolicy::Local
        } else {
            pb::ExternalTrafficPolicy::Cluster
        } as i32,
        health_check_node_port: if local { 31999 } else { 0 },
        annotations: annotations
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        ..Default::default()
    }
}

fn nodes(instances: &[Instance]) -> Vec<pb::LoadBalancerNode> {
    instances
        .iter()
        .map(|i| pb::LoadBalancerNode {
            name: i.node_name.clone(),
            provider_id: i.provider_id.clone(),
            ..Default::default()
        })
        .collect()
}

async fn ensure(gateway: &Gateway, svc: &pb::Service, nodes: &[pb::LoadBalancerNode]) {
    gateway
        .client()
        .await
        .ensure_load_balancer(pb::EnsureLoadBalancerRequest {
            cluster_id: String::new(),
            cluster_name: CLUSTER.into(),
            service: Some(svc.clone()),
            nodes: nodes.to_vec(),
        })
        .await
        .unwrap_or_else(|e| panic!("EnsureLoadBalancer {}: {e}", svc.name));
}

/// [`ensure`], tried again a few times: making hundreds of load balancers, moto now and then
/// answers one call with a server error.
async fn make(gateway: &Gateway, svc: &pb::Service, nodes: &[pb::LoadBalancerNode]) {
    let client = gateway.client().await;
    retrying_server_errors(&format!("EnsureLoadBalancer {}", svc.name), || {
        let mut client = client.clone();
        let request = pb::EnsureLoadBalancerRequest {
            cluster_id: String::new(),
            cluster_name: CLUSTER.into(),
            service: Some(svc.clone()),
            nodes: nodes.to_vec(),
        };
        async move { client.ensure_load_balancer(request).await }
    })
    .await;
}

/// Makes `call`, and again up to 4 more times a second apart after a failure, as the service
/// controller requeues a failed sync: at hundreds of calls at once moto now and then answers one
/// with a server error. Returns how many times it was tried again; panics after the fifth failure.
async fn retrying_server_errors<T, F, Fut>(what: &str, mut call: F) -> usize
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, tonic::Status>>,
{
    let mut retries = 0;
    loop {
        match call().await {
            Ok(_) => return retries,
            Err(e) if retries < 4 => {
                retries += 1;
                eprintln!("{what} (try {retries}): {e}");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(e) => panic!("{what}: {e}"),
        }
    }
}

/// Reads and writes among the proxy's recorded calls.
fn counted(proxy: &FaultProxy) -> (usize, usize) {
    let all = proxy.actions().len();
    let writes = proxy.writes().len();
    (all - writes, writes)
}

struct Row {
    scenario: String,
    mode: &'static str,
    reads: usize,
    writes: usize,
    upstream: (usize, usize),
    calls: Vec<String>,
}

#[tokio::main]
async fn main() {
    let json_path = std::env::args()
        .skip_while(|a| a != "--json")
        .nth(1)
        .map(PathBuf::from);
    let dir = tempfile::tempdir().expect("temp dir");
    let (_moto, moto) = start_moto(dir.path()).await;
    let endpoint = format!("http://{moto}");
    let cloud = Arc::new(Cloud::connect(&endpoint).await);
    let network: Network = cloud.network(CLUSTER).await;
    let mut instances = Vec::new();
    for n in 0..3 {
        instances.push(cloud.run_instance(&network, n).await);
    }
    let nodes = nodes(&instances);
    let proxy = FaultProxy::start(&endpoint).await;

    let nlb = ("service.beta.kubernetes.io/aws-load-balancer-type", "nlb");
    let cases: Vec<(&str, pb::Service, (usize, usize))> = vec![
        (
            "Classic ELB, 1 port",
            service(1, &[], &[(80, 30080)], false),
            (9, 1),
        ),
        ("NLB, 1 port", service(2, &[nlb], &[(80, 30081)], false), (11, 0)),
        (
            "NLB, 2 ports, Local, TLS on one",
            service(
                3,
                &[
                    nlb,
                    ("service.beta.kubernetes.io/aws-load-balancer-ssl-cert", CERT),
                    ("service.beta.kubernetes.io/aws-load-balancer-ssl-ports", "443"),
                ],
                &[(80, 30082), (443, 30443)],
                true,
            ),
            // 10 + 2 DescribeTargetHealth, and per HTTP-checked group a ModifyTargetGroup and
            // its DescribeTargetGroups; a ModifyListener for the TLS listener.
            (14, 3),
        ),
    ];
    let mut rows = Vec::new();
    let fast = Gateway::start(
        &proxy.endpoint,
        &network.vpc_id,
        &[],
        &dir.path().join("gateway.log"),
    )
    .await;
    let full = Gateway::start(
        &proxy.endpoint,
        &network.vpc_id,
        &["--aws-load-balancer-verify-period", "0s"],
        &dir.path().join("gateway-full.log"),
    )
    .await;
    for (scenario, svc, upstream) in &cases {
        ensure(&fast, svc, &nodes).await;
        for (gateway, mode) in [
            (&fast, "ours"),
            (&full, "ours, verify period 0s (every sync reads all)"),
        ] {
            // Once more so the gateway under test has seen it converged.
            ensure(gateway, svc, &nodes).await;
            proxy.reset_counts();
            ensure(gateway, svc, &nodes).await;
            let (reads, writes) = counted(&proxy);
            rows.push(Row {
                scenario: format!("unchanged sync: {scenario}"),
                mode,
                reads,
                writes,
                upstream: *upstream,
                calls: proxy.actions(),
            });
        }
    }
    full.stop().await;

    // Many unchanged Services, right after a gateway restart.
    let many: Vec<pb::Service> = (0..SERVICES_AFTER_RESTART)
        .map(|n| service(100 + n, &[], &[(80, 31000 + n as u16)], false))
        .collect();
    for chunk in many.chunks(20) {
        let ensures = chunk.iter().map(|s| ensure(&fast, s, &nodes));
        futures::future::join_all(ensures).await;
    }
    fast.stop().await;
    let restarted = Gateway::start(
        &proxy.endpoint,
        &network.vpc_id,
        &[],
        &dir.path().join("gateway-restarted.log"),
    )
    .await;
    proxy.reset_counts();
    let started = Instant::now();
    let ensures = many.iter().map(|s| ensure(&restarted, s, &nodes));
    futures::future::join_all(ensures).await;
    let took = started.elapsed();
    let (reads, writes) = counted(&proxy);
    rows.push(Row {
        scenario: format!(
            "{SERVICES_AFTER_RESTART} unchanged Classic ELB Services after a gateway restart ({:.1} s)",
            took.as_secs_f64()
        ),
        mode: "ours",
        reads,
        writes,
        // Each sync as above, and one account-wide DescribeInstances filling the emptied cache.
        upstream: (SERVICES_AFTER_RESTART * 9 + 1, SERVICES_AFTER_RESTART),
        calls: Vec::new(),
    });
    restarted.stop().await;

    // 1000 unchanged Services, Classic and NLB mixed, right after a gateway restart.
    let no_rules = dir.path().join("no-node-rules.conf");
    std::fs::write(&no_rules, "[Global]\nDisableSecurityGroupIngress = true\n").expect("cloud config");
    let no_rules = no_rules.to_str().expect("a UTF-8 temp path").to_owned();
    let mixed_args = ["--cloud-config", no_rules.as_str()];
    let mixed: Vec<pb::Service> = (0..MIXED_AFTER_RESTART)
        .map(|n| {
            let annotations: &[(&str, &str)] = if n % 2 == 1 { &[nlb] } else { &[] };
            let node_port = 30000 + u16::try_from(n % 2000).expect("small");
            service(2000 + n, annotations, &[(80, node_port)], false)
        })
        .collect();
    let maker = Gateway::start(
        &proxy.endpoint,
        &network.vpc_id,
        &mixed_args,
        &dir.path().join("gateway-mixed.log"),
    )
    .await;
    let started = Instant::now();
    for chunk in mixed.chunks(20) {
        futures::future::join_all(chunk.iter().map(|s| make(&maker, s, &nodes))).await;
    }
    eprintln!(
        "made {MIXED_AFTER_RESTART} load balancers in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    maker.stop().await;
    let restarted = Gateway::start(
        &proxy.endpoint,
        &network.vpc_id,
        &mixed_args,
        &dir.path().join("gateway-mixed-restarted.log"),
    )
    .await;
    // One channel, as the service controller has.
    let client = restarted.client().await;
    proxy.reset_counts();
    let started = Instant::now();
    futures::future::join_all(mixed.iter().map(|s| {
        let mut client = client.clone();
        let nodes = &nodes;
        async move {
            client
                .ensure_load_balancer(pb::EnsureLoadBalancerRequest {
                    cluster_id: String::new(),
                    cluster_name: CLUSTER.into(),
                    service: Some(s.clone()),
                    nodes: nodes.to_vec(),
                })
                .await
                .unwrap_or_else(|e| panic!("EnsureLoadBalancer {}: {e}", s.name));
        }
    }))
    .await;
    let took = started.elapsed();
    let (reads, writes) = counted(&proxy);
    let classic = mixed.len().div_ceil(2);
    let network_lbs = mixed.len() - classic;
    let mut kinds: Vec<String> = proxy.actions();
    kinds.sort();
    kinds.dedup_by(|a, b| a == b);
    rows.push(Row {
        scenario: format!(
            "{MIXED_AFTER_RESTART} unchanged Services ({classic} Classic, {network_lbs} NLB) after a gateway restart ({:.1} s)",
            took.as_secs_f64()
        ),
        mode: "ours",
        reads,
        writes,
        // Each sync as the rows above, and one DescribeInstances filling the emptied cache.
        upstream: (classic * 9 + network_lbs * 11 + 1, classic),
        calls: kinds
            .iter()
            .map(|k| format!("{k} ×{}", proxy.count(k)))
            .collect(),
    });

    // Then 50 nodes join: every load balancer's backends updated once, as the service
    // controller does after a node change (one UpdateLoadBalancer per Service, at once).
    for n in instances.len()..instances.len() + JOINING_NODES {
        instances.push(cloud.run_instance(&network, n).await);
    }
    let joined = self::nodes(&instances);
    proxy.reset_counts();
    let started = Instant::now();
    // Tried again after a failure, as the service controller does: 1000 at once, moto now and
    // then answers a call with a server error. The retries' calls are counted too.
    let retries: usize = futures::future::join_all(mixed.iter().map(|s| {
        let client = client.clone();
        let nodes = &joined;
        async move {
            retrying_server_errors(&format!("UpdateLoadBalancer {}", s.name), || {
                let mut client = client.clone();
                let request = pb::UpdateLoadBalancerRequest {
                    cluster_id: String::new(),
                    cluster_name: CLUSTER.into(),
                    service: Some(s.clone()),
                    nodes: nodes.to_vec(),
                };
                async move { client.update_load_balancer(request).await }
            })
            .await
        }
    }))
    .await
    .into_iter()
    .sum();
    let took = started.elapsed();
    let (reads, writes) = counted(&proxy);
    let mut kinds: Vec<String> = proxy.actions();
    kinds.sort();
    kinds.dedup_by(|a, b| a == b);
    rows.push(Row {
        scenario: format!(
            "then {JOINING_NODES} nodes join: {MIXED_AFTER_RESTART} load balancers updated ({:.1} s; writes per load balancer {:.2}; {retries} updates tried again after a moto server error)",
            took.as_secs_f64(),
            writes as f64 / MIXED_AFTER_RESTART as f64
        ),
        mode: "ours",
        reads,
        writes,
        // A Classic update: DescribeLoadBalancers (its two DescribeSecurityGroups are off with
        // DisableSecurityGroupIngress) and the register; an NLB update: a describe and the full
        // ensure (11 reads), the register; one DescribeInstances for the new nodes.
        upstream: (classic + network_lbs * 12 + 1, MIXED_AFTER_RESTART),
        calls: kinds
            .iter()
            .map(|k| format!("{k} ×{}", proxy.count(k)))
            .collect(),
    });
    restarted.stop().await;

    println!(
        "| scenario | mode | AWS reads | AWS writes | cloud-provider-aws reads | cloud-provider-aws writes | calls |"
    );
    println!("|---|---|---|---|---|---|---|");
    for r in &rows {
        println!(
            "| {} | {} | {} | {} | {} | {} | {} |",
            r.scenario,
            r.mode,
            r.reads,
            r.writes,
            r.upstream.0,
            r.upstream.1,
            r.calls.join(", ")
        );
    }
    if let Some(path) = json_path {
        let rows: Vec<Value> = rows
            .iter()
            .map(|r| {
                json!({
                    "scenario": r.scenario, "mode": r.mode, "reads": r.reads, "writes": r.writes,
                    "upstream_reads": r.upstream.0, "upstream_writes": r.upstream.1, "calls": r.calls,
                })
            })
            .collect();
        std::fs::write(&path, serde_json::to_string_pretty(&rows).expect("json")).expect("write the JSON");
        eprintln!("wrote {}", path.display());
    }
}
