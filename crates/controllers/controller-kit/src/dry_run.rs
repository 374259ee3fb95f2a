//! Shadow mode (`--dry-run`): a controller that plans every change and makes none.
//!
//! In dry-run a controller makes no write to the Kubernetes API (no patch, create, update,
//! delete, event or finalizer change) and asks the gateway for dry-run write calls only. Each
//! write it would make is a **planned change**: one info log line (`dry-run: would <kind>
//! <object>`, with the change), a count in `ccm_dry_run_planned_changes_total{controller,kind}`
//! and an entry of `/dry-run` on the side port (JSON of every planned change since start).
//!
//! Two layers keep it so:
//! - the writers plan instead of writing: [`crate::patch::Writer`] (patches, deletes; the object
//!   it returns is the one the write would have produced, so a sync goes on as after a real
//!   write and never retries a write it only planned), [`crate::events::Events`] (a Normal event only
//!   restates a change: logged at debug; a Warning is planned, so the shadow run lists what the
//!   operator would be warned of), the gateway client's write calls
//!   (sent with the dry-run header, or not sent at all to a gateway that cannot dry-run);
//! - underneath, both Kubernetes clients refuse every request that writes ([`GuardLayer`]),
//!   except those on the dry-run Leases: a write path that forgot the first layer fails (and
//!   is reported as a planned change of kind `unguarded_write`) instead of writing.
//!
//! Leader election and the shard leases use their own Lease names, the usual name plus
//! [`LEASE_SUFFIX`], so a dry-run replica never contends with (or fences) the real controllers.
//!
//! **Counting.** Planned changes are deduplicated by (kind, object, change): a resync that plans
//! the same change again is not a new one, so the metric and `/dry-run`'s `total` count distinct
//! planned changes; an entry's `times_planned` says how often it was planned. A change that
//! differs (another port, another node set) is a new entry. `/dry-run` keeps the last
//! [`KEPT`] distinct changes (deduplication is over those).

use std::{
    collections::{HashMap, VecDeque},
    future::Future,
    pin::Pin,
    sync::{Arc, Mutex},
    task::{Context, Poll},
};

use futures::FutureExt as _;
use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family},
};
use serde_json::{Value, json};
use side_port::MetricsRegistry;
use tower::{Layer, Service};

/// Appended to every Lease name of a controller in dry-run (leader election, shard and member
/// leases), so it never holds or contends for the real controllers' leases.
pub const LEASE_SUFFIX: &str = "-dry-run";

/// How many distinct planned changes `/dry-run` keeps.
pub const KEPT: usize = 10_000;

/// Labels of `ccm_dry_run_planned_changes_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PlannedLabels {
    /// The controller that planned it.
    pub controller: String,
    /// What kind of change (`node_patch`, `service_status`, `finalizer`, `load_balancer`, ...).
    pub kind: String,
}

/// Whether this controller runs in dry-run, and what it planned. Cheap to clone; off by default.
#[derive(Clone, Default)]
pub struct DryRun(Option<Arc<Inner>>);

struct Inner {
    controller: String,
    metric: Family<PlannedLabels, Counter>,
    log: Mutex<Log>,
}

#[derive(Default)]
struct Log {
    /// Sequence number of each kept change, by its key.
    seen: HashMap<String, u64>,
    kept: VecDeque<Planned>,
    total: u64,
}

struct Planned {
    seq: u64,
    key: String,
    kind: String,
    object: String,
    change: Value,
    times: u64,
}

impl std::fmt::Debug for DryRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DryRun")
            .field("enabled", &self.enabled())
            .finish()
    }
}

impl DryRun {
    /// Not in dry-run: every write is made.
    pub fn off() -> Self {
        Self(None)
    }

    /// In dry-run, as `controller`: registers `ccm_dry_run_planned_changes_total` in `metrics`.
    pub fn on(controller: &str, metrics: &MetricsRegistry) -> Self {
        let metric = Family::<PlannedLabels, Counter>::default();
        metrics.register(
            "ccm_dry_run_planned_changes",
            "Distinct changes a controller in dry-run would have made and did not, by kind",
            metric.clone(),
        );
        Self(Some(Arc::new(Inner {
            controller: controller.to_owned(),
            metric,
            log: Mutex::default(),
        })))
    }

    /// Whether writes are planned instead of made.
    pub fn enabled(&self) -> bool {
        self.0.is_some()
    }

