//! The HTTP side port of every binary: `/healthz` (the process is alive), `/readyz` (it wants
//! traffic; says why not) and `/metrics` (Prometheus, OpenMetrics text).
//!
//! The gateway and the controllers share it; it knows nothing of Kubernetes, so the gateway
//! stays cluster-agnostic.

use std::{
    future::Future,
    net::SocketAddr,
    sync::{Arc, Mutex, RwLock},
};

use axum::{Router, extract::State, http::StatusCode, response::IntoResponse, routing::get};
use prometheus_client::{
    encoding::text::encode,
    registry::{Metric, Registry},
};
use tokio::net::TcpListener;

/// What `/readyz` reports. Cheap to clone; every clone sees the same state.
#[derive(Clone, Default)]
pub struct Readiness(Arc<RwLock<Option<String>>>);

impl Readiness {
    /// Not ready ("starting") until [`Readiness::set_ready`].
    pub fn new() -> Self {
        let r = Self::default();
        r.set_not_ready("starting");
        r
    }

    /// Ready.
    pub fn set_ready(&self) {
        *self.0.write().unwrap_or_else(std::sync::PoisonError::into_inner) = None;
    }

    /// Not ready, saying why (the body of the 503).
    pub fn set_not_ready(&self, why: &str) {
        *self.0.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(why.to_owned());
    }

    /// Why not ready, or `None` when ready.
    pub fn reason(&self) -> Option<String> {
        self.0
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// A Prometheus registry shared by the parts of one program. Cheap to clone; each program (or
/// test) owns its own, so several can live in one process without sharing metrics.
#[derive(Clone, Default)]
pub struct MetricsRegistry(Arc<Mutex<Registry>>);

impl MetricsRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// A registry whose metric names all start with `prefix_`.
    pub fn with_prefix(prefix: &str) -> Self {
        Self(Arc::new(Mutex::new(Registry::with_prefix(prefix))))
    }

    /// Registers `metric` under `name` (Prometheus adds `_total` to counters).
    pub fn register(&self, name: &str, help: &str, metric: impl Metric) {
        self.lock().register(name, help, metric);
    }

    /// Every registered metric in OpenMetrics text format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.lock());
        out
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[derive(Clone)]
struct SidePort {
    readiness: Readiness,
    metrics: MetricsRegistry,
}

/// The side port's routes.
pub fn router(readiness: Readiness, metrics: MetricsRegistry) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .with_state(SidePort { readiness, metrics })
}

/// Binds `addr` and serves the side port until `shutdown` completes.
///
/// # Errors
/// The address cannot be bound.
pub async fn serve(
    addr: SocketAddr,
    readiness: Readiness,
    metrics: MetricsRegistry,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<tokio::task::JoinHandle<std::io::Result<()>>> {
    serve_with(addr, readiness, metrics, Router::new(), shutdown).await
}

/// [`serve`], with `extra` routes beside the side port's own (e.g. `/dry-run`).
///
/// # Errors
/// The address cannot be bound.
pub async fn serve_with(
    addr: SocketAddr,
    readiness: Readiness,
    metrics: MetricsRegistry,
    extra: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<tokio::task::JoinHandle<std::io::Result<()>>> {
    let listener = TcpListener::bind(addr).await?;
    tracing::info!(addr = %listener.local_addr()?, "serving /healthz, /readyz and /metrics");
    let app = router(readiness, metrics).merge(extra);
    Ok(tokio::spawn(async move {
        axum::serve(listener, app).with_graceful_shutdown(shutdown).await
    }))
}

async fn readyz(State(port): State<SidePort>) -> (StatusCode, String) {
    match port.readiness.reason() {
        None => (StatusCode::OK, "ok".into()),
        Some(why) => (StatusCode::SERVICE_UNAVAILABLE, why),
    }
}

async fn metrics_text(State(port): State<SidePort>) -> impl IntoResponse {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        port.metrics.render(),
    )
}

#[cfg(test)]
mod tests {
    use axum::{body::Body, http::Request};
    use http_body_util::BodyExt;
    use prometheus_client::metrics::counter::Counter;
    use tower::ServiceExt;

    use super::*;

    async fn get(app: &Router, path: &str) -> (StatusCode, String) {
        let response = app
            .clone()
            .oneshot(Request::get(path).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn readiness_says_why_not_and_metrics_are_rendered() {
        let readiness = Readiness::new();
        let metrics = MetricsRegistry::with_prefix("demo");
        let counter = Counter::<u64>::default();
        metrics.register("calls", "Calls made", counter.clone());
        counter.inc();
        let app = router(readiness.clone(), metrics);
        assert_eq!(get(&app, "/healthz").await, (StatusCode::OK, "ok".into()));
        assert_eq!(
            get(&app, "/readyz").await,
            (StatusCode::SERVICE_UNAVAILABLE, "starting".into())
        );
        readiness.set_ready();
        assert_eq!(get(&app, "/readyz").await, (StatusCode::OK, "ok".into()));
        let (status, text) = get(&app, "/metrics").await;
        assert_eq!(status, StatusCode::OK);
        assert!(text.contains("demo_calls_total 1"), "{text}");
    }

    #[test]
    fn two_registries_do_not_share_metrics() {
        let (a, b) = (MetricsRegistry::new(), MetricsRegistry::new());
        a.register("only_in_a", "A's", Counter::<u64>::default());
        assert!(a.render().contains("only_in_a"));
        assert!(!b.render().contains("only_in_a"));
    }
}
