//! Metrics parity and the dashboard: every metric the docs name (the cloud-gateway configuration
//! of docs/gateway.md, the controllers' reference in docs/controllers.md) is served on `/metrics`
//! by the binary that owns it, under upstream's name where upstream has one; the Grafana
//! dashboard is valid JSON, queries only metrics the binaries serve, and the chart ships it only
//! when asked to.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::PathBuf,
    time::Duration,
};

use e2e::{Cluster, ClusterSpec, http_get, ingress_ips, wait_for};
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

const GATEWAY: &str = "cloud-gateway";
const NODE: &str = "cloud-node-controller";
const LIFECYCLE: &str = "cloud-node-lifecycle-controller";
const SERVICE: &str = "service-lb-controller";
const ROUTE: &str = "node-route-controller";
const CONTROLLERS: [&str; 4] = [NODE, LIFECYCLE, SERVICE, ROUTE];
/// Controllers run by one leader (the service controller is sharded instead).
const LEADER_ELECTED: [&str; 3] = [NODE, LIFECYCLE, ROUTE];

/// Which binaries serve a metric, by its name's prefix (longest first).
const OWNERS: &[(&str, &[&str])] = &[
    ("cloudgateway_", &[GATEWAY]),
    ("cloud_node_lifecycle_controller_", &[LIFECYCLE]),
    ("cloud_node_controller_", &[NODE]),
    ("node_controller_", &[NODE]),
    ("service_lb_controller_", &[SERVICE]),
    ("service_controller_", &[SERVICE]),
    ("node_route_controller_", &[ROUTE]),
    ("route_controller_", &[ROUTE]),
    ("workqueue_", &[NODE, SERVICE]),
    ("leader_election_", &LEADER_ELECTED),
    ("gateway_provider_", &CONTROLLERS),
];

/// snake_case words of those doc sections that are not metrics (the simulator's operations).
const NOT_METRICS: &[&str] = &["describe_instances", "ensure_load_balancer"];

/// Metrics whose every series names what it is about, so none exists before it happens, and
/// the test that makes it happen and checks the metric.
const CHECKED_ELSEWHERE: &[(&str, &str)] = &[
    (
        "service_lb_controller_load_balancer_at_former_provider",
        "tests/tests/vendor_swap.rs: a Service whose load balancer a former provider holds",
    ),
    (
        "service_lb_controller_orphaned_load_balancers_total",
        "tests/tests/vendor_swap.rs: such a Service deleted",
    ),
    (
        "cloudgateway_denied_calls_total",
        "crates/testing/contract-tests/tests/mtls.rs: a call the policy refuses (mutual TLS only)",
    ),
];

/// Upstream's metrics (k8s.io/cloud-provider, client-go's work queue, component-base's leader
/// election) that we serve under the same name and type: (binary, name, type).
const UPSTREAM: &[(&str, &str, &str)] = &[
    (
        NODE,
        "node_controller_cloud_provider_taint_removal_delay_seconds",
        "histogram",
    ),
    (
        NODE,
        "node_controller_initial_node_sync_delay_seconds",
        "histogram",
    ),
    (SERVICE, "service_controller_loadbalancer_sync_total", "counter"),
    (SERVICE, "service_controller_nodesync_error_total", "counter"),
    (
        SERVICE,
        "service_controller_nodesync_latency_seconds",
        "histogram",
    ),
    (
        SERVICE,
        "service_controller_update_loadbalancer_host_latency_seconds",
        "histogram",
    ),
    (ROUTE, "route_controller_route_sync_total", "counter"),
    (NODE, "leader_election_master_status", "gauge"),
    (LIFECYCLE, "leader_election_master_status", "gauge"),
    (ROUTE, "leader_election_master_status", "gauge"),
    (NODE, "workqueue_depth", "gauge"),
    (NODE, "workqueue_adds_total", "counter"),
    (NODE, "workqueue_queue_duration_seconds", "histogram"),
    (NODE, "workqueue_work_duration_seconds", "histogram"),
    (NODE, "workqueue_retries_total", "counter"),
    (SERVICE, "workqueue_depth", "gauge"),
    (SERVICE, "workqueue_adds_total", "counter"),
    (SERVICE, "workqueue_queue_duration_seconds", "histogram"),
    (SERVICE, "workqueue_work_duration_seconds", "histogram"),
    (SERVICE, "workqueue_retries_total", "counter"),
];

