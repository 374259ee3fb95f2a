//! What to do with one node, decided from its readiness, its taints and the cloud's answer.

use controller_kit::gateway::{GatewayError, Instance};

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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use controller_kit::gateway::InstanceMetadata;

    use super::*;

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
