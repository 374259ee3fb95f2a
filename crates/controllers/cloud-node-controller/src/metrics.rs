//! The node controller's metrics: upstream's two delay histograms, and reconcile counts.

use controller_kit::metrics::{ReconcileMetrics, delay_histogram};
use prometheus_client::metrics::{counter::Counter, histogram::Histogram};
use side_port::MetricsRegistry;

/// Every metric of the node controller; cheap to clone.
#[derive(Clone)]
pub struct Metrics {
    /// Seconds from node creation to the removal of the uninitialized taint.
    pub taint_removal_delay: Histogram,
    /// Seconds from node creation to the end of its initial synchronization.
    pub initial_sync_delay: Histogram,
    /// Reconciles, their failures by error, their duration.
    pub reconcile: ReconcileMetrics,
    /// Periodic address refresh passes completed (`--node-status-update-frequency`): an
    /// operator sees them run, and a benchmark counts the cloud calls of exactly one.
    pub address_refreshes: Counter,
}

impl Metrics {
    /// Creates the metrics and registers them (they show at zero before the first observation).
    pub fn register(registry: &MetricsRegistry) -> Self {
        let metrics = Self {
            taint_removal_delay: delay_histogram(),
            initial_sync_delay: delay_histogram(),
            reconcile: ReconcileMetrics::register(registry, "cloud_node_controller").with_errors(&[
                "cloud_lookup",
                "not_initializable",
                "write",
            ]),
            address_refreshes: Counter::default(),
        };
        registry.register(
            "cloud_node_controller_address_refreshes",
            "Periodic node address refresh passes completed",
            metrics.address_refreshes.clone(),
        );
        registry.register(
            "node_controller_cloud_provider_taint_removal_delay_seconds",
            "Number of seconds after node creation when NodeController removed the cloud-provider taint of a single node.",
            metrics.taint_removal_delay.clone(),
        );
        registry.register(
            "node_controller_initial_node_sync_delay_seconds",
            "Number of seconds after node creation when NodeController finished the initial synchronization of a single node.",
            metrics.initial_sync_delay.clone(),
        );
        metrics
    }
}
