//! Metric helpers shared by the controllers; the registry itself is [`side_port::MetricsRegistry`],
//! a handle each controller owns.

use std::time::Instant;

use prometheus_client::metrics::{
    counter::Counter,
    family::Family,
    histogram::{Histogram, exponential_buckets},
};
use side_port::MetricsRegistry;

/// Histogram buckets of upstream's node controller delays: 1 s doubling to about 17 minutes.
pub fn delay_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1.0, 2.0, 11))
}

/// Labels of a failed reconcile.
#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
pub struct ErrorLabels {
    /// The error's metric label (`cloud_lookup`, `write`, ...).
    pub error: &'static str,
}

/// What every controller counts about its reconciles (or periodic passes).
#[derive(Clone)]
pub struct ReconcileMetrics {
    runs: Counter,
    failures: Family<ErrorLabels, Counter>,
    duration: Histogram,
}

impl ReconcileMetrics {
    /// Registers `<prefix>_reconcile_total`, `<prefix>_reconcile_errors_total{error}` and
    /// `<prefix>_reconcile_duration_seconds` in `registry`.
    pub fn register(registry: &MetricsRegistry, prefix: &str) -> Self {
        let metrics = Self {
            runs: Counter::default(),
            failures: Family::default(),
            duration: Histogram::new(exponential_buckets(0.005, 2.0, 14)),
        };
        registry.register(
            &format!("{prefix}_reconcile"),
            "Reconciles run",
            metrics.runs.clone(),
        );
        registry.register(
            &format!("{prefix}_reconcile_errors"),
            "Reconciles that failed, by error",
            metrics.failures.clone(),
        );
        registry.register(
            &format!("{prefix}_reconcile_duration_seconds"),
            "Time a reconcile took",
            metrics.duration.clone(),
        );
        metrics
    }

    /// Shows `<prefix>_reconcile_errors_total{error}` at 0 for each of `errors` (the
    /// controller's error labels) from the start, so a dashboard or an alert sees a failure
    /// kind before its first occurrence, and `rate()` counts the first one.
    #[must_use]
    pub fn with_errors(self, errors: &[&'static str]) -> Self {
        for &error in errors {
            let _ = self.failures.get_or_create(&ErrorLabels { error });
        }
        self
    }

    /// Counts a reconcile and measures it until the returned guard is dropped.
    pub fn count_and_measure(&self) -> ReconcileTimer {
        self.runs.inc();
        ReconcileTimer {
            started: Instant::now(),
            duration: self.duration.clone(),
        }
    }

    /// Counts a failure with the error's label.
    pub fn failed(&self, error: &'static str) {
        self.failures.get_or_create(&ErrorLabels { error }).inc();
    }
}

/// Records a reconcile's duration when dropped.
pub struct ReconcileTimer {
    started: Instant,
    duration: Histogram,
}

impl Drop for ReconcileTimer {
    fn drop(&mut self) {
        self.duration.observe(self.started.elapsed().as_secs_f64());
    }
}
