//! The Kubernetes client: kubeconfig or in-cluster config, with a client-side QPS limit like
//! client-go's (`--kube-api-qps`, `--kube-api-burst`), so a controller never floods the API server.

use std::{
    future::Future,
    path::PathBuf,
    pin::Pin,
    sync::{Arc, Mutex},
    task::{Context, Poll, ready},
    time::Instant,
};

use kube::{
    Client, Config,
    client::ClientBuilder,
    config::{KubeConfigOptions, Kubeconfig},
};
use token_bucket::{Limit, TokenBucket};
use tower::{Layer, Service};

/// Flags for the Kubernetes API connection.
#[derive(Debug, Clone, clap::Args)]
pub struct KubeArgs {
    /// Path to a kubeconfig; in-cluster configuration when unset.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Sustained queries per second to the API server.
    #[arg(long = "kube-api-qps", default_value_t = 20.0)]
    pub qps: f64,
    /// Burst of queries to the API server.
    #[arg(long = "kube-api-burst", default_value_t = 30)]
    pub burst: u32,
}

/// The Kubernetes client could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum KubeSetupError {
    /// The kubeconfig could not be read or used.
    #[error("cannot load kubeconfig {path}: {source}")]
    Kubeconfig {
        /// Its path.
        path: PathBuf,
        /// Why.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// Neither in-cluster nor default kubeconfig configuration was found.
    #[error("cannot infer Kubernetes configuration (no --kubeconfig, not in a cluster): {0}")]
    Infer(#[from] kube::config::InferConfigError),
    /// The QPS settings are invalid.
    #[error("invalid --kube-api-qps/--kube-api-burst: {0}")]
    Limit(String),
    /// Building the HTTP client failed.
    #[error("cannot build the Kubernetes client: {0}")]
    Client(#[from] kube::Error),
}

/// Selects rustls's crypto provider for the process (ring): kube without its default features
/// selects none, and rustls will not guess. Harmless when already installed.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The two clients of a controller, on one configuration.
#[derive(Clone)]
pub struct Clients {
    /// For the controller's own requests: held to `--kube-api-qps`/`--kube-api-burst`.
    pub limited: Client,
    /// For leader election only: no client-side limit, so a lease renewal never waits behind a
    /// busy controller's requests (and loses the lease for it).
    pub elector: Client,
}

/// Builds both clients.
pub async fn clients(args: &KubeArgs) -> Result<Clients, KubeSetupError> {
    install_crypto_provider();
    let config = match &args.kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path).map_err(|source| KubeSetupError::Kubeconfig {
                path: path.clone(),
                source,
            })?;
            Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .map_err(|source| KubeSetupError::Kubeconfig {
                    path: path.clone(),
                    source,
                })?
        }
        None => Config::infer().await?,
    };
    let limit = Limit::new(args.qps, f64::from(args.burst.max(1))).map_err(KubeSetupError::Limit)?;
    Ok(Clients {
        limited: ClientBuilder::try_from(config.clone())?
            .with_layer(&QpsLayer::new(limit))
            .build(),
        elector: ClientBuilder::try_from(config)?.build(),
    })
}

/// Holds each request until the token bucket allows it.
#[derive(Clone)]
pub struct QpsLayer {
    bucket: Arc<Mutex<TokenBucket>>,
}

impl QpsLayer {
    /// A limiter at `limit`.
    pub fn new(limit: Limit) -> Self {
        Self {
            bucket: Arc::new(Mutex::new(TokenBucket::new(limit, Instant::now()))),
        }
    }
}

impl<S> Layer<S> for QpsLayer {
    type Service = QpsService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        QpsService {
            inner,
            bucket: self.bucket.clone(),
            sleep: None,
            has_token: false,
        }
    }
}

/// See [`QpsLayer`]. Waiting happens in `poll_ready`, as tower expects of a limiter.
pub struct QpsService<S> {
    inner: S,
    bucket: Arc<Mutex<TokenBucket>>,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    has_token: bool,
}

impl<S, Req> Service<Req> for QpsService<S>
where
    S: Service<Req>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        while !self.has_token {
            if let Some(sleep) = self.sleep.as_mut() {
                ready!(sleep.as_mut().poll(cx));
                self.sleep = None;
            }
            let taken = self
                .bucket
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .try_acquire(Instant::now());
            match taken {
                Ok(()) => self.has_token = true,
                Err(wait) => self.sleep = Some(Box::pin(tokio::time::sleep(wait))),
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        self.has_token = false;
        self.inner.call(req)
    }
}
