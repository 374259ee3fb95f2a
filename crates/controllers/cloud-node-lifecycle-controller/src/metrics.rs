//! The lifecycle controller's metrics: changes made to nodes, and pass counts.

use controller_kit::metrics::ReconcileMetrics;
use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family},
};
use side_port::MetricsRegistry;

/// Labels of a change made to a node.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ActionLabels {
    /// `delete`, `add_shutdown_taint` or `remove_shutdown_taint`.
    pub action: &'static str,
}

/// Every metric of the lifecycle controller; cheap to clone.
#[derive(Clone)]
pub struct Metrics {
    /// Changes made to nodes, by action.
    pub actions: Family<ActionLabels, Counter>,
    /// Passes, their failures by error, their duration.
    pub reconcile: ReconcileMetrics,
}

impl Metrics {
    /// Creates the metrics and registers them.
    pub fn register(registry: &MetricsRegistry) -> Self {
        let metrics = Self {
            actions: Family::default(),
            reconcile: ReconcileMetrics::register(registry, "cloud_node_lifecycle_controller")
                .with_errors(&["cloud_lookup", "read", "write"]),
        };
        // Each action shows at 0 before it first happens.
        for action in ["delete", "add_shutdown_taint", "remove_shutdown_taint"] {
            let _ = metrics.actions.get_or_create(&ActionLabels { action });
        }
        registry.register(
            "cloud_node_lifecycle_controller_actions",
            "Changes made to nodes, by action (delete, add_shutdown_taint, remove_shutdown_taint)",
            metrics.actions.clone(),
        );
        metrics
    }

    /// Counts one change.
    pub fn acted(&self, action: &'static str) {
        self.actions.get_or_create(&ActionLabels { action }).inc();
    }
}
