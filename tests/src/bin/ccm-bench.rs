//! `make bench`: node initialization at cloud scale, ours side by side with upstream mode.
//!
//! Starts fake-apiserver, cloud-gateway on the simulator and the node controllers as processes
//! (the binaries next to this one: `make bench` builds them in release mode) and drives each
//! scenario twice: **ours** (default flags) and **upstream mode** (the same binaries configured
//! like the upstream cloud-controller-manager: one worker, no batching, no look-ahead, no
//! cache, no coalescing, one provider call per node per refresh, a client-side limit of 20 QPS). Prints a
//! table and writes it as JSON.
//!
//! Scenarios:
//! - (a) N Ready nodes join at once, tainted, on a cloud allowing 10 calls/s (burst 10) at
//!   50 ms per call: time until all are initialized, provider calls, throttled answers, API
//!   requests (all of them since the controllers started, and per node net of the controllers'
//!   start-up requests, measured by starting them on an empty cluster), peak RSS;
//! - (b) steady state: N initialized nodes, time run 50 times faster: the address refresh
//!   (5 min → 6 s) and ours' gateway cache TTL (10 s → 200 ms) shortened, the cloud's limit
//!   raised as much: provider calls per refresh period, as a real 5-minute period costs;
//! - (c) a large cluster (5 × N nodes, fast cloud): peak RSS of each process.
//!
//! The service controller's scenarios (d), (e), (f), (i), (j) are in `e2e::services_bench`, the route
//! controller's (g) and (h) in `e2e::routes_bench`.
//!
//! `--quick` runs small sizes (CI checks that it completes and prints the table).

use std::{
    collections::BTreeMap,
    path::PathBuf,
    time::{Duration, Instant},
};

use e2e::{
    Cluster, ClusterSpec, counter,
    measure::{self, fmt_f},
    routes_bench, services_bench,
};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::{Api, api::ListParams};
use serde_json::{Value, json};

const UNINITIALIZED: &str = "node.cloudprovider.kubernetes.io/uninitialized";

/// The gateway's instance cache TTL in ours mode (its default).
const OURS_CACHE_TTL: Duration = Duration::from_secs(10);

/// How much faster than real time scenario (b) runs its periods.
const STEADY_SPEEDUP: u32 = 50;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Ours,
    Upstream,
}

impl Mode {
    fn label(self) -> &'static str {
        match self {
            Self::Ours => "ours",
            Self::Upstream => "upstream mode",
        }
    }

    /// Gateway flags: upstream has no batching, cache or coalescing. Ours caches instances for
    /// 10 s, divided by `speedup` when the scenario runs time that much faster.
    fn gateway_args(self, speedup: u32) -> Vec<String> {
        match self {
            Self::Ours => vec![
                "--instance-cache-ttl".into(),
                format!("{}ms", (OURS_CACHE_TTL / speedup.max(1)).as_millis()),
            ],
            Self::Upstream => vec![
                "--instance-batch-size".into(),
                "1".into(),
                "--instance-cache-ttl".into(),
                "0s".into(),
                "--instance-coalescing=false".into(),
            ],
        }
    }

    /// Node controller flags: upstream's one worker, one node per lookup, and client-side
    /// limit of 20 QPS.
    fn node_controller_args(self) -> Vec<&'static str> {
        match self {
            Self::Ours => vec![],
            Self::Upstream => vec![
                "--concurrent-node-syncs",
                "1",
                "--lookup-ahead",
                "0",
                "--kube-api-qps",
                "20",
            ],
        }
    }
}

struct Sizes {
    join: usize,
    steady: usize,
    steady_periods: u32,
    large: usize,
    large_deadline: Duration,
}

/// One scenario's figures for one mode.
#[derive(Default, Clone)]
struct Row {
    scenario: String,
    mode: String,
    nodes: usize,
    seconds: f64,
    provider_calls: u64,
    throttled: u64,
    api_requests: u64,
    /// The controllers' own start-up requests (LIST and WATCH of nodes...), counted by starting
    /// them on an empty cluster: in `api_requests`, but no node's cost.
    startup_api_requests: Option<u64>,
    peak_rss_mib: BTreeMap<String, f64>,
    /// Least time the provider's limit allows for the calls this mode needs.
    floor_seconds: Option<f64>,
    note: String,
}

fn inventory(n: usize) -> String {
    let mut inventory = String::from(
        "region: sim-east-1\nzones: [sim-east-1a, sim-east-1b]\ninstance_subnet: 10.0.0.0/16\ninstances:\n",
    );
    for i in 0..n {
        inventory.push_str(&format!(
            "  - name: node-{i}\n    type: sim.medium\n    zone: sim-east-1{}\n    private_ip: 10.0.{}.{}\n",
            if i % 2 == 0 { 'a' } else { 'b' },
            10 + i / 250,
            1 + i % 250
        ));
    }
    inventory
}

