//! The reconcile of one node (the initial sync of a tainted node, beta→GA labels of an
//! initialized one), its error policy, and the periodic address refresh. The decisions are in
//! [`crate::plan`]; this module does the I/O around them.

use std::{
    collections::HashMap,
    convert::Infallible,
    sync::{Arc, Mutex},
    time::Duration,
};

use controller_kit::{
    events::Events,
    gateway::{CloudInstances, GatewayError},
    names::{TAINT_UNINITIALIZED, controllers::CLOUD_NODE},
    node::{has_taint, node_ref, object_ref},
    patch::{Patches, WriteError, Writer},
    spans,
    workqueue::WorkQueue,
};
use futures::StreamExt;
use k8s_openapi::{api::core::v1::Node, jiff::Timestamp};
use kube::{Api, ResourceExt, runtime::controller::Action};
use tracing::{Instrument as _, field::Empty};

use crate::{metrics::Metrics, plan};

/// What every reconcile of the node controller gets.
pub struct Context {
    /// The Nodes API.
    pub nodes: Api<Node>,
    /// The cloud's instances (the gateway; a fake in tests).
    pub cloud: Arc<dyn CloudInstances>,
    /// Guarded writes, fenced by this replica's leadership.
    pub writer: Writer,
    /// Best-effort events.
    pub events: Events,
    /// The controller's metrics.
    pub metrics: Metrics,
    /// Consecutive failures per node, for the exponential requeue.
    failures: Mutex<HashMap<String, u32>>,
    /// The work queue's metrics (upstream's `Nodes` queue), when the controller runs one.
    queue: Option<WorkQueue>,
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
            failures: Mutex::new(HashMap::new()),
            queue: None,
        }
    }

    /// Reports to `queue` when a worker takes a node, and each retry.
    pub fn with_queue(mut self, queue: WorkQueue) -> Self {
        self.queue = Some(queue);
        self
    }

    fn failures(&self) -> std::sync::MutexGuard<'_, HashMap<String, u32>> {
        self.failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Why a node could not be reconciled; it is requeued ([`error_policy`]).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The cloud lookup failed (the node stays tainted).
    #[error("failed to get instance metadata for node {node}: {source}")]
    CloudLookup {
        /// Node name.
        node: String,
        /// The gateway's error.
        #[source]
        source: GatewayError,
    },
    /// The node cannot be initialized from the cloud's answer yet (it stays tainted).
    #[error(transparent)]
    NotYet(#[from] plan::NotYet),
    /// Writing the node failed.
    #[error("failed to update node {node}: {source}")]
    Write {
        /// Node name.
        node: String,
        /// The write error.
        #[source]
        source: WriteError,
    },
}

impl Error {
    /// The delay the cloud asked for before the next attempt (a RETRY_AFTER answer); the node
    /// is requeued after exactly that, not with the backoff.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::CloudLookup {
                source: GatewayError::RetryAfter { after, .. },
                ..
            } => Some(*after),
            _ => None,
        }
    }

    /// The error's label in `cloud_node_controller_reconcile_errors_total`.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::CloudLookup { .. } => "cloud_lookup",
            Self::NotYet(_) => "not_initializable",
            Self::Write { .. } => "write",
        }
    }
}

/// Reconciles one node: the root span of its own trace (`reconcile node`, with the node, what
/// the reconcile did and how it ended), whose children are the gateway calls it makes.
///
/// # Errors
/// See [`Error`]; a node deleted meanwhile is no error.
pub async fn reconcile(node: Arc<Node>, ctx: Arc<Context>) -> Result<Action, Error> {
    let name = node.name_any();
    let _work = ctx.queue.as_ref().map(|q| q.started_for(&*node));
    let action = if has_taint(&node, TAINT_UNINITIALIZED) {
        "initialize"
    } else {
        "reconcile labels"
    };
    let span = controller_kit::reconcile_span!("reconcile node", CLOUD_NODE, node = %name, action);
    let result = reconcile_node(node, &ctx).instrument(span.clone()).await;
    spans::record_outcome(&span, &result, Error::metric_label);
    result
}

async fn reconcile_node(node: Arc<Node>, ctx: &Context) -> Result<Action, Error> {
    let _timer = ctx.metrics.reconcile.count_and_measure();
    let name = node.name_any();
    if has_taint(&node, TAINT_UNINITIALIZED) {
        initialize(&node, ctx).await?;
    } else {
        let written = ctx
            .writer
            .write_from(&ctx.nodes, &node, |fresh| {
                Ok::<_, Infallible>(
                    plan::ga_labels_patch(fresh)
                        .map(Patches::main)
                        .unwrap_or_default(),
                )
            })
            .await;
        finish_write(&name, written)?;
    }
    ctx.failures().remove(&name);
    Ok(Action::await_change())
}

/// Requeues a failed node: after exactly the delay the cloud asked for (RETRY_AFTER), else with
/// exponential backoff (1 s doubling, at most 5 min).
pub fn error_policy(node: Arc<Node>, err: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics.reconcile.failed(err.metric_label());
    if let Some(queue) = &ctx.queue {
        queue.retried();
    }
    let name = node.name_any();
    let delay = err.retry_after().unwrap_or_else(|| {
        let mut failures = ctx.failures();
        let count = failures.entry(name.clone()).or_insert(0);
        *count = count.saturating_add(1);
        backoff(*count)
    });
    tracing::warn!(node = %name, error = %err, retry_in = ?delay, "node sync failed");
    Action::requeue(delay)
}

/// The delay after `failures` consecutive failures: 1 s doubling, at most 5 min.
pub fn backoff(failures: u32) -> Duration {
    Duration::from_secs(1u64 << failures.saturating_sub(1).min(9)).min(Duration::from_secs(300))
}