fn repo_file(path: &str) -> String {
    let full = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

/// The text of the section `## heading` of the doc at `path`, up to the next `## `.
fn section(path: &str, heading: &str) -> String {
    let doc = repo_file(path);
    let start = doc
        .find(&format!("\n## {heading}\n"))
        .unwrap_or_else(|| panic!("{path} has no section {heading:?}"));
    let rest = &doc[start + 1..];
    let end = rest[1..].find("\n## ").map_or(rest.len(), |i| i + 1);
    rest[..end].to_owned()
}

/// The metric names a doc text names in code spans: snake_case words, label sets and values
/// left out (`name{label} 1` → `name`); `prefix_*` stands for every metric of that prefix.
fn named_metrics(text: &str) -> BTreeSet<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter_map(|code| {
            let name = code.split(['{', ' ']).next()?;
            let word = name.strip_suffix('*').unwrap_or(name);
            let snake = word.starts_with(|c: char| c.is_ascii_lowercase())
                && word.contains('_')
                && word
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
            (snake && !NOT_METRICS.contains(&name)).then(|| name.to_owned())
        })
        .collect()
}

/// The metrics the docs name: the gateway's configuration and the controllers' reference
/// (sections that moved there from the README whole).
fn documented_metrics() -> BTreeSet<String> {
    let mut names = named_metrics(&section("docs/gateway.md", "cloud-gateway configuration"));
    names.extend(named_metrics(&section(
        "docs/controllers.md",
        "Flags, metrics and events",
    )));
    names
}

fn owners(metric: &str) -> &'static [&'static str] {
    OWNERS
        .iter()
        .find(|(prefix, _)| metric.starts_with(prefix))
        .map(|(_, owners)| *owners)
        .unwrap_or_else(|| {
            panic!("the docs name {metric}, which no binary is known to serve: add its prefix to OWNERS")
        })
}

/// A binary's exposition: metric family name → type, from its `# TYPE` lines (present even
/// for a labelled family that has no series yet).
fn families(exposition: &str) -> BTreeMap<String, String> {
    exposition
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| {
            let (name, kind) = l.split_once(' ')?;
            Some((name.to_owned(), kind.to_owned()))
        })
        .collect()
}

/// The type of the family serving sample name `name` (`x_total` is counter `x`'s), if served.
fn served<'a>(families: &'a BTreeMap<String, String>, name: &str) -> Option<&'a str> {
    if let Some(kind) = families.get(name) {
        return Some(kind);
    }
    let family = name.strip_suffix("_total")?;
    families
        .get(family)
        .filter(|kind| *kind == "counter")
        .map(String::as_str)
}

/// Every sample name the families can produce: `x_total` for counter `x`, `x_bucket`,
/// `x_sum`, `x_count` for histogram `x`.
fn series_names(families: &BTreeMap<String, String>) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (name, kind) in families {
        match kind.as_str() {
            "counter" => {
                names.insert(format!("{name}_total"));
            }
            "histogram" => {
                for suffix in ["_bucket", "_sum", "_count"] {
                    names.insert(format!("{name}{suffix}"));
                }
            }
            _ => {
                names.insert(name.clone());
            }
        }
    }
    names
}

/// PromQL functions, aggregations and keywords that look like metric names.
const PROMQL_WORDS: &[&str] = &[
    "histogram_quantile",
    "label_values",
    "label_replace",
    "label_join",
    "clamp_min",
    "clamp_max",
    "count_values",
    "group_left",
    "group_right",
    "quantile_over_time",
    "avg_over_time",
    "max_over_time",
    "min_over_time",
    "sum_over_time",
];

/// The metric names a PromQL expression uses: identifiers with an underscore that are not
/// PromQL's own words, Grafana variables (`$__rate_interval`) or quoted strings.
fn query_metrics(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut in_string = false;
    let mut word = String::new();
    let mut variable = false;
    let mut flush = |word: &mut String, variable: bool| {
        if !variable
            && word.contains('_')
            && word.starts_with(|c: char| c.is_ascii_alphabetic())
            && !PROMQL_WORDS.contains(&word.as_str())
        {
            names.insert(word.clone());
        }
        word.clear();
    };
    for c in expr.chars() {
        if c == '"' {
            in_string = !in_string;
            flush(&mut word, variable);
            continue;
        }
        if in_string {
            continue;
        }
        if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
            if word.is_empty() {
                variable = false;
            }
            word.push(c);
        } else {
            flush(&mut word, variable);
            variable = c == '$';
        }
    }
    flush(&mut word, variable);
    names
}

