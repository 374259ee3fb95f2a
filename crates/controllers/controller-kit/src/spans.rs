//! One trace per reconcile. Each controller opens a root span (`parent: None`) per reconcile or
//! periodic pass, named `reconcile` with `otel.name` saying what (`reconcile node`,
//! `sync service`, …), the fields `controller`, the object (`node`, `service`, `shard`…) and
//! [`OUTCOME_FIELDS`]; the gateway calls it makes are its children, and the gateway's spans join
//! them through the W3C trace context the gateway client sends.
//!
//! ```
//! # use tracing::field::Empty;
//! let span = tracing::info_span!(parent: None, "reconcile", otel.name = "reconcile node",
//!     controller = "cloud-node-controller", node = "worker-1",
//!     outcome = Empty, otel.status_code = Empty, otel.status_description = Empty);
//! let result: Result<(), std::io::Error> = Ok(());
//! controller_kit::spans::record_outcome(&span, &result, |_| "io");
//! ```

use std::fmt::Display;

use tracing::Span;

/// The fields [`record_outcome`] fills; declare them `Empty` in the reconcile span.
pub const OUTCOME_FIELDS: [&str; 3] = ["outcome", "otel.status_code", "otel.status_description"];

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
