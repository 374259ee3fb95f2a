//! Logging, trace export and the shutdown signal, shared by every binary of the project.
//!
//! - [`init`] installs the logger (`RUST_LOG`, text or JSON) and, when an OTLP endpoint is
//!   configured ([`TraceArgs`], or the standard `OTEL_EXPORTER_OTLP_*` variables), the
//!   OpenTelemetry layer that exports spans to it in batches. It returns the [`Telemetry`]
//!   handle whose [`Telemetry::shutdown`] flushes what is still queued.
//! - [`propagation`]: the W3C trace context carried in gRPC metadata, and span links.
//! - [`shutdown_signal`]: SIGTERM or Ctrl-C.

mod json;
mod otlp;
pub mod propagation;

use std::sync::{Arc, OnceLock};

use tracing::dispatcher::WeakDispatch;
use tracing_subscriber::{EnvFilter, Layer, Registry, fmt, prelude::*};

pub use otlp::TraceArgs;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line, for log collectors; inside a traced span it carries the
    /// span's `trace_id` and `span_id`.
    Json,
}

/// What [`init`] sets up.
#[derive(Debug, Clone, Copy)]
pub struct Settings<'a> {
    /// The binary's name: the default `service.name` of its spans.
    pub service: &'a str,
    /// The binary's version (`service.version`).
    pub version: &'a str,
    /// Log format.
    pub format: LogFormat,
    /// Log filter when `RUST_LOG` is unset (e.g. `info`).
    pub default_filter: &'a str,
}

/// The installed telemetry; [`Telemetry::shutdown`] exports the spans still queued.
#[derive(Debug, Default)]
pub struct Telemetry {
    traces: Option<otlp::Exporting>,
}

impl Telemetry {
    /// Whether spans are exported.
    pub fn exporting(&self) -> bool {
        self.traces.is_some()
    }

    /// Exports the spans still queued (bounded: a collector that does not answer delays the
    /// exit by a few seconds at most, never more) and stops the exporter.
    pub async fn shutdown(self) {
        if let Some(traces) = self.traces {
            traces.shutdown().await;
        }
    }
}

/// Installs the global logger and, when configured, trace export. The log filter comes from
/// `RUST_LOG` when set, else `settings.default_filter`. Calling it twice is harmless (the
/// second call does nothing and exports nothing). Never fails: an unusable trace setting is
/// logged as a warning and the program runs without traces.
pub fn init(settings: Settings<'_>, traces: &TraceArgs) -> Telemetry {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(settings.default_filter));
    let dispatch = Arc::new(OnceLock::<WeakDispatch>::new());
    let (exporting, setup_error) = match otlp::Exporting::start(&settings, traces) {
        Ok(exporting) => (exporting, None),
        Err(err) => (None, Some(err)),
    };
    let log_layer: Box<dyn Layer<Registry> + Send + Sync> = match settings.format {
        LogFormat::Text => fmt::layer()
            .with_writer(std::io::stderr)
            .with_filter(filter)
            .boxed(),
        LogFormat::Json => fmt::layer()
            .json()
            .event_format(json::WithTraceIds::new(dispatch.clone(), exporting.is_some()))
            .with_writer(std::io::stderr)
            .with_filter(filter)
            .boxed(),
    };
    let mut layers = vec![log_layer];
    if let Some(exporting) = &exporting {
        layers.push(exporting.layer());
    }
    if tracing_subscriber::registry().with(layers).try_init().is_err() {
        // Someone installed a logger first (a test): keep theirs, export nothing.
        if let Some(exporting) = exporting {
            exporting.abandon();
        }
        return Telemetry::default();
    }
    // The JSON formatter finds each span's trace context through the installed dispatcher.
    tracing::dispatcher::get_default(|current| {
        let _ = dispatch.set(current.downgrade());
    });
    if let Some(err) = setup_error {
        tracing::warn!("{err}; running without trace export");
    }
    if let Some(exporting) = &exporting {
        exporting.announce();
    }
    propagation::set_enabled(exporting.is_some());
    Telemetry { traces: exporting }
}

/// Installs the global logger only (no trace export). The filter comes from `RUST_LOG` when
/// set, else `default_filter` (e.g. `info`). Calling it twice is harmless.
pub fn init_logging(format: LogFormat, default_filter: &str) {
    let settings = Settings {
        service: "",
        version: "",
        format,
        default_filter,
    };
    init(settings, &TraceArgs::off());
}

/// Completes on SIGTERM (what Kubernetes sends) or Ctrl-C.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(err) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %err, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut sig) => {
                sig.recv().await;
            }
            Err(err) => {
                tracing::error!(error = %err, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => tracing::info!("received Ctrl-C"),
        () = terminate => tracing::info!("received SIGTERM"),
    }
}
