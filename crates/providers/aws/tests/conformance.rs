//! Our gateway on AWS, as a process: the real `cloud-gateway` binary (`--provider aws`) against
//! moto, checked by the real `cloudgateway-conformance` binary with a fixture file describing
//! the instances seeded here, as a vendor would check theirs. Needs `scripts/moto/setup.sh` and
//! the workspace's binaries (`cargo build --workspace --bins`, which `make test` does).

mod support;

use std::{
    net::{SocketAddr, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use provider_aws::annotations::{HC_INTERVAL, TYPE};
use support::{Cloud, FaultProxy, INSTANCE_TYPE, Instance, REGION, moto_endpoint, unique_cluster};

/// Where `cargo build` put the workspace's binaries: `$CCM_BIN_DIR`, else next to `deps/`.
fn binary(name: &str) -> PathBuf {
    let dir = std::env::var_os("CCM_BIN_DIR").map_or_else(
        || {
            let exe = std::env::current_exe().expect("test executable");
            let deps = exe.parent().expect("deps directory");
            deps.parent().unwrap_or(deps).to_path_buf()
        },
        PathBuf::from,
    );
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} is missing: build the binaries first (`cargo build --workspace --bins`, which `make test` does)",
        path.display()
    );
    path
}

fn free_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
}

/// A child process killed when dropped; its log is printed when the test fails.
struct Proc(Child, PathBuf);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        if std::thread::panicking() {
            eprintln!(
                "----- {} -----\n{}",
                self.1.display(),
                std::fs::read_to_string(&self.1).unwrap_or_default()
            );
        }
    }
}

/// A directory of this test, removed when dropped (no tempfile in this crate's dependencies).
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Self {
        let path = std::env::temp_dir().join(unique_cluster("aws-conformance"));
        std::fs::create_dir_all(&path).expect("temp dir");
        Self(path)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn fixture_instance(i: &Instance) -> String {
    format!(
        "{{node_name: {}, provider_id: \"{}\", instance_type: {INSTANCE_TYPE}, zone: {}, region: {REGION}, internal_ip: {}}}",
        i.node_name, i.provider_id, i.zone, i.internal_ip
    )
}

/// The fixture for `cluster`; the throttle hook creates and removes `flag` (see
/// [`FaultProxy::throttle_while_exists`]).
fn fixture(
    cluster: &str,
    running: &[Instance],
    stopped: &Instance,
    terminated: &Instance,
    flag: &Path,
) -> String {
    let running: Vec<String> = running
        .iter()
        .map(|i| format!("    - {}", fixture_instance(i)))
        .collect();
    format!(
        r#"provider_name: aws
cluster_name: {cluster}
instances:
  running:
{running}
  stopped:
    - {{node_name: {stopped_name}, provider_id: "{stopped_id}"}}
  terminated:
    - {{node_name: {terminated_name}, provider_id: "{terminated_id}"}}
  unknown_provider_id: "aws:///us-east-1a/i-0123456789abcdef0"
load_balancers:
  implemented_elsewhere_annotations: {{{TYPE}: external}}
  invalid_service:
    annotations: {{{HC_INTERVAL}: often}}
routes:
  destination_cidr: 100.96.7.0/24
hooks:
  throttle: {{on: "touch '{flag}'", off: "rm -f '{flag}'"}}
"#,
        running = running.join("\n"),
        stopped_name = stopped.node_name,
        stopped_id = stopped.provider_id,
        terminated_name = terminated.node_name,
        terminated_id = terminated.provider_id,
        flag = flag.display(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_gateway_on_aws_passes_cloudgateway_conformance() {
    let (gateway_binary, tool) = (binary("cloud-gateway"), binary("cloudgateway-conformance"));
    let dir = TempDir::new();

    // The cloud: a network tagged for the cluster, two running instances, a stopped and a
    // terminated one.
    let cloud = Cloud::connect(&moto_endpoint()).await;
    let network = cloud.network(&unique_cluster("conformance")).await;
    let running = vec![
        cloud.run_instance(&network, 0).await,
        cloud.run_instance(&network, 1).await,
    ];
    let stopped = cloud.run_instance(&network, 1).await;
    cloud.stop(&stopped).await;
    let terminated = cloud.run_instance(&network, 0).await;
    cloud.terminate(&terminated).await;

    // The gateway reaches moto through the fault proxy, which throttles while the flag exists.
    let proxy = FaultProxy::start(&moto_endpoint()).await;
    let flag = dir.path().join("throttle");
    proxy.throttle_while_exists(flag.clone());
    let (grpc, http) = (free_addr(), free_addr());
    let log = dir.path().join("cloud-gateway.log");
    let log_file = std::fs::File::create(&log).expect("log file");
    let child = Command::new(&gateway_binary)
        .args([
            "--insecure-plaintext",
            "--provider",
            "aws",
            "--aws-region",
            REGION,
        ])
        .args([
            "--grpc-listen",
            &grpc.to_string(),
            "--http-listen",
            &http.to_string(),
        ])
        .args(["--aws-endpoint-url", &proxy.endpoint])
        .args(["--aws-vpc-id", &network.vpc_id])
        .args(["--aws-route-table-id", &network.route_table_id])
        .args(["--aws-max-attempts", "1"])
        .args(["--read-rate", "1000", "--read-burst", "1000"])
        .args(["--write-rate", "1000", "--write-burst", "1000"])
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .stdin(Stdio::null())
        .stdout(log_file.try_clone().expect("log file"))
        .stderr(log_file)
        .spawn()
        .expect("start cloud-gateway");
    let _gateway = Proc(child, log);
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(grpc).is_err() {
        assert!(Instant::now() < deadline, "the gateway did not listen within 30s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let fixture_path = dir.path().join("fixture.yaml");
    std::fs::write(
        &fixture_path,
        fixture(&network.cluster, &running, &stopped, &terminated, &flag),
    )
    .expect("write the fixture");
    let run = tokio::process::Command::new(&tool)
        .args(["--address", &grpc.to_string()])
        .arg("--fixture")
        .arg(&fixture_path)
        .args(["--metrics-url", &format!("http://{http}/metrics")])
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("the conformance run ends within 120s")
        .expect("run cloudgateway-conformance");
    let stdout = String::from_utf8_lossy(&output.stdout);
    println!("{stdout}{}", String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "{:?}:\n{stdout}", output.status);
    let verdicts: Vec<(&str, &str)> = stdout
        .lines()
        .filter_map(|l| {
            let (verdict, rest) = l.split_once(' ')?;
            Some((verdict, rest.split(':').next()?))
        })
        .filter(|(v, _)| ["PASS", "FAIL", "SKIP"].contains(v))
        .collect();
    let skipped: Vec<&str> = verdicts
        .iter()
        .filter(|(v, _)| *v != "PASS")
        .map(|(_, case)| *case)
        .collect();
    // moto provisions at once (no RETRY_AFTER to see), and the gateway has every capability.
    assert_eq!(
        skipped,
        [
            "missing_capabilities_answer_unimplemented",
            "retry_after_is_typed"
        ],
        "{stdout}"
    );
    assert!(verdicts.len() >= 21, "{stdout}");
    assert!(!flag.exists(), "the throttle hook was undone");
}
