//! Calls spread over every gateway replica: the gateway's host name is resolved every few
//! seconds (a headless Service answers one address per ready replica) and each call goes to the
//! next address in turn, each over a connection of its own. A name that resolves to one address
//! (a ClusterIP Service, a single replica) behaves as one connection.

use std::{
    collections::BTreeMap,
    future::Future,
    net::SocketAddr,
    pin::Pin,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    task::{Context, Poll},
    time::Duration,
};

use tonic::{body::Body, transport::Channel};
use tower::ServiceExt;

/// How often the gateway's name is resolved again.
const RESOLVE_EVERY: Duration = Duration::from_secs(5);

/// A channel per resolved gateway address, used in turn.
#[derive(Clone)]
pub struct Balanced {
    inner: Arc<Inner>,
}

struct Inner {
    /// The channel by name, used when the name resolves to nothing.
    fallback: Channel,
    channels: Mutex<Vec<Channel>>,
    next: AtomicUsize,
}

impl Balanced {
    /// Calls over `fallback` until `host:port` resolves; then over one channel per address,
    /// each made by `connect` (which keeps the TLS server name of the host).
    pub fn new(
        fallback: Channel,
        host: String,
        port: u16,
        connect: impl Fn(SocketAddr) -> Channel + Send + 'static,
    ) -> Self {
        let resolve = move || {
            let host = host.clone();
            Box::pin(async move {
                tokio::net::lookup_host((host.as_str(), port))
                    .await
                    .map(Iterator::collect)
                    .unwrap_or_default()
            }) as Pin<Box<dyn Future<Output = Vec<SocketAddr>> + Send>>
        };
        Self::over(fallback, resolve, connect)
    }

    /// [`Balanced::new`] with the addresses from `resolve`, asked every few seconds.
    pub fn over(
        fallback: Channel,
        resolve: impl Fn() -> Pin<Box<dyn Future<Output = Vec<SocketAddr>> + Send>> + Send + 'static,
        connect: impl Fn(SocketAddr) -> Channel + Send + 'static,
    ) -> Self {
        let inner = Arc::new(Inner {
            fallback,
            channels: Mutex::new(Vec::new()),
            next: AtomicUsize::new(0),
        });
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let weak = Arc::downgrade(&inner);
            runtime.spawn(async move {
                let mut by_address: BTreeMap<SocketAddr, Channel> = BTreeMap::new();
                loop {
                    let resolved = resolve().await;
                    let Some(inner) = weak.upgrade() else { return };
                    let changed = resolved.len() != by_address.len()
                        || resolved.iter().any(|a| !by_address.contains_key(a));
                    if changed && !resolved.is_empty() {
                        by_address.retain(|a, _| resolved.contains(a));
                        for address in resolved {
                            by_address.entry(address).or_insert_with(|| connect(address));
                        }
                        tracing::debug!(replicas = by_address.len(), "gateway addresses changed");
                        *inner
                            .channels
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner) =
                            by_address.values().cloned().collect();
                    }
                    drop(inner);
                    tokio::time::sleep(RESOLVE_EVERY).await;
                }
            });
        }
        Self { inner }
    }

    /// How many addresses calls are spread over (0: the name's own channel).
    pub fn replicas(&self) -> usize {
        self.inner
            .channels
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }

    fn pick(&self) -> Channel {
        let channels = self
            .inner
            .channels
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if channels.is_empty() {
            return self.inner.fallback.clone();
        }
        let i = self.inner.next.fetch_add(1, Ordering::Relaxed) % channels.len();
        channels[i].clone()
    }
}

impl tower::Service<http::Request<Body>> for Balanced {
    type Response = http::Response<Body>;
    type Error = tonic::transport::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Each call waits for its own channel's readiness (a channel buffers its requests).
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let channel = self.pick();
        Box::pin(channel.oneshot(request))
    }
}
