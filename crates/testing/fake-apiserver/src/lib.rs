//! A Kubernetes API server for tests, the demo and benchmarks, answering like the real one.
//!
//! Tests start it in-process on `127.0.0.1:0` and talk to it with kube-rs or kubectl over
//! plain HTTP:
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! let server = fake_apiserver::FakeApiServer::start(fake_apiserver::Config::default()).await?;
//! let client = server.client()?;
//! let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client);
//! # let _ = nodes; server.shutdown().await; Ok(()) }
//! ```

pub mod alloc;
pub mod discovery;
pub mod errors;
pub mod http;
pub mod metrics;
pub mod patch;
pub mod registry;
pub mod resources;
pub mod selectors;
pub mod store;
pub mod strategy;
pub mod table;
pub mod typed;
pub mod validation;
pub mod watch;

use std::net::SocketAddr;
use std::ops::RangeInclusive;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use ipnet::IpNet;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub use registry::Registry;

/// Server settings; `Config::default()` binds `127.0.0.1:0`.
#[derive(Debug, Clone)]
pub struct Config {
    pub bind: SocketAddr,
    /// Changes kept per resource for watch resumption; older versions get `410 Gone`.
    pub watch_history_size: usize,
    pub service_cluster_ip_range: IpNet,
    pub node_port_range: RangeInclusive<u16>,
    /// How often a watcher that asked for bookmarks gets one (the real server: about 1 min).
    pub bookmark_interval: Duration,
    /// Events a watcher may fall behind by before its stream is closed.
    pub watch_channel_capacity: usize,
    /// Create `default/kubernetes` like a real cluster does.
    pub kubernetes_service: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            bind: SocketAddr::from(([127, 0, 0, 1], 0)),
            watch_history_size: 10_000,
            service_cluster_ip_range: IpNet::V4(
                ipnet::Ipv4Net::new([10, 96, 0, 0].into(), 12).unwrap_or_default(),
            ),
            node_port_range: 30000..=32767,
            bookmark_interval: Duration::from_secs(60),
            watch_channel_capacity: 16_384,
            kubernetes_service: true,
        }
    }
}

pub struct FakeApiServer;

/// A server listening on its socket; dropping it stops it.
pub struct RunningServer {
    addr: SocketAddr,
    registry: Arc<Registry>,
    state: http::AppState,
    shutdown: Option<oneshot::Sender<()>>,
    server: Option<JoinHandle<()>>,
    controller: JoinHandle<()>,
}

impl FakeApiServer {
    /// Binds `config.bind` and serves until shut down.
    pub async fn start(config: Config) -> anyhow::Result<RunningServer> {
        let listener = tokio::net::TcpListener::bind(config.bind).await?;
        let addr = listener.local_addr()?;
        let registry = Arc::new(Registry::new(Arc::new(config)));
        let state = http::AppState {
            reg: registry.clone(),
            server_address: Arc::from(addr.to_string()),
            requests: metrics::RequestCounter::default(),
        };
        let (tx, server) = serve(listener, state.clone());
        let controller = tokio::spawn(namespace_controller(registry.clone()));
        tracing::info!(%addr, "fake-apiserver listening");
        Ok(RunningServer {
            addr,
            registry,
            state,
            shutdown: Some(tx),
            server: Some(server),
            controller,
        })
    }
}

/// Serves `state` on `listener` until the sender is used or dropped.
fn serve(listener: tokio::net::TcpListener, state: http::AppState) -> (oneshot::Sender<()>, JoinHandle<()>) {
    let app = http::router(state);
    let (tx, rx) = oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        let serve = axum::serve(listener, app).with_graceful_shutdown(async move {
            let _ = rx.await;
        });
        if let Err(e) = serve.await {
            tracing::error!(error = %e, "fake-apiserver stopped");
        }
    });
    (tx, server)
}

/// Stands in for kube-controller-manager's namespace controller: a deleted namespace is
/// emptied, then finalized and removed.
async fn namespace_controller(reg: Arc<Registry>) {
    loop {
        let notified = reg.db.changed.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        reg.reconcile_namespaces();
        tokio::select! {
            _ = notified => {}
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
    }
}

impl RunningServer {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Direct access to the storage (for tests that inspect or seed state).
    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    pub fn kube_config(&self) -> anyhow::Result<kube::Config> {
        let uri: ::http::Uri = self.url().parse()?;
        let mut cfg = kube::Config::new(uri);
        cfg.default_namespace = "default".into();
        Ok(cfg)
    }

    /// A kube-rs client for this server (call inside a tokio runtime). It speaks plain HTTP
    /// through hyper directly, so it needs no TLS crypto provider.
    pub fn client(&self) -> anyhow::Result<kube::Client> {
        use kube::client::ConfigExt;
        let config = self.kube_config()?;
        let http =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build_http();
        let service = tower::ServiceBuilder::new()
            .layer(config.base_uri_layer())
            .map_err(tower::BoxError::from)
            .service(http);
        Ok(kube::Client::new(service, config.default_namespace))
    }

    /// A kubeconfig that kubectl and kube-rs accept.
    pub fn kubeconfig_yaml(&self) -> String {
        kubeconfig_yaml(&self.url())
    }

    pub fn write_kubeconfig(&self, path: impl AsRef<Path>) -> std::io::Result<()> {
        // Written aside and renamed into place: a reader polling for the file never sees half
        // of it (a kubeconfig cut before its current-context still parses).
        let path = path.as_ref();
        let mut partial = path.as_os_str().to_owned();
        partial.push(".partial");
        std::fs::write(&partial, self.kubeconfig_yaml())?;
        std::fs::rename(&partial, path)
    }

    /// Stops accepting, then ends open connections (watches included) after a short grace.
    pub async fn shutdown(mut self) {
        self.stop_serving().await;
        self.controller.abort();
    }

    async fn stop_serving(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(server) = self.server.take() {
            let abort = server.abort_handle();
            if tokio::time::timeout(Duration::from_secs(1), server)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
    }

    /// What a restart of the real server does, its storage (etcd) kept: every connection ends
    /// (watches first), nothing answers for `down_for`, and the server comes back at the same
    /// address with a new watch cache: a watch from a version before it gets `410 Gone`.
    /// Meanwhile the storage can still change through [`RunningServer::registry`], as it does
    /// through the other servers of a real control plane.
    ///
    /// # Errors
    /// The address cannot be bound again.
    pub async fn restart(&mut self, down_for: Duration) -> anyhow::Result<()> {
        self.registry.db.close_watches();
        self.stop_serving().await;
        tokio::time::sleep(down_for).await;
        self.registry.db.compact();
        let listener = tokio::net::TcpListener::bind(self.addr).await?;
        let (tx, server) = serve(listener, self.state.clone());
        self.shutdown = Some(tx);
        self.server = Some(server);
        tracing::info!(addr = %self.addr, "fake-apiserver restarted");
        Ok(())
    }
}

impl Drop for RunningServer {
    fn drop(&mut self) {
        if let Some(s) = &self.server {
            s.abort();
        }
        self.controller.abort();
    }
}

pub fn kubeconfig_yaml(url: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {url}\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n    namespace: default\ncurrent-context: fake\nusers:\n- name: fake\n  user:\n    token: fake\npreferences: {{}}\n"
    )
}
