//! `make bench` scenarios of the service controller, ours beside upstream mode:
//!
//! - (d) N LoadBalancer Services created at once, the cloud allowing 20 writes/s: time until
//!   every one has an ingress, provider calls, API requests per Service;
//! - (e) then M nodes join with the N load balancers present: backend updates per load balancer
//!   (target: exactly one) and the time until every load balancer has them;
//! - (f) where the controller, not the cloud, is the bottleneck (200 writes/s, 200 ms per call,
//!   `--concurrent-service-syncs 5`): time for N Services with 1, 2 and 4 replicas;
//! - (i) (d) at scale, ours only: 5000 Services at once, 20 writes/s, the peak RSS at 5000;
//! - (j) then the steady state: the service controller restarted syncs every Service again;
//!   the cloud's writes (target 0) and reads (target: 2 per 20 Services) until it has.
//!
//! Upstream mode runs the same binary configured like upstream's service controller: one
//! worker, a client-side limit of 20 QPS, backends updated at once on every node change.

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::{ListParams, PostParams};
use serde_json::{Value, json};

use crate::{
    Cluster, ClusterSpec, counter, ingress_ips,
    measure::{self, delta, fmt_f},
};

/// Ours (defaults) or upstream mode.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mode {
    /// Default flags.
    Ours,
    /// Configured like upstream's service controller.
    Upstream,
}

impl Mode {
    /// As the table says it.
    pub fn label(self) -> &'static str {
        match self {
            Self::Ours => "ours",
            Self::Upstream => "upstream mode",
        }
    }

    fn controller_args(self) -> Vec<&'static str> {
        match self {
            Self::Ours => vec![],
            Self::Upstream => vec![
                "--concurrent-service-syncs",
                "1",
                "--kube-api-qps",
                "20",
                "--node-sync-delay",
                "0s",
            ],
        }
    }
}

/// Sizes of the scenarios.
#[derive(Clone, Copy, Debug)]
pub struct Sizes {
    /// Services of (d), (e), (f).
    pub services: usize,
    /// Nodes joining in (e).
    pub joining_nodes: usize,
    /// Replica counts of (f).
    pub replicas: &'static [usize],
}

impl Sizes {
    /// The issue's sizes.
    pub const FULL: Self = Self {
        services: 500,
        joining_nodes: 50,
        replicas: &[1, 2, 4],
    };
    /// A bounded run for CI.
    pub const QUICK: Self = Self {
        services: 40,
        joining_nodes: 5,
        replicas: &[1, 2],
    };
}

/// One scenario's figures for one mode.
#[derive(Clone, Debug, Default)]
pub struct Row {
    /// Which scenario.
    pub scenario: String,
    /// Ours or upstream mode (with the replica count in (f)).
    pub mode: String,
    /// Seconds until converged (NaN: did not converge).
    pub seconds: f64,
    /// Least time the provider's limit allows for the calls needed.
    pub floor_seconds: Option<f64>,
    /// Provider calls by operation.
    pub provider_calls: BTreeMap<String, u64>,
    /// Provider answers "throttled".
    pub throttled: u64,
    /// API requests during the scenario (this program's own excluded).
    pub api_requests: u64,
    /// What the row is counted per (Services, load balancers).
    pub per: usize,
    /// Backend updates per load balancer ((e) only).
    pub updates_per_load_balancer: Option<f64>,
    /// Peak RSS of the service controller (the largest replica) and of the gateway.
    pub peak_rss_mib: BTreeMap<String, f64>,
    /// Anything to know.
    pub note: String,
}

impl Row {
    /// As JSON.
    pub fn to_json(&self) -> Value {
        json!({
            "scenario": self.scenario, "mode": self.mode,
            "seconds": (!self.seconds.is_nan()).then_some(self.seconds),
            "floor_seconds": self.floor_seconds, "provider_calls": self.provider_calls,
            "throttled": self.throttled, "api_requests": self.api_requests, "per": self.per,
            "updates_per_load_balancer": self.updates_per_load_balancer,
            "peak_rss_mib": self.peak_rss_mib, "note": self.note,
        })
    }
}

