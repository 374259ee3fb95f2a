//! `make bench` scenarios of the route controller, ours beside upstream mode:
//!
//! - (g) N nodes with pod CIDRs join at once, the cloud allowing 100 writes/s: time until every
//!   route exists and until every Node says `NetworkUnavailable=False`, provider calls, API
//!   requests;
//! - (h) then steady state, the N nodes routed and nothing changing, over one minute:
//!   provider calls (target: exactly one ListRoutes per resync period and nothing else) and API
//!   requests (target: none). Ours also with a one-minute resync, which the watch makes safe:
//!   a change is reconciled when it happens, not at the next resync.
//!
//! Upstream mode runs the same binary configured like upstream's route controller (its default,
//! without the watch-based feature gate): a full reconcile every 10 s whatever happens
//! (`--route-reconciliation-mode=periodic`: one ListRoutes and a list of the node cache, as
//! upstream's informer lister, which costs no API request), a client-side limit of 20 QPS.

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::{ListParams, PostParams};
use serde_json::{Value, json};

use crate::{
    Cluster, ClusterSpec, counter, http_get,
    measure::{self, delta, fmt_f},
};

/// The pod network: room for 16 384 /24 pod CIDRs.
const CLUSTER_CIDR: &str = "10.64.0.0/10";

/// Ours (defaults) or upstream mode.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mode {
    /// Default flags.
    Ours,
    /// Configured like upstream's route controller.
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
            Self::Upstream => vec!["--route-reconciliation-mode", "periodic", "--kube-api-qps", "20"],
        }
    }
}

/// Sizes of the scenarios.
#[derive(Clone, Copy, Debug)]
pub struct Sizes {
    /// Nodes of (g) and (h).
    pub nodes: usize,
    /// The resync period of (h) (upstream's and our default: 10 s).
    pub period: Duration,
    /// How long (h) counts.
    pub window: Duration,
    /// Ours' long resync period in (h).
    pub long_period: Duration,
}

impl Sizes {
    /// The sizes.
    pub const FULL: Self = Self {
        nodes: 1000,
        period: Duration::from_secs(10),
        window: Duration::from_secs(60),
        long_period: Duration::from_secs(60),
    };
    /// A bounded run for CI.
    pub const QUICK: Self = Self {
        nodes: 40,
        period: Duration::from_secs(2),
        window: Duration::from_secs(6),
        long_period: Duration::from_secs(6),
    };
}

/// One scenario's figures for one mode.
#[derive(Clone, Debug, Default)]
pub struct Row {
    /// Which scenario.
    pub scenario: String,
    /// Ours or upstream mode.
    pub mode: String,
    /// Nodes.
    pub nodes: usize,
    /// Seconds until every route exists (NaN: not in time; (h): none).
    pub seconds: f64,
    /// Seconds until every Node says `NetworkUnavailable=False`.
    pub conditions_seconds: f64,
    /// Least time the cloud's write limit allows for the creates.
    pub floor_seconds: Option<f64>,
    /// Provider calls by operation.
    pub provider_calls: BTreeMap<String, u64>,
    /// Provider answers "throttled" (the gateway retries them: a throttled create is counted
    /// twice above).
    pub throttled: u64,
    /// API requests of the controller during the scenario.
    pub api_requests: u64,
    /// (h): resync periods in the window, and ListRoutes per period.
    pub periods: Option<f64>,
    /// Peak RSS of the route controller and of the gateway.
    pub peak_rss_mib: BTreeMap<String, f64>,
    /// Anything to know.
    pub note: String,
}

impl Row {
    /// As JSON.
    pub fn to_json(&self) -> Value {
        let nan = |v: f64| (!v.is_nan()).then_some(v);
        json!({
            "scenario": self.scenario, "mode": self.mode, "nodes": self.nodes,
            "seconds": nan(self.seconds), "conditions_seconds": nan(self.conditions_seconds),
            "floor_seconds": self.floor_seconds, "provider_calls": self.provider_calls,
            "throttled": self.throttled,
            "api_requests": self.api_requests, "periods": self.periods,
            "list_routes_per_period": self.list_routes_per_period(),
            "peak_rss_mib": self.peak_rss_mib, "note": self.note,
        })
    }

