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

use e2e::{Procs, binary, free_port, http_get, spawn, wait_for};

/// Every case of the suite but the one for missing capabilities.
const EVERY_CASE: [&str; 22] = [
    "capabilities_describe_the_provider",
    "every_answer_names_the_provider",
    "running_instance_exists_and_is_not_shut_down",
    "stopped_instance_exists_and_is_shut_down",
    "terminated_instance_does_not_exist",
    "unknown_provider_id_does_not_exist",
    "metadata_describes_the_instance",
    "lookup_by_name_when_provider_id_is_empty",
    "batch_lookup_answers_each_node_in_order",
    "load_balancer_lifecycle",
    "ensure_twice_creates_one_load_balancer",
    "update_changes_backends",
    "implemented_elsewhere_is_typed",
    "provider_invalid_argument_is_typed",
    "routes_lifecycle",
    "routes_lifecycle_as_the_route_controller_sends",
    "gateway_validation_rejects_bad_requests",
    "garbage_bytes_get_a_status_and_the_gateway_lives_on",
    "an_unknown_caller_header_is_served_as_anonymous",
    "an_unknown_caller_header_reaches_no_metric",
    "retry_after_is_typed",
    "throttled_is_typed",
];

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
    let grpc: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let http: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let mut args: Vec<String> = [
        "--insecure-plaintext",
        "--grpc-listen",
        &grpc.to_string(),
        "--http-listen",
        &http.to_string(),
        "--provider",
        "simulator",
        "--simulator-inventory",
        &inventory.to_string_lossy(),
        "--simulator-no-fsync",
        "--read-rate",
        "1000",
        "--read-burst",
        "1000",
        "--write-rate",
        "1000",
        "--write-burst",
        "1000",
    ]
    .map(String::from)
    .to_vec();
    args.extend(extra.iter().map(|a| (*a).to_owned()));
    procs.push(spawn(dir, "cloud-gateway", &binary("cloud-gateway"), &args));
    wait_for(
        "the gateway to be ready",
        Duration::from_secs(30),
        || async move { matches!(http_get(http, "/readyz").await, Some((200, _))).then_some(()) },
    )
    .await;
    (grpc, http)
}

/// Writes the simulator's fixture, its hooks calling `cloud-sim` on the gateway at `http`.
fn sim_fixture(dir: &Path, http: SocketAddr, edit: impl FnOnce(String) -> String) -> PathBuf {
    let console = format!("'{}' --admin-url http://{http}", binary("cloud-sim").display());
    let path = dir.join("fixture.yaml");
    std::fs::write(&path, edit(FIXTURE.replace("CLOUD_SIM", &console))).expect("write the fixture");
    path
}

/// Runs the conformance tool; its output is printed (shown when the test fails).
async fn conformance(args: &[String], env: &[(&str, String)]) -> (Output, String) {
    let mut command = tokio::process::Command::new(binary("cloudgateway-conformance"));
    command.args(args).kill_on_drop(true);
    for (key, value) in env {
        command.env(key, value);
    }
    let output = tokio::time::timeout(Duration::from_secs(120), command.output())
        .await
        .expect("the conformance run ends within 120s")
        .expect("run cloudgateway-conformance");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    println!("{stdout}{}", String::from_utf8_lossy(&output.stderr));
    (output, stdout)
}

fn args_for(grpc: SocketAddr, fixture: &Path, extra: &[String]) -> Vec<String> {
    let mut args = vec![
        "--address".to_owned(),
        grpc.to_string(),
        "--fixture".to_owned(),
        fixture.to_string_lossy().into_owned(),
    ];
    args.extend_from_slice(extra);
    args
}

/// The verdict printed for `case`.
fn verdict<'a>(stdout: &'a str, case: &str) -> &'a str {
    stdout
        .lines()
        .find_map(|l| {
            let (verdict, rest) = l.split_once(' ')?;
            rest.strip_prefix(case)?.starts_with(':').then_some(verdict)
        })
        .unwrap_or_else(|| panic!("no line for {case} in:\n{stdout}"))
}

fn assert_every_case_passes(output: &Output, stdout: &str) {
    assert!(output.status.success(), "{:?}:\n{stdout}", output.status);
    let not_passed: Vec<&str> = EVERY_CASE
        .into_iter()
        .filter(|case| verdict(stdout, case) != "PASS")
        .collect();
    assert!(not_passed.is_empty(), "not passed: {not_passed:?}\n{stdout}");
    assert_eq!(
        verdict(stdout, "missing_capabilities_answer_unimplemented"),
        "SKIP"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_gateway_on_the_simulator_passes_every_case() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut procs = Procs::default();
    let (grpc, http) = sim_gateway(&mut procs, dir.path(), &[]).await;
    let fixture = sim_fixture(dir.path(), http, |f| f);
    let metrics = vec!["--metrics-url".to_owned(), format!("http://{http}/metrics")];
    let (output, stdout) = conformance(&args_for(grpc, &fixture, &metrics), &[]).await;
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
    let (output, stdout) = conformance(&args_for(grpc, &fixture, &only), &[]).await;
    assert!(output.status.success(), "{stdout}");
    let verdicts: Vec<&str> = cases.iter().map(|c| verdict(&stdout, c)).collect();
    assert_eq!(verdicts, ["PASS", "PASS", "PASS", "SKIP", "SKIP"], "{stdout}");
    assert_eq!(
        stdout.lines().count(),
        cases.len() + 1,
        "one line per case and a summary"
    );

    // The same gateway, held to a fixture that expects routes: the capabilities case fails.
    let expects_routes = sim_fixture(dir.path(), http, |f| f);
    let (output, stdout) = conformance(
        &args_for(
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
    assert_eq!(verdict(&stdout, "capabilities_describe_the_provider"), "FAIL");
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
        &args_for(grpc, &fixture, &metrics),
        &[("PYTHON_GATEWAY_ADMIN", format!("http://{admin}"))],
    )
    .await;
    assert_every_case_passes(&output, &stdout);
}
