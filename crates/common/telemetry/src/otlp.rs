//! OTLP/gRPC trace export: configured by a flag or the standard `OTEL_*` variables, batched in a
//! bounded queue, and never in the program's way: a collector that is down costs one warning
//! and the spans of the outage, nothing else. An `https://` collector is reached over TLS and
//! trusted through the system's roots (`SSL_CERT_FILE` / `SSL_CERT_DIR` name others, such as
//! a cluster's private CA).

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{
    WithExportConfig as _, WithTonicConfig as _, tonic_types::transport::ClientTlsConfig,
};
use opentelemetry_sdk::{
    Resource,
    error::{OTelSdkError, OTelSdkResult},
    trace::{SdkTracerProvider, SpanData, SpanExporter},
};
use tracing_subscriber::{EnvFilter, Layer, Registry};

use crate::Settings;

/// The spans exported by default: this project's (info and above), and the AWS SDK's operation
/// spans (`EC2.DescribeInstances`, …), which are at debug level. kube-runtime's own
/// "reconciling object" span is left out: each controller opens its own root span per
/// reconcile.
pub const DEFAULT_TRACE_FILTER: &str = "info,kube_runtime=off,aws_sdk_ec2=debug,aws_sdk_elasticloadbalancing=debug,aws_sdk_elasticloadbalancingv2=debug";

/// Never traced, whatever the filter says: the exporter's own transport would trace itself.
const NEVER_TRACED: &[&str] = &[
    "h2=off",
    "hyper=off",
    "hyper_util=off",
    "tonic=off",
    "tower=off",
    "opentelemetry=off",
    "opentelemetry_sdk=off",
    "opentelemetry_otlp=off",
];

/// How long [`crate::Telemetry::shutdown`] waits for the last export.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

/// Trace export flags, shared by every binary.
#[derive(Debug, Clone, clap::Args)]
pub struct TraceArgs {
    /// OTLP/gRPC collector to export traces to (e.g. `http://otel-collector:4317`). Unset:
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, then `OTEL_EXPORTER_OTLP_ENDPOINT`; none of them
    /// set: no traces. The standard `OTEL_*` variables apply (`OTEL_SERVICE_NAME`,
    /// `OTEL_TRACES_SAMPLER`, `OTEL_TRACES_SAMPLER_ARG`, `OTEL_EXPORTER_OTLP_HEADERS`,
    /// `OTEL_EXPORTER_OTLP_TIMEOUT`, `OTEL_BSP_*`, `OTEL_RESOURCE_ATTRIBUTES`); a collector
    /// that is down never blocks or fails the program.
    #[arg(long = "otlp-endpoint", value_name = "URL")]
    pub otlp_endpoint: Option<String>,
    /// Which spans are exported, in `RUST_LOG` syntax (independent of the log filter).
    #[arg(
        long = "otlp-trace-filter",
        env = "CCM_OTLP_TRACE_FILTER",
        value_name = "FILTER",
        default_value = DEFAULT_TRACE_FILTER
    )]
    pub trace_filter: String,
}

impl Default for TraceArgs {
    fn default() -> Self {
        Self::off()
    }
}

impl TraceArgs {
    /// No export (unless the environment configures it).
    pub fn off() -> Self {
        Self {
            otlp_endpoint: None,
            trace_filter: DEFAULT_TRACE_FILTER.into(),
        }
    }

    /// Export to `endpoint`.
    pub fn to(endpoint: impl Into<String>) -> Self {
        Self {
            otlp_endpoint: Some(endpoint.into()),
            ..Self::off()
        }
    }

    /// The collector's endpoint: the flag, else the standard variables; `None` when export is
    /// off (nothing set, `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none`).
    pub fn endpoint(&self) -> Option<String> {
        self.endpoint_from(|name| std::env::var(name).ok())
    }