async fn initialize(node: &Node, ctx: &Context) -> Result<(), Error> {
    let name = node.name_any();
    tracing::info!(node = %name, "initializing node with cloud provider");
    let cloud = ctx
        .cloud
        .instance(&node_ref(node))
        .await
        .map_err(|source| Error::CloudLookup {
            node: name.clone(),
            source,
        })?
        .metadata;
    // Whether a plan of this write removed the taint. After a 409 on the status patch the
    // replan sees the node untainted (by this write's main patch, or by someone else's
    // concurrent one that this write's 409 met) and plans only the addresses.
    let mut untaints = false;
    let written = ctx
        .writer
        .write_from(&ctx.nodes, node, |fresh| {
            let init = plan::initialize(fresh, &cloud)?;
            untaints |= init.untaints;
            Ok::<_, plan::NotYet>(init.patches)
        })
        .await;
    if finish_write(&name, written)?.is_none() {
        return Ok(()); // already initialized (another replica, an admin), or deleted
    }
    if !untaints {
        return Ok(()); // never planned with the taint: only the addresses were missing
    }
    let regarding = object_ref(node);
    for label in plan::invalid_labels(&cloud) {
        tracing::warn!(node = %name, label = %label.key, reason = %label.reason, "discarding invalid node label from the cloud provider");
        let note = format!(
            "Discarded label {:?} from the cloud provider: {}",
            label.key, label.reason
        );
        ctx.events
            .warning(&regarding, "InvalidNodeLabel", "InitializeNode", note)
            .await;
    }
    ctx.metrics.taint_removal_delay.observe(age_seconds(node));
    ctx.events
        .normal(
            &regarding,
            "Synced",
            "InitializeNode",
            "Node synced successfully".into(),
        )
        .await;
    ctx.metrics.initial_sync_delay.observe(age_seconds(node));
    tracing::info!(node = %name, provider_id = %cloud.provider_id, "successfully initialized node with cloud provider");
    Ok(())
}

/// A write's outcome as the reconcile sees it: a node deleted meanwhile is no error (there is
/// nothing left to sync), a plan that refused is [`Error::NotYet`].
fn finish_write<E: Into<Error>>(
    name: &str,
    written: Result<Option<Node>, WriteError<E>>,
) -> Result<Option<Node>, Error> {
    match written {
        Ok(node) => Ok(node),
        Err(err) if err.is_not_found() => Ok(None),
        Err(err) => Err(match err.into_write_error() {
            Ok(source) => Error::Write {
                node: name.to_owned(),
                source,
            },
            Err(plan) => plan.into(),
        }),
    }
}

impl From<Infallible> for Error {
    fn from(never: Infallible) -> Self {
        match never {}
    }
}

fn age_seconds(node: &Node) -> f64 {
    node.metadata
        .creation_timestamp
        .as_ref()
        .map(|t| Timestamp::now().duration_since(t.0).as_secs_f64().max(0.0))
        .unwrap_or(0.0)
}

/// One pass of the periodic address refresh over `nodes` (the cache): one batched cloud lookup
/// for every initialized node instead of upstream's call per node, then a status patch for each
/// node whose addresses changed, `parallelism` at a time. Returns how many nodes were updated.
pub async fn refresh_addresses(ctx: &Context, nodes: Vec<Arc<Node>>, parallelism: usize) -> usize {
    let span = controller_kit::reconcile_span!(
        "refresh node addresses",
        CLOUD_NODE,
        nodes = nodes.len(),
        updated = Empty,
    );
    let updated = refresh(ctx, nodes, parallelism, &span)
        .instrument(span.clone())
        .await;
    span.record("updated", updated);
    updated
}

async fn refresh(ctx: &Context, nodes: Vec<Arc<Node>>, parallelism: usize, span: &tracing::Span) -> usize {
    let nodes: Vec<_> = nodes
        .into_iter()
        .filter(|n| !has_taint(n, TAINT_UNINITIALIZED))
        .collect();
    if nodes.is_empty() {
        return 0;
    }
    let refs: Vec<_> = nodes.iter().map(|n| node_ref(n)).collect();
    let answers = match ctx.cloud.lookup_instances(&refs).await {
        Ok(answers) => {
            span.record("outcome", "ok");
            answers
        }
        Err(err) => {
            tracing::warn!(error = %err, nodes = nodes.len(), "cannot look up instances for the address refresh");
            spans::failed(span, "cloud_lookup", &err);
            return 0;
        }
    };
    let work = nodes.into_iter().zip(answers).filter_map(|(node, answer)| match answer {
        Ok(instance) => Some((node, instance.metadata.addresses)),
        Err(err) => {
            tracing::warn!(node = %node.name_any(), error = %err, "error getting instance metadata for node addresses");
            None
        }
    });
    futures::stream::iter(work)
        .map(|(node, cloud)| async move {
            let name = node.name_any();
            let written = ctx
                .writer
                .write_from(&ctx.nodes, &*node, |fresh| {
                    plan::refresh_addresses(fresh, &cloud)
                        .map(|patch| patch.map(Patches::status).unwrap_or_default())
                })
                .await;
            match finish_write(&name, written) {
                Ok(Some(_)) => {
                    tracing::info!(node = %name, "updated node addresses from the cloud");
                    true
                }
                Ok(None) => false,
                Err(err) => {
                    tracing::warn!(node = %name, error = %err, "failed to update node addresses");
                    false
                }
            }
        })
        .buffer_unordered(parallelism.max(1))
        .filter(|updated| std::future::ready(*updated))
        .count()
        .await
}
