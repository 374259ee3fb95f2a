//! The periodic pass: Ready nodes lose the shutdown taint; nodes that are not Ready are looked
//! up in the cloud in one batch, then deleted (instance definitely gone) or tainted (shut down).
//! The decisions are in [`crate::plan`]; this module does the I/O around them.

use std::{convert::Infallible, sync::Arc};

use controller_kit::{
    events::Events,
    gateway::{CloudInstances, GatewayError},
    names::TAINT_SHUTDOWN,
    node::{has_taint, node_ref, object_ref, ready},
    patch::{Patches, WriteError, Writer},
};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::{Api, ResourceExt};

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
/// the next pass.
pub async fn monitor_nodes(ctx: &Context, nodes: &[Arc<Node>]) {
    let _timer = ctx.metrics.reconcile.count_and_measure();
    let needing_lookup: Vec<usize> = (0..nodes.len())
        .filter(|&i| plan::needs_lookup(ready(&nodes[i])))
        .collect();
    let answers = if needing_lookup.is_empty() {
        Vec::new()
    } else {
        let refs: Vec<_> = needing_lookup.iter().map(|&i| node_ref(&nodes[i])).collect();
        match ctx.cloud.lookup_instances(&refs).await {
            Ok(answers) => answers,
            Err(err) => {
                // Without answers nothing is deleted or tainted; Ready nodes are still handled.
                report(ctx, &Error::CloudLookup(err));
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
                tracing::warn!(node = %node.name_any(), error = %err, "error checking if node exists; leaving it");
            }
            (node, plan::decide(ready(node), has_taint(node, TAINT_SHUTDOWN), lookup))
        })
        .filter(|(_, action)| *action != Action::Nothing)
        .collect();
    futures::stream::iter(actions)
        .for_each_concurrent(PARALLEL_ACTIONS, |(node, action)| async move {
            match act(ctx, node, action).await {
                Ok(true) => ctx.metrics.acted(action.metric_label()),
                Ok(false) => {}
                Err(err) => report(ctx, &err),
            }
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
