//! What to do with one node, decided from its readiness, its taints and the cloud's answer, and
//! the patch that does it. No I/O here.

use controller_kit::{
    gateway::{GatewayError, Instance},
    names::TAINT_SHUTDOWN,
};
use k8s_openapi::api::core::v1::{Node, Taint};
use serde_json::{Value, json};

/// The change to make to a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Leave it alone.
    Nothing,
    /// The node is Ready again: remove the shutdown taint.
    RemoveShutdownTaint,
    /// The instance is powered off: add the shutdown taint.
    AddShutdownTaint,
    /// The cloud says definitely that the instance is gone: delete the Node.
    Delete,
}

/// Whether the node's instance must be looked up: every node that is not Ready. Upstream makes
/// no cloud call for Ready nodes and treats a missing Ready condition as Unknown (not Ready).
pub fn needs_lookup(ready: Option<bool>) -> bool {
    ready != Some(true)
}

impl Action {
    /// The action's label in `cloud_node_lifecycle_controller_actions`.
    pub fn metric_label(self) -> &'static str {
        match self {
            Self::Nothing => "nothing",
            Self::RemoveShutdownTaint => "remove_shutdown_taint",
            Self::AddShutdownTaint => "add_shutdown_taint",
            Self::Delete => "delete",
        }
    }
}

/// Decides for one node.
///
/// `ready` is the Ready condition (`None` when missing), `lookup` the cloud's answer (present
/// only for nodes that [`needs_lookup`]). Deletion happens only on a definite
/// `InstanceNotFound`: never on an error, never for a stopped instance.
pub fn decide(
    ready: Option<bool>,
    has_shutdown_taint: bool,
    lookup: Option<&Result<Instance, GatewayError>>,
) -> Action {
    if ready == Some(true) {
        return if has_shutdown_taint {
            Action::RemoveShutdownTaint
        } else {
            Action::Nothing
        };
    }
    match lookup {
        Some(Err(GatewayError::InstanceNotFound(_))) => Action::Delete,
        Some(Ok(instance)) if instance.shutdown && !has_shutdown_taint => Action::AddShutdownTaint,
        // A running instance, a shut-down one already tainted, any error, or no answer.
        _ => Action::Nothing,
    }
}

