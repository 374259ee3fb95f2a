//! The service controller's metrics: upstream's four (`service_controller_*`), the shards this
//! replica owns and their handovers, and reconcile counts.

use controller_kit::{metrics::ReconcileMetrics, shards::Shards};
use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{
        counter::Counter,
        family::Family,
        gauge::Gauge,
        histogram::{Histogram, exponential_buckets},
    },
};
use side_port::MetricsRegistry;

/// A Service and the provider that holds its load balancer.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FormerProviderLabels {
    /// Service namespace.
    pub namespace: String,
    /// Service name.
    pub name: String,
    /// The provider holding its load balancer.
    pub provider: String,
}

/// A provider (the same labels as `gateway_provider_info`).
pub use controller_kit::runner::ProviderLabels;

/// Every metric of the service controller; cheap to clone.
#[derive(Clone)]
pub struct Metrics {
    /// Backend updates after node-set changes (upstream counts only these, despite its help).
    pub loadbalancer_sync: Counter,
    /// Backend updates after node-set changes that failed.
    pub nodesync_error: Counter,
    /// Seconds a node-set sync took, from the change to the last backend update it caused.
    pub nodesync_latency: Histogram,
    /// Seconds one load balancer's backend update took.
    pub update_host_latency: Histogram,
    /// Service syncs, their failures by error, their duration.
    pub reconcile: ReconcileMetrics,
    /// 1 per Service whose load balancer lives at a provider the gateway no longer serves.
    pub at_former_provider: Family<FormerProviderLabels, Gauge>,
    /// Services deleted whose load balancer was left at a provider the gateway no longer serves.
    pub orphaned: Family<ProviderLabels, Counter>,
}

/// Upstream's buckets: 1 s doubling to about 4.5 hours.
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1.0, 2.0, 15))
}

impl Metrics {
    /// Creates the metrics and registers them, with `shards`' ownership and handovers.
    pub fn register(registry: &MetricsRegistry, shards: &Shards) -> Self {
        let metrics = Self {
            loadbalancer_sync: Counter::default(),
            nodesync_error: Counter::default(),
            nodesync_latency: latency_histogram(),
            update_host_latency: latency_histogram(),
            reconcile: ReconcileMetrics::register(registry, "service_lb_controller").with_errors(&[
                "invalid_service",
                "retry_after",
                "cloud",
                "write",
                "load_balancer_gone",
            ]),
            at_former_provider: Family::default(),
            orphaned: Family::default(),
        };
        registry.register(
            "service_lb_controller_load_balancer_at_former_provider",
            "1 per Service whose load balancer lives at a provider the gateway no longer serves (a vendor swap): neither updated nor deleted here",
            metrics.at_former_provider.clone(),
        );
        registry.register(
            "service_lb_controller_orphaned_load_balancers",
            "Services deleted whose load balancer was left at a provider the gateway no longer serves",
            metrics.orphaned.clone(),
        );
        registry.register(
            "service_controller_loadbalancer_sync",
            "A metric counting the amount of times any load balancer has been configured, as an effect of service/node changes on the cluster",
            metrics.loadbalancer_sync.clone(),
        );
        registry.register(
            "service_controller_nodesync_error",
            "A metric counting the amount of times any load balancer has been configured and errored, as an effect of node changes on the cluster",
            metrics.nodesync_error.clone(),
        );
        registry.register(
            "service_controller_nodesync_latency_seconds",
            "A metric measuring the latency for nodesync which updates loadbalancer hosts on cluster node updates.",
            metrics.nodesync_latency.clone(),
        );
        registry.register(
            "service_controller_update_loadbalancer_host_latency_seconds",
            "A metric measuring the latency for updating each load balancer hosts.",
            metrics.update_host_latency.clone(),
        );
        registry.register(
            "service_lb_controller_shards_owned",
            "Shards of the Services this replica owns now",
            shards.owned_gauge(),
        );
        registry.register(
            "service_lb_controller_shard_handovers",
            "Shards this replica acquired, released (drained and given up) or lost",
            shards.handovers(),
        );
        metrics
    }
}
