//! What the benchmarks (`ccm-bench`: the node, service and route scenarios) and the chaos suite
//! read off running processes: their metrics, provider calls per operation and how they moved,
//! API requests served, peak memory. One set of readers, so every table counts the same way.

use std::{collections::BTreeMap, net::SocketAddr};

use crate::{Cluster, Proc, counter, http_get};

/// The `/metrics` text of the process serving `addr`; empty when it does not answer.
pub async fn metrics(addr: SocketAddr) -> String {
    http_get(addr, "/metrics")
        .await
        .map(|(_, body)| body)
        .unwrap_or_default()
}

/// The gateway's `/metrics`.
pub async fn gateway_metrics(cluster: &Cluster) -> String {
    metrics(cluster.gateway_http).await
}

/// A process's `/metrics` (a controller's side port); empty for one without.
pub async fn process_metrics(proc: &Proc) -> String {
    match proc.http {
        Some(addr) => metrics(addr).await,
        None => String::new(),
    }
}

/// fake-apiserver's `/metrics` (through the cluster's client: the API server has no side port).
pub async fn apiserver_metrics(cluster: &Cluster) -> String {
    let request = http::Request::get("/metrics").body(Vec::new()).expect("request");
    cluster.client.request_text(request).await.unwrap_or_default()
}

/// Every API request the server answered so far; fake-apiserver does not count reads of its own
/// `/metrics`, so reading this costs nothing.
pub async fn api_requests(cluster: &Cluster) -> u64 {
    counter(&apiserver_metrics(cluster).await, "apiserver_request_total", &[])
}

/// API requests of `verb` on `resource` answered so far.
pub async fn api_requests_of(cluster: &Cluster, verb: &str, resource: &str) -> u64 {
    counter(
        &apiserver_metrics(cluster).await,
        "apiserver_request_total",
        &[("verb", verb), ("resource", resource)],
    )
}

/// The gateway's provider calls of each of `operations` (every outcome) in `metrics`.
pub fn provider_calls(metrics: &str, operations: &[&str]) -> BTreeMap<String, u64> {
    operations
        .iter()
        .map(|op| {
            let calls = counter(metrics, "cloudgateway_provider_calls_total", &[("operation", op)]);
            ((*op).to_owned(), calls)
        })
        .collect()
}

/// "Throttled" answers of the cloud the gateway counted in `metrics`.
pub fn throttled(metrics: &str) -> u64 {
    counter(metrics, "cloudgateway_provider_throttled_total", &[])
}

/// What each count of `after` grew by since `before`; counts that did not grow are left out.
pub fn delta(after: &BTreeMap<String, u64>, before: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    after
        .iter()
        .map(|(op, n)| (op.clone(), n.saturating_sub(before.get(op).copied().unwrap_or(0))))
        .filter(|(_, n)| *n > 0)
        .collect()
}

/// Peak resident memory of each running process, MiB, by name; processes whose names start
/// with one of `groups` (replicas: `service-lb-controller-0`, `-1`…) count as that group,
/// with the largest peak among them.
pub fn peak_rss(procs: &[Proc], groups: &[&str]) -> BTreeMap<String, f64> {
    let mut rss = BTreeMap::new();
    for proc in procs {
        let Some(mib) = proc.id().and_then(peak_rss_mib) else {
            continue;
        };
        let name = groups
            .iter()
            .find(|g| proc.name.starts_with(**g))
            .map_or_else(|| proc.name.clone(), |g| (*g).to_owned());
        let entry = rss.entry(name).or_insert(0.0_f64);
        *entry = entry.max(mib);
    }
    rss
}

/// Peak resident memory of process `pid`, MiB (`VmHWM`), to a tenth.
pub fn peak_rss_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some((kib / 1024.0 * 10.0).round() / 10.0)
}

/// A figure of a table to a tenth; `-` for one not measured (NaN).
pub fn fmt_f(v: f64) -> String {
    if v.is_nan() { "-".into() } else { format!("{v:.1}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deltas_and_provider_calls() {
        let metrics = "# TYPE cloudgateway_provider_calls_total counter\n\
            cloudgateway_provider_calls_total{operation=\"create_route\",outcome=\"ok\"} 3\n\
            cloudgateway_provider_calls_total{operation=\"create_route\",outcome=\"throttled\"} 1\n\
            cloudgateway_provider_calls_total{operation=\"list_routes\",outcome=\"ok\"} 2\n\
            cloudgateway_provider_throttled_total 1\n";
        let after = provider_calls(metrics, &["create_route", "list_routes", "delete_route"]);
        assert_eq!(after["create_route"], 4);
        assert_eq!(after["delete_route"], 0);
        assert_eq!(throttled(metrics), 1);
        let before = BTreeMap::from([("create_route".to_owned(), 1), ("list_routes".to_owned(), 2)]);
        assert_eq!(
            delta(&after, &before),
            BTreeMap::from([("create_route".to_owned(), 3)])
        );
        assert_eq!(fmt_f(f64::NAN), "-");
        assert_eq!(fmt_f(2.345), "2.3");
    }

    #[test]
    fn this_process_has_a_peak_rss() {
        assert!(peak_rss_mib(std::process::id()).is_some_and(|m| m > 0.0));
    }
}