/// The merge patch adding or removing the shutdown taint, or `None` if already so. Other
/// taints are kept as they are (the resourceVersion guard makes replacing the list safe).
pub fn shutdown_taint_patch(node: &Node, add: bool) -> Option<Value> {
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    let is_shutdown = |t: &Taint| t.key == TAINT_SHUTDOWN && t.effect == "NoSchedule";
    let wanted: Vec<Taint> = match (add, taints.iter().any(is_shutdown)) {
        (true, false) => {
            let mut t = taints;
            t.push(Taint {
                key: TAINT_SHUTDOWN.into(),
                effect: "NoSchedule".into(),
                value: None,
                time_added: None,
            });
            t
        }
        (false, true) => taints.into_iter().filter(|t| !is_shutdown(t)).collect(),
        _ => return None,
    };
    Some(json!({ "spec": { "taints": wanted } }))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use controller_kit::gateway::InstanceMetadata;
    use k8s_openapi::api::core::v1::NodeSpec;

    use super::*;

    fn node_with(taints: &[(&str, &str)]) -> Node {
        Node {
            spec: Some(NodeSpec {
                taints: Some(
                    taints
                        .iter()
                        .map(|(k, e)| Taint {
                            key: (*k).into(),
                            effect: (*e).into(),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn the_shutdown_taint_is_added_and_removed_keeping_the_others() {
        let patch = shutdown_taint_patch(&node_with(&[("other", "NoExecute")]), true).unwrap();
        assert_eq!(
            patch,
            json!({"spec": {"taints": [{"key": "other", "effect": "NoExecute"}, {"key": TAINT_SHUTDOWN, "effect": "NoSchedule"}]}})
        );
        let patch = shutdown_taint_patch(
            &node_with(&[("other", "NoExecute"), (TAINT_SHUTDOWN, "NoSchedule")]),
            false,
        )
        .unwrap();
        assert_eq!(
            patch,
            json!({"spec": {"taints": [{"key": "other", "effect": "NoExecute"}]}})
        );
        assert_eq!(
            shutdown_taint_patch(&node_with(&[(TAINT_SHUTDOWN, "NoSchedule")]), true),
            None
        );
        assert_eq!(shutdown_taint_patch(&node_with(&[]), false), None);
    }

    fn instance(shutdown: bool) -> Result<Instance, GatewayError> {
        Ok(Instance {
            metadata: InstanceMetadata::default(),
            shutdown,
        })
    }

    #[test]
    fn upstream_cases() {
        let gone = Err(GatewayError::InstanceNotFound("i-1".into()));
        let unavailable = Err(GatewayError::Unavailable("cloud down".into()));
        let throttled = Err(GatewayError::Throttled {
            retry_after: None,
            message: "slow".into(),
        });
        let deadline = Err(GatewayError::DeadlineExceeded("late".into()));
        let retry = Err(GatewayError::RetryAfter {
            after: Duration::from_secs(1),
            message: "x".into(),
        });
        let (stopped, running) = (instance(true), instance(false));
        type Case<'a> = (
            &'a str,
            Option<bool>,
            bool,
            Option<&'a Result<Instance, GatewayError>>,
            Action,
        );
        let cases: Vec<Case> = vec![
            (
                "ready, untainted: nothing",
                Some(true),
                false,
                None,
                Action::Nothing,
            ),
            (
                "ready again, tainted: untaint",
                Some(true),
                true,
                None,
                Action::RemoveShutdownTaint,
            ),
            (
                "no Ready condition counts as Unknown: instance gone, delete",
                None,
                false,
                Some(&gone),
                Action::Delete,
            ),
            (
                "no Ready condition, stopped: taint",
                None,
                false,
                Some(&stopped),
                Action::AddShutdownTaint,
            ),
            (
                "no Ready condition, tainted, running: keep the taint",
                None,
                true,
                Some(&running),
                Action::Nothing,
            ),
            (
                "not ready, instance gone: delete",
                Some(false),
                false,
                Some(&gone),
                Action::Delete,
            ),
            (
                "not ready, tainted, instance gone: delete",
                Some(false),
                true,
                Some(&gone),
                Action::Delete,
            ),
            (
                "not ready, stopped: taint",
                Some(false),
                false,
                Some(&stopped),
                Action::AddShutdownTaint,
            ),
            (
                "not ready, stopped, tainted already: nothing",
                Some(false),
                true,
                Some(&stopped),
                Action::Nothing,
            ),
            (
                "not ready, running: nothing",
                Some(false),
                false,
                Some(&running),
                Action::Nothing,
            ),
            (
                "not ready, cloud unavailable: never delete",
                Some(false),
                false,
                Some(&unavailable),
                Action::Nothing,
            ),
            (
                "not ready, throttled: never delete",
                Some(false),
                false,
                Some(&throttled),
                Action::Nothing,
            ),
            (
                "not ready, deadline: never delete",
                Some(false),
                false,
                Some(&deadline),
                Action::Nothing,
            ),
            (
                "not ready, odd answer: never delete",
                Some(false),
                false,
                Some(&retry),
                Action::Nothing,
            ),
            (
                "not ready, no answer: nothing",
                Some(false),
                false,
                None,
                Action::Nothing,
            ),
        ];
        for (what, ready, tainted, lookup, want) in cases {
            assert_eq!(decide(ready, tainted, lookup), want, "{what}");
        }
    }

    #[test]
    fn only_not_ready_nodes_cost_a_cloud_call() {
        assert!(needs_lookup(Some(false)));
        assert!(!needs_lookup(Some(true)));
        assert!(needs_lookup(None));
    }
}
