//! `cloudgateway-conformance` against a gateway run as a process: the gateway on free ports, the
//! tool's run, and the verdicts it prints (`tests/conformance.rs`, `tests/openstack_conformance.rs`).

use std::{
    net::SocketAddr,
    path::Path,
    process::Output,
    time::{Duration, Instant},
};

use crate::{Procs, binary, free_port, http_get, spawn, wait_for};

/// Every case of the suite, as `cloudgateway-conformance` lists them.
pub const CASES: [&str; 23] = [
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
    "missing_capabilities_answer_unimplemented",
    "retry_after_is_typed",
    "throttled_is_typed",
];

/// [`CASES`] but `except`.
pub fn cases_except(except: &[&str]) -> Vec<&'static str> {
    CASES.into_iter().filter(|case| !except.contains(case)).collect()
}

/// Starts `cloud-gateway` in plain text on free loopback ports with the `provider` flags, its own
/// limits out of the way (1000 calls/s: the subject is the contract), then `extra`; waits up to
/// `ready_within` for `/readyz`. Returns its (gRPC, HTTP) addresses.
pub async fn start_gateway(
    procs: &mut Procs,
    dir: &Path,
    provider: &[&str],
    extra: &[&str],
    ready_within: Duration,
) -> (SocketAddr, SocketAddr) {
    let grpc: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let http: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let (grpc_flag, http_flag) = (grpc.to_string(), http.to_string());
    let listen = [
        "--insecure-plaintext",
        "--grpc-listen",
        &grpc_flag,
        "--http-listen",
        &http_flag,
    ];
    let limits = [
        "--read-rate",
        "1000",
        "--read-burst",
        "1000",
        "--write-rate",
        "1000",
        "--write-burst",
        "1000",
    ];
    let args: Vec<String> = [&listen[..], provider, &limits, extra]
        .concat()
        .into_iter()
        .map(String::from)
        .collect();
    procs.push(spawn(dir, "cloud-gateway", &binary("cloud-gateway"), &args));
    wait_for("the gateway to be ready", ready_within, || async move {
        matches!(http_get(http, "/readyz").await, Some((200, _))).then_some(())
    })
    .await;
    (grpc, http)
}

/// The tool's flags for the gateway at `grpc` held to `fixture`, then `extra`.
pub fn tool_args(grpc: SocketAddr, fixture: &Path, extra: &[String]) -> Vec<String> {
    let mut args = vec![
        "--address".to_owned(),
        grpc.to_string(),
        "--fixture".to_owned(),
        fixture.to_string_lossy().into_owned(),
    ];
    args.extend_from_slice(extra);
    args
}

/// Runs the tool with `args` and `env`, failing after `within`; its output is printed (shown
/// when the test fails). Returns it, and its stdout as text.
pub async fn run(args: &[String], env: &[(&str, String)], within: Duration) -> (Output, String) {
    let mut command = tokio::process::Command::new(binary("cloudgateway-conformance"));
    command.args(args).kill_on_drop(true);
    for (key, value) in env {
        command.env(key, value);
    }
    let output = tokio::time::timeout(within, command.output())
        .await
        .unwrap_or_else(|_| panic!("the conformance run ends within {}s", within.as_secs()))
        .expect("run cloudgateway-conformance");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    println!("{stdout}{}", String::from_utf8_lossy(&output.stderr));
    (output, stdout)
}

/// The verdict printed for `case`, and the rest of its line.
pub fn verdict<'a>(stdout: &'a str, case: &str) -> (&'a str, &'a str) {
    stdout
        .lines()
        .find_map(|l| {
            let (verdict, rest) = l.split_once(' ')?;
            let rest = rest.strip_prefix(case)?.strip_prefix(':')?;
            Some((verdict, rest))
        })
        .unwrap_or_else(|| panic!("no line for {case} in:\n{stdout}"))
}

/// Asserts that the run succeeded and that each of `cases` passed.
pub fn assert_passed(output: &Output, stdout: &str, cases: &[&str]) {
    assert!(output.status.success(), "{:?}:\n{stdout}", output.status);
    let not_passed: Vec<&str> = cases
        .iter()
        .copied()
        .filter(|case| verdict(stdout, case).0 != "PASS")
        .collect();
    assert!(not_passed.is_empty(), "not passed: {not_passed:?}\n{stdout}");
}

/// The whole suite against the gateway at `grpc` (its metrics at `http`) held to `fixture`,
/// verbose, failing after `within`: asserts that the run succeeded, that each of `skipped` skipped
/// with its reason in the line (`(case, reason)`), that every other case passed, and that there
/// is one line per case and a summary. Returns the tool's stdout.
pub async fn run_suite(
    grpc: SocketAddr,
    http: SocketAddr,
    fixture: &Path,
    skipped: &[(&str, &str)],
    within: Duration,
) -> String {
    let started = Instant::now();
    let extra = [
        "--metrics-url".to_owned(),
        format!("http://{http}/metrics"),
        "--verbose".to_owned(),
    ];
    let (output, stdout) = run(&tool_args(grpc, fixture, &extra), &[], within).await;
    println!("(run in {:.1}s)", started.elapsed().as_secs_f64());

    let skipped_cases: Vec<&str> = skipped.iter().map(|(case, _)| *case).collect();
    assert_passed(&output, &stdout, &cases_except(&skipped_cases));
    for (case, reason) in skipped {
        let (verdict, why) = verdict(&stdout, case);
        assert!(
            verdict == "SKIP" && why.contains(reason),
            "{case} must skip ({reason}):\n{stdout}"
        );
    }
    assert_eq!(
        stdout.lines().count(),
        CASES.len() + 1,
        "one line per case and a summary:\n{stdout}"
    );
    stdout
}
