//! One reconcile of the whole cluster's routes: one ListRoutes, the plan from the Node cache,
//! the cloud operations (at most `--concurrent-route-operations` at once), then each node's
//! `NetworkUnavailable` condition as soon as its routes are done. The decisions are in
//! [`crate::plan`]; this module does the I/O around them.

use std::{
    collections::HashMap,
    convert::Infallible,
    sync::Arc,
    time::{Duration, Instant},
};

use controller_kit::{
    events::Events,
    gateway::GatewayError,
    names::controllers::NODE_ROUTE,
    node::object_ref,
    patch::{WriteError, Writer},
    routes::{CloudRoutes, Route},
    spans,
};
use futures::future::join_all;
use k8s_openapi::{api::core::v1::Node, apimachinery::pkg::apis::meta::v1::Time, jiff::Timestamp};
use kube::{
    Api,
    runtime::reflector::{ObjectRef, Store},
};
use serde_json::Value;
use tokio::sync::Semaphore;
use tracing::{Instrument as _, field::Empty};

use crate::{
    metrics::Metrics,
    plan::{self, ClusterCidrs, Create, NodeFacts, NodeRoutes, Unrouted},
};

/// Condition writes at once (each is one API request).
const PARALLEL_WRITES: usize = 32;

/// How long to wait before asking again a gateway whose provider has no routes.
const NOT_IMPLEMENTED_PAUSE: Duration = Duration::from_secs(60);

/// What every reconcile gets.
pub struct Context {
    /// The Nodes API (condition writes).
    pub nodes_api: Api<Node>,
    /// The Node cache the watch fills: what the plan reads, never a list request.
    pub nodes: Store<Node>,
    /// The cloud's routes (the gateway; a fake in tests).
    pub cloud: Arc<dyn CloudRoutes>,
    /// `--cluster-name`, passed to every route call.
    pub cluster_name: String,
    /// `--cluster-cidr`.
    pub cluster_cidrs: ClusterCidrs,
    /// Guarded writes, fenced by this replica's leadership.
    pub writer: Writer,
    /// Best-effort events.
    pub events: Events,
    /// The controller's metrics.
    pub metrics: Metrics,
    /// Permits for cloud operations in flight (`--concurrent-route-operations`).
    operations: Semaphore,
    /// Permits for condition writes in flight.
    writes: Semaphore,
}

impl Context {
    /// A context over these clients and handles, with at most `concurrent_operations` creates
    /// and deletes in flight.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        nodes_api: Api<Node>,
        nodes: Store<Node>,
        cloud: Arc<dyn CloudRoutes>,
        cluster_name: String,
        cluster_cidrs: ClusterCidrs,
        writer: Writer,
        events: Events,
        metrics: Metrics,
        concurrent_operations: usize,
    ) -> Self {
        Self {
            nodes_api,
            nodes,
            cloud,
            cluster_name,
            cluster_cidrs,
            writer,
            events,
            metrics,
            operations: Semaphore::new(concurrent_operations.max(1)),
            writes: Semaphore::new(PARALLEL_WRITES),
        }
    }

    /// The cached node `name`, if it is still the node with `uid`.
    fn node(&self, name: &str, uid: &str) -> Option<Arc<Node>> {
        self.nodes
            .get(&ObjectRef::new(name))
            .filter(|n| n.metadata.uid.as_deref().unwrap_or_default() == uid)
    }
}

/// What a reconcile did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Routes created.
    pub created: usize,
    /// Routes deleted.
    pub deleted: usize,
    /// `NetworkUnavailable` conditions written.
    pub conditions_written: usize,
}

/// Why a reconcile failed; the next one (after [`error_policy`]'s delay, or a node change)
/// starts over from a fresh list.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// ListRoutes failed: nothing was created or deleted.
    #[error("cannot list the cloud's routes: {0}")]
    ListRoutes(#[source] GatewayError),
    /// Some creates or deletes failed (the others were made, the conditions written).
    #[error("{failed} of {attempted} route operations failed; the first: {first}")]
    Operations {
        /// How many failed.
        failed: usize,
        /// How many were attempted.
        attempted: usize,
        /// The first failure.
        first: GatewayError,
        /// The longest RETRY_AFTER among the failures.
        retry_after: Option<Duration>,
    },
    /// Some condition writes failed.
    #[error("cannot write the NetworkUnavailable condition of {failed} nodes; the first: {first}")]
    Conditions {
        /// How many failed.
        failed: usize,
        /// The first failure.
        first: String,
    },
}