    fn endpoint_from(&self, env: impl Fn(&str) -> Option<String>) -> Option<String> {
        let set = |v: Option<String>| v.map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
        if set(env("OTEL_SDK_DISABLED")).is_some_and(|v| v.eq_ignore_ascii_case("true"))
            || set(env("OTEL_TRACES_EXPORTER")).is_some_and(|v| v.eq_ignore_ascii_case("none"))
        {
            return None;
        }
        let endpoint = set(self.otlp_endpoint.clone())
            .or_else(|| set(env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")))
            .or_else(|| set(env("OTEL_EXPORTER_OTLP_ENDPOINT")))?;
        // gRPC needs a scheme; `collector:4317` means plain text, as most in-cluster collectors are.
        Some(if endpoint.contains("://") {
            endpoint
        } else {
            format!("http://{endpoint}")
        })
    }
}

/// Trace export running: the provider, its layer, the exporter's health.
#[derive(Debug)]
pub(crate) struct Exporting {
    provider: SdkTracerProvider,
    service: String,
    endpoint: String,
    filter: String,
}

impl Exporting {
    /// Starts export when an endpoint is configured; `Ok(None)` when none is.
    pub(crate) fn start(settings: &Settings<'_>, args: &TraceArgs) -> Result<Option<Self>, String> {
        let Some(endpoint) = args.endpoint() else {
            return Ok(None);
        };
        let mut builder = opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(endpoint.clone());
        if endpoint.starts_with("https://") {
            builder = builder.with_tls_config(ClientTlsConfig::new().with_native_roots());
        }
        let otlp = builder
            .build()
            .map_err(|e| format!("cannot export traces to {endpoint}: {e}"))?;
        let exporter = Exporter {
            inner: Arc::new(otlp),
            runtime: tokio::runtime::Handle::try_current().ok(),
            endpoint: endpoint.clone(),
            failing: Arc::new(AtomicBool::new(false)),
        };
        let service = service_name(settings.service);
        let resource = Resource::builder()
            .with_service_name(service.clone())
            .with_attribute(opentelemetry::KeyValue::new(
                "service.version",
                settings.version.to_owned(),
            ))
            .build();
        // The sampler comes from OTEL_TRACES_SAMPLER / _ARG (default: parent-based, always on);
        // the queue (2048 spans) and batch settings from OTEL_BSP_*. A full queue drops spans.
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource)
            .build();
        let mut filter = args.trace_filter.clone();
        for directive in NEVER_TRACED {
            filter.push(',');
            filter.push_str(directive);
        }
        Ok(Some(Self {
            provider,
            service,
            endpoint,
            filter,
        }))
    }

    /// The tracing layer that turns spans into OpenTelemetry spans, with its own filter.
    pub(crate) fn layer(&self) -> Box<dyn Layer<Registry> + Send + Sync> {
        let filter = EnvFilter::try_new(&self.filter).unwrap_or_else(|err| {
            eprintln!(
                "invalid --otlp-trace-filter {:?} ({err}); using {DEFAULT_TRACE_FILTER:?}",
                self.filter
            );
            EnvFilter::new(DEFAULT_TRACE_FILTER)
        });
        tracing_opentelemetry::layer::<Registry>()
            .with_tracer(self.provider.tracer("ccm"))
            .with_filter(filter)
            .boxed()
    }

    pub(crate) fn announce(&self) {
        tracing::info!(endpoint = %self.endpoint, service = %self.service, "exporting traces over OTLP/gRPC");
    }

    /// Stops the exporter without waiting (the logger could not be installed).
    pub(crate) fn abandon(self) {
        std::thread::spawn(move || self.provider.shutdown_with_timeout(Duration::ZERO));
    }

    pub(crate) async fn shutdown(self) {
        let provider = self.provider;
        // Blocking: the batch thread exports what is queued, on this runtime.
        let done = tokio::task::spawn_blocking(move || provider.shutdown_with_timeout(SHUTDOWN_TIMEOUT));
        let _ = tokio::time::timeout(SHUTDOWN_TIMEOUT + Duration::from_secs(1), done).await;
    }
}

/// `OTEL_SERVICE_NAME`, else `service.name` of `OTEL_RESOURCE_ATTRIBUTES`, else the binary's name.
fn service_name(binary: &str) -> String {
    if let Some(name) = std::env::var("OTEL_SERVICE_NAME")
        .ok()
        .filter(|v| !v.trim().is_empty())
    {
        return name.trim().to_owned();
    }
    let from_attributes = std::env::var("OTEL_RESOURCE_ATTRIBUTES")
        .unwrap_or_default()
        .split(',')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| k.trim() == "service.name")
        .map(|(_, v)| v.trim().to_owned())
        .filter(|v| !v.is_empty());
    from_attributes.unwrap_or_else(|| binary.to_owned())
}

