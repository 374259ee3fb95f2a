//! The route controller's metrics: upstream's `route_controller_route_sync_total`, the cloud
//! operations and condition writes it made, and reconcile counts.

use controller_kit::metrics::ReconcileMetrics;
use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family},
};
use side_port::MetricsRegistry;

/// Labels of a cloud operation.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OperationLabels {
    /// `create` or `delete`.
    pub operation: &'static str,
    /// `success` or `error`.
    pub result: &'static str,
}

/// Labels of a condition write.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConditionLabels {
    /// The reason written: `RouteCreated` or `NoRouteCreated`.
    pub reason: &'static str,
}

/// Every metric of the route controller; cheap to clone.
#[derive(Clone)]
pub struct Metrics {
    /// Reconciles of the routes with the cloud, each one ListRoutes (upstream's name).
    pub route_sync: Counter,
    /// Routes created and deleted, by result.
    pub operations: Family<OperationLabels, Counter>,
    /// `NetworkUnavailable` conditions written, by reason.
    pub conditions: Family<ConditionLabels, Counter>,
    /// Reconciles, their failures by error, their duration.
    pub reconcile: ReconcileMetrics,
}

impl Metrics {
    /// Creates the metrics and registers them.
    pub fn register(registry: &MetricsRegistry) -> Self {
        let metrics = Self {
            route_sync: Counter::default(),
            operations: Family::default(),
            conditions: Family::default(),
            reconcile: ReconcileMetrics::register(registry, "node_route_controller").with_errors(&[
                "list_routes",
                "route_operations",
                "write",
            ]),
        };
        registry.register(
            "route_controller_route_sync",
            "A metric counting the amount of times routes have been synced with the cloud provider.",
            metrics.route_sync.clone(),
        );
        registry.register(
            "node_route_controller_route_operations",
            "Routes created and deleted in the cloud, by operation (create, delete) and result (success, error)",
            metrics.operations.clone(),
        );
        registry.register(
            "node_route_controller_condition_updates",
            "NetworkUnavailable conditions written, by reason (RouteCreated, NoRouteCreated)",
            metrics.conditions.clone(),
        );
        metrics
    }

    /// Counts one cloud operation.
    pub fn operation(&self, operation: &'static str, ok: bool) {
        let result = if ok { "success" } else { "error" };
        self.operations
            .get_or_create(&OperationLabels { operation, result })
            .inc();
    }
}
