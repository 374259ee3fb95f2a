//! One trace per reconcile. Each controller opens a root span per reconcile or periodic pass
//! with [`reconcile_span!`](crate::reconcile_span): named `reconcile`, `otel.name` saying what
//! (`reconcile node`, `sync service`, …), the fields `controller`, [`OUTCOME_FIELDS`] and its
//! own (the object: `node`, `service`, `shard`…). The gateway calls it makes are its children,
//! and the gateway's spans join them through the W3C trace context the gateway client sends.
//! Declared in one place, so no controller can forget the fields [`record_outcome`] fills
//! (tracing drops a value recorded into a field the span did not declare).
//!
//! ```
//! let span = controller_kit::reconcile_span!("reconcile node", "cloud-node-controller", node = "worker-1");
//! let result: Result<(), std::io::Error> = Ok(());
//! controller_kit::spans::record_outcome(&span, &result, |_| "io");
//! ```

use std::fmt::Display;

use tracing::Span;

/// The fields [`record_outcome`] fills, declared `Empty` by [`reconcile_span!`](crate::reconcile_span).
pub const OUTCOME_FIELDS: [&str; 3] = ["outcome", "otel.status_code", "otel.status_description"];

/// The root span of one reconcile (or periodic pass): its own trace (`parent: None`), named
/// `reconcile`, with `otel.name` = `$what`, `controller` = `$controller`, the outcome fields
/// ([`OUTCOME_FIELDS`], filled by [`record_outcome`]) and any further fields, written as for
/// `tracing::info_span!` (`node = %name`, `updated = tracing::field::Empty`, …).
#[macro_export]
macro_rules! reconcile_span {
    ($what:expr, $controller:expr $(, $($fields:tt)*)?) => {
        ::tracing::info_span!(
            parent: None,
            "reconcile",
            otel.name = $what,
            controller = $controller,
            outcome = ::tracing::field::Empty,
            otel.status_code = ::tracing::field::Empty,
            otel.status_description = ::tracing::field::Empty
            $(, $($fields)*)?
        )
    };
}

/// Records how a reconcile ended on its span: `outcome` is `ok` or the error's metric label
/// (`label`), and a failure marks the span as an error with the message.
pub fn record_outcome<T, E: Display>(
    span: &Span,
    result: &Result<T, E>,
    label: impl FnOnce(&E) -> &'static str,
) {
    match result {
        Ok(_) => {
            span.record("outcome", "ok");
        }
        Err(err) => failed(span, label(err), err),
    }
}

/// Records a failure on a reconcile span: `outcome` is `label`, the span an error saying `err`.
pub fn failed(span: &Span, label: &'static str, err: &dyn Display) {
    span.record("outcome", label);
    span.record("otel.status_code", "ERROR");
    span.record("otel.status_description", err.to_string());
}