/// The OTLP exporter, run on the program's Tokio runtime (tonic needs it; the SDK's batch
/// thread has none), logging one warning when the collector stops answering and one line when
/// it answers again.
#[derive(Debug)]
struct Exporter {
    inner: Arc<opentelemetry_otlp::SpanExporter>,
    runtime: Option<tokio::runtime::Handle>,
    endpoint: String,
    failing: Arc<AtomicBool>,
}

impl Exporter {
    fn note(&self, result: &OTelSdkResult) {
        match result {
            Ok(()) => {
                if self.failing.swap(false, Ordering::Relaxed) {
                    tracing::info!(endpoint = %self.endpoint, "the trace collector answers again; exporting traces");
                }
            }
            Err(err) => {
                if !self.failing.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        endpoint = %self.endpoint,
                        error = %err,
                        "cannot export traces to the OpenTelemetry collector; dropping spans until it answers (said once per outage)"
                    );
                }
            }
        }
    }
}

impl SpanExporter for Exporter {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let inner = self.inner.clone();
        let result = match &self.runtime {
            Some(runtime) => runtime
                .spawn(async move { inner.export(batch).await })
                .await
                .unwrap_or_else(|e| Err(OTelSdkError::InternalFailure(format!("export task: {e}")))),
            None => inner.export(batch).await,
        };
        self.note(&result);
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        // Called once, before any export: nothing else holds the exporter yet.
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.set_resource(resource);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn the_flag_wins_then_the_traces_variable_then_the_general_one() {
        let all = [
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://traces:4317"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://all:4317"),
        ];
        let flag = TraceArgs::to("http://flag:4317");
        assert_eq!(flag.endpoint_from(env(&all)).as_deref(), Some("http://flag:4317"));
        let none = TraceArgs::off();
        assert_eq!(
            none.endpoint_from(env(&all)).as_deref(),
            Some("http://traces:4317")
        );
        assert_eq!(
            none.endpoint_from(env(&all[1..])).as_deref(),
            Some("http://all:4317")
        );
        assert_eq!(none.endpoint_from(env(&[])), None, "off when nothing is set");
        assert_eq!(
            none.endpoint_from(env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")])),
            None,
            "empty is unset"
        );
    }

    #[test]
    fn export_can_be_switched_off_the_standard_ways_and_a_bare_address_is_plain_grpc() {
        let flag = TraceArgs::to("collector:4317");
        assert_eq!(
            flag.endpoint_from(env(&[])).as_deref(),
            Some("http://collector:4317")
        );
        assert_eq!(flag.endpoint_from(env(&[("OTEL_SDK_DISABLED", "true")])), None);
        assert_eq!(flag.endpoint_from(env(&[("OTEL_TRACES_EXPORTER", "none")])), None);
        assert!(
            flag.endpoint_from(env(&[("OTEL_TRACES_EXPORTER", "otlp")]))
                .is_some()
        );
    }

    /// Counts the warnings logged.
    #[derive(Clone, Default)]
    struct Warnings(Arc<std::sync::atomic::AtomicUsize>);

    impl<S: tracing::Subscriber> Layer<S> for Warnings {
        fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
            if *event.metadata().level() == tracing::Level::WARN {
                self.0.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    #[tokio::test]
    async fn a_collector_that_is_down_is_one_warning_however_many_exports_fail() {
        use opentelemetry_otlp::WithTonicConfig as _;
        use tracing_subscriber::prelude::*;
        let closed = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap();
        let warnings = Warnings::default();
        let _logger = tracing_subscriber::registry()
            .with(warnings.clone())
            .set_default();
        let otlp = opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(format!("http://{closed}"))
            .with_retry_policy(opentelemetry_otlp::RetryPolicy::disabled())
            .build()
            .unwrap();
        let exporter = Exporter {
            inner: Arc::new(otlp),
            runtime: Some(tokio::runtime::Handle::current()),
            endpoint: closed.to_string(),
            failing: Arc::new(AtomicBool::new(false)),
        };
        for _ in 0..3 {
            assert!(exporter.export(Vec::new()).await.is_err());
        }
        assert_eq!(warnings.0.load(Ordering::Relaxed), 1);
    }
}
