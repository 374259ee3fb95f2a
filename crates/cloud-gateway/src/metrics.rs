//! The gateway's Prometheus metrics, all prefixed `cloudgateway_`.

use std::sync::atomic::AtomicU64;

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
};
use side_port::MetricsRegistry;

/// Labels of a provider call.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProviderCallLabels {
    /// Provider operation (`lookup_instances`, `ensure_load_balancer`, ...).
    pub operation: &'static str,
    /// `success` or the error's metric label (`throttled`, `instance_not_found`, ...).
    pub outcome: &'static str,
}

/// Labels naming a provider operation.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OperationLabels {
    /// Provider operation.
    pub operation: &'static str,
}

/// Labels of a queue.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabels {
    /// `read` or `write`.
    pub class: &'static str,
    /// Calling controller.
    pub caller: String,
}

/// Labels naming a queue class.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClassLabels {
    /// `read` or `write`.
    pub class: &'static str,
}

/// Labels of a gRPC call.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RpcLabels {
    /// gRPC method name.
    pub method: &'static str,
    /// Calling controller.
    pub caller: String,
    /// gRPC status code name (`Ok`, `NotFound`, ...).
    pub code: String,
}

/// Labels naming a gRPC method.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MethodLabels {
    /// gRPC method name.
    pub method: &'static str,
}

/// Labels of a capability's state.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CapabilityLabels {
    /// `instances`, `load_balancers` or `routes`.
    pub capability: &'static str,
    /// Why it is off, as `GetCapabilities` says it: the provider's reason, `not implemented`, or
    /// empty while it is served.
    pub reason: String,
}

/// Every metric the gateway exports.
pub struct Metrics {
    registry: MetricsRegistry,
    /// Provider calls by operation and outcome.
    pub provider_calls: Family<ProviderCallLabels, Counter>,
    /// Provider call latency.
    pub provider_latency: Family<OperationLabels, Histogram>,
    /// "Throttled" answers from the provider.
    pub provider_throttled: Counter,
    /// Time calls waited for their turn at the rate limiter.
    pub queue_wait: Family<QueueLabels, Histogram>,
    /// Calls waiting for a turn right now, by class and caller.
    pub queue_depth: Family<QueueLabels, Gauge>,
    /// The rate the gateway currently allows itself (after adaptive slowdown), calls/s.
    pub rate_limit: Family<ClassLabels, Gauge<f64, AtomicU64>>,
    /// Instance lookups answered from the cache.
    pub cache_hits: Counter,
    /// Instance lookups the cache could not answer.
    pub cache_misses: Counter,
    /// Instance lookups answered without a provider call of their own (joined another lookup
    /// in flight, or rode in a batch with others).
    pub coalesced_saved: Counter,
    /// Nodes per batched provider lookup.
    pub batch_size: Histogram,
    /// Services per batched provider load-balancer read.
    pub lb_read_batch_size: Histogram,
    /// gRPC calls by method, caller and status code.
    pub rpc_calls: Family<RpcLabels, Counter>,
    /// Calls refused by the authorization policy, by method.
    pub denied: Family<MethodLabels, Counter>,
    /// TLS handshakes refused (no client certificate, an untrusted one, a timeout).
    pub tls_refused: Counter,
    /// Live gateway replicas sharing the provider limits (1 when alone).
    pub replicas: Gauge,
    /// Provider writes recorded instead of made (dry-run), by provider and call.
    pub dry_run_woulds: Family<crate::dry_run::WouldLabels, Counter>,
    /// 1 for a capability the provider serves, 0 for one it does not, with the reason.
    pub capabilities: Family<CapabilityLabels, Gauge>,
}

impl Metrics {
    /// Creates and registers every metric.
    pub fn new() -> Self {
        let registry = MetricsRegistry::with_prefix("cloudgateway");
        let latency_buckets = || {
            Histogram::new([
                0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
            ])
        };
        let metrics = Self {
            provider_calls: Family::default(),
            provider_latency: Family::new_with_constructor(latency_buckets),
            provider_throttled: Counter::default(),
            queue_wait: Family::new_with_constructor(latency_buckets),
            queue_depth: Family::default(),
            rate_limit: Family::default(),
            cache_hits: Counter::default(),
            cache_misses: Counter::default(),
            coalesced_saved: Counter::default(),
            batch_size: Histogram::new([1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0]),
            lb_read_batch_size: Histogram::new([1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0]),
            rpc_calls: Family::default(),
            denied: Family::default(),
            tls_refused: Counter::default(),
            replicas: Gauge::default(),
            dry_run_woulds: Family::default(),
            capabilities: Family::default(),
            registry: MetricsRegistry::default(),
        };
        registry.register(
            "provider_calls",
            "Calls to the cloud provider",
            metrics.provider_calls.clone(),
        );
        registry.register(
            "provider_call_duration_seconds",
            "Latency of calls to the cloud provider",
            metrics.provider_latency.clone(),
        );
        registry.register(
            "provider_throttled",
            "Throttled answers from the cloud provider",
            metrics.provider_throttled.clone(),
        );
        registry.register(
            "queue_wait_seconds",
            "Time a call waited for its turn at the rate limiter",
            metrics.queue_wait.clone(),
        );
        registry.register(
            "queue_depth",
            "Calls waiting for a turn at the rate limiter, by class and caller",
            metrics.queue_depth.clone(),
        );
        registry.register(
            "rate_limit_calls_per_second",
            "Rate the gateway currently allows itself towards the provider",
            metrics.rate_limit.clone(),
        );
        registry.register(
            "instance_cache_hits",
            "Instance lookups answered from the cache",
            metrics.cache_hits.clone(),
        );
        registry.register(
            "instance_cache_misses",
            "Instance lookups the cache could not answer",
            metrics.cache_misses.clone(),
        );
        registry.register(
            "coalesced_lookups_saved",
            "Instance lookups served without a provider call of their own",
            metrics.coalesced_saved.clone(),
        );
        registry.register(
            "instance_batch_size",
            "Nodes per batched instance lookup sent to the provider",
            metrics.batch_size.clone(),
        );
        registry.register(
            "load_balancer_read_batch_size",
            "Services per batched load-balancer read sent to the provider",
            metrics.lb_read_batch_size.clone(),
        );
        registry.register(
            "grpc_calls",
            "gRPC calls by method, caller and code",
            metrics.rpc_calls.clone(),
        );
        registry.register(
            "denied_calls",
            "Calls the authorization policy refused, by method",
            metrics.denied.clone(),
        );
        registry.register(
            "tls_handshakes_refused",
            "TLS handshakes refused on the gRPC port (no client certificate, an untrusted one, a timeout)",
            metrics.tls_refused.clone(),
        );
        metrics.replicas.set(1);
        registry.register(
            "replicas",
            "Live gateway replicas sharing the provider limits; each takes 1/replicas of them",
            metrics.replicas.clone(),
        );
        registry.register(
            "dry_run_woulds",
            "Provider writes recorded instead of made (dry-run), by provider and call",
            metrics.dry_run_woulds.clone(),
        );
        registry.register(
            "capability",
            "1 for a capability the provider serves, 0 for one it does not (reason: why)",
            metrics.capabilities.clone(),
        );
        Self { registry, ..metrics }
    }

    /// The registry every metric is in, for the side port.
    pub fn registry(&self) -> MetricsRegistry {
        self.registry.clone()
    }

    /// The metrics in Prometheus text format.
    pub fn render(&self) -> String {
        self.registry.render()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
