//! The W3C trace context (`traceparent`, `tracestate`) across gRPC calls, and links between
//! spans. Every function does nothing when trace export is off, so callers need not check.

use std::sync::atomic::{AtomicBool, Ordering};

use http::{HeaderMap, HeaderName, HeaderValue};
use opentelemetry::{
    propagation::{Extractor, Injector, TextMapPropagator as _},
    trace::TraceContextExt as _,
};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

static ENABLED: AtomicBool = AtomicBool::new(false);

pub(crate) fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

/// Whether spans are exported (and trace contexts exist).
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Writes the current span's trace context into `headers` (gRPC metadata: tonic's
/// `metadata_mut().as_mut()`), so that the server's spans join the caller's trace.
pub fn inject_current(headers: &mut HeaderMap) {
    if enabled() {
        inject(&Span::current(), headers);
    }
}

/// Writes `span`'s trace context into `headers`.
pub fn inject(span: &Span, headers: &mut HeaderMap) {
    if !enabled() {
        return;
    }
    let cx = span.context();
    if cx.span().span_context().is_valid() {
        TraceContextPropagator::new().inject_context(&cx, &mut HeaderInjector(headers));
    }
}

/// Makes `span` the child of the trace context a caller sent in `headers`, if it sent one.
/// Call it before `span` is first entered.
pub fn set_remote_parent(span: &Span, headers: &HeaderMap) {
    if !enabled() {
        return;
    }
    let cx = TraceContextPropagator::new().extract(&HeaderExtractor(headers));
    if cx.span().span_context().is_valid() {
        let _ = span.set_parent(cx);
    }
}

/// Links `span` to `other` (e.g. a batched call to each request it carries besides its
/// parent's).
pub fn link(span: &Span, other: &Span) {
    if !enabled() {
        return;
    }
    let target = other.context().span().span_context().clone();
    span.add_link(target);
}

/// The trace id of `span` (32 hex digits), when it is traced.
pub fn trace_id(span: &Span) -> Option<String> {
    if !enabled() {
        return None;
    }
    let cx = span.context();
    let otel = cx.span();
    let span_context = otel.span_context();
    span_context
        .is_valid()
        .then(|| span_context.trace_id().to_string())
}

struct HeaderInjector<'a>(&'a mut HeaderMap);

impl Injector for HeaderInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(key.as_bytes()),
            HeaderValue::from_str(&value),
        ) {
            self.0.insert(name, value);
        }
    }
}

struct HeaderExtractor<'a>(&'a HeaderMap);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(HeaderName::as_str).collect()
    }
}
