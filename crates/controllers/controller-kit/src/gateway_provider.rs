//! Which provider the gateway serves, as its answers say ([`gateway_api::PROVIDER_HEADER`]):
//! a gateway swapped for another vendor at the same address is noticed on the first answer
//! after the client reconnects, not at the next periodic check.

use std::{
    future::Future,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
};

use gateway_api::PROVIDER_HEADER;
use tokio::sync::watch;

/// The provider named by the gateway's latest answer; `None` before the first.
#[derive(Clone)]
pub struct ProviderWatch {
    tx: Arc<watch::Sender<Option<String>>>,
}

impl Default for ProviderWatch {
    fn default() -> Self {
        Self {
            tx: Arc::new(watch::Sender::new(None)),
        }
    }
}

impl ProviderWatch {
    /// The provider of the latest answer.
    pub fn current(&self) -> Option<String> {
        self.tx.borrow().clone()
    }

    /// A receiver that wakes when the provider changes.
    pub fn subscribe(&self) -> watch::Receiver<Option<String>> {
        self.tx.subscribe()
    }

    /// Records the provider an answer named; wakes subscribers only on a change.
    pub fn observe(&self, provider: &str) {
        self.tx.send_if_modified(|current| {
            if current.as_deref() == Some(provider) {
                return false;
            }
            match current.replace(provider.to_owned()) {
                Some(before) => {
                    tracing::info!(before, now = provider, "the gateway now serves another provider")
                }
                None => tracing::debug!(provider, "the gateway serves this provider"),
            }
            true
        });
    }
}

/// A tower layer over the gRPC channel that reads the provider header of every answer, errors
/// included (a gRPC error is an HTTP response too).
#[derive(Clone)]
pub struct ObserveProvider<S> {
    inner: S,
    watch: ProviderWatch,
}

impl<S> ObserveProvider<S> {
    /// Observes `inner`'s answers into `watch`.
    pub fn new(inner: S, watch: ProviderWatch) -> Self {
        Self { inner, watch }
    }
}

impl<S, B, RB> tower::Service<http::Request<B>> for ObserveProvider<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<RB>>,
    S::Future: Send + 'static,
    S::Error: 'static,
    RB: 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let answer = self.inner.call(request);
        let watch = self.watch.clone();
        Box::pin(async move {
            let response = answer.await?;
            if let Some(provider) = response
                .headers()
                .get(PROVIDER_HEADER)
                .and_then(|v| v.to_str().ok())
            {
                watch.observe(provider);
            }
            Ok(response)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscribers_wake_only_when_the_provider_changes() {
        let watch = ProviderWatch::default();
        let mut rx = watch.subscribe();
        assert_eq!(watch.current(), None);
        watch.observe("simulator");
        assert!(rx.has_changed().unwrap());
        rx.mark_unchanged();
        watch.observe("simulator");
        assert!(!rx.has_changed().unwrap(), "the same provider again is no change");
        watch.observe("aws");
        assert!(rx.has_changed().unwrap());
        assert_eq!(watch.current().as_deref(), Some("aws"));
    }
}