struct Bench {
    cluster: Cluster,
    mode: Mode,
    /// LISTs of nodes this program made itself (not the controllers' requests).
    own_lists: u64,
}

impl Bench {
    /// A cluster whose gateway runs in `mode`, its time-based settings divided by `speedup`.
    async fn start(mode: Mode, nodes: usize, cloud: &[&str], gateway: &[&str], speedup: u32) -> Self {
        let mut spec = ClusterSpec::with_instances(&[]);
        spec.inventory = inventory(nodes);
        spec.gateway_args = cloud.iter().chain(gateway).map(|s| (*s).to_owned()).collect();
        spec.gateway_args.extend(mode.gateway_args(speedup));
        Self {
            cluster: Cluster::start(spec).await,
            mode,
            own_lists: 0,
        }
    }

    /// BatchLookupInstances calls the node controller made: one per refresh pass in steady state.
    async fn refresh_passes(&self) -> u64 {
        let m = measure::gateway_metrics(&self.cluster).await;
        counter(
            &m,
            "cloudgateway_grpc_calls_total",
            &[("method", "BatchLookupInstances"), ("caller", "node-controller")],
        )
    }

    async fn provider_calls(&self) -> (u64, u64) {
        let m = measure::gateway_metrics(&self.cluster).await;
        let calls = measure::provider_calls(&m, &["lookup_instances"]);
        (calls["lookup_instances"], measure::throttled(&m))
    }

    /// Every API request served so far (this program's own LISTs excluded).
    async fn api_requests(&self) -> u64 {
        measure::api_requests(&self.cluster)
            .await
            .saturating_sub(self.own_lists)
    }

