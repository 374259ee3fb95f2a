//! What a shadow run (`--dry-run`) is checked by: the API server's own count of the requests
//! that write, the Leases (a dry-run replica holds only its own), and each component's
//! `/dry-run` list.

use std::{collections::BTreeMap, net::SocketAddr};

use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, ResourceExt, api::ListParams};
use serde_json::Value;

use crate::{Cluster, http_get};

/// Where the controllers keep their Leases.
pub const LEASE_NAMESPACE: &str = "kube-system";

/// Requests that write, by resource, as the API server counted them.
pub async fn writes(cluster: &Cluster) -> BTreeMap<String, u64> {
    let request = http::Request::get("/metrics").body(Vec::new()).expect("request");
    let text = cluster
        .client
        .request_text(request)
        .await
        .expect("apiserver metrics");
    let mut out = BTreeMap::new();
    for line in text.lines().filter(|l| l.starts_with("apiserver_request_total{")) {
        let label = |name: &str| {
            let start = line.find(&format!("{name}=\""))? + name.len() + 2;
            let end = line[start..].find('"')? + start;
            Some(line[start..end].to_owned())
        };
        let verb = label("verb").unwrap_or_default();
        if ["POST", "PUT", "PATCH", "DELETE", "DELETECOLLECTION"].contains(&verb.as_str()) {
            let count: u64 = line.rsplit(' ').next().unwrap_or("0").parse().unwrap_or(0);
            *out.entry(label("resource").unwrap_or_default()).or_default() += count;
        }
    }
    out
}

/// What was written since `before`, but for Leases (checked by name on their own).
pub fn written_since(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    after
        .iter()
        .filter(|(resource, _)| *resource != "leases")
        .filter_map(|(resource, n)| {
            let d = n - before.get(resource).copied().unwrap_or(0);
            (d > 0).then(|| (resource.clone(), d))
        })
        .collect()
}

/// A JSON document served at `path`.
pub async fn json_of(addr: SocketAddr, path: &str) -> Option<Value> {
    let (status, body) = http_get(addr, path).await?;
    (status == 200)
        .then(|| serde_json::from_str(&body).ok())
        .flatten()
}

/// Every Lease, name → resourceVersion.
pub async fn leases(cluster: &Cluster) -> BTreeMap<String, String> {
    let api: Api<Lease> = Api::namespaced(cluster.client.clone(), LEASE_NAMESPACE);
    api.list(&ListParams::default())
        .await
        .expect("leases")
        .items
        .into_iter()
        .map(|l| (l.name_any(), l.resource_version().unwrap_or_default()))
        .collect()
}
