//! JSON log lines that carry the current span's `trace_id` and `span_id`, so that logs and
//! traces join.

use std::{
    fmt,
    sync::{Arc, OnceLock},
};

use opentelemetry::trace::TraceContextExt as _;
use tracing::{Event, Subscriber, dispatcher::WeakDispatch};
use tracing_subscriber::{
    fmt::{
        FmtContext, FormatEvent, FormatFields,
        format::{Format, Json, Writer},
    },
    registry::LookupSpan,
};

/// tracing-subscriber's JSON line, with `"trace_id"` and `"span_id"` first when the event
/// happens inside a span the trace exporter knows.
pub(crate) struct WithTraceIds {
    inner: Format<Json>,
    dispatch: Arc<OnceLock<WeakDispatch>>,
    tracing: bool,
}

impl WithTraceIds {
    /// `dispatch` is set once the subscriber is installed; `tracing` says whether spans have
    /// trace contexts at all (trace export on).
    pub(crate) fn new(dispatch: Arc<OnceLock<WeakDispatch>>, tracing: bool) -> Self {
        Self {
            inner: tracing_subscriber::fmt::format()
                .json()
                .flatten_event(true)
                .with_current_span(false),
            dispatch,
            tracing,
        }
    }

    fn ids<S, N>(&self, ctx: &FmtContext<'_, S, N>) -> Option<(String, String)>
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
        N: for<'a> FormatFields<'a> + 'static,
    {
        if !self.tracing {
            return None;
        }
        let span = ctx.lookup_current()?;
        let dispatch = self.dispatch.get()?.upgrade()?;
        let cx = tracing_opentelemetry::get_otel_context(&span.id(), &dispatch)?;
        let otel = cx.span();
        let span_context = otel.span_context();
        span_context.is_valid().then(|| {
            (
                span_context.trace_id().to_string(),
                span_context.span_id().to_string(),
            )
        })
    }
}

impl<S, N> FormatEvent<S, N> for WithTraceIds
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let Some((trace_id, span_id)) = self.ids(ctx) else {
            return self.inner.format_event(ctx, writer, event);
        };
        let mut line = String::new();
        self.inner.format_event(ctx, Writer::new(&mut line), event)?;
        match line.strip_prefix('{') {
            Some(rest) => write!(
                writer,
                "{{\"trace_id\":\"{trace_id}\",\"span_id\":\"{span_id}\",{rest}"
            ),
            None => writer.write_str(&line),
        }
    }
}
