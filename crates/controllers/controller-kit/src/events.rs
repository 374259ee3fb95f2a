//! Best-effort Kubernetes events, as client-go's broadcaster: a failed write is logged and
//! dropped; it never fails, blocks or retries a sync.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::{
    Client,
    runtime::events::{Event, EventType, Recorder, Reporter},
};

/// Publishes events for one controller.
#[derive(Clone)]
pub struct Events {
    recorder: Recorder,
}

impl Events {
    /// Events reported by `controller` (its ID), from replica `instance`.
    pub fn new(client: Client, controller: &str, instance: Option<String>) -> Self {
        let reporter = Reporter {
            controller: controller.to_owned(),
            instance,
        };
        Self {
            recorder: Recorder::new(client, reporter),
        }
    }

    /// A `Normal` event.
    pub async fn normal(&self, regarding: &ObjectReference, reason: &str, action: &str, note: String) {
        self.publish(regarding, EventType::Normal, reason, action, note)
            .await;
    }

    /// A `Warning` event.
    pub async fn warning(&self, regarding: &ObjectReference, reason: &str, action: &str, note: String) {
        self.publish(regarding, EventType::Warning, reason, action, note)
            .await;
    }

    async fn publish(
        &self,
        regarding: &ObjectReference,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) {
        let event = Event {
            type_,
            reason: reason.to_owned(),
            note: Some(truncate(note, 1024)),
            action: action.to_owned(),
            secondary: None,
        };
        let publish = self.recorder.publish(&event, regarding);
        match tokio::time::timeout(std::time::Duration::from_secs(5), publish).await {
            Ok(Ok(())) => {}
            Ok(Err(err)) => tracing::warn!(reason, error = %err, "could not write event; dropped"),
            Err(_) => tracing::warn!(reason, "writing event timed out; dropped"),
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
