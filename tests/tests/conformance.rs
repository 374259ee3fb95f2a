//! End-to-end: `cloudgateway-conformance` against gateways running as processes, each with the
//! fixture file a vendor would write: ours on the simulator (every case, and again with a
//! capability switched off) and the Python example gateway (`examples/python-gateway`).
//! Ours on AWS (moto) is in `crates/providers/aws/tests/conformance.rs`.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    process::Output,
    time::Duration,
};

use e2e::{
    Procs, binary,
    conformance::{assert_passed, cases_except, run, start_gateway, tool_args, verdict},
    free_port, http_get, spawn, wait_for,
};

/// The case every gateway that claims every capability skips.
const MISSING_CAPABILITIES: &str = "missing_capabilities_answer_unimplemented";

const INVENTORY: &str = r#"
region: conf-1
zones: [conf-1a, conf-1b]
instance_subnet: 10.20.0.0/16
load_balancer_pool: 203.0.113.0/24
instances:
  - {name: worker-1, id: i-0c0f00000000000a1, type: sim.medium, zone: conf-1a, private_ip: 10.20.1.11}
  - {name: worker-2, id: i-0c0f00000000000a2, type: sim.large, zone: conf-1b, private_ip: 10.20.2.11}
  - {name: sleeper, id: i-0c0f00000000000b1, zone: conf-1a, private_ip: 10.20.1.12, state: stopped}
  - {name: gone, id: i-0c0f00000000000c1, zone: conf-1b, private_ip: 10.20.2.12, state: terminated}
"#;

/// The fixture of [`INVENTORY`]; `CLOUD_SIM` is replaced by the console's command line.
const FIXTURE: &str = r#"
provider_name: simulator
instances:
  running:
    - {node_name: worker-1, provider_id: "simulator://conf-1a/i-0c0f00000000000a1",
       instance_type: sim.medium, zone: conf-1a, region: conf-1, internal_ip: 10.20.1.11}
    - {node_name: worker-2, provider_id: "simulator://conf-1b/i-0c0f00000000000a2",
       instance_type: sim.large, zone: conf-1b, region: conf-1, internal_ip: 10.20.2.11}
  stopped:
    - {node_name: sleeper, provider_id: "simulator://conf-1a/i-0c0f00000000000b1"}
  terminated:
    - {node_name: gone, provider_id: "simulator://conf-1b/i-0c0f00000000000c1"}
  unknown_provider_id: "simulator://conf-1a/i-0123456789abcdef0"
load_balancers:
  implemented_elsewhere_annotations: {simulator.cloudgateway.io/load-balancer-type: external}
  invalid_service: {load_balancer_ip: 192.0.2.77}
routes:
  destination_cidr: 10.244.7.0/24
hooks:
  throttle: {on: "CLOUD_SIM knobs set --rate-limit 0", off: "CLOUD_SIM knobs set --rate-limit off"}
  slow_provisioning:
    on: "CLOUD_SIM knobs set --lb-provision-delay ${CONFORMANCE_SECONDS}s"
    off: "CLOUD_SIM knobs set --lb-provision-delay 0s"
"#;

/// Starts our gateway on the simulator seeded with [`INVENTORY`]; (gRPC, HTTP) addresses.
async fn sim_gateway(procs: &mut Procs, dir: &Path, extra: &[&str]) -> (SocketAddr, SocketAddr) {
    let inventory = dir.join("inventory.yaml");
    std::fs::write(&inventory, INVENTORY).expect("write the inventory");
    let provider = [
        "--provider",
        "simulator",
        "--simulator-inventory",
        &inventory.to_string_lossy(),
        "--simulator-no-fsync",
    ];
    start_gateway(procs, dir, &provider, extra, Duration::from_secs(30)).await
}

/// Writes the simulator's fixture, its hooks calling `cloud-sim` on the gateway at `http`.
fn sim_fixture(dir: &Path, http: SocketAddr, edit: impl FnOnce(String) -> String) -> PathBuf {
    let console = format!("'{}' --admin-url http://{http}", binary("cloud-sim").display());
    let path = dir.join("fixture.yaml");
    std::fs::write(&path, edit(FIXTURE.replace("CLOUD_SIM", &console))).expect("write the fixture");
    path
}

