//! One span per `cloudgateway.v1` call, the child of the caller's span when the request carries
//! a W3C trace context (`traceparent` metadata). Everything the gateway does for the call (the
//! wait for a turn, cache and batch, the provider call) nests under it. grpc.health.v1 checks
//! are not traced.

use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll},
};

use tracing::{Instrument as _, Span, field::Empty};

/// The gRPC package of the contract; only its calls are traced.
const PACKAGE: &str = "cloudgateway.v1.";

/// Wraps the gRPC services: a span per call.
#[derive(Debug, Clone, Copy, Default)]
pub struct TraceCallsLayer;

impl<S> tower::Layer<S> for TraceCallsLayer {
    type Service = TraceCalls<S>;

    fn layer(&self, inner: S) -> Self::Service {
        TraceCalls { inner }
    }
}

/// See [`TraceCallsLayer`].
#[derive(Debug, Clone)]
pub struct TraceCalls<S> {
    inner: S,
}

impl<S, B, R> tower::Service<http::Request<B>> for TraceCalls<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
    S::Error: 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let Some(span) = call_span(request.uri().path(), request.headers()) else {
            return Box::pin(self.inner.call(request));
        };
        let future = span.in_scope(|| self.inner.call(request));
        Box::pin(
            async move {
                let response = future.await;
                // An answer without a body (a refusal, most errors) says its status in the
                // headers; others are recorded by the handler (`record_outcome`).
                if let Ok(response) = &response
                    && let Some(code) = response
                        .headers()
                        .get("grpc-status")
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.parse::<i32>().ok())
                {
                    record_code(&Span::current(), tonic::Code::from_i32(code));
                }
                response
            }
            .instrument(span),
        )
    }
}

/// The span of a call to `path` (`/cloudgateway.v1.Instances/BatchLookupInstances`), with the
/// caller's trace context from `headers` as its parent; `None` for calls not traced.
fn call_span(path: &str, headers: &http::HeaderMap) -> Option<Span> {
    let full = path.strip_prefix('/')?;
    if !full.starts_with(PACKAGE) {
        return None;
    }
    let (service, method) = full.split_once('/')?;
    let span = tracing::info_span!(
        "gateway call",
        otel.name = full,
        otel.kind = "server",
        otel.status_code = Empty,
        rpc.system = "grpc",
        rpc.service = service,
        rpc.method = method,
        rpc.grpc.status_code = Empty,
        caller = Empty,
    );
    telemetry::propagation::set_remote_parent(&span, headers);
    Some(span)
}

/// Records who called and how the call ended on the current call's span.
pub fn record_outcome(caller: &str, code: tonic::Code) {
    let span = Span::current();
    span.record("caller", caller);
    record_code(&span, code);
}

fn record_code(span: &Span, code: tonic::Code) {
    span.record("rpc.grpc.status_code", code as i32);
    // The OpenTelemetry conventions for a gRPC server: only these codes are the server's error.
    if matches!(
        code,
        tonic::Code::Unknown
            | tonic::Code::DeadlineExceeded
            | tonic::Code::Unimplemented
            | tonic::Code::Internal
            | tonic::Code::Unavailable
            | tonic::Code::DataLoss
    ) {
        span.record("otel.status_code", "ERROR");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_contract_calls_get_a_span() {
        let headers = http::HeaderMap::new();
        assert!(call_span("/grpc.health.v1.Health/Check", &headers).is_none());
        assert!(call_span("/cloudgateway.v1.Instances/BatchLookupInstances", &headers).is_some());
        assert!(call_span("/cloudgateway.v1.Instances", &headers).is_none());
    }
}
