//! The Kubernetes clients: kubeconfig or in-cluster config, and the client-side rate limit.
//!
//! Current Kubernetes practice (SIG API Machinery; controller-runtime turned its limiter off by
//! default) is to let the server protect itself with API Priority and Fairness, on by default
//! since v1.20. So by default the controller starts with client-go's limit (20/s, burst 30) and
//! drops it as soon as a response shows the server classifies requests with APF (the
//! `X-Kubernetes-PF-FlowSchema-UID` header, as Flux detects it). `--kube-api-qps N` always holds
//! to N; `--kube-api-qps -1` never limits. Leader election has a client of its own, never
//! limited, so a renewal never waits behind the controller's requests.

use std::{
    future::Future,
    path::PathBuf,
    pin::Pin,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
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

use crate::dry_run::{DryRun, GuardLayer};

/// Flags for the Kubernetes API connection.
#[derive(Debug, Clone, clap::Args)]
pub struct KubeArgs {
    /// Path to a kubeconfig; in-cluster configuration when unset.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Client-side limit of queries per second to the API server. Unset: 20 until the server
    /// shows it runs API Priority and Fairness, then none. A negative value: no limit.
    #[arg(long = "kube-api-qps", allow_negative_numbers = true)]
    pub qps: Option<f64>,
    /// Burst of queries to the API server, with the client-side limit.
    #[arg(long = "kube-api-burst", default_value_t = 30)]
    pub burst: u32,
}

/// client-go's default QPS, used until the server shows API Priority and Fairness.
pub const DEFAULT_QPS: f64 = 20.0;

/// How the client-side limit applies.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RateLimit {
    /// `--kube-api-qps N`: always this limit.
    Fixed(Limit),
    /// No `--kube-api-qps`: this limit until a response carries API Priority and Fairness
    /// headers, then none.
    UntilPriorityAndFairness(Limit),
    /// `--kube-api-qps -1`: none.
    Off,
}

impl KubeArgs {
    /// The client-side limit these flags ask for.
    ///
    /// # Errors
    /// A QPS or burst the token bucket cannot use (zero, not finite).
    pub fn rate_limit(&self) -> Result<RateLimit, KubeSetupError> {
        let burst = f64::from(self.burst.max(1));
        let limit = |qps| Limit::new(qps, burst).map_err(KubeSetupError::Limit);
        Ok(match self.qps {
            None => RateLimit::UntilPriorityAndFairness(limit(DEFAULT_QPS)?),
            Some(qps) if qps < 0.0 => RateLimit::Off,
            Some(qps) => RateLimit::Fixed(limit(qps)?),
        })
    }
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
    clients_for(args, &DryRun::off()).await
}

/// Builds both clients; in dry-run both refuse every request that writes, but for the
/// dry-run Leases ([`crate::dry_run::GuardLayer`]).
pub async fn clients_for(args: &KubeArgs, dry_run: &DryRun) -> Result<Clients, KubeSetupError> {
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
    let guard = GuardLayer::new(dry_run.clone());
    let limited = match args.rate_limit()? {
        RateLimit::Off => ClientBuilder::try_from(config.clone())?
            .with_layer(&guard)
            .build(),
        limit => ClientBuilder::try_from(config.clone())?
            .with_layer(&guard)
            .with_layer(&QpsLayer::new(limit))
            .build(),
    };
    Ok(Clients {
        limited,
        elector: ClientBuilder::try_from(config)?.with_layer(&guard).build(),
    })
}

/// The response header by which a server shows it runs API Priority and Fairness.
pub const HEADER_PF_FLOW_SCHEMA_UID: &str = "x-kubernetes-pf-flowschema-uid";

/// Holds each request until the token bucket allows it (see [`RateLimit`]).
#[derive(Clone)]
pub struct QpsLayer {
    bucket: Arc<Mutex<TokenBucket>>,
    /// Whether the limit lifts once the server shows API Priority and Fairness.
    until_apf: bool,
    /// Set by the first response carrying the APF headers.
    apf_seen: Arc<AtomicBool>,
}

