//! The node controller's metrics, with upstream's names and buckets.

use std::sync::LazyLock;

use prometheus_client::metrics::histogram::Histogram;

/// Seconds from node creation to the removal of the uninitialized taint.
pub static TAINT_REMOVAL_DELAY: LazyLock<Histogram> = LazyLock::new(|| {
    let h = controller_kit::metrics::delay_histogram();
    controller_kit::metrics::register(
        "node_controller_cloud_provider_taint_removal_delay_seconds",
        "Number of seconds after node creation when NodeController removed the cloud-provider taint of a single node.",
        h.clone(),
    );
    h
});

/// Seconds from node creation to the end of its initial synchronization.
pub static INITIAL_SYNC_DELAY: LazyLock<Histogram> = LazyLock::new(|| {
    let h = controller_kit::metrics::delay_histogram();
    controller_kit::metrics::register(
        "node_controller_initial_node_sync_delay_seconds",
        "Number of seconds after node creation when NodeController finished the initial synchronization of a single node.",
        h.clone(),
    );
    h
});

/// Registers every metric so they show (at zero) before the first observation.
pub fn register() {
    LazyLock::force(&TAINT_REMOVAL_DELAY);
    LazyLock::force(&INITIAL_SYNC_DELAY);
}
