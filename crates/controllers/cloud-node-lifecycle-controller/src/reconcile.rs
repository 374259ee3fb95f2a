//! The periodic pass: Ready nodes lose the shutdown taint; nodes that are not Ready are looked
//! up in the cloud in one batch, then deleted (instance definitely gone) or tainted (shut down).
//! The decisions are in [`crate::plan`]; this module does the I/O around them.

use std::{
    convert::Infallible,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use controller_kit::{
    events::Events,
    gateway::{CloudInstances, GatewayError},
    names::{TAINT_SHUTDOWN, controllers::CLOUD_NODE_LIFECYCLE},
    node::{has_taint, node_ref, object_ref, ready},
    patch::{Patches, WriteError, Writer},
    spans,
};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::{Api, ResourceExt};
use tracing::{Instrument as _, field::Empty};

use crate::{
    metrics::Metrics,
    plan::{self, Action},
};

/// Nodes changed at once during a pass.
const PARALLEL_ACTIONS: usize = 8;

/// What every pass of the lifecycle controller gets.
pub struct Context {
    /// The Nodes API.
    pub nodes: Api<Node>,
    /// The cloud's instances (the gateway; a fake in tests).
    pub cloud: Arc<dyn CloudInstances>,
    /// Guarded writes and deletes, fenced by this replica's leadership.
    pub writer: Writer,
    /// Best-effort events.
    pub events: Events,
    /// The controller's metrics.
    pub metrics: Metrics,
    /// No cloud lookup before this (the cloud answered RETRY_AFTER).
    lookup_pause: LookupPause,
}

impl Context {
    /// A context over these clients and handles.
    pub fn new(
        nodes: Api<Node>,
        cloud: Arc<dyn CloudInstances>,
        writer: Writer,
        events: Events,
        metrics: Metrics,
    ) -> Self {
        Self {
            nodes,
            cloud,
            writer,
            events,
            metrics,
            lookup_pause: LookupPause::default(),
        }
    }
}

/// Until when the cloud asked not to be asked again: the batched lookup was answered
/// RETRY_AFTER. Passes before then make no lookup (as if it had failed: nothing is deleted or
/// tainted, Ready nodes are still handled) instead of asking every `--node-monitor-period`.
#[derive(Debug, Default)]
struct LookupPause(Mutex<Option<Instant>>);

impl LookupPause {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// No lookup for `after` from `now` (a longer pause already asked for stands).
    fn pause(&self, now: Instant, after: Duration) {
        let mut until = self.lock();
        let asked = now + after;
        if until.is_none_or(|u| u < asked) {
            *until = Some(asked);
        }
    }

    /// How long lookups must still wait at `now`; `None` when they may go out.
    fn remaining(&self, now: Instant) -> Option<Duration> {
        let mut until = self.lock();
        match until.and_then(|u| u.checked_duration_since(now)) {
            Some(left) if !left.is_zero() => Some(left),
            _ => {
                *until = None;
                None
            }
        }
    }
}

/// What went wrong with one node during a pass; the next pass retries it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The batched cloud lookup failed: no node that is not Ready is acted on in this pass.
    #[error("cannot check the instances of nodes that are not Ready: {0}")]
    CloudLookup(#[source] GatewayError),
    /// Re-reading the node before deleting it failed.
    #[error("cannot re-read node {node} before deleting it: {source}")]
    Read {
        /// Node name.
        node: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Writing or deleting the node failed.
    #[error("failed to {action} node {node}: {source}")]
    Write {
        /// Node name.
        node: String,
        /// What was being done.
        action: &'static str,
        /// The write error.
        #[source]
        source: WriteError,
    },
}

impl Error {
    /// The delay the cloud asked for before the next attempt (a RETRY_AFTER answer to the
    /// batched lookup): the passes until then look nothing up.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::CloudLookup(GatewayError::RetryAfter { after, .. }) => Some(*after),
            _ => None,
        }
    }

    /// The error's label in `cloud_node_lifecycle_controller_reconcile_errors_total`.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::CloudLookup(_) => "cloud_lookup",
            Self::Read { .. } => "read",
            Self::Write { .. } => "write",
        }
    }
}