impl Error {
    /// The delay the cloud asked for before it is asked again (RETRY_AFTER).
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::ListRoutes(err) => err
                .retry_after()
                .filter(|_| matches!(err, GatewayError::RetryAfter { .. })),
            Self::Operations { retry_after, .. } => *retry_after,
            Self::Conditions { .. } => None,
        }
    }

    /// Whether the gateway's provider has no routes (a gateway swapped for another vendor).
    pub fn not_implemented(&self) -> bool {
        matches!(
            self,
            Self::ListRoutes(GatewayError::NotImplemented(_))
                | Self::Operations {
                    first: GatewayError::NotImplemented(_),
                    ..
                }
        )
    }

    /// The error's label in `node_route_controller_reconcile_errors_total`.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::ListRoutes(_) => "list_routes",
            Self::Operations { .. } => "route_operations",
            Self::Conditions { .. } => "write",
        }
    }
}

/// When to try again after `err`, the `failures`-th failed reconcile in a row, with the resync
/// every `period`: after exactly the delay the cloud asked for (RETRY_AFTER); a minute when
/// the provider has no routes; else 1 s doubling, never later than the next resync would be.
/// A node change does not cut a RETRY_AFTER or a minute's pause short.
pub fn error_policy(err: &Error, failures: u32, period: Duration) -> Duration {
    if let Some(after) = err.retry_after() {
        return after;
    }
    if err.not_implemented() {
        return NOT_IMPLEMENTED_PAUSE.max(period);
    }
    let doubled = Duration::from_secs(1).saturating_mul(1 << failures.saturating_sub(1).min(16));
    doubled.min(period)
}

/// One reconcile of every route with the cluster's nodes (from the cache): one ListRoutes,
/// then the plan's creates and deletes, and each node's condition once its creates are done.
///
/// # Errors
/// [`Error`]: a failed list (then only nodes that have no `NetworkUnavailable` condition yet
/// get `NoRouteCreated`), failed operations, failed condition writes.
///
/// The root span of its own trace (`reconcile routes`: routes created and deleted, conditions
/// written, the outcome); the gateway calls it makes are its children.
pub async fn reconcile(ctx: &Context) -> Result<Outcome, Error> {
    let _timer = ctx.metrics.reconcile.count_and_measure();
    let span = controller_kit::reconcile_span!(
        "reconcile routes",
        NODE_ROUTE,
        created = Empty,
        deleted = Empty,
        conditions_written = Empty,
    );
    let result = reconcile_routes(ctx).instrument(span.clone()).await;
    if let Ok(outcome) = &result {
        span.record("created", outcome.created);
        span.record("deleted", outcome.deleted);
        span.record("conditions_written", outcome.conditions_written);
    }
    spans::record_outcome(&span, &result, Error::metric_label);
    if let Err(err) = &result {
        ctx.metrics.reconcile.failed(err.metric_label());
    }
    result
}

