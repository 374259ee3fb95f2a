//! What a scenario did to each Service, kept so that a failed run explains each leaked or
//! missing load balancer without a rerun: the Service's changes as the API server answered
//! them, its last known state, and the syncs the replicas' logs show for it.

use std::collections::BTreeMap;

use k8s_openapi::{api::core::v1::Service, jiff::Timestamp};
use kube::ResourceExt;

use super::services::Work;
use crate::ingress_ips;

/// One change the scenario made to a Service.
#[derive(Debug, Clone)]
struct Change {
    at: Timestamp,
    what: String,
    /// The Service as the API server answered the change ([`summary`]); empty when it answered
    /// no object (a deletion that removed it at once).
    answer: String,
}

/// The scenario's changes, by Service name, and the names by UID.
#[derive(Debug, Default)]
pub struct Journal {
    changes: BTreeMap<String, Vec<Change>>,
    names: BTreeMap<String, String>,
}

impl Journal {
    /// Records that the scenario did `what` to Service `name`, and the object the API server
    /// answered (which also teaches the journal the Service's UID).
    pub fn record(&mut self, name: &str, what: impl Into<String>, answer: Option<&Service>) {
        if let Some(uid) = answer.and_then(|s| s.uid()) {
            self.names.insert(uid, name.to_owned());
        }
        self.changes.entry(name.to_owned()).or_default().push(Change {
            at: Timestamp::now(),
            what: what.into(),
            answer: answer.map(summary).unwrap_or_default(),
        });
    }

    /// The name of the Service with `uid`, when the scenario made it.
    pub fn name_of(&self, uid: &str) -> Option<&str> {
        self.names.get(uid).map(String::as_str)
    }

    /// The story of Service `name`: the scenario's last changes, its state in the API server
    /// now (`live`, `None` when it is gone) and the last syncs of it in the replicas' logs.
    pub fn explain(&self, name: &str, live: Option<&Service>, syncs: Option<&Vec<Work>>) -> String {
        let changes = self.changes.get(name).map(Vec::as_slice).unwrap_or_default();
        let changes: Vec<String> = changes
            .iter()
            .rev()
            .take(4)
            .rev()
            .map(|c| {
                let answer = if c.answer.is_empty() {
                    String::new()
                } else {
                    format!(" → {}", c.answer)
                };
                format!("{} {}{answer}", clock(c.at), c.what)
            })
            .collect();
        let now = live.map_or_else(|| "gone".to_owned(), summary);
        let mut syncs: Vec<&Work> = syncs.map(|w| w.iter().collect()).unwrap_or_default();
        syncs.sort_by_key(|w| w.start);
        let syncs: Vec<String> = syncs
            .iter()
            .rev()
            .take(3)
            .rev()
            .map(|w| {
                let ok = match w.ok {
                    Some(true) => "ok",
                    Some(false) => "failed",
                    None => "killed",
                };
                format!(
                    "{} {} {}–{} {ok}",
                    w.replica,
                    w.decision,
                    clock(w.start),
                    clock(w.end)
                )
            })
            .collect();
        format!(
            "{name}: changes [{}]; in the API server now: {now}; last syncs [{}]",
            changes.join("; "),
            syncs.join("; ")
        )
    }
}

/// A Service in a line: type, finalizers, deletion, ingress and resourceVersion.
pub fn summary(svc: &Service) -> String {
    let spec = svc.spec.clone().unwrap_or_default();
    let port = spec
        .ports
        .iter()
        .flatten()
        .map(|p| p.port.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let deleting = svc
        .metadata
        .deletion_timestamp
        .as_ref()
        .map(|t| format!(" deleting since {}", clock(t.0)))
        .unwrap_or_default();
    format!(
        "{} :{port} finalizers {:?}{deleting} ingress {:?} rv {}",
        spec.type_.unwrap_or_default(),
        svc.finalizers(),
        ingress_ips(svc),
        svc.resource_version().unwrap_or_default()
    )
}

/// A time of day to the millisecond (UTC), as the replicas' JSON logs can be searched for it.
fn clock(at: Timestamp) -> String {
    at.strftime("%H:%M:%S%.3f").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(name: &str, uid: &str, type_: &str) -> Service {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "uid": uid, "resourceVersion": "7",
                         "finalizers": ["service.kubernetes.io/load-balancer-cleanup"]},
            "spec": {"type": type_, "ports": [{"port": 81}]},
        }))
        .unwrap()
    }

    #[test]
    fn a_story_names_the_changes_the_state_now_and_the_last_syncs() {
        let mut journal = Journal::default();
        journal.record("svc-1", "created", Some(&service("svc-1", "u1", "LoadBalancer")));
        journal.record("svc-1", "deleted", None);
        assert_eq!(journal.name_of("u1"), Some("svc-1"));
        assert_eq!(journal.name_of("u2"), None);
        let at = Timestamp::now();
        let syncs = vec![Work {
            replica: "slb-3".into(),
            start: at,
            end: at,
            decision: "Ensure".into(),
            ok: None,
        }];

        let story = journal.explain("svc-1", None, Some(&syncs));

        assert!(story.starts_with("svc-1: changes ["), "{story}");
        assert!(
            story.contains(
                "created → LoadBalancer :81 finalizers [\"service.kubernetes.io/load-balancer-cleanup\"]"
            ),
            "{story}"
        );
        assert!(story.contains(" deleted]; "), "{story}");
        assert!(story.contains("in the API server now: gone"), "{story}");
        assert!(story.contains("slb-3 Ensure"), "{story}");
        assert!(story.ends_with(" killed]"), "{story}");
    }
}