/// One pass over `nodes` (from the cache). Errors are per node: logged, counted, and retried by
/// the next pass. A pass with something to look at (a node not Ready, or tainted shut down) is
/// the root span of its own trace (`monitor nodes`: how many nodes, how many looked up, how
/// many acted on); each change to a node is a child span naming it. A pass over healthy nodes
/// only, every `--node-monitor-period`, is not traced.
pub async fn monitor_nodes(ctx: &Context, nodes: &[Arc<Node>]) {
    let busy = nodes
        .iter()
        .any(|n| plan::needs_lookup(ready(n)) || has_taint(n, TAINT_SHUTDOWN));
    let span = if busy {
        controller_kit::reconcile_span!(
            "monitor nodes",
            CLOUD_NODE_LIFECYCLE,
            nodes = nodes.len(),
            looked_up = Empty,
            acted = Empty,
        )
    } else {
        tracing::Span::none()
    };
    monitor(ctx, nodes, &span).instrument(span.clone()).await;
}

async fn monitor(ctx: &Context, nodes: &[Arc<Node>], span: &tracing::Span) {
    let _timer = ctx.metrics.reconcile.count_and_measure();
    span.record("outcome", "ok");
    let needing_lookup: Vec<usize> = (0..nodes.len())
        .filter(|&i| plan::needs_lookup(ready(&nodes[i])))
        .collect();
    let answers = if needing_lookup.is_empty() {
        Vec::new()
    } else if let Some(left) = ctx.lookup_pause.remaining(Instant::now()) {
        tracing::debug!(nodes = needing_lookup.len(), retry_in = ?left, "the cloud asked to wait; no lookup in this pass");
        Vec::new()
    } else {
        let refs: Vec<_> = needing_lookup.iter().map(|&i| node_ref(&nodes[i])).collect();
        span.record("looked_up", refs.len());
        match ctx.cloud.lookup_instances(&refs).await {
            Ok(answers) => answers,
            Err(err) => {
                // Without answers nothing is deleted or tainted; Ready nodes are still handled.
                let err = Error::CloudLookup(err);
                if let Some(after) = err.retry_after() {
                    ctx.lookup_pause.pause(Instant::now(), after);
                }
                spans::failed(span, err.metric_label(), &err);
                report(ctx, &err);
                Vec::new()
            }
        }
    };
    // The cloud's answer for each node, aligned with `nodes` (None: not looked up or no answer).
    let mut lookups: Vec<Option<&Result<_, _>>> = vec![None; nodes.len()];
    for (&i, answer) in needing_lookup.iter().zip(&answers) {
        lookups[i] = Some(answer);
    }
    let actions: Vec<(&Node, Action)> = nodes
        .iter()
        .zip(lookups)
        .map(|(n, lookup)| {
            let node: &Node = n;
            if let Some(Err(err)) = lookup
                && !matches!(err, GatewayError::InstanceNotFound(_))
            {
                // Counted as a failed lookup, like a failed batch: an operator sees vCenter or
                // Nova not answering for this node in the metric, not only in the log.
                ctx.metrics.reconcile.failed("cloud_lookup");
                tracing::warn!(node = %node.name_any(), error = %err, "error checking if node exists; leaving it");
            }
            (node, plan::decide(ready(node), has_taint(node, TAINT_SHUTDOWN), lookup))
        })
        .filter(|(_, action)| *action != Action::Nothing)
        .collect();
    span.record("acted", actions.len());
    futures::stream::iter(actions)
        .for_each_concurrent(PARALLEL_ACTIONS, |(node, action)| {
            let node_span = tracing::info_span!(
                "node action",
                otel.name = format!("node action {}", action.metric_label()),
                node = %node.name_any(),
                action = action.metric_label(),
                outcome = Empty,
                otel.status_code = Empty,
                otel.status_description = Empty,
            );
            async move {
                let result = act(ctx, node, action).await;
                spans::record_outcome(&tracing::Span::current(), &result, Error::metric_label);
                match result {
                    Ok(true) => ctx.metrics.acted(action.metric_label()),
                    Ok(false) => {}
                    Err(err) => report(ctx, &err),
                }
            }
            .instrument(node_span)
        })
        .await;
}

fn report(ctx: &Context, err: &Error) {
    ctx.metrics.reconcile.failed(err.metric_label());
    tracing::warn!(error = %err, "node lifecycle");
}