async fn reconcile_routes(ctx: &Context) -> Result<Outcome, Error> {
    ctx.metrics.route_sync.inc();
    let routes = match ctx.cloud.list_routes(&ctx.cluster_name).await {
        Ok(routes) => routes,
        Err(err) => {
            let now = Time(Timestamp::now());
            let nodes = ctx.nodes.state();
            let writes = nodes
                .iter()
                .filter(|n| plan::condition_patch_without_routes(n, &now).is_some())
                .map(|n| write_condition(ctx, n, |fresh| plan::condition_patch_without_routes(fresh, &now)));
            join_all(writes).await;
            return Err(Error::ListRoutes(err));
        }
    };
    let nodes = ctx.nodes.state();
    let facts: Vec<NodeFacts> = nodes.iter().map(|n| NodeFacts::of(n)).collect();
    let plan = plan::plan(&ctx.cluster_cidrs, &facts, &routes, false);
    if !plan.changes_nothing() {
        tracing::info!(
            routes = routes.len(),
            nodes = nodes.len(),
            create = plan.creates.len(),
            delete = plan.deletes.len() + plan.creates.iter().map(|c| c.replaces.len()).sum::<usize>(),
            "reconciling routes"
        );
    }
    let mut creates: HashMap<&str, Vec<&Create>> = HashMap::new();
    for create in &plan.creates {
        creates.entry(create.node.as_str()).or_default().push(create);
    }
    let deletes = join_all(plan.deletes.iter().map(|r| delete(ctx, r)));
    let per_node = join_all(
        plan.nodes
            .iter()
            .map(|n| node_routes(ctx, n, creates.remove(n.name.as_str()).unwrap_or_default())),
    );
    let (deleted, per_node) = futures::join!(deletes, per_node);

    let mut outcome = Outcome::default();
    let mut failures: Vec<GatewayError> = Vec::new();
    let mut write_failures: Vec<String> = Vec::new();
    for result in deleted {
        match result {
            Ok(true) => outcome.deleted += 1,
            Ok(false) => {}
            Err(err) => failures.push(err),
        }
    }
    for node in per_node {
        outcome.created += node.created;
        outcome.deleted += node.deleted;
        failures.extend(node.failures);
        match node.condition {
            Ok(true) => outcome.conditions_written += 1,
            Ok(false) => {}
            Err(err) => write_failures.push(err),
        }
    }
    let attempted = plan.deletes.len() + plan.creates.iter().map(|c| 1 + c.replaces.len()).sum::<usize>();
    if let Some(first) = failures.first().cloned() {
        let retry_after = failures
            .iter()
            .filter_map(|e| match e {
                GatewayError::RetryAfter { after, .. } => Some(*after),
                _ => None,
            })
            .max();
        return Err(Error::Operations {
            failed: failures.len(),
            attempted,
            first,
            retry_after,
        });
    }
    if let Some(first) = write_failures.first().cloned() {
        return Err(Error::Conditions {
            failed: write_failures.len(),
            first,
        });
    }
    Ok(outcome)
}

/// What was done for one node.
struct NodeDone {
    created: usize,
    deleted: usize,
    failures: Vec<GatewayError>,
    /// Whether its condition was written; the error of the write.
    condition: Result<bool, String>,
}

/// One node's creates (each after the routes it replaces are deleted), then its condition.
async fn node_routes(ctx: &Context, routes: &NodeRoutes, creates: Vec<&Create>) -> NodeDone {
    let results = join_all(creates.iter().map(|c| create(ctx, c))).await;
    let mut done = NodeDone {
        created: 0,
        deleted: 0,
        failures: Vec::new(),
        condition: Ok(false),
    };
    let mut failed: Vec<String> = Vec::new();
    for (create, result) in creates.iter().zip(results) {
        done.deleted += result.deleted;
        match result.created {
            Ok(true) => done.created += 1,
            Ok(false) => failed.push(create.route.destination_cidr.clone()),
            Err(err) => {
                failed.push(create.route.destination_cidr.clone());
                done.failures.push(err);
            }
        }
    }
    let Some(node) = ctx.nodes.get(&ObjectRef::new(&routes.name)) else {
        return done;
    };
    let created = routes.routes_created(&failed);
    let now = Time(Timestamp::now());
    done.condition =
        match write_condition(ctx, &node, |fresh| plan::condition_patch(fresh, created, &now)).await {
            Ok(written) => {
                if written && !created {
                    explain_unrouted(ctx, &node, routes).await;
                }
                Ok(written)
            }
            Err(err) => Err(err),
        };
    done
}

/// A create's result: whether the route was made (`Ok(false)`: not attempted, its node is gone
/// or this replica stopped leading), and the routes deleted before it.
struct Created {
    created: Result<bool, GatewayError>,
    deleted: usize,
}