impl QpsLayer {
    /// A limiter as `limit` says; [`RateLimit::Off`] builds one that never waits.
    pub fn new(limit: RateLimit) -> Self {
        let (limit, until_apf, off) = match limit {
            RateLimit::Fixed(limit) => (limit, false, false),
            RateLimit::UntilPriorityAndFairness(limit) => (limit, true, false),
            RateLimit::Off => (
                Limit {
                    rate: 1.0,
                    burst: 1.0,
                },
                false,
                true,
            ),
        };
        Self {
            bucket: Arc::new(Mutex::new(TokenBucket::new(limit, Instant::now()))),
            until_apf,
            apf_seen: Arc::new(AtomicBool::new(off)),
        }
    }

    /// Whether requests still wait for the bucket.
    pub fn limiting(&self) -> bool {
        !self.apf_seen.load(Ordering::Relaxed)
    }
}

impl<S> Layer<S> for QpsLayer {
    type Service = QpsService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        QpsService {
            inner,
            layer: self.clone(),
            sleep: None,
            has_token: false,
        }
    }
}

/// See [`QpsLayer`]. Waiting happens in `poll_ready`, as tower expects of a limiter.
pub struct QpsService<S> {
    inner: S,
    layer: QpsLayer,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    has_token: bool,
}

impl<S, Req, B> Service<Req> for QpsService<S>
where
    S: Service<Req, Response = http::Response<B>>,
    S::Future: Send + 'static,
    B: 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        while !self.has_token && self.layer.limiting() {
            if let Some(sleep) = self.sleep.as_mut() {
                ready!(sleep.as_mut().poll(cx));
                self.sleep = None;
            }
            let taken = self
                .layer
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
        let response = self.inner.call(req);
        if !(self.layer.until_apf && self.layer.limiting()) {
            return Box::pin(response);
        }
        let apf_seen = self.layer.apf_seen.clone();
        Box::pin(async move {
            let response = response.await?;
            if response.headers().contains_key(HEADER_PF_FLOW_SCHEMA_UID)
                && !apf_seen.swap(true, Ordering::Relaxed)
            {
                tracing::info!(
                    "the API server runs API Priority and Fairness; no client-side rate limit from now on (set --kube-api-qps to keep one)"
                );
            }
            Ok(response)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(qps: Option<f64>) -> KubeArgs {
        KubeArgs {
            kubeconfig: None,
            qps,
            burst: 30,
        }
    }

    #[test]
    fn the_limit_is_auto_unless_set_and_negative_is_off() {
        let limit = |rate| Limit { rate, burst: 30.0 };
        assert_eq!(
            args(None).rate_limit().unwrap(),
            RateLimit::UntilPriorityAndFairness(limit(20.0))
        );
        assert_eq!(
            args(Some(5.0)).rate_limit().unwrap(),
            RateLimit::Fixed(limit(5.0))
        );
        assert_eq!(args(Some(-1.0)).rate_limit().unwrap(), RateLimit::Off);
        assert!(args(Some(0.0)).rate_limit().is_err());
    }

    fn response(apf: bool) -> http::Response<()> {
        let mut response = http::Response::new(());
        if apf {
            response
                .headers_mut()
                .insert(HEADER_PF_FLOW_SCHEMA_UID, http::HeaderValue::from_static("uid"));
        }
        response
    }

    async fn call_once(layer: &QpsLayer, apf: bool) {
        let service =
            tower::service_fn(move |_: ()| async move { Ok::<_, std::convert::Infallible>(response(apf)) });
        let mut service = layer.layer(service);
        std::future::poll_fn(|cx| service.poll_ready(cx)).await.unwrap();
        service.call(()).await.unwrap();
    }

    #[tokio::test]
    async fn the_default_limit_lifts_once_the_server_shows_priority_and_fairness() {
        let limit = Limit {
            rate: 20.0,
            burst: 30.0,
        };
        let auto = QpsLayer::new(RateLimit::UntilPriorityAndFairness(limit));
        call_once(&auto, false).await;
        assert!(auto.limiting(), "no APF headers: keep the limit");
        call_once(&auto, true).await;
        assert!(!auto.limiting(), "APF headers: the server protects itself");

        let fixed = QpsLayer::new(RateLimit::Fixed(limit));
        call_once(&fixed, true).await;
        assert!(fixed.limiting(), "an explicit --kube-api-qps always holds");
        assert!(!QpsLayer::new(RateLimit::Off).limiting());
    }
}