    /// The Lease name to use for `name`: itself, or with [`LEASE_SUFFIX`] in dry-run.
    pub fn lease_name(&self, name: &str) -> String {
        if self.enabled() {
            format!("{name}{LEASE_SUFFIX}")
        } else {
            name.to_owned()
        }
    }

    /// Records a planned change of `kind` to `object` (`Kind/namespace/name`): logged, counted
    /// and kept, unless the same change of the same object was planned already. Whether it is a
    /// new one. Does nothing when not in dry-run.
    pub fn plan(&self, kind: &str, object: &str, change: Value) -> bool {
        let Some(inner) = &self.0 else {
            return false;
        };
        let key = format!("{kind}\u{0}{object}\u{0}{}", without_times(&change));
        let mut log = inner
            .log
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(&seq) = log.seen.get(&key) {
            let first = log.kept.front().map_or(seq, |p| p.seq);
            let index = usize::try_from(seq - first).unwrap_or(usize::MAX);
            if let Some(planned) = log.kept.get_mut(index) {
                planned.times += 1;
            }
            tracing::debug!(kind, object, %change, "dry-run: would {kind} {object} (planned already)");
            return false;
        }
        tracing::info!(controller = %inner.controller, kind, object, %change, "dry-run: would {kind} {object}");
        inner
            .metric
            .get_or_create(&PlannedLabels {
                controller: inner.controller.clone(),
                kind: kind.to_owned(),
            })
            .inc();
        log.total += 1;
        let seq = log.total;
        if log.kept.len() == KEPT
            && let Some(oldest) = log.kept.pop_front()
        {
            log.seen.remove(&oldest.key);
        }
        log.seen.insert(key.clone(), seq);
        log.kept.push_back(Planned {
            seq,
            key,
            kind: kind.to_owned(),
            object: object.to_owned(),
            change,
            times: 1,
        });
        true
    }

    /// `/dry-run`'s body: `{"controller", "dry_run", "total", "kept", "planned": [{"seq",
    /// "kind", "object", "change", "times_planned"}]}`, oldest first.
    pub fn to_json(&self) -> Value {
        let Some(inner) = &self.0 else {
            return json!({ "dry_run": false, "total": 0, "kept": 0, "planned": [] });
        };
        let log = inner
            .log
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let planned: Vec<Value> = log
            .kept
            .iter()
            .map(|p| {
                json!({
                    "seq": p.seq,
                    "kind": p.kind,
                    "object": p.object,
                    "change": p.change,
                    "times_planned": p.times,
                })
            })
            .collect();
        json!({
            "controller": inner.controller,
            "dry_run": true,
            "total": log.total,
            "kept": planned.len(),
            "planned": planned,
        })
    }

    /// `GET /dry-run` on the side port.
    pub fn router(&self) -> axum::Router {
        let this = self.clone();
        axum::Router::new().route(
            "/dry-run",
            axum::routing::get(move || {
                let body = this.to_json();
                async move { axum::Json(body) }
            }),
        )
    }
}

/// Condition times a planned patch stamps with "now" (`lastHeartbeatTime`, ...): left out of
/// what makes two planned changes the same, or every pass would plan its patch anew.
const TIME_FIELDS: [&str; 4] = [
    "lastHeartbeatTime",
    "lastTransitionTime",
    "lastProbeTime",
    "lastUpdateTime",
];

/// `change` without [`TIME_FIELDS`], at any depth.
fn without_times(change: &Value) -> Value {
    match change {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| !TIME_FIELDS.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), without_times(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_times).collect()),
        other => other.clone(),
    }
}

/// `Kind/namespace/name` (`Kind/name` for a cluster-scoped object), as planned changes name
/// their object.
pub fn object_name(kind: &str, namespace: Option<&str>, name: &str) -> String {
    match namespace.filter(|ns| !ns.is_empty()) {
        Some(ns) => format!("{kind}/{ns}/{name}"),
        None => format!("{kind}/{name}"),
    }
}

