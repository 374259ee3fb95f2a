//! One Prometheus registry per process, rendered by the `/metrics` endpoint.

use std::sync::{LazyLock, Mutex, MutexGuard};

use prometheus_client::{
    encoding::text::encode,
    metrics::{gauge::Gauge, histogram::Histogram},
    registry::{Metric, Registry},
};

static REGISTRY: LazyLock<Mutex<Registry>> = LazyLock::new(|| Mutex::new(Registry::default()));

static LEADER: LazyLock<Gauge> = LazyLock::new(|| {
    let gauge = Gauge::default();
    register(
        "leader_election_master_status",
        "1 while this replica holds the leader lease, 0 otherwise",
        gauge.clone(),
    );
    gauge
});

fn lock() -> MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Registers a metric under its full name (e.g. `node_controller_...`).
pub fn register(name: &str, help: &str, metric: impl Metric) {
    lock().register(name, help, metric);
}

/// Histogram buckets of upstream's node controller delays: 1 s doubling to about 17 minutes.
pub fn delay_histogram() -> Histogram {
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
        1.0, 2.0, 11,
    ))
}

/// Records whether this replica leads.
pub fn set_leader(leading: bool) {
    LEADER.set(i64::from(leading));
}

/// Every registered metric in Prometheus text format.
pub fn render() -> String {
    LazyLock::force(&LEADER);
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = encode(&mut out, &lock());
    out
}
