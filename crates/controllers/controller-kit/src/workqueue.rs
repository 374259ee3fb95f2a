//! Upstream's work-queue metrics (`workqueue_depth`, `workqueue_adds_total`,
//! `workqueue_queue_duration_seconds`, `workqueue_work_duration_seconds`,
//! `workqueue_retries_total`, each labelled `name` as client-go's) for a kube-runtime
//! controller, whose queue is internal: the controller's watch reports each object it queues
//! ([`WorkQueue::observe`]), the reconcile reports when a worker takes it
//! ([`WorkQueue::started`]), the error policy each retry.
//!
//! Like client-go's queue, an object queued again before a worker took it counts once. Objects
//! a reconcile asked to see again later (a requeue) are not counted while they wait.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Instant,
};

use futures::{Stream, StreamExt};
use kube::{Resource, ResourceExt, runtime::watcher};
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

/// The `name` label of a queue.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabels {
    /// The queue's name (upstream's: `Nodes` for the node controller, `service` for the
    /// service controller).
    pub name: &'static str,
}

/// One controller's work queue, as metrics; cheap to clone.
#[derive(Clone)]
pub struct WorkQueue {
    depth: Gauge,
    adds: Counter,
    queue_duration: Histogram,
    work_duration: Histogram,
    retries: Counter,
    /// Objects queued and not yet taken by a worker, and since when.
    waiting: Arc<Mutex<HashMap<String, Instant>>>,
}

/// client-go's buckets: 10 ns to 10 s, by tens.
fn duration_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1e-8, 10.0, 10))
}

impl WorkQueue {
    /// Registers queue `name`'s metrics in `registry`.
    pub fn register(registry: &MetricsRegistry, name: &'static str) -> Self {
        let labels = QueueLabels { name };
        let depth = Family::<QueueLabels, Gauge>::default();
        let adds = Family::<QueueLabels, Counter>::default();
        let queue_duration = Family::<QueueLabels, Histogram>::new_with_constructor(duration_histogram);
        let work_duration = Family::<QueueLabels, Histogram>::new_with_constructor(duration_histogram);
        let retries = Family::<QueueLabels, Counter>::default();
        registry.register("workqueue_depth", "Current depth of workqueue", depth.clone());
        registry.register(
            "workqueue_adds",
            "Total number of adds handled by workqueue",
            adds.clone(),
        );
        registry.register(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested.",
            queue_duration.clone(),
        );
        registry.register(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes.",
            work_duration.clone(),
        );
        registry.register(
            "workqueue_retries",
            "Total number of retries handled by workqueue",
            retries.clone(),
        );
        Self {
            depth: depth.get_or_create(&labels).clone(),
            adds: adds.get_or_create(&labels).clone(),
            queue_duration: queue_duration.get_or_create(&labels).clone(),
            work_duration: work_duration.get_or_create(&labels).clone(),
            retries: retries.get_or_create(&labels).clone(),
            waiting: Arc::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
        self.waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `key` was queued (counted once until a worker takes it).
    pub fn added(&self, key: String) {
        let mut waiting = self.lock();
        if let std::collections::hash_map::Entry::Vacant(entry) = waiting.entry(key) {
            entry.insert(Instant::now());
            self.adds.inc();
            self.depth.set(i64::try_from(waiting.len()).unwrap_or(i64::MAX));
        }
    }

    /// `key` left the queue without a worker taking it (deleted meanwhile).
    pub fn forget(&self, key: &str) {
        let mut waiting = self.lock();
        if waiting.remove(key).is_some() {
            self.depth.set(i64::try_from(waiting.len()).unwrap_or(i64::MAX));
        }
    }

    /// A worker takes `obj` (keyed as [`Self::observe`] keys what the watch delivers).
    pub fn started_for<K: Resource>(&self, obj: &K) -> WorkTimer {
        self.started(&key_of(obj))
    }

    /// A worker takes `key`: its wait is measured, and its work until the guard is dropped.
    pub fn started(&self, key: &str) -> WorkTimer {
        let mut waiting = self.lock();
        if let Some(since) = waiting.remove(key) {
            self.queue_duration.observe(since.elapsed().as_secs_f64());
            self.depth.set(i64::try_from(waiting.len()).unwrap_or(i64::MAX));
        }
        WorkTimer {
            started: Instant::now(),
            duration: self.work_duration.clone(),
        }
    }

    /// A failed object goes back to the queue with backoff.
    pub fn retried(&self) {
        self.retries.inc();
    }

    /// Counts the objects a controller's watch delivers as queued, and deleted ones as gone:
    /// put it between the watch (with its reflector) and the controller.
    pub fn observe<K, S>(
        &self,
        events: S,
    ) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + use<K, S>
    where
        K: Resource + Send + 'static,
        S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send,
    {
        let queue = self.clone();
        events.inspect(move |event| match event {
            Ok(watcher::Event::Apply(obj) | watcher::Event::InitApply(obj)) => queue.added(key_of(obj)),
            Ok(watcher::Event::Delete(obj)) => queue.forget(&key_of(obj)),
            _ => {}
        })
    }
}

/// The queue key of an object: `namespace/name`, or `name` for a cluster-scoped one.
pub fn key_of<K: Resource>(obj: &K) -> String {
    match obj.namespace() {
        Some(ns) => format!("{ns}/{}", obj.name_any()),
        None => obj.name_any(),
    }
}

/// Measures a worker's processing of an object until dropped.
pub struct WorkTimer {
    started: Instant,
    duration: Histogram,
}

impl Drop for WorkTimer {
    fn drop(&mut self) {
        self.duration.observe(self.started.elapsed().as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metric(registry: &MetricsRegistry, name: &str) -> f64 {
        let text = registry.render();
        let line = text
            .lines()
            .find(|l| l.starts_with(name) && l.contains("name=\"Nodes\""))
            .unwrap_or_else(|| panic!("{name} missing in\n{text}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    }

    #[test]
    fn an_object_queued_twice_before_a_worker_takes_it_counts_once() {
        let registry = MetricsRegistry::new();
        let queue = WorkQueue::register(&registry, "Nodes");
        queue.added("a".into());
        queue.added("a".into());
        queue.added("b".into());
        assert_eq!(metric(&registry, "workqueue_depth"), 2.0);
        assert_eq!(metric(&registry, "workqueue_adds_total"), 2.0);
        drop(queue.started("a"));
        queue.forget("b");
        assert_eq!(metric(&registry, "workqueue_depth"), 0.0);
        assert_eq!(metric(&registry, "workqueue_queue_duration_seconds_count"), 1.0);
        assert_eq!(metric(&registry, "workqueue_work_duration_seconds_count"), 1.0);
        queue.retried();
        assert_eq!(metric(&registry, "workqueue_retries_total"), 1.0);
    }
}
