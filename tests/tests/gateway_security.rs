//! End-to-end: the cloud-gateway binary keeps its promises about who may call it and what it
//! keeps: no plain text unless asked for loudly, no state for made-up callers, and the cloud
//! credentials never in a log line, a metric or an answer.

use std::{
    path::PathBuf,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use e2e::{binary, free_port, http_get, spawn, wait_for};
use gateway_api::v1::{
    self as pb, identity_client::IdentityClient, instances_client::InstancesClient,
    load_balancers_client::LoadBalancersClient, routes_client::RoutesClient,
};
use tonic::{Request, transport::Channel};

/// Resident memory of `pid`, KiB.
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

fn series(metrics: &str) -> usize {
    metrics
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .count()
}

async fn metrics(http: std::net::SocketAddr) -> String {
    http_get(http, "/metrics")
        .await
        .map(|(_, b)| b)
        .unwrap_or_default()
}

async fn channel(grpc: std::net::SocketAddr) -> Channel {
    wait_for(
        "the gateway's gRPC port",
        Duration::from_secs(30),
        || async move {
            Channel::from_shared(format!("http://{grpc}"))
                .ok()?
                .connect()
                .await
                .ok()
        },
    )
    .await
}

#[test]
fn without_mutual_tls_the_gateway_does_not_start_unless_told_it_is_insecure() {
    let output = Command::new(binary("cloud-gateway"))
        .args(["--grpc-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .output()
        .expect("run cloud-gateway");
    assert_eq!(output.status.code(), Some(64), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("mutual TLS") && stderr.contains("--insecure-plaintext"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_caller_names_leave_memory_and_metric_series_flat() {
    let dir = tempfile::tempdir().unwrap();
    let (grpc, http) = (free_port(), free_port());
    let mut gateway = spawn(
        dir.path(),
        "cloud-gateway",
        &binary("cloud-gateway"),
        &[
            "--insecure-plaintext".into(),
            "--read-rate".into(),
            "100000".into(),
            "--read-burst".into(),
            "100000".into(),
            "--grpc-listen".into(),
            format!("127.0.0.1:{grpc}"),
            "--http-listen".into(),
            format!("127.0.0.1:{http}"),
        ],
    );
    let http = ([127, 0, 0, 1], http).into();
    // Instance lookups: a caller's calls queue at the rate limiter and batch per caller, the
    // per-caller state a made-up name must not get.
    let mut instances = InstancesClient::new(channel(([127, 0, 0, 1], grpc).into()).await);
    let call = |name: String, node: usize| {
        let mut request = Request::new(pb::BatchLookupInstancesRequest {
            nodes: vec![pb::NodeRef {
                name: format!("node-{node}"),
                provider_id: String::new(),
            }],
        });
        request
            .metadata_mut()
            .insert(gateway_api::CALLER_HEADER, name.parse().unwrap());
        request
    };
    // Warm up the allocator and every code path: a known name, and one unknown name (every
    // unknown name shares the anonymous caller's series).
    for i in 0..1_000 {
        instances
            .batch_lookup_instances(call("node-controller".into(), i))
            .await
            .unwrap();
        instances
            .batch_lookup_instances(call("warm-up".into(), i))
            .await
            .unwrap();
    }
    let pid = gateway.id().unwrap();
    let (rss_before, series_before) = (rss_kib(pid), series(&metrics(http).await));
    for i in 0..10_000 {
        instances
            .batch_lookup_instances(call(format!("caller-{i}"), 10_000 + i))
            .await
            .unwrap();
    }
    let (rss_after, after) = (rss_kib(pid), metrics(http).await);
    assert_eq!(series(&after), series_before, "no metric series per caller name");
    assert!(!after.contains("caller-"), "no caller name reaches a label");
    assert!(
        rss_after < rss_before + 2 * 1024,
        "memory grew from {rss_before} KiB to {rss_after} KiB over 10 000 caller names"
    );
    eprintln!("RSS {rss_before} KiB before, {rss_after} KiB after 10 000 caller names");
    gateway.stop(Duration::from_secs(5)).await;
}

/// Where `moto_server` is (installed by `scripts/moto/setup.sh`, which `make test` runs).
fn moto_server() -> PathBuf {
    let path = std::env::var_os("MOTO_SERVER").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.venv-moto/bin/moto_server"),
        PathBuf::from,
    );
    assert!(
        path.is_file(),
        "{} is missing: run scripts/moto/setup.sh (make test-deps)",
        path.display()
    );
    path
}

const ACCESS_KEY_ID: &str = "AKIAPROBE0CREDENTIAL";
const SECRET_ACCESS_KEY: &str = "s3cr3t-Pr0be-9f2c1e7a5b3d8046aa1c-never-log-me";
const SESSION_TOKEN: &str = "sess10n-t0ken-Pr0be-0c7d2e9b4f6a1385-never-log-me";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cloud_credentials_never_reach_a_log_line_a_metric_or_a_caller() {
    let dir = tempfile::tempdir().unwrap();
    let moto_port = free_port();
    let moto = spawn(
        dir.path(),
        "moto",
        &moto_server(),
        &[
            "-H".into(),
            "127.0.0.1".into(),
            "-p".into(),
            moto_port.to_string(),
        ],
    );
    let moto_http = ([127, 0, 0, 1], moto_port).into();
    wait_for("moto to answer", Duration::from_secs(60), || async move {
        http_get(moto_http, "/moto-api/data.json").await.map(|_| ())
    })
    .await;

    let (grpc, http) = (free_port(), free_port());
    let log = dir.path().join("gateway.log");
    let file = std::fs::File::create(&log).unwrap();
    // Every log level, the AWS SDK's included, so nothing hides behind a filter.
    let mut gateway = tokio::process::Command::new(binary("cloud-gateway"))
        .args([
            "--insecure-plaintext",
            "--provider",
            "aws",
            "--aws-region",
            "us-east-1",
            "--aws-endpoint-url",
            &format!("http://127.0.0.1:{moto_port}"),
            "--aws-max-attempts",
            "1",
            "--grpc-listen",
            &format!("127.0.0.1:{grpc}"),
            "--http-listen",
            &format!("127.0.0.1:{http}"),
        ])
        .env("RUST_LOG", "trace")
        .env("AWS_ACCESS_KEY_ID", ACCESS_KEY_ID)
        .env("AWS_SECRET_ACCESS_KEY", SECRET_ACCESS_KEY)
        .env("AWS_SESSION_TOKEN", SESSION_TOKEN)
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .stdin(Stdio::null())
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let channel = channel(([127, 0, 0, 1], grpc).into()).await;

    // Calls that succeed and calls that fail in the cloud, so error paths log and answer too.
    let mut answers = Vec::new();
    let mut instances = InstancesClient::new(channel.clone());
    let lookup = pb::BatchLookupInstancesRequest {
        nodes: vec![
            pb::NodeRef {
                name: "ip-10-0-0-1.ec2.internal".into(),
                provider_id: String::new(),
            },
            pb::NodeRef {
                name: String::new(),
                provider_id: "aws:///us-east-1a/i-0123456789abcdef0".into(),
            },
        ],
    };
    answers.push(format!("{:?}", instances.batch_lookup_instances(lookup).await));
    let mut lbs = LoadBalancersClient::new(channel.clone());
    let service = pb::Service {
        uid: "4b2c1d7e-0000-4000-8000-000000000001".into(),
        namespace: "default".into(),
        name: "web".into(),
        ports: vec![pb::ServicePort {
            name: "http".into(),
            protocol: pb::Protocol::Tcp.into(),
            port: 80,
            node_port: 30080,
        }],
        ..Default::default()
    };
    let ensure = pb::EnsureLoadBalancerRequest {
        cluster_id: String::new(),
        cluster_name: "kubernetes".into(),
        service: Some(service.clone()),
        nodes: Vec::new(),
    };
    answers.push(format!("{:?}", lbs.ensure_load_balancer(ensure).await));
    let get = pb::GetLoadBalancerRequest {
        cluster_id: String::new(),
        cluster_name: "kubernetes".into(),
        service: Some(service),
    };
    answers.push(format!("{:?}", lbs.get_load_balancer(get).await));
    let mut routes = RoutesClient::new(channel.clone());
    let list = pb::ListRoutesRequest {
        cluster_name: "kubernetes".into(),
    };
    answers.push(format!("{:?}", routes.list_routes(list).await));
    let mut identity = IdentityClient::new(channel);
    answers.push(format!(
        "{:?}",
        identity.get_capabilities(pb::GetCapabilitiesRequest {}).await
    ));

    let metrics = metrics(([127, 0, 0, 1], http).into()).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let _ = tokio::process::Command::new("kill")
        .arg("-TERM")
        .arg(gateway.id().unwrap().to_string())
        .status()
        .await;
    while gateway.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let logs = std::fs::read_to_string(&log).unwrap();
    assert!(logs.lines().count() > 20, "the gateway logged its work:\n{logs}");
    assert!(
        logs.contains("127.0.0.1"),
        "the SDK's requests are in the trace log"
    );
    for secret in [SECRET_ACCESS_KEY, SESSION_TOKEN] {
        let hits: Vec<&str> = logs.lines().filter(|l| l.contains(secret)).collect();
        assert!(hits.is_empty(), "a log line holds a credential: {hits:?}");
        assert!(!metrics.contains(secret), "/metrics holds a credential");
        for answer in &answers {
            assert!(
                !answer.contains(secret),
                "an answer to a caller holds a credential: {answer}"
            );
        }
    }
    drop(moto);
}