    fn list_routes_per_period(&self) -> Option<f64> {
        let periods = self.periods?;
        let lists = self.provider_calls.get("list_routes").copied().unwrap_or(0);
        Some(lists as f64 / periods)
    }

    /// Whether (h) met its target: one ListRoutes per period, no other call, no API request.
    fn steady_target_met(&self) -> bool {
        let others: u64 = self
            .provider_calls
            .iter()
            .filter(|(op, _)| op.as_str() != "list_routes")
            .map(|(_, n)| n)
            .sum();
        self.list_routes_per_period()
            .is_some_and(|p| (p - 1.0).abs() < 1e-9)
            && others == 0
            && self.api_requests == 0
    }
}

const OPERATIONS: [&str; 3] = ["list_routes", "create_route", "delete_route"];

fn inventory(n: usize) -> String {
    let mut inventory = String::from(
        "region: sim-east-1\nzones: [sim-east-1a, sim-east-1b]\ninstance_subnet: 10.0.0.0/16\ninstances:\n",
    );
    for i in 0..n {
        inventory.push_str(&format!(
            "  - name: node-{i}\n    zone: sim-east-1{}\n    private_ip: 10.0.{}.{}\n",
            if i % 2 == 0 { 'a' } else { 'b' },
            10 + i / 250,
            1 + i % 250
        ));
    }
    inventory
}

/// Node `i`'s pod CIDR: the `i`-th /24 of [`CLUSTER_CIDR`].
fn pod_cidr(i: usize) -> String {
    format!("10.{}.{}.0/24", 64 + i / 256, i % 256)
}

struct Bench {
    cluster: Cluster,
    /// The route controller's index in the cluster's processes.
    controller: Option<usize>,
    /// Requests this program made to the API server itself.
    own_requests: u64,
}