/// Does `action`; whether it changed the node.
async fn act(ctx: &Context, node: &Node, action: Action) -> Result<bool, Error> {
    let name = node.name_any();
    let add = match action {
        Action::Nothing => return Ok(false),
        Action::Delete => return delete(ctx, node).await,
        Action::AddShutdownTaint => true,
        Action::RemoveShutdownTaint => false,
    };
    let written = ctx
        .writer
        .write_from(&ctx.nodes, node, |fresh| {
            Ok::<_, Infallible>(
                plan::shutdown_taint_patch(fresh, add)
                    .map(Patches::main)
                    .unwrap_or_default(),
            )
        })
        .await;
    match written {
        Ok(written) => {
            if written.is_some() {
                tracing::info!(node = %name, shutdown = add, "updated the shutdown taint");
            }
            Ok(written.is_some())
        }
        Err(err) if err.is_not_found() => Ok(false),
        Err(source) => Err(Error::Write {
            node: name,
            action: "taint",
            source,
        }),
    }
}

/// Deletes a node whose instance is gone. The node is read again first: if it became Ready
/// meanwhile, or is another Node object with the same name, it is left alone. Leadership is
/// checked right before the DELETE (nothing slow comes between); the event follows it.
async fn delete(ctx: &Context, node: &Node) -> Result<bool, Error> {
    let name = node.name_any();
    let fresh = match ctx.nodes.get_opt(&name).await {
        Ok(Some(fresh)) => fresh,
        Ok(None) => return Ok(false),
        Err(source) => return Err(Error::Read { node: name, source }),
    };
    if fresh.uid() != node.uid() || ready(&fresh) == Some(true) {
        return Ok(false);
    }
    tracing::info!(node = %name, "deleting node since it is no longer present in cloud provider");
    let regarding = object_ref(&fresh);
    match ctx.writer.delete(&ctx.nodes, &name, fresh.uid()).await {
        Ok(deleted) => {
            if deleted {
                let note = format!("Deleting node {name} because it does not exist in the cloud provider");
                ctx.events
                    .normal(&regarding, "DeletingNode", "DeleteNode", note)
                    .await;
            }
            Ok(deleted)
        }
        Err(WriteError::NotLeading) => Err(Error::Write {
            node: name,
            action: "delete",
            source: WriteError::NotLeading,
        }),
        Err(source) => {
            let note = format!("Failed deleting node {name}: {source}");
            ctx.events
                .warning(&regarding, "DeletingNodeFailed", "DeleteNode", note)
                .await;
            Err(Error::Write {
                node: name,
                action: "delete",
                source,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_retry_after_answer_names_a_delay() {
        let after = Duration::from_secs(30);
        let retry = Error::CloudLookup(GatewayError::RetryAfter {
            after,
            message: "the cloud is busy".into(),
        });
        assert_eq!(retry.retry_after(), Some(after));
        for other in [
            Error::CloudLookup(GatewayError::Unavailable("down".into())),
            Error::CloudLookup(GatewayError::Throttled {
                retry_after: Some(after),
                message: "slow down".into(),
            }),
            Error::CloudLookup(GatewayError::InstanceNotFound("i-1".into())),
            Error::Write {
                node: "n1".into(),
                action: "delete",
                source: WriteError::NotLeading,
            },
        ] {
            assert_eq!(other.retry_after(), None, "{other:?}");
        }
    }

    #[test]
    fn lookups_wait_for_the_longest_delay_asked_then_go_out_again() {
        let pause = LookupPause::default();
        let now = Instant::now();
        assert_eq!(pause.remaining(now), None, "no pause at first");
        pause.pause(now, Duration::from_secs(30));
        pause.pause(now, Duration::from_secs(10));
        assert_eq!(
            pause.remaining(now),
            Some(Duration::from_secs(30)),
            "the longer stands"
        );
        assert_eq!(
            pause.remaining(now + Duration::from_secs(20)),
            Some(Duration::from_secs(10))
        );
        assert_eq!(pause.remaining(now + Duration::from_secs(30)), None);
        assert_eq!(pause.remaining(now), None, "a pause that ran out is forgotten");
    }
}