/// Every PromQL expression of the dashboard: its panels' targets and its variables' queries.
fn dashboard_queries(dashboard: &Value) -> Vec<String> {
    fn walk(value: &Value, out: &mut Vec<String>) {
        match value {
            Value::Object(map) => {
                for (key, value) in map {
                    match (key.as_str(), value) {
                        ("expr" | "definition", Value::String(expr)) => out.push(expr.clone()),
                        ("query", Value::String(expr)) => out.push(expr.clone()),
                        _ => walk(value, out),
                    }
                }
            }
            Value::Array(items) => items.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(dashboard, &mut out);
    // The datasource variable's query is a plugin type, not PromQL.
    out.retain(|q| q != "prometheus");
    out
}

fn dashboard() -> Value {
    let text = repo_file("charts/ccm/dashboards/ccm.json");
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("charts/ccm/dashboards/ccm.json is not valid JSON: {e}"))
}

#[test]
fn the_docs_name_their_metrics_and_the_dashboard_queries_only_those() {
    let named = documented_metrics();
    for must in [
        "cloudgateway_provider_calls_total",
        "cloud_node_controller_reconcile_total",
        "workqueue_depth",
        "route_controller_route_sync_total",
    ] {
        assert!(named.contains(must), "the docs parse misses {must}: {named:?}");
    }
    for name in &named {
        owners(name);
    }
    // Valid JSON, panels with queries, every metric queried named in the docs.
    let dashboard = dashboard();
    assert!(dashboard["title"].is_string() && dashboard["uid"].is_string());
    let panels = dashboard["panels"].as_array().expect("panels");
    let mut ids = BTreeSet::new();
    for panel in panels {
        assert!(
            ids.insert(panel["id"].as_u64().expect("panel id")),
            "duplicate panel id"
        );
        if panel["type"] != "row" {
            assert!(
                panel["targets"].as_array().is_some_and(|t| !t.is_empty()),
                "panel {} has no query",
                panel["title"]
            );
        }
    }
    let queries = dashboard_queries(&dashboard);
    assert!(queries.len() > 20, "{queries:?}");
    for query in &queries {
        for metric in query_metrics(query) {
            let base = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| metric.strip_suffix(s))
                .unwrap_or(&metric);
            let by_wildcard = named
                .iter()
                .filter_map(|n| n.strip_suffix('*'))
                .any(|prefix| base.starts_with(prefix));
            assert!(
                named.contains(&metric) || named.contains(base) || by_wildcard,
                "the dashboard queries {metric}, which the docs do not name: {query}"
            );
        }
    }
    // What the brief asks the dashboard to show.
    let all = queries.join("\n");
    for shown in [
        "_reconcile_total",
        "_reconcile_errors_total",
        "workqueue_depth",
        "_reconcile_duration_seconds_bucket",
        "cloudgateway_provider_calls_total",
        "cloudgateway_provider_throttled_total",
        "cloudgateway_rate_limit_calls_per_second",
        "cloudgateway_queue_depth",
        "cloudgateway_instance_batch_size_bucket",
        "cloudgateway_instance_cache_hits_total",
        "cloudgateway_instance_cache_misses_total",
    ] {
        assert!(all.contains(shown), "the dashboard does not show {shown}");
    }
    for controller in [
        "cloud_node_controller",
        "cloud_node_lifecycle_controller",
        "service_lb_controller",
        "node_route_controller",
    ] {
        assert!(
            all.contains(&format!("{controller}_reconcile_total")),
            "no syncs of {controller}"
        );
    }
}

/// The `helm` the deployment checks use: `$HELM`, else the repository's `.tools/helm`, else
/// `helm` on `PATH`.
fn helm() -> Option<PathBuf> {
    if let Some(helm) = std::env::var_os("HELM") {
        return Some(helm.into());
    }
    let tools = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.tools/helm");
    if tools.is_file() {
        return Some(tools);
    }
    std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("helm"))
            .find(|p| p.is_file())
    })
}