    /// Waits until the provider-call and API-request counters stop changing (the same on two
    /// readings 200 ms apart; at most `deadline`): the calls and writes under way have landed.
    /// Returns whether they settled.
    async fn settle(&self, deadline: Duration) -> bool {
        let give_up = Instant::now() + deadline;
        let mut last = (self.provider_calls().await, self.api_requests().await);
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let now = (self.provider_calls().await, self.api_requests().await);
            if now == last {
                return true;
            }
            if Instant::now() > give_up {
                return false;
            }
            last = now;
        }
    }

    async fn register(&self, n: usize) {
        futures::stream::iter(0..n)
            .map(|i| async move { self.cluster.register_node(&format!("node-{i}"), true).await })
            .buffer_unordered(64)
            .collect::<Vec<_>>()
            .await;
    }

    fn start_controllers(&mut self, extra_node: &[&str]) {
        let mut node_args = self.mode.node_controller_args();
        node_args.extend_from_slice(extra_node);
        node_args.push("--leader-elect=false");
        self.cluster
            .start_controller("cloud-node-controller", "cloud-node-controller", &node_args);
        self.cluster.start_controller(
            "cloud-node-lifecycle-controller",
            "cloud-node-lifecycle-controller",
            &["--leader-elect=false"],
        );
    }

    async fn initialized(&mut self) -> usize {
        self.own_lists += 1;
        let nodes: Api<Node> = self.cluster.nodes();
        let list = nodes
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        list.iter()
            .filter(|n| {
                !n.spec
                    .as_ref()
                    .and_then(|s| s.taints.as_ref())
                    .is_some_and(|t| t.iter().any(|t| t.key == UNINITIALIZED))
            })
            .count()
    }

    async fn wait_initialized(&mut self, n: usize, deadline: Duration) -> Option<f64> {
        let started = Instant::now();
        loop {
            if self.initialized().await >= n {
                return Some(started.elapsed().as_secs_f64());
            }
            if started.elapsed() > deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn peak_rss(&self) -> BTreeMap<String, f64> {
        measure::peak_rss(&self.cluster.procs, &[])
    }

    async fn stop(mut self) {
        self.cluster.stop().await;
    }
}

/// The API requests the controllers make to start (list and watch nodes, ...) when there is no
/// node: started on an empty cluster, counted once both watch nodes and the count settles.
/// `None` when they did not settle within 60 s.
async fn startup_requests(mode: Mode) -> Option<u64> {
    let mut bench = Bench::start(mode, 0, &[], &[], 1).await;
    let before = bench.api_requests().await;
    bench.start_controllers(&[]);
    let deadline = Instant::now() + Duration::from_secs(60);
    // Both controllers watch nodes once started.
    while measure::api_requests_of(&bench.cluster, "WATCH", "nodes").await < 2 {
        if Instant::now() > deadline {
            bench.stop().await;
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let settled = bench.settle(Duration::from_secs(10)).await;
    let requests = bench.api_requests().await.saturating_sub(before);
    bench.stop().await;
    settled.then_some(requests)
}

/// `n` Ready, tainted nodes registered, then the controllers started: time until every node is
/// initialized (at most `deadline`), provider calls, API requests since the controllers started
/// (read once the counters settle, so the last nodes' status patches and events are in) and
/// peak RSS.
async fn initialize_all(mode: Mode, n: usize, cloud: &[&str], gateway: &[&str], deadline: Duration) -> Row {
    let mut bench = Bench::start(mode, n, cloud, gateway, 1).await;
    bench.register(n).await;
    let api_before = bench.api_requests().await;
    bench.start_controllers(&[]);
    let seconds = bench.wait_initialized(n, deadline).await;
    if seconds.is_some() {
        // The last nodes' status patches and events may still be on their way: count them.
        bench.settle(Duration::from_secs(10)).await;
    }
    let done = bench.initialized().await;
    let (calls, throttled) = bench.provider_calls().await;
    let api = bench.api_requests().await.saturating_sub(api_before);
    let row = Row {
        mode: mode.label().into(),
        nodes: n,
        seconds: seconds.unwrap_or(f64::NAN),
        provider_calls: calls,
        throttled,
        api_requests: api,
        peak_rss_mib: bench.peak_rss(),
        note: if seconds.is_none() {
            format!("did not converge: {done} of {n} initialized after {deadline:?}")
        } else {
            String::new()
        },
        ..Row::default()
    };
    bench.stop().await;
    row
}

/// (a) `n` Ready nodes join at once; cloud 10 calls/s, burst 10, 50 ms per call.
async fn join_at_once(mode: Mode, n: usize) -> Row {
    let cloud = ["--simulator-rate-limit", "10/10", "--simulator-latency", "50ms"];
    let needed = match mode {
        Mode::Ours => n.div_ceil(100),
        Mode::Upstream => n,
    };
    let startup = startup_requests(mode).await;
    Row {
        scenario: format!("(a) {n} nodes join at once, cloud 10 calls/s, 50 ms/call"),
        // Calls beyond the burst of 10, at 10 per second.
        floor_seconds: Some(needed.saturating_sub(10) as f64 / 10.0),
        startup_api_requests: startup,
        ..initialize_all(mode, n, &cloud, &[], Duration::from_secs(1800)).await
    }
}

/// (b) steady state: `n` initialized nodes, time 50 times faster: refresh every 6 s (5 min / 50),
/// ours' cache TTL 200 ms (10 s / 50; left at 10 s, the cache would answer every other 6 s
/// pass and halve the calls a real 5-minute period costs), cloud limit ×50: provider calls per
/// refresh pass, over `periods` passes.
async fn steady_state(mode: Mode, n: usize, periods: u32) -> Row {
    let cloud = ["--simulator-rate-limit", "500/500"];
    let gateway = ["--read-rate", "500", "--read-burst", "500"];
    let mut bench = Bench::start(mode, n, &cloud, &gateway, STEADY_SPEEDUP).await;
    bench.register(n).await;
    let period = Duration::from_secs(5 * 60) / STEADY_SPEEDUP;
    let period_flag = format!("{}ms", period.as_millis());
    bench.start_controllers(&["--node-status-update-frequency", &period_flag]);
    let converged = bench.wait_initialized(n, Duration::from_secs(900)).await;
    // Count from the first pass after every node is initialized.
    let deadline = Instant::now() + Duration::from_secs(60) + 2 * period * periods;
    let first = bench.refresh_passes().await;
    while bench.refresh_passes().await == first && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let passes_before = bench.refresh_passes().await;
    let (calls_before, _) = bench.provider_calls().await;
    let api_before = bench.api_requests().await;
    while bench.refresh_passes().await < passes_before + u64::from(periods) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The last pass's provider calls are counted before its RPC is (the gateway counts an RPC
    // as it answers); the writes of its answers (if addresses changed) may still be landing.
    let settled = bench.settle(Duration::from_secs(10)).await;
    let passes = bench.refresh_passes().await - passes_before;
    let (calls, throttled) = bench.provider_calls().await;
    let api = bench.api_requests().await.saturating_sub(api_before);
    let row = Row {
        scenario: format!(
            "(b) steady state, {n} nodes: per refresh period (5 min, run as 6 s; cache TTL 10 s, run as 200 ms)"
        ),
        mode: mode.label().into(),
        nodes: n,
        seconds: f64::NAN,
        provider_calls: (calls - calls_before) / passes.max(1),
        throttled,
        api_requests: api / passes.max(1),
        peak_rss_mib: bench.peak_rss(),
        floor_seconds: None,
        startup_api_requests: None,
        note: match (converged, settled) {
            (None, _) => "did not converge".into(),
            (Some(_), true) => format!("average of {passes} passes"),
            (Some(_), false) => format!("average of {passes} passes; counters still moving after 10 s"),
        },
    };
    bench.stop().await;
    row
}

/// (c) a large cluster on a fast cloud: peak RSS once every node is initialized.
async fn large_cluster(mode: Mode, n: usize, deadline: Duration) -> Row {
    let gateway = ["--read-rate", "1000", "--read-burst", "1000"];
    Row {
        scenario: format!("(c) {n} nodes, fast cloud: peak RSS"),
        ..initialize_all(mode, n, &[], &gateway, deadline).await
    }
}

fn ratio(ours: f64, upstream: f64) -> String {
    if ours.is_nan() || upstream.is_nan() || upstream == 0.0 {
        "-".into()
    } else {
        format!("{:.3}", ours / upstream)
    }
}

/// API requests per node net of the controllers' start-up requests, when those were measured.
fn net_per_node(r: &Row) -> Option<f64> {
    let startup = r.startup_api_requests?;
    Some(r.api_requests.saturating_sub(startup) as f64 / r.nodes.max(1) as f64)
}

fn print_table(rows: &[Row]) {
    println!(
        "\n| scenario | mode | converge s | floor s | provider calls | throttled | API requests | per node | per node net of start-up (start-up requests) | peak RSS MiB (apiserver / gateway / node / lifecycle) | note |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for r in rows {
        let rss = [
            "fake-apiserver",
            "cloud-gateway",
            "cloud-node-controller",
            "cloud-node-lifecycle-controller",
        ]
        .iter()
        .map(|p| r.peak_rss_mib.get(*p).map_or("-".into(), |v| format!("{v}")))
        .collect::<Vec<_>>()
        .join(" / ");
        let net = match (net_per_node(r), r.startup_api_requests) {
            (Some(net), Some(startup)) => format!("{net:.2} ({startup})"),
            _ => "-".into(),
        };
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {:.2} | {} | {} | {} |",
            r.scenario,
            r.mode,
            fmt_f(r.seconds),
            r.floor_seconds.map_or("-".into(), fmt_f),
            r.provider_calls,
            r.throttled,
            r.api_requests,
            r.api_requests as f64 / r.nodes.max(1) as f64,
            net,
            rss,
            r.note
        );
    }
    println!("\n| scenario | ours / upstream mode: time | provider calls | API requests |");
    println!("|---|---|---|---|");
    for pair in rows.chunks(2) {
        if let [ours, up] = pair {
            println!(
                "| {} | {} | {} | {} |",
                ours.scenario,
                ratio(ours.seconds, up.seconds),
                ratio(ours.provider_calls as f64, up.provider_calls as f64),
                ratio(ours.api_requests as f64, up.api_requests as f64)
            );
        }
    }
}

fn to_json(rows: &[Row]) -> Value {
    Value::Array(
        rows.iter()
            .map(|r| {
                json!({
                    "scenario": r.scenario, "mode": r.mode, "nodes": r.nodes,
                    "seconds": (!r.seconds.is_nan()).then_some(r.seconds),
                    "floor_seconds": r.floor_seconds,
                    "provider_calls": r.provider_calls, "throttled": r.throttled,
                    "api_requests": r.api_requests,
                    "startup_api_requests": r.startup_api_requests,
                    "api_requests_per_node_net_of_startup": net_per_node(r),
                    "peak_rss_mib": r.peak_rss_mib, "note": r.note,
                })
            })
            .collect(),
    )
}

#[tokio::main]
async fn main() {
    let mut quick = false;
    let mut only: Option<String> = None;
    let mut modes = vec![Mode::Ours, Mode::Upstream];
    let mut json_out = PathBuf::from("target/bench.json");
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quick" => quick = true,
            "--only" => only = args.next(),
            "--ours-only" => modes = vec![Mode::Ours],
            "--json" => json_out = args.next().map(PathBuf::from).unwrap_or(json_out),
            "-h" | "--help" => {
                println!("usage: ccm-bench [--quick] [--only a|b|c|de|f|ij|gh] [--ours-only] [--json FILE]");
                return;
            }
            other => {
                eprintln!("ccm-bench: unknown argument {other:?} (try --help)");
                std::process::exit(64);
            }
        }
    }
    let sizes = if quick {
        Sizes {
            join: 40,
            steady: 40,
            steady_periods: 1,
            large: 100,
            large_deadline: Duration::from_secs(60),
        }
    } else {
        Sizes {
            join: 1000,
            steady: 1000,
            steady_periods: 2,
            large: 5000,
            large_deadline: Duration::from_secs(180),
        }
    };
    let mut rows = Vec::new();
    let run = |scenario: &str| only.as_deref().is_none_or(|o| o == scenario);
    for &mode in modes.iter().filter(|_| run("a")) {
        eprintln!(
            "ccm-bench: (a) {} nodes join at once, {}",
            sizes.join,
            mode.label()
        );
        rows.push(join_at_once(mode, sizes.join).await);
    }
    for &mode in modes.iter().filter(|_| run("b")) {
        eprintln!(
            "ccm-bench: (b) steady state, {} nodes, {}",
            sizes.steady,
            mode.label()
        );
        rows.push(steady_state(mode, sizes.steady, sizes.steady_periods).await);
    }
    for &mode in modes.iter().filter(|_| run("c")) {
        eprintln!("ccm-bench: (c) {} nodes, {}", sizes.large, mode.label());
        // Upstream mode initializes a node at a time at 20 QPS: its RSS is read after at most
        // `large_deadline` (the note says how far it got).
        let deadline = match mode {
            Mode::Ours => Duration::from_secs(1800),
            Mode::Upstream => sizes.large_deadline,
        };
        rows.push(large_cluster(mode, sizes.large, deadline).await);
    }
    // The service controller's scenarios: (d) and (e) share a cluster per mode.
    let service_sizes = if quick {
        services_bench::Sizes::QUICK
    } else {
        services_bench::Sizes::FULL
    };
    let mut service_rows = Vec::new();
    for &mode in modes.iter().filter(|_| run("de")) {
        let mode = match mode {
            Mode::Ours => services_bench::Mode::Ours,
            Mode::Upstream => services_bench::Mode::Upstream,
        };
        eprintln!(
            "ccm-bench: (d) {} Services created, (e) {} nodes join, {}",
            service_sizes.services,
            service_sizes.joining_nodes,
            mode.label()
        );
        service_rows.extend(services_bench::create_then_join(mode, service_sizes).await);
    }
    for &replicas in service_sizes.replicas.iter().filter(|_| run("f")) {
        eprintln!(
            "ccm-bench: (f) {} Services, {replicas} replicas",
            service_sizes.services
        );
        service_rows.push(services_bench::spread_over_replicas(replicas, service_sizes).await);
    }
    if run("ij") && modes.contains(&Mode::Ours) {
        let n = if quick { 100 } else { 5000 };
        eprintln!("ccm-bench: (i) {n} Services created, (j) the service controller restarts, ours");
        service_rows.extend(services_bench::at_scale(n).await);
    }

    // The route controller's scenarios: (g) then (h) share a cluster per mode.
    let route_sizes = if quick {
        routes_bench::Sizes::QUICK
    } else {
        routes_bench::Sizes::FULL
    };
    let mut route_rows = Vec::new();
    for &mode in modes.iter().filter(|_| run("gh")) {
        let mode = match mode {
            Mode::Ours => routes_bench::Mode::Ours,
            Mode::Upstream => routes_bench::Mode::Upstream,
        };
        eprintln!(
            "ccm-bench: (g) {} nodes with pod CIDRs join, (h) steady state, {}",
            route_sizes.nodes,
            mode.label()
        );
        route_rows.extend(routes_bench::join_then_steady(mode, route_sizes).await);
    }

    if !rows.is_empty() {
        print_table(&rows);
    }
    if !service_rows.is_empty() {
        services_bench::print_table(&service_rows);
    }
    if !route_rows.is_empty() {
        routes_bench::print_table(&route_rows);
    }
    let mut json = to_json(&rows);
    if let Value::Array(all) = &mut json {
        all.extend(service_rows.iter().map(services_bench::Row::to_json));
        all.extend(route_rows.iter().map(routes_bench::Row::to_json));
    }
    let json = serde_json::to_string_pretty(&json).unwrap_or_default();
    if let Some(dir) = json_out.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    match std::fs::write(&json_out, json) {
        Ok(()) => println!("\n(JSON in {})", json_out.display()),
        Err(err) => eprintln!("ccm-bench: cannot write {}: {err}", json_out.display()),
    }
}