/// Whether an API request may go out from a controller in dry-run: reads, and writes of the
/// dry-run Leases only (a Lease whose name carries [`LEASE_SUFFIX`]). `body` is the request's
/// body when it is at hand (a create names its object there, not in the path).
pub fn allowed(method: &http::Method, path: &str, body: Option<&[u8]>) -> bool {
    if matches!(
        *method,
        http::Method::GET | http::Method::HEAD | http::Method::OPTIONS
    ) {
        return true;
    }
    let Some(rest) = path.strip_prefix("/apis/coordination.k8s.io/v1/namespaces/") else {
        return false;
    };
    // `<namespace>/leases` (create) or `<namespace>/leases/<name>`.
    let mut parts = rest.split('/');
    let (Some(_namespace), Some("leases")) = (parts.next(), parts.next()) else {
        return false;
    };
    let name = match (parts.next(), parts.next()) {
        (Some(name), None) if !name.is_empty() => name.to_owned(),
        (None, None) if *method == http::Method::POST => {
            let created: Option<Value> = body.and_then(|b| serde_json::from_slice(b).ok());
            match created
                .as_ref()
                .and_then(|v| v.pointer("/metadata/name"))
                .and_then(Value::as_str)
            {
                Some(name) => name.to_owned(),
                None => return false,
            }
        }
        _ => return false,
    };
    is_dry_run_lease(&name)
}

/// Whether `name` is a dry-run Lease: the suffix ends it or a shard/member suffix follows it.
fn is_dry_run_lease(name: &str) -> bool {
    name.ends_with(LEASE_SUFFIX)
        || name.contains(&format!("{LEASE_SUFFIX}-shard-"))
        || name.contains(&format!("{LEASE_SUFFIX}-member-"))
}

/// Refused by [`GuardLayer`]: a write request from a controller in dry-run.
#[derive(Debug, thiserror::Error)]
#[error("dry-run: refused {method} {path}: a controller in dry-run writes nothing to the Kubernetes API")]
pub struct Refused {
    /// The request's method.
    pub method: http::Method,
    /// Its path.
    pub path: String,
}

/// The Kubernetes clients' last line in dry-run: every request that writes is refused before it
/// leaves ([`allowed`]), reported as a planned change of kind `unguarded_write`.
#[derive(Clone)]
pub struct GuardLayer {
    dry_run: DryRun,
}

impl GuardLayer {
    /// A guard reporting to `dry_run` (which must be on for it to refuse anything).
    pub fn new(dry_run: DryRun) -> Self {
        Self { dry_run }
    }
}

impl<S> Layer<S> for GuardLayer {
    type Service = Guard<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Guard {
            inner,
            dry_run: self.dry_run.clone(),
        }
    }
}

/// See [`GuardLayer`].
pub struct Guard<S> {
    inner: S,
    dry_run: DryRun,
}

type Boxed<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