impl Bench {
    async fn start(nodes: usize) -> Self {
        let mut spec = ClusterSpec::with_instances(&[]);
        spec.inventory = inventory(nodes);
        spec.gateway_args = [
            "--simulator-rate-limit",
            "100/100",
            "--write-rate",
            "100",
            "--write-burst",
            "100",
            "--read-rate",
            "100",
            "--read-burst",
            "100",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        Self {
            cluster: Cluster::start(spec).await,
            controller: None,
            own_requests: 0,
        }
    }

    /// Starts the route controller in `mode` with resync `period`; returns once its first
    /// reconcile is done.
    async fn start_controller(&mut self, mode: Mode, period: Duration) {
        let period = format!("{}ms", period.as_millis());
        let mut args = mode.controller_args();
        args.extend([
            "--cluster-cidr",
            CLUSTER_CIDR,
            "--route-reconciliation-period",
            &period,
            "--leader-elect=false",
        ]);
        let index = self
            .cluster
            .start_controller("node-route-controller", "node-route-controller", &args);
        self.controller = Some(index);
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.syncs().await == 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn stop_controller(&mut self) {
        if let Some(index) = self.controller.take() {
            self.cluster.procs[index].stop(Duration::from_secs(10)).await;
        }
    }

    /// The route controller's `route_controller_route_sync_total`.
    async fn syncs(&self) -> u64 {
        let Some(index) = self.controller else {
            return 0;
        };
        let metrics = measure::process_metrics(&self.cluster.procs[index]).await;
        counter(&metrics, "route_controller_route_sync_total", &[])
    }

    async fn throttled(&self) -> u64 {
        measure::throttled(&measure::gateway_metrics(&self.cluster).await)
    }

    async fn provider_calls(&self) -> BTreeMap<String, u64> {
        measure::provider_calls(&measure::gateway_metrics(&self.cluster).await, &OPERATIONS)
    }

    /// API requests to resources served so far, this program's own excluded.
    async fn api_requests(&self) -> u64 {
        measure::api_requests(&self.cluster)
            .await
            .saturating_sub(self.own_requests)
    }

    /// Nodes `node-0..n` join at once with their pod CIDRs.
    async fn join(&mut self, n: usize) {
        let nodes = self.cluster.nodes();
        futures::stream::iter(0..n)
            .for_each_concurrent(32, |i| {
                let nodes = nodes.clone();
                async move {
                    let cidr = pod_cidr(i);
                    let node: Node = serde_json::from_value(json!({
                        "apiVersion": "v1", "kind": "Node",
                        "metadata": { "name": format!("node-{i}") },
                        "spec": { "podCIDR": cidr, "podCIDRs": [cidr] },
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

    /// Active routes of the cluster in the cloud (the simulator's admin API).
    async fn routes(&self) -> usize {
        let body = http_get(self.cluster.gateway_http, "/simulator/v1/routes")
            .await
            .map(|(_, b)| b)
            .unwrap_or_default();
        let routes: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        routes.as_array().map_or(0, |all| {
            all.iter()
                .filter(|r| r["cluster"] == "kubernetes" && r["blackhole"] == false)
                .count()
        })
    }

    /// Nodes whose NetworkUnavailable is False/RouteCreated.
    async fn routed_nodes(&mut self) -> usize {
        self.own_requests += 1;
        let list = self
            .cluster
            .nodes()
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        list.iter()
            .filter(|n| {
                n.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| {
                        c.iter().any(|c| {
                            c.type_ == "NetworkUnavailable"
                                && c.status == "False"
                                && c.reason.as_deref() == Some("RouteCreated")
                        })
                    })
            })
            .count()
    }

    /// Waits until the provider calls and API requests stop changing (the same on two readings
    /// a second apart, at most `deadline`), leaving out ListRoutes, which the resync keeps
    /// making.
    async fn settle(&mut self, deadline: Duration) {
        let give_up = Instant::now() + deadline;
        let reading = |calls: BTreeMap<String, u64>| {
            calls
                .into_iter()
                .filter(|(op, _)| op != "list_routes")
                .collect::<BTreeMap<_, _>>()
        };
        let mut last = (reading(self.provider_calls().await), self.api_requests().await);
        while Instant::now() < give_up {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let now = (reading(self.provider_calls().await), self.api_requests().await);
            if now == last {
                return;
            }
            last = now;
        }
    }

    /// Returns right after the next ListRoutes.
    async fn next_list(&self, deadline: Duration) {
        let give_up = Instant::now() + deadline;
        let before = self.provider_calls().await["list_routes"];
        while self.provider_calls().await["list_routes"] == before && Instant::now() < give_up {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn peak_rss(&self) -> BTreeMap<String, f64> {
        measure::peak_rss(&self.cluster.procs, &[])
    }
}

/// (h) on a converged cluster with the controller as it runs: the calls over `window`, which
/// starts half a period after a ListRoutes, so that the window holds exactly `window / period`
/// resyncs.
async fn steady(bench: &mut Bench, label: String, n: usize, period: Duration, window: Duration) -> Row {
    bench.next_list(period * 3).await;
    tokio::time::sleep(period / 2).await;
    let calls_before = bench.provider_calls().await;
    let throttled_before = bench.throttled().await;
    let api_before = bench.api_requests().await;
    tokio::time::sleep(window).await;
    let calls = delta(&bench.provider_calls().await, &calls_before);
    let throttled = bench.throttled().await.saturating_sub(throttled_before);
    let api = bench.api_requests().await.saturating_sub(api_before);
    let mut row = Row {
        scenario: format!(
            "(h) steady state, {n} nodes, nothing changing, {} s",
            window.as_secs()
        ),
        mode: label,
        nodes: n,
        seconds: f64::NAN,
        conditions_seconds: f64::NAN,
        floor_seconds: None,
        provider_calls: calls,
        throttled,
        api_requests: api,
        periods: Some(window.as_secs_f64() / period.as_secs_f64()),
        peak_rss_mib: bench.peak_rss(),
        note: String::new(),
    };
    row.note = if row.steady_target_met() {
        format!(
            "one ListRoutes per {} s resync, nothing else",
            period.as_secs_f64()
        )
    } else {
        format!(
            "resync {} s: not one ListRoutes per period alone",
            period.as_secs_f64()
        )
    };
    row
}

/// (g) then (h) for one mode, on one cluster: `sizes.nodes` nodes with pod CIDRs join at once,
/// then nothing changes.
pub async fn join_then_steady(mode: Mode, sizes: Sizes) -> Vec<Row> {
    let n = sizes.nodes;
    let mut bench = Bench::start(n).await;
    bench.start_controller(mode, sizes.period).await;
    let calls_before = bench.provider_calls().await;
    let throttled_before = bench.throttled().await;
    let api_before = bench.api_requests().await;
    let started = Instant::now();
    bench.join(n).await;
    let deadline = Duration::from_secs(900);
    let mut routes_at = None;
    while started.elapsed() < deadline {
        if bench.routes().await >= n {
            routes_at = Some(started.elapsed().as_secs_f64());
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut conditions_at = None;
    while routes_at.is_some() && started.elapsed() < deadline {
        if bench.routed_nodes().await >= n {
            conditions_at = Some(started.elapsed().as_secs_f64());
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    bench.settle(Duration::from_secs(30)).await;
    let calls = delta(&bench.provider_calls().await, &calls_before);
    let throttled = bench.throttled().await.saturating_sub(throttled_before);
    let api = bench.api_requests().await.saturating_sub(api_before);
    let g = Row {
        scenario: format!("(g) {n} nodes with pod CIDRs join at once, cloud 100 writes/s"),
        mode: mode.label().into(),
        nodes: n,
        seconds: routes_at.unwrap_or(f64::NAN),
        conditions_seconds: conditions_at.unwrap_or(f64::NAN),
        // One create per node; the first 100 ride the burst.
        floor_seconds: Some(n.saturating_sub(100) as f64 / 100.0),
        provider_calls: calls,
        throttled,
        api_requests: api,
        periods: None,
        peak_rss_mib: bench.peak_rss(),
        note: match (routes_at, conditions_at) {
            (Some(_), Some(_)) => String::new(),
            _ => "did not converge".into(),
        },
    };
    let mut rows = vec![g];
    rows.push(steady(&mut bench, mode.label().into(), n, sizes.period, sizes.window).await);
    if mode == Mode::Ours {
        // The watch reconciles changes when they happen, so the resync may be rare.
        bench.stop_controller().await;
        bench.start_controller(mode, sizes.long_period).await;
        rows.push(
            steady(
                &mut bench,
                format!(
                    "ours, --route-reconciliation-period {}s",
                    sizes.long_period.as_secs()
                ),
                n,
                sizes.long_period,
                sizes.window,
            )
            .await,
        );
    }
    bench.cluster.stop().await;
    rows
}

/// Prints the route scenarios' table.
pub fn print_table(rows: &[Row]) {
    println!(
        "\n| scenario | mode | routes s | NetworkUnavailable=False s | floor s | provider calls | throttled | ListRoutes per resync period | API requests | peak RSS MiB (route controller / gateway) | note |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for r in rows {
        let calls: Vec<String> = r
            .provider_calls
            .iter()
            .map(|(op, n)| format!("{n} {}", op.replace('_', " ")))
            .collect();
        let rss = ["node-route-controller", "cloud-gateway"]
            .iter()
            .map(|p| r.peak_rss_mib.get(*p).map_or("-".into(), |v| format!("{v}")))
            .collect::<Vec<_>>()
            .join(" / ");
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.scenario,
            r.mode,
            fmt_f(r.seconds),
            fmt_f(r.conditions_seconds),
            r.floor_seconds.map_or("-".into(), fmt_f),
            if calls.is_empty() {
                "0".into()
            } else {
                calls.join(", ")
            },
            r.throttled,
            r.list_routes_per_period()
                .map_or("-".into(), |p| format!("{p:.2}")),
            r.api_requests,
            rss,
            r.note
        );
    }
}