/// Deletes the routes `create` replaces, then creates its route, unless its node is gone by
/// then: a create for a node that no longer exists is not made (nor retried: the next plan has
/// no such node). A failure is reported on the node as `FailedToCreateRoute`.
async fn create(ctx: &Context, create: &Create) -> Created {
    let mut deleted = 0;
    for old in &create.replaces {
        match delete(ctx, old).await {
            Ok(true) => deleted += 1,
            Ok(false) => {
                return Created {
                    created: Ok(false),
                    deleted,
                };
            }
            Err(err) => {
                return Created {
                    created: Err(err),
                    deleted,
                };
            }
        }
    }
    let _permit = ctx.operations.acquire().await;
    let Some(node) = ctx.node(&create.node, &create.uid) else {
        tracing::info!(node = %create.node, cidr = %create.route.destination_cidr, "the node is gone; no route is created for it");
        return Created {
            created: Ok(false),
            deleted,
        };
    };
    if !ctx.writer.leadership().may_act() {
        return Created {
            created: Ok(false),
            deleted,
        };
    }
    let started = Instant::now();
    let result = ctx
        .cloud
        .create_route(&ctx.cluster_name, &create.uid, &create.route)
        .await;
    ctx.metrics.operation("create", result.is_ok());
    let created = match result {
        Ok(()) => {
            tracing::info!(node = %create.node, cidr = %create.route.destination_cidr, hint = %create.uid, elapsed = ?started.elapsed(), "created route");
            Ok(true)
        }
        Err(err) => {
            let note = format!(
                "Could not create route {} {} for node {} after {:?}: {err}",
                create.uid,
                create.route.destination_cidr,
                create.node,
                started.elapsed()
            );
            tracing::warn!("{note}");
            ctx.events
                .warning(&object_ref(&node), "FailedToCreateRoute", "CreateRoute", note)
                .await;
            Err(err)
        }
    };
    Created { created, deleted }
}

/// Deletes `route`; `Ok(false)` when this replica stopped leading.
async fn delete(ctx: &Context, route: &Route) -> Result<bool, GatewayError> {
    let _permit = ctx.operations.acquire().await;
    if !ctx.writer.leadership().may_act() {
        return Ok(false);
    }
    let started = Instant::now();
    let result = ctx.cloud.delete_route(&ctx.cluster_name, route).await;
    ctx.metrics.operation("delete", result.is_ok());
    match &result {
        Ok(()) => {
            tracing::info!(route = %route.name, cidr = %route.destination_cidr, target = %route.target_node, blackhole = route.blackhole, elapsed = ?started.elapsed(), "deleted route")
        }
        Err(err) => {
            tracing::warn!(route = %route.name, cidr = %route.destination_cidr, error = %err, elapsed = ?started.elapsed(), "could not delete route")
        }
    }
    result.map(|()| true)
}

/// Writes the condition `decide` returns for the node (guarded by its resourceVersion, planned
/// again from a fresh read after a conflict); whether it wrote. A node gone meanwhile is not
/// an error.
async fn write_condition<F>(ctx: &Context, node: &Node, decide: F) -> Result<bool, String>
where
    F: Fn(&Node) -> Option<Value>,
{
    let _permit = ctx.writes.acquire().await;
    let written = ctx
        .writer
        .write_status_strategic_from(&ctx.nodes_api, node, |fresh| Ok::<_, Infallible>(decide(fresh)))
        .await;
    let name = node.metadata.name.as_deref().unwrap_or_default();
    match written {
        Ok(Some(node)) => {
            let reason = plan::network_unavailable(&node)
                .and_then(|c| c.reason.clone())
                .unwrap_or_default();
            let reason = if reason == plan::REASON_ROUTE_CREATED {
                plan::REASON_ROUTE_CREATED
            } else {
                plan::REASON_NO_ROUTE_CREATED
            };
            tracing::info!(node = name, reason, "NetworkUnavailable condition written");
            ctx.metrics
                .conditions
                .get_or_create(&crate::metrics::ConditionLabels { reason })
                .inc();
            Ok(true)
        }
        Ok(None) => Ok(false),
        Err(err) if err.is_not_found() => Ok(false),
        Err(WriteError::NotLeading) => Ok(false),
        Err(err) => {
            tracing::warn!(node = name, error = %err, "cannot write the NetworkUnavailable condition");
            Err(format!("node {name}: {err}"))
        }
    }
}

/// Says on the node why a pod CIDR of it got no route (once, when its condition turns
/// `NoRouteCreated`).
async fn explain_unrouted(ctx: &Context, node: &Node, routes: &NodeRoutes) {
    for (cidr, why) in &routes.unrouted {
        let note = match why {
            Unrouted::OutsideClusterCidr => format!(
                "pod CIDR {cidr} lies outside --cluster-cidr {}: no route is created for it",
                ctx.cluster_cidrs
            ),
            Unrouted::HeldBy(other) => {
                format!("pod CIDR {cidr} is also node {other}'s, and the route to it is {other}'s")
            }
        };
        ctx.events
            .warning(&object_ref(node), "FailedToCreateRoute", "CreateRoute", note)
            .await;
    }
}
