//! Best-effort Kubernetes events (`events.k8s.io/v1`), as client-go's broadcaster: a failed
//! write is logged and dropped; it never fails, blocks or retries a sync.
//!
//! An event repeated within [`SERIES_WINDOW`] (same object, type, reason, action and note)
//! updates the first one's `series` (count, last seen) instead of adding an object, as client-go
//! and kube's `Recorder` do. Unlike the `Recorder`, only the event's name and count are kept for
//! that, not the whole event: at 5000 nodes the `Recorder`'s cache cost the node controller
//! 17 MiB.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use k8s_openapi::{
    api::{
        core::v1::ObjectReference,
        events::v1::{Event, EventSeries},
    },
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
    jiff::Timestamp,
};
use kube::{
    Api, Client,
    api::{Patch, PatchParams, PostParams},
};
use serde_json::json;

use crate::dry_run::DryRun;

/// How long a repeated event counts as the same series (client-go: 6 minutes).
pub const SERIES_WINDOW: Duration = Duration::from_secs(6 * 60);

/// How long one write may take before the event is dropped.
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// Publishes events for one controller. Cheap to clone.
#[derive(Clone)]
pub struct Events {
    client: Client,
    controller: String,
    instance: String,
    series: Arc<Mutex<Series>>,
    dry_run: DryRun,
}

/// The events written recently, by what makes them the same event.
#[derive(Default)]
struct Series {
    by_key: HashMap<SeriesKey, Written>,
    last_sweep: Option<Instant>,
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct SeriesKey {
    regarding: String,
    type_: &'static str,
    reason: String,
    action: String,
    note: String,
}

struct Written {
    namespace: String,
    name: String,
    count: i32,
    at: Instant,
}

impl Events {
    /// Events reported by `controller` (its ID), from replica `instance` (the controller's ID
    /// when `None`).
    pub fn new(client: Client, controller: &str, instance: Option<String>) -> Self {
        Self {
            client,
            controller: controller.to_owned(),
            instance: instance.unwrap_or_else(|| controller.to_owned()),
            series: Arc::default(),
            dry_run: DryRun::off(),
        }
    }

    /// In dry-run, events are not written. A `Normal` event only restates a change (which is
    /// planned where it is made), so it is logged at debug. A `Warning` is planned (kind
    /// `warning_event`, its reason and note): what the operator would be warned of after the
    /// switch (a Service refused, an annotation read other than written) is listed by the shadow
    /// run before it.
    #[must_use]
    pub fn with_dry_run(mut self, dry_run: DryRun) -> Self {
        self.dry_run = dry_run;
        self
    }

    /// A `Normal` event.
    pub async fn normal(&self, regarding: &ObjectReference, reason: &str, action: &str, note: String) {
        self.publish(regarding, "Normal", reason, action, note).await;
    }

    /// A `Warning` event.
    pub async fn warning(&self, regarding: &ObjectReference, reason: &str, action: &str, note: String) {
        self.publish(regarding, "Warning", reason, action, note).await;
    }

    async fn publish(
        &self,
        regarding: &ObjectReference,
        type_: &'static str,
        reason: &str,
        action: &str,
        note: String,
    ) {
        let note = truncate(note, 1024);
        if type_ == "Warning" {
            let object = crate::dry_run::object_name(
                regarding.kind.as_deref().unwrap_or_default(),
                regarding.namespace.as_deref(),
                regarding.name.as_deref().unwrap_or_default(),
            );
            self.dry_run.plan(
                "warning_event",
                &object,
                serde_json::json!({ "reason": reason, "note": note }),
            );
        }
        if self.dry_run.enabled() {
            tracing::debug!(
                reason,
                action,
                type_,
                note,
                regarding = regarding.name.as_deref().unwrap_or_default(),
                "dry-run: would record an event"
            );
            return;
        }
        let key = SeriesKey {
            regarding: format!(
                "{}/{}/{}/{}",
                regarding.kind.as_deref().unwrap_or_default(),
                regarding.namespace.as_deref().unwrap_or_default(),
                regarding.name.as_deref().unwrap_or_default(),
                regarding.uid.as_deref().unwrap_or_default()
            ),
            type_,
            reason: reason.to_owned(),
            action: action.to_owned(),
            note: note.clone(),
        };
        let repeat = self.repeat_of(&key);
        let write = async {
            match &repeat {
                Some((namespace, name, count)) => {
                    let series = json!({ "series": EventSeries {
                        count: *count,
                        last_observed_time: MicroTime(Timestamp::now()),
                    }});
                    let api: Api<Event> = Api::namespaced(self.client.clone(), namespace);
                    api.patch(name, &PatchParams::default(), &Patch::Merge(&series))
                        .await
                        .map(|_| ())
                }
                None => {
                    let event = self.event(regarding, type_, reason, action, note);
                    let namespace = event.metadata.namespace.clone().unwrap_or_default();
                    let name = event.metadata.name.clone().unwrap_or_default();
                    let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
                    api.create(&PostParams::default(), &event).await?;
                    self.remember(key, namespace, name);
                    Ok(())
                }
            }
        };
        match tokio::time::timeout(WRITE_TIMEOUT, write).await {
            Ok(Ok(())) => {}
            Ok(Err(err)) => tracing::warn!(reason, error = %err, "could not write event; dropped"),
            Err(_) => tracing::warn!(reason, "writing event timed out; dropped"),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Series> {
        self.series
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// When `key` was written within the window: its event's namespace, name and new count.
    fn repeat_of(&self, key: &SeriesKey) -> Option<(String, String, i32)> {
        let mut series = self.lock();
        let now = Instant::now();
        // Forget old series now and then, not on every event (it is a walk over all of them).
        if series
            .last_sweep
            .is_none_or(|at| now.duration_since(at) > Duration::from_secs(30))
        {
            series
                .by_key
                .retain(|_, w| now.duration_since(w.at) < SERIES_WINDOW);
            series.last_sweep = Some(now);
        }
        let written = series
            .by_key
            .get_mut(key)
            .filter(|w| now.duration_since(w.at) < SERIES_WINDOW)?;
        written.count = written.count.saturating_add(1);
        Some((written.namespace.clone(), written.name.clone(), written.count))
    }

    fn remember(&self, key: SeriesKey, namespace: String, name: String) {
        let written = Written {
            namespace,
            name,
            count: 1,
            at: Instant::now(),
        };
        self.lock().by_key.insert(key, written);
    }

    fn event(
        &self,
        regarding: &ObjectReference,
        type_: &str,
        reason: &str,
        action: &str,
        note: String,
    ) -> Event {
        let now = Timestamp::now();
        // Events about cluster-scoped objects (Nodes) go to `default`, as client-go's.
        let namespace = regarding
            .namespace
            .clone()
            .filter(|ns| !ns.is_empty())
            .unwrap_or_else(|| "default".into());
        let name = format!(
            "{}.{:x}",
            regarding.name.as_deref().unwrap_or(&self.controller),
            now.as_nanosecond()
        );
        Event {
            metadata: ObjectMeta {
                name: Some(name),
                namespace: Some(namespace),
                ..Default::default()
            },
            action: Some(action.to_owned()),
            reason: Some(reason.to_owned()),
            note: Some(note),
            type_: Some(type_.to_owned()),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding.clone()),
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.instance.clone()),
            ..Default::default()
        }
    }
}

/// Events allow at most 1 kB of note.
fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}
