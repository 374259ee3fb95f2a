//! The side port every controller serves: `/healthz`, `/readyz` and `/metrics`.

use std::{
    net::SocketAddr,
    sync::{Arc, RwLock},
};

use axum::{Router, extract::State, http::StatusCode, routing::get};
use tokio::net::TcpListener;

/// What `/readyz` reports; controllers flip it as they start and stop.
#[derive(Clone, Default)]
pub struct Readiness(Arc<RwLock<Option<String>>>);

impl Readiness {
    /// Not ready until [`Readiness::set_ready`].
    pub fn new() -> Self {
        let r = Self::default();
        r.set_not_ready("starting");
        r
    }

    /// Ready.
    pub fn set_ready(&self) {
        *self.0.write().unwrap_or_else(std::sync::PoisonError::into_inner) = None;
    }

    /// Not ready, saying why.
    pub fn set_not_ready(&self, why: &str) {
        *self.0.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(why.to_owned());
    }

    fn reason(&self) -> Option<String> {
        self.0
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// Binds `addr` and serves the side port until `shutdown`.
pub async fn serve(
    addr: SocketAddr,
    readiness: Readiness,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<tokio::task::JoinHandle<std::io::Result<()>>> {
    let listener = TcpListener::bind(addr).await?;
    let app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(|| async { crate::metrics::render() }))
        .with_state(readiness);
    tracing::info!(addr = %listener.local_addr()?, "serving /healthz, /readyz and /metrics");
    Ok(tokio::spawn(async move {
        axum::serve(listener, app).with_graceful_shutdown(shutdown).await
    }))
}

async fn readyz(State(readiness): State<Readiness>) -> (StatusCode, String) {
    match readiness.reason() {
        None => (StatusCode::OK, "ok".into()),
        Some(why) => (StatusCode::SERVICE_UNAVAILABLE, why),
    }
}