impl<S> Service<http::Request<kube::client::Body>> for Guard<S>
where
    S: Service<http::Request<kube::client::Body>>,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
    S::Error: From<Box<dyn std::error::Error + Send + Sync>> + Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Boxed<S::Response, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<kube::client::Body>) -> Self::Future {
        if self.dry_run.enabled() {
            // A request body built in memory (every kube request) is at hand at once.
            let body = request
                .body()
                .try_clone()
                .and_then(|b| b.collect_bytes().now_or_never())
                .and_then(Result::ok);
            let path = request.uri().path().to_owned();
            if !allowed(request.method(), &path, body.as_deref()) {
                let method = request.method().clone();
                let text = body
                    .as_deref()
                    .map(|b| String::from_utf8_lossy(b).into_owned())
                    .unwrap_or_default();
                tracing::error!(%method, path, "dry-run: a write bypassed the dry-run writers; refused");
                self.dry_run.plan(
                    "unguarded_write",
                    &path,
                    json!({ "method": method.as_str(), "body": text }),
                );
                let refused: Box<dyn std::error::Error + Send + Sync> = Box::new(Refused { method, path });
                return Box::pin(std::future::ready(Err(S::Error::from(refused))));
            }
        }
        Box::pin(self.inner.call(request))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_reads_and_the_dry_run_leases_may_go_out() {
        use http::Method;
        let lease = |name: &str| format!("/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/{name}");
        for (method, path, body, ok) in [
            (Method::GET, "/api/v1/nodes".to_owned(), None, true),
            (Method::GET, "/api/v1/nodes?watch=true".to_owned(), None, true),
            (Method::PATCH, "/api/v1/nodes/n1".to_owned(), None, false),
            (
                Method::PATCH,
                "/api/v1/namespaces/a/services/s/status".to_owned(),
                None,
                false,
            ),
            (Method::DELETE, "/api/v1/nodes/n1".to_owned(), None, false),
            (
                Method::POST,
                "/apis/events.k8s.io/v1/namespaces/default/events".to_owned(),
                None,
                false,
            ),
            (Method::PUT, lease("cloud-node-controller"), None, false),
            (Method::PUT, lease("cloud-node-controller-dry-run"), None, true),
            (
                Method::PUT,
                lease("service-lb-controller-dry-run-shard-3"),
                None,
                true,
            ),
            (
                Method::DELETE,
                lease("service-lb-controller-dry-run-member-00ff"),
                None,
                true,
            ),
            (
                Method::DELETE,
                lease("service-lb-controller-member-00ff"),
                None,
                false,
            ),
        ] {
            assert_eq!(allowed(&method, &path, body), ok, "{method} {path}");
        }
        let create = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases";
        let body = |name: &str| serde_json::to_vec(&json!({"metadata": {"name": name}})).unwrap();
        assert!(allowed(&Method::POST, create, Some(&body("x-dry-run"))));
        assert!(!allowed(&Method::POST, create, Some(&body("x"))));
        assert!(!allowed(&Method::POST, create, None), "a create naming nothing");
        assert!(!allowed(&Method::POST, create, Some(b"not json")));
    }

    #[test]
    fn planned_changes_are_counted_once_each() {
        let metrics = MetricsRegistry::new();
        let dry = DryRun::on("service-lb-controller", &metrics);
        let change = json!({"woulds": [{"call": "ensure_load_balancer", "request": "{\"port\":8080}"}]});
        assert!(dry.plan("load_balancer", "Service/default/web", change.clone()));
        assert!(
            !dry.plan("load_balancer", "Service/default/web", change.clone()),
            "a resync"
        );
        assert!(dry.plan(
            "load_balancer",
            "Service/default/web",
            json!({"woulds": ["other"]})
        ));
        assert!(dry.plan("service_status", "Service/default/web", change));
        let json = dry.to_json();
        assert_eq!(json["total"], 3);
        assert_eq!(json["planned"][0]["times_planned"], 2);
        assert_eq!(json["planned"][0]["object"], "Service/default/web");
        assert_eq!(json["planned"][2]["kind"], "service_status");
        let text = metrics.render();
        assert!(
            text.contains(
                "ccm_dry_run_planned_changes_total{controller=\"service-lb-controller\",kind=\"load_balancer\"} 2"
            ),
            "{text}"
        );
        assert!(text.contains("kind=\"service_status\"} 1"), "{text}");
    }

    #[test]
    fn a_patch_planned_again_with_new_condition_times_is_the_same_change() {
        let dry = DryRun::on("node-route-controller", &MetricsRegistry::new());
        let at = |t: &str| {
            json!({"patch": {"status": {"conditions": [{
                "type": "NetworkUnavailable", "status": "False", "reason": "RouteCreated",
                "lastHeartbeatTime": t, "lastTransitionTime": t
            }]}}})
        };
        assert!(dry.plan("node_status", "Node/n1", at("2026-11-24T21:00:00Z")));
        assert!(!dry.plan("node_status", "Node/n1", at("2026-11-24T21:00:10Z")));
        let mut other = at("2026-11-24T21:00:20Z");
        other["patch"]["status"]["conditions"][0]["status"] = json!("True");
        assert!(
            dry.plan("node_status", "Node/n1", other),
            "another status is another change"
        );
        let listed = dry.to_json();
        assert_eq!(listed["total"], 2, "{listed}");
        assert_eq!(listed["planned"][0]["times_planned"], 2, "{listed}");
    }

    #[test]
    fn off_plans_nothing_and_keeps_lease_names() {
        let dry = DryRun::off();
        assert!(!dry.plan("node_patch", "Node/n1", json!({})));
        assert_eq!(dry.to_json()["total"], 0);
        assert_eq!(dry.lease_name("cloud-node-controller"), "cloud-node-controller");
        let on = DryRun::on("x", &MetricsRegistry::new());
        assert_eq!(
            on.lease_name("cloud-node-controller"),
            "cloud-node-controller-dry-run"
        );
    }

    #[test]
    fn the_kept_window_is_bounded_and_forgets_what_it_drops() {
        let dry = DryRun::on("x", &MetricsRegistry::new());
        for i in 0..(KEPT + 3) {
            assert!(dry.plan("node_patch", &format!("Node/n{i}"), json!({})));
        }
        let json = dry.to_json();
        assert_eq!(json["total"], KEPT as u64 + 3);
        assert_eq!(json["kept"], KEPT);
        assert_eq!(json["planned"][0]["object"], "Node/n3");
        // n1 was dropped from the window: planning it again is new; n5 is still kept.
        assert!(dry.plan("node_patch", "Node/n1", json!({})));
        assert!(!dry.plan("node_patch", "Node/n5", json!({})));
    }
}