const OPERATIONS: [&str; 5] = [
    "ensure_load_balancer",
    "update_load_balancer",
    "get_load_balancer",
    "read_load_balancers",
    "delete_load_balancer",
];

/// The cloud's limit of (d), (e), (i): 20 writes/s and 20 reads/s, the gateway set to match.
const WRITE_LIMIT: [&str; 10] = [
    "--simulator-rate-limit",
    "20/20",
    "--write-rate",
    "20",
    "--write-burst",
    "20",
    "--read-rate",
    "20",
    "--read-burst",
    "20",
];

/// Least time `n` creations take at 20 writes/s: one ensure per Service, the first 20 ride the
/// burst.
fn write_floor(n: usize) -> f64 {
    n.saturating_sub(20) as f64 / 20.0
}

fn did_not_converge(seconds: Option<f64>) -> String {
    if seconds.is_none() {
        "did not converge".into()
    } else {
        String::new()
    }
}

struct Bench {
    cluster: Cluster,
    replicas: Vec<usize>,
    /// LISTs this program made itself (not the controllers' requests).
    own_requests: u64,
}

impl Bench {
    async fn start(gateway: &[&str], nodes: usize) -> Self {
        let mut spec = ClusterSpec::with_instances(&[]);
        // Room for every load balancer (the default pool is a /24).
        spec.inventory = format!("load_balancer_pool: 100.64.0.0/16\n{}", spec.inventory);
        spec.gateway_args = gateway.iter().map(|s| (*s).to_owned()).collect();
        // Room for 5000 Services' node ports: a cluster that size widens kube-apiserver's
        // --service-node-port-range too (the default 30000-32767 holds 2768).
        spec.apiserver_args = ["--service-node-port-range".into(), "30000-39999".into()].into();
        let mut bench = Self {
            cluster: Cluster::start(spec).await,
            replicas: Vec::new(),
            own_requests: 0,
        };
        bench.add_nodes("node", 0, nodes).await;
        bench
    }

    /// Nodes `<prefix>-<from..from+n>` join at once, as initialized nodes do (providerID,
    /// addresses, Ready).
    async fn add_nodes(&mut self, prefix: &str, from: usize, n: usize) {
        let nodes = self.cluster.nodes();
        futures::stream::iter(from..from + n)
            .for_each_concurrent(32, |i| {
                let nodes = nodes.clone();
                async move {
                    let node: Node = serde_json::from_value(json!({
                        "apiVersion": "v1", "kind": "Node",
                        "metadata": { "name": format!("{prefix}-{i}") },
                        "spec": { "providerID": format!("simulator://sim-east-1a/i-{i:017x}") },
                    }))
                    .expect("node");
                    nodes
                        .create(&PostParams::default(), &node)
                        .await
                        .expect("create node");
                }
            })
            .await;
        self.own_requests += n as u64;
    }

    fn start_replicas(&mut self, mode: Mode, count: usize, extra: &[&str]) {
        for r in 0..count {
            let name = format!("service-lb-controller-{r}");
            let mut args = mode.controller_args();
            args.extend_from_slice(extra);
            args.extend(["--leader-elect-identity", name.as_str()]);
            let index = self
                .cluster
                .start_controller("service-lb-controller", &name, &args);
            self.replicas.push(index);
        }
    }

    async fn metrics_of(&self, index: usize) -> String {
        measure::process_metrics(&self.cluster.procs[index]).await
    }

