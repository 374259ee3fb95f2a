//! The route controller's wiring: the Node watch and its cache, what calls for a reconcile
//! (a node added or deleted, its pod CIDRs or addresses changed), the debounce that makes nodes
//! joining together cost one reconcile, the periodic safety resync, the pauses after failures.

use std::sync::Arc;

use controller_kit::{
    events::Events,
    names::{callers::ROUTE_CONTROLLER, controllers::NODE_ROUTE},
    node_watch::watch_node_changes,
    patch::Writer,
    runner::Runtime,
};
use k8s_openapi::api::core::v1::Node;
use kube::{Api, runtime::reflector::Store};
use tokio::{
    sync::Notify,
    time::{Duration, Instant},
};
use tokio_util::sync::CancellationToken;

use crate::{
    config::{Config, Mode, NODE_SYNC_MAX_DELAY},
    metrics::Metrics,
    plan::RouteInputs,
    reconcile::{self, Context},
};

/// Runs the controller until `runtime.shutdown` is cancelled: once the Node cache is filled, a
/// reconcile at once, then one after each burst of node changes (watch mode) and one every
/// `--route-reconciliation-period`.
pub async fn run(runtime: Runtime, config: Config) {
    let cluster_cidrs = match config.cluster_cidrs() {
        Ok(cidrs) => cidrs,
        Err(err) => {
            // `validate` refused this already; never reached.
            tracing::error!("{err}");
            return;
        }
    };
    let api: Api<Node> = Api::all(runtime.client.clone());
    let (nodes, changes, watch) = watch_nodes(api.clone());
    let instance = runtime
        .leader_args
        .identity
        .clone()
        .or_else(|| std::env::var("HOSTNAME").ok());
    let ctx = Context::new(
        api,
        nodes.clone(),
        Arc::new(runtime.gateway.clone()),
        runtime.cluster_name.clone(),
        cluster_cidrs,
        Writer::new(NODE_ROUTE, runtime.leadership.clone()).with_dry_run(runtime.dry_run.clone()),
        Events::new(runtime.client.clone(), ROUTE_CONTROLLER, instance).with_dry_run(runtime.dry_run.clone()),
        Metrics::register(&runtime.metrics),
        usize::from(config.concurrent_route_operations),
    );
    tokio::select! {
        () = runtime.shutdown.cancelled() => {}
        ready = nodes.wait_until_ready() => if ready.is_ok() {
            tracing::info!(
                cluster_cidr = %ctx.cluster_cidrs,
                mode = ?config.mode,
                period = ?config.route_reconciliation_period,
                "reconciling pod-CIDR routes"
            );
            reconcile_loop(&ctx, &config, &changes, &runtime.shutdown).await;
        }
    }
    watch.abort();
}

async fn reconcile_loop(ctx: &Context, config: &Config, changes: &Notify, shutdown: &CancellationToken) {
    let period = config.route_reconciliation_period;
    let mut failures = 0;
    loop {
        let started = Instant::now();
        // Not before this, whatever changes (the cloud asked for a pause, or has no routes).
        let mut not_before = None;
        let next = match reconcile::reconcile(ctx).await {
            Ok(outcome) => {
                failures = 0;
                if outcome != reconcile::Outcome::default() {
                    tracing::info!(?outcome, elapsed = ?started.elapsed(), "routes reconciled");
                }
                started + period
            }
            Err(err) => {
                failures += 1;
                let delay = reconcile::error_policy(&err, failures, period);
                tracing::warn!(error = %err, retry_in = ?delay, "route reconcile failed");
                if err.retry_after().is_some() || err.not_implemented() {
                    not_before = Some(Instant::now() + delay);
                }
                match config.mode {
                    // Upstream's loop: the next pass a period after this one started.
                    Mode::Periodic => started + period,
                    Mode::Watch => Instant::now() + delay,
                }
            }
        };
        let go = match config.mode {
            Mode::Periodic => wait(shutdown, next).await,
            Mode::Watch => {
                tokio::select! {
                    () = shutdown.cancelled() => false,
                    () = tokio::time::sleep_until(next) => true,
                    () = changes.notified() => {
                        settle(changes, config.node_sync_delay, shutdown).await
                            && match not_before {
                                Some(at) if at > Instant::now() => wait(shutdown, at).await,
                                _ => true,
                            }
                    }
                }
            }
        };
        if !go {
            return;
        }
    }
}

/// Sleeps until `at`; `false` when shut down first.
async fn wait(shutdown: &CancellationToken, at: Instant) -> bool {
    tokio::select! {
        () = shutdown.cancelled() => false,
        () = tokio::time::sleep_until(at) => true,
    }
}

/// After a node change: waits until the nodes have been quiet for `quiet`, at most
/// [`NODE_SYNC_MAX_DELAY`] after the first change; `false` when shut down first.
async fn settle(changes: &Notify, quiet: Duration, shutdown: &CancellationToken) -> bool {
    let deadline = Instant::now() + NODE_SYNC_MAX_DELAY;
    while !quiet.is_zero() {
        let until = (Instant::now() + quiet).min(deadline);
        tokio::select! {
            () = shutdown.cancelled() => return false,
            () = changes.notified() => if Instant::now() >= deadline { break },
            () = tokio::time::sleep_until(until) => break,
        }
    }
    true
}

/// Watches the Nodes into a cache and signals each change that concerns routes (a node added
/// or deleted, its UID, pod CIDRs or addresses changed), comparing each node with what it was.
/// A re-list after the watch fell behind signals only if it found such a change.
fn watch_nodes(api: Api<Node>) -> (Store<Node>, Arc<Notify>, tokio::task::JoinHandle<()>) {
    watch_node_changes(api, |node| Some(RouteInputs::of(node)), false)
}