/// Runs the conformance tool for up to 120 s; its output is printed (shown when the test fails).
async fn conformance(args: &[String], env: &[(&str, String)]) -> (Output, String) {
    run(args, env, Duration::from_secs(120)).await
}

fn assert_every_case_passes(output: &Output, stdout: &str) {
    assert_passed(output, stdout, &cases_except(&[MISSING_CAPABILITIES]));
    assert_eq!(verdict(stdout, MISSING_CAPABILITIES).0, "SKIP");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_gateway_on_the_simulator_passes_every_case() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut procs = Procs::default();
    let (grpc, http) = sim_gateway(&mut procs, dir.path(), &[]).await;
    let fixture = sim_fixture(dir.path(), http, |f| f);
    let metrics = vec!["--metrics-url".to_owned(), format!("http://{http}/metrics")];
    let (output, stdout) = conformance(&tool_args(grpc, &fixture, &metrics), &[]).await;
    assert_every_case_passes(&output, &stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capability_switched_off_answers_unimplemented_and_its_cases_are_skipped() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut procs = Procs::default();
    let (grpc, http) = sim_gateway(&mut procs, dir.path(), &["--simulator-disable", "routes"]).await;
    let fixture = sim_fixture(dir.path(), http, |f| {
        format!("{f}capabilities: {{routes: false}}\n")
    });
    let cases = [
        "capabilities_describe_the_provider",
        "missing_capabilities_answer_unimplemented",
        "gateway_validation_rejects_bad_requests",
        "routes_lifecycle",
        "routes_lifecycle_as_the_route_controller_sends",
    ];
    let only: Vec<String> = cases
        .iter()
        .flat_map(|c| ["--case".to_owned(), (*c).to_owned()])
        .collect();
    let (output, stdout) = conformance(&tool_args(grpc, &fixture, &only), &[]).await;
    assert!(output.status.success(), "{stdout}");
    let verdicts: Vec<&str> = cases.iter().map(|c| verdict(&stdout, c).0).collect();
    assert_eq!(verdicts, ["PASS", "PASS", "PASS", "SKIP", "SKIP"], "{stdout}");
    assert_eq!(
        stdout.lines().count(),
        cases.len() + 1,
        "one line per case and a summary"
    );

    // The same gateway, held to a fixture that expects routes: the capabilities case fails.
    let expects_routes = sim_fixture(dir.path(), http, |f| f);
    let (output, stdout) = conformance(
        &tool_args(
            grpc,
            &expects_routes,
            &[
                "--case".to_owned(),
                "capabilities_describe_the_provider".to_owned(),
            ],
        ),
        &[],
    )
    .await;
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert_eq!(verdict(&stdout, "capabilities_describe_the_provider").0, "FAIL");
}

/// The repository's root.
fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_example_gateway_passes_every_case() {
    let venv = std::env::var_os("PYTHON_GATEWAY_VENV")
        .map_or_else(|| repo().join(".venv-python-gateway"), PathBuf::from);
    assert!(
        venv.join("generated/cloudgateway").is_dir(),
        "the Python gateway is not set up in {}: run scripts/python-gateway/setup.sh (make test-deps)",
        venv.display()
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let mut procs = Procs::default();
    let grpc: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let admin: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let run = repo().join("scripts/python-gateway/run.sh");
    let args = [
        "--listen",
        &grpc.to_string(),
        "--admin-listen",
        &admin.to_string(),
    ]
    .map(String::from);
    procs.push(spawn(dir.path(), "python-gateway", &run, &args));
    wait_for(
        "the Python gateway to be ready",
        Duration::from_secs(30),
        || async move { matches!(http_get(admin, "/readyz").await, Some((200, _))).then_some(()) },
    )
    .await;

    // The fixture checked in next to the gateway, as its README runs it.
    let fixture = repo().join("examples/python-gateway/conformance.yaml");
    let metrics = vec!["--metrics-url".to_owned(), format!("http://{admin}/metrics")];
    let (output, stdout) = conformance(
        &tool_args(grpc, &fixture, &metrics),
        &[("PYTHON_GATEWAY_ADMIN", format!("http://{admin}"))],
    )
    .await;
    assert_every_case_passes(&output, &stdout);
}