fn render(helm: &PathBuf, args: &[&str]) -> String {
    let chart = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../charts/ccm");
    let output = std::process::Command::new(helm)
        .arg("template")
        .arg("ccm")
        .arg(&chart)
        .args(args)
        .output()
        .expect("run helm");
    assert!(
        output.status.success(),
        "helm template {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("utf-8")
}

#[test]
fn the_chart_ships_the_dashboard_only_when_enabled() {
    let Some(helm) = helm() else {
        eprintln!("skipped: no helm (make test-deps installs it in .tools)");
        return;
    };
    // Off by default.
    let default = render(&helm, &[]);
    assert!(
        !default.contains("grafana_dashboard"),
        "rendered without dashboards.enabled"
    );
    // On: one ConfigMap with the sidecar's label, holding the dashboard file as it is.
    let enabled = render(
        &helm,
        &[
            "--set",
            "dashboards.enabled=true",
            "--show-only",
            "templates/dashboard.yaml",
        ],
    );
    assert!(enabled.contains("kind: ConfigMap"), "{enabled}");
    assert!(enabled.contains("grafana_dashboard: \"1\""), "{enabled}");
    let (_, body) = enabled.split_once("ccm.json: |-\n").expect("the dashboard key");
    let shipped: String = body
        .lines()
        .map(|l| l.strip_prefix("    ").unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n");
    let shipped: Value = serde_json::from_str(&shipped).expect("the shipped dashboard is JSON");
    assert_eq!(shipped, dashboard());
}

/// `name on binary` for each metric the docs name that its binary does not serve.
fn missing(
    documented: &BTreeSet<String>,
    served_by: &BTreeMap<&str, BTreeMap<String, String>>,
) -> Vec<String> {
    let mut missing = Vec::new();
    for name in documented {
        if CHECKED_ELSEWHERE.iter().any(|(n, _)| n == name) {
            continue;
        }
        for binary in owners(name) {
            let families = &served_by[binary];
            let found = match name.strip_suffix('*') {
                Some(prefix) => families.keys().any(|f| f.starts_with(prefix)),
                None => served(families, name).is_some(),
            };
            if !found {
                missing.push(format!("{name} on {binary}"));
            }
        }
    }
    missing
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_docs_name_is_served_by_its_binary() {
    let mut cluster = Cluster::start(ClusterSpec::with_instances(&["worker-0"])).await;
    let mut http = BTreeMap::new();
    for (binary, extra) in [
        (NODE, vec![]),
        (LIFECYCLE, vec![]),
        (SERVICE, vec![]),
        (ROUTE, vec!["--cluster-cidr", "10.244.0.0/16"]),
    ] {
        let i = cluster.start_controller(binary, binary, &extra);
        http.insert(binary, cluster.procs[i].http.unwrap());
    }
    http.insert(GATEWAY, cluster.gateway_http);
    // Some work, so that the controllers are past their start-up and their queues exist.
    cluster.register_node("worker-0", true).await;
    let patch = json!({"spec": {"podCIDR": "10.244.0.0/24", "podCIDRs": ["10.244.0.0/24"]}});
    cluster
        .nodes()
        .patch("worker-0", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("pod CIDR");
    cluster.create_lb_service("default", "web", json!({})).await;
    let services = cluster.services("default");
    wait_for("the load balancer", Duration::from_secs(60), || {
        let services = services.clone();
        async move {
            let web = services.get_opt("web").await.ok().flatten()?;
            (!ingress_ips(&web).is_empty()).then_some(())
        }
    })
    .await;

    // Every metric the docs name, on each binary that owns it (the controllers register
    // theirs once they lead, so the scrape is repeated until they are all there).
    let documented = documented_metrics();
    let (expositions, served_by) = wait_for(
        "every metric the docs name to be served",
        Duration::from_secs(30),
        || {
            let http = http.clone();
            let documented = documented.clone();
            async move {
                let mut expositions = BTreeMap::new();
                for (binary, addr) in &http {
                    match http_get(*addr, "/metrics").await {
                        Some((200, body)) => expositions.insert(*binary, body),
                        _ => return None,
                    };
                }
                let served_by: BTreeMap<&str, BTreeMap<String, String>> = expositions
                    .iter()
                    .map(|(binary, body)| (*binary, families(body)))
                    .collect();
                let missing = missing(&documented, &served_by);
                if !missing.is_empty() {
                    eprintln!("not served yet: {missing:?}");
                    return None;
                }
                Some((expositions, served_by))
            }
        },
    )
    .await;

    // Upstream's names, with upstream's types; the work queues under upstream's queue names.
    let named = documented;
    for (binary, name, kind) in UPSTREAM {
        assert!(named.contains(*name), "the docs do not name upstream's {name}");
        assert_eq!(
            served(&served_by[binary], name),
            Some(*kind),
            "{name} on {binary}"
        );
    }
    assert!(
        expositions[NODE].contains("workqueue_depth{name=\"Nodes\"}"),
        "{}",
        expositions[NODE]
    );
    assert!(
        expositions[SERVICE].contains("workqueue_depth{name=\"service\"}"),
        "{}",
        expositions[SERVICE]
    );

    // The dashboard queries only what the binaries serve.
    let all_series: BTreeSet<String> = served_by.values().flat_map(series_names).collect();
    for query in dashboard_queries(&dashboard()) {
        for metric in query_metrics(&query) {
            assert!(
                all_series.contains(&metric),
                "the dashboard queries {metric}, which no binary serves: {query}"
            );
        }
    }
    cluster.stop().await;
}