    /// Waits until the replicas own the 16 shards between them, evenly (a handover during the
    /// measurement would cost re-ensures and time).
    async fn wait_shards_split(&self) {
        let deadline = Instant::now() + Duration::from_secs(120);
        while Instant::now() < deadline {
            let mut owned = Vec::new();
            for &index in &self.replicas {
                owned.push(counter(
                    &self.metrics_of(index).await,
                    "service_lb_controller_shards_owned",
                    &[],
                ));
            }
            let (least, most) = (owned.iter().min().copied(), owned.iter().max().copied());
            if owned.iter().sum::<u64>() == 16 && least.zip(most).is_some_and(|(l, m)| l > 0 && m - l <= 1) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        eprintln!("ccm-bench: the shards were not split between the replicas in time");
    }

    async fn provider_calls(&self) -> (BTreeMap<String, u64>, u64) {
        let m = measure::gateway_metrics(&self.cluster).await;
        (measure::provider_calls(&m, &OPERATIONS), measure::throttled(&m))
    }

    async fn api_requests(&self) -> u64 {
        measure::api_requests(&self.cluster)
            .await
            .saturating_sub(self.own_requests)
    }

    async fn create_services(&mut self, n: usize) {
        let cluster = &self.cluster;
        futures::stream::iter(0..n)
            .for_each_concurrent(32, |i| async move {
                cluster
                    .create_lb_service("default", &format!("svc-{i:04}"), json!({}))
                    .await;
            })
            .await;
        self.own_requests += n as u64;
    }

    /// Waits until `n` Services have an ingress IP; the seconds it took from `started`.
    async fn wait_provisioned(&mut self, n: usize, started: Instant, deadline: Duration) -> Option<f64> {
        let services = self.cluster.services("default");
        loop {
            self.own_requests += 1;
            let list = services
                .list(&ListParams::default())
                .await
                .map(|l| l.items)
                .unwrap_or_default();
            if list.iter().filter(|s| !ingress_ips(s).is_empty()).count() >= n {
                return Some(started.elapsed().as_secs_f64());
            }
            if started.elapsed() > deadline {
                return None;
            }
            // A list of 5000 Services is megabytes: look less often the more there are.
            tokio::time::sleep(Duration::from_millis(100.max(n as u64 / 5))).await;
        }
    }

    /// Waits until every load balancer of the cloud has `backends` backends.
    async fn wait_backends(&self, backends: usize, started: Instant, deadline: Duration) -> Option<f64> {
        loop {
            let lbs = self.cluster.load_balancers().await;
            let done = !lbs.is_empty()
                && lbs
                    .iter()
                    .all(|lb| lb["backends"].as_array().is_some_and(|b| b.len() == backends));
            if done {
                return Some(started.elapsed().as_secs_f64());
            }
            if started.elapsed() > deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    fn peak_rss(&self) -> BTreeMap<String, f64> {
        measure::peak_rss(&self.cluster.procs, &["service-lb-controller"])
    }
}

/// (d) then (e) for one mode, on one cluster: `sizes.services` Services created at once on a
/// cloud allowing 20 writes/s, then `sizes.joining_nodes` nodes join.
pub async fn create_then_join(mode: Mode, sizes: Sizes) -> Vec<Row> {
    const NODES: usize = 3;
    let mut bench = Bench::start(&WRITE_LIMIT, NODES).await;
    bench.start_replicas(mode, 1, &[]);
    bench.wait_shards_split().await;
    let n = sizes.services;

    let (calls_before, throttled_before) = bench.provider_calls().await;
    let api_before = bench.api_requests().await;
    let started = Instant::now();
    bench.create_services(n).await;
    let seconds = bench.wait_provisioned(n, started, Duration::from_secs(900)).await;
    let (calls, throttled) = bench.provider_calls().await;
    let api = bench.api_requests().await.saturating_sub(api_before);
    let d = Row {
        scenario: format!("(d) {n} LoadBalancer Services created at once, cloud 20 writes/s"),
        mode: mode.label().into(),
        seconds: seconds.unwrap_or(f64::NAN),
        floor_seconds: Some(write_floor(n)),
        provider_calls: delta(&calls, &calls_before),
        throttled: throttled - throttled_before,
        api_requests: api,
        per: n,
        updates_per_load_balancer: None,
        peak_rss_mib: bench.peak_rss(),
        note: did_not_converge(seconds),
    };

    let joining = sizes.joining_nodes;
    let (calls_before, throttled_before) = bench.provider_calls().await;
    let api_before = bench.api_requests().await;
    let started = Instant::now();
    bench.add_nodes("joining", 0, joining).await;
    let seconds = bench
        .wait_backends(NODES + joining, started, Duration::from_secs(900))
        .await;
    // Updates still in flight after the last backend landed are counted too: wait until the
    // update count stops moving for a second (upstream mode may go round twice).
    let mut last = bench.provider_calls().await.0;
    let settle = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = bench.provider_calls().await.0;
        if now == last || settle.elapsed() > Duration::from_secs(120) {
            break;
        }
        last = now;
    }
    let (calls, throttled) = bench.provider_calls().await;
    let api = bench.api_requests().await.saturating_sub(api_before);
    let calls = delta(&calls, &calls_before);
    let updates = calls.get("update_load_balancer").copied().unwrap_or(0);
    let e = Row {
        scenario: format!("(e) {joining} nodes join, {n} load balancers present, cloud 20 writes/s"),
        mode: mode.label().into(),
        seconds: seconds.unwrap_or(f64::NAN),
        floor_seconds: Some(write_floor(n)),
        provider_calls: calls,
        throttled: throttled - throttled_before,
        api_requests: api,
        per: n,
        updates_per_load_balancer: Some(updates as f64 / n as f64),
        peak_rss_mib: bench.peak_rss(),
        note: did_not_converge(seconds),
    };
    bench.cluster.stop().await;
    vec![d, e]
}

/// (i) `n` Services created at once on a cloud allowing 20 writes/s (ours only: upstream
/// mode's row is (d)'s), then (j): the service controller restarted, which syncs every
/// Service again; the cloud calls until the gateway has answered `n` ensures.
pub async fn at_scale(n: usize) -> Vec<Row> {
    let mut bench = Bench::start(&WRITE_LIMIT, 3).await;
    bench.start_replicas(Mode::Ours, 1, &[]);
    bench.wait_shards_split().await;
    let (calls_before, throttled_before) = bench.provider_calls().await;
    let api_before = bench.api_requests().await;
    let started = Instant::now();
    bench.create_services(n).await;
    let deadline = Duration::from_secs_f64(write_floor(n) * 2.0 + 300.0);
    let seconds = bench.wait_provisioned(n, started, deadline).await;
    let (calls, throttled) = bench.provider_calls().await;
    let created = Row {
        scenario: format!("(i) {n} LoadBalancer Services created at once, cloud 20 writes/s"),
        mode: Mode::Ours.label().into(),
        seconds: seconds.unwrap_or(f64::NAN),
        floor_seconds: Some(write_floor(n)),
        provider_calls: delta(&calls, &calls_before),
        throttled: throttled - throttled_before,
        api_requests: bench.api_requests().await.saturating_sub(api_before),
        per: n,
        updates_per_load_balancer: None,
        peak_rss_mib: bench.peak_rss(),
        note: did_not_converge(seconds),
    };

    let old = bench.replicas.pop().expect("one replica");
    bench.cluster.procs[old].stop(Duration::from_secs(30)).await;
    let ensures = |metrics: &str| {
        counter(
            metrics,
            "cloudgateway_grpc_calls_total",
            &[("method", "EnsureLoadBalancer")],
        )
    };
    let gateway = measure::gateway_metrics(&bench.cluster).await;
    let (calls_before, throttled_before) = (
        measure::provider_calls(&gateway, &OPERATIONS),
        measure::throttled(&gateway),
    );
    let ensures_before = ensures(&gateway);
    let api_before = bench.api_requests().await;
    let started = Instant::now();
    bench.start_replicas(Mode::Ours, 1, &[]);
    let mut seconds = None;
    while started.elapsed() < Duration::from_secs(600) {
        if ensures(&measure::gateway_metrics(&bench.cluster).await) >= ensures_before + n as u64 {
            seconds = Some(started.elapsed().as_secs_f64());
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (calls, throttled) = bench.provider_calls().await;
    let calls = delta(&calls, &calls_before);
    let reads: u64 = ["get_load_balancer", "read_load_balancers"]
        .iter()
        .filter_map(|op| calls.get(*op))
        .sum();
    let writes: u64 = calls.values().sum::<u64>() - reads;
    let resynced = Row {
        scenario: format!("(j) then the service controller restarts and syncs the {n} Services again"),
        mode: Mode::Ours.label().into(),
        seconds: seconds.unwrap_or(f64::NAN),
        floor_seconds: None,
        provider_calls: calls,
        throttled: throttled - throttled_before,
        api_requests: bench.api_requests().await.saturating_sub(api_before),
        per: n,
        updates_per_load_balancer: None,
        peak_rss_mib: bench.peak_rss(),
        note: if seconds.is_none() {
            "did not converge".into()
        } else {
            format!("{writes} writes, {reads} reads (target ≤ {})", n.div_ceil(20) * 2)
        },
    };
    bench.cluster.stop().await;
    vec![created, resynced]
}

/// (f) `sizes.services` Services with `replicas` replicas where the controller is the
/// bottleneck: the cloud takes 200 writes/s at 200 ms per call, each replica syncs 5 at once.
pub async fn spread_over_replicas(replicas: usize, sizes: Sizes) -> Row {
    let fast_cloud = [
        "--simulator-rate-limit",
        "200/200",
        "--simulator-latency",
        "200ms",
        "--write-rate",
        "200",
        "--write-burst",
        "200",
    ];
    let mut bench = Bench::start(&fast_cloud, 3).await;
    bench.start_replicas(Mode::Ours, replicas, &["--concurrent-service-syncs", "5"]);
    bench.wait_shards_split().await;
    let n = sizes.services;
    let (calls_before, throttled_before) = bench.provider_calls().await;
    let api_before = bench.api_requests().await;
    let started = Instant::now();
    bench.create_services(n).await;
    let seconds = bench.wait_provisioned(n, started, Duration::from_secs(900)).await;
    let (calls, throttled) = bench.provider_calls().await;
    let api = bench.api_requests().await.saturating_sub(api_before);
    // Where a sync's time goes: the provider's own time per ensure (200 ms and whatever the
    // simulator adds), and each replica's time per Service reconcile (every reconcile counts,
    // the ones that find nothing to do included).
    let ensure_ms = mean_ms(
        &measure::gateway_metrics(&bench.cluster).await,
        "cloudgateway_provider_call_duration_seconds",
        &[("operation", "ensure_load_balancer")],
    );
    let mut replica_metrics = String::new();
    // The Services each replica ensured (its syncs over 160 ms: an ensure takes 200 ms at the
    // provider, a sync with nothing to do a few): the shards split the Services by UID hash,
    // not evenly, and the busiest replica sets the time.
    let mut busiest = 0;
    for &index in &bench.replicas {
        let metrics = bench.metrics_of(index).await;
        busiest = busiest.max(slower_than(
            &metrics,
            "service_lb_controller_reconcile_duration_seconds",
            0.16,
        ));
        replica_metrics.push_str(&metrics);
    }
    let reconcile_ms = mean_ms(
        &replica_metrics,
        "service_lb_controller_reconcile_duration_seconds",
        &[],
    );
    let row = Row {
        scenario: format!(
            "(f) {n} Services, controller-bound (cloud 200 writes/s, 200 ms/call, 5 syncs per replica)"
        ),
        mode: format!("ours, {replicas} replica{}", if replicas == 1 { "" } else { "s" }),
        seconds: seconds.unwrap_or(f64::NAN),
        // What the syncs in parallel allow: 200 ms per Service, 5 at once per replica.
        floor_seconds: Some(n as f64 * 0.2 / (5.0 * replicas as f64)),
        provider_calls: delta(&calls, &calls_before),
        throttled: throttled - throttled_before,
        api_requests: api,
        per: n,
        updates_per_load_balancer: None,
        peak_rss_mib: bench.peak_rss(),
        note: [
            did_not_converge(seconds),
            format!(
                "provider time per ensure {} ms, per reconcile {} ms; busiest replica ensured {busiest} (even share {})",
                fmt_f(ensure_ms),
                fmt_f(reconcile_ms),
                n.div_ceil(replicas)
            ),
        ]
        .into_iter()
        .filter(|n| !n.is_empty())
        .collect::<Vec<_>>()
        .join("; "),
    };
    bench.cluster.stop().await;
    row
}

/// How many of a histogram's observations exceeded the bucket bound `le` (`_count` less that
/// bucket; 0 when it has no such bucket).
fn slower_than(metrics: &str, histogram: &str, le: f64) -> u64 {
    let (mut count, mut within) = (None::<f64>, None::<f64>);
    for line in metrics.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        let (metric, labels) = series.split_once('{').unwrap_or((series, ""));
        if metric == format!("{histogram}_count") {
            count = Some(value);
        } else if metric == format!("{histogram}_bucket")
            && labels
                .split_once("le=\"")
                .and_then(|(_, rest)| rest.split('"').next())
                .and_then(|b| b.parse::<f64>().ok())
                .is_some_and(|b| (b - le).abs() < 1e-9)
        {
            within = Some(value);
        }
    }
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // counts
    match (count, within) {
        (Some(count), Some(within)) => (count - within).max(0.0) as u64,
        _ => 0,
    }
}

/// The mean of a histogram's observations in milliseconds, over every series matching `with`
/// (`_sum` over `_count`); NaN when it has none.
fn mean_ms(metrics: &str, histogram: &str, with: &[(&str, &str)]) -> f64 {
    let total = |suffix: &str| -> f64 {
        let name = format!("{histogram}{suffix}");
        metrics
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| {
                let (series, value) = l.rsplit_once(' ')?;
                let (metric, labels) = series.split_once('{').unwrap_or((series, ""));
                (metric == name && with.iter().all(|(k, v)| labels.contains(&format!("{k}=\"{v}\""))))
                    .then(|| value.parse::<f64>().ok())
                    .flatten()
            })
            .sum()
    };
    let count = total("_count");
    if count > 0.0 {
        total("_sum") * 1000.0 / count
    } else {
        f64::NAN
    }
}

/// Prints the service scenarios' table and ratios.
pub fn print_table(rows: &[Row]) {
    println!(
        "\n| scenario | mode | converge s | floor s | provider calls | throttled | API requests (per Service) | updates per LB | peak RSS MiB (service-lb-controller / gateway) | note |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for r in rows {
        let calls: Vec<String> = r
            .provider_calls
            .iter()
            .map(|(op, n)| format!("{n} {}", op.trim_end_matches("_load_balancer").replace('_', " ")))
            .collect();
        let rss = ["service-lb-controller", "cloud-gateway"]
            .iter()
            .map(|p| r.peak_rss_mib.get(*p).map_or("-".into(), |v| format!("{v}")))
            .collect::<Vec<_>>()
            .join(" / ");
        println!(
            "| {} | {} | {} | {} | {} | {} | {} ({:.2}) | {} | {} | {} |",
            r.scenario,
            r.mode,
            fmt_f(r.seconds),
            r.floor_seconds.map_or("-".into(), fmt_f),
            if calls.is_empty() {
                "0".into()
            } else {
                calls.join(", ")
            },
            r.throttled,
            r.api_requests,
            r.api_requests as f64 / r.per.max(1) as f64,
            r.updates_per_load_balancer
                .map_or("-".into(), |u| format!("{u:.2}")),
            rss,
            r.note
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const METRICS: &str = "# TYPE d histogram\n\
        d_sum{operation=\"ensure_load_balancer\"} 1.5\n\
        d_count{operation=\"ensure_load_balancer\"} 6\n\
        d_sum{operation=\"read_load_balancers\"} 9\n\
        d_count{operation=\"read_load_balancers\"} 1\n\
        r_bucket{le=\"0.08\"} 4\n\
        r_bucket{le=\"0.16\"} 7\n\
        r_bucket{le=\"+Inf\"} 10\n\
        r_count 10\n";

    #[test]
    fn a_histograms_mean_and_its_observations_over_a_bound() {
        assert!((mean_ms(METRICS, "d", &[("operation", "ensure_load_balancer")]) - 250.0).abs() < 1e-9);
        assert!((mean_ms(METRICS, "d", &[]) - 1500.0).abs() < 1e-9, "every series");
        assert!(mean_ms(METRICS, "missing", &[]).is_nan());
        assert_eq!(slower_than(METRICS, "r", 0.16), 3);
        assert_eq!(slower_than(METRICS, "r", 0.08), 6);
        assert_eq!(slower_than(METRICS, "r", 0.5), 0, "no such bucket");
    }
}
