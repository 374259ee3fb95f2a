//! The node controller's wiring: the Node watch and work queue, and the periodic address refresh.

use std::{sync::Arc, time::Duration};

use controller_kit::{
    events::Events,
    gateway::BatchingLookups,
    gateway_batching::{LOOK_AHEAD_ANSWER_TTL, PendingNodes},
    names::{TAINT_UNINITIALIZED, controllers::CLOUD_NODE},
    node::{has_taint, node_ref},
    patch::Writer,
    runner::Runtime,
    workqueue::WorkQueue,
};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::{
    Api,
    runtime::{
        Controller, controller,
        reflector::{self, Store},
        watcher,
    },
};
use tokio_util::sync::CancellationToken;

use crate::{
    config::Config,
    metrics::Metrics,
    reconcile::{self, Context},
};

/// Runs the controller until `runtime.shutdown` is cancelled.
pub async fn run(runtime: Runtime, config: Config) {
    let nodes: Api<Node> = Api::all(runtime.client.clone());
    // Upstream's queue name: the `workqueue_*{name="Nodes"}` series match upstream's dashboards.
    let queue = WorkQueue::register(&runtime.metrics, "Nodes");
    let (store, writer) = reflector::store();
    // Nodes initializing at once share BatchLookupInstances calls, which also ask for the
    // tainted nodes still waiting for a worker.
    let lookups = BatchingLookups::new(Arc::new(runtime.gateway.clone()))
        .looking_ahead(
            awaiting_initialization(store.clone()),
            usize::from(config.lookup_ahead),
            LOOK_AHEAD_ANSWER_TTL,
        )
        .answered_by(runtime.gateway.provider().clone());
    let ctx = Arc::new(
        Context::new(
            nodes.clone(),
            Arc::new(lookups),
            Writer::new(CLOUD_NODE, runtime.leadership.clone()).with_dry_run(runtime.dry_run.clone()),
            Events::new(runtime.client.clone(), CLOUD_NODE, None).with_dry_run(runtime.dry_run.clone()),
            Metrics::register(&runtime.metrics),
        )
        .with_queue(queue.clone()),
    );
    // What Controller::new does, with the queue counting what the watch delivers.
    let watch = queue.observe(reflector::reflector(
        writer,
        controller_kit::watch_backoff::retrying(watcher(nodes, watcher::Config::default())),
    ));
    let controller = Controller::for_stream(controller_kit::relist::applied_objects(watch), store)
        .trigger_backoff(controller_kit::watch_backoff::AlreadyBackedOff)
        .with_config(controller::Config::default().concurrency(config.concurrent_node_syncs));
    let refresh = tokio::spawn(refresh_periodically(
        ctx.clone(),
        controller.store(),
        config.node_status_update_frequency,
        config.status_update_parallelism(),
        runtime.shutdown.clone(),
    ));
    controller
        .graceful_shutdown_on(runtime.shutdown.clone().cancelled_owned())
        .run(reconcile::reconcile, reconcile::error_policy, ctx)
        .for_each(|result| async move {
            if let Err(err) = result {
                tracing::debug!(error = %err, "reconcile failed");
            }
        })
        .await;
    refresh.abort();
}

/// The nodes in the cache that carry the uninitialized taint, as their reconciles name them.
fn awaiting_initialization(store: Store<Node>) -> PendingNodes {
    Arc::new(move || {
        store
            .state()
            .iter()
            .filter(|node| has_taint(node, TAINT_UNINITIALIZED))
            .map(|node| node_ref(node))
            .collect()
    })
}

/// A refresh pass every `period` after the last one ended, over the nodes in the cache (the
/// reconciles initialize new nodes meanwhile; upstream's first pass too finds them tainted).
async fn refresh_periodically(
    ctx: Arc<Context>,
    store: Store<Node>,
    period: Duration,
    parallelism: usize,
    shutdown: CancellationToken,
) {
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(period) => {}
        }
        let updated = reconcile::refresh_addresses(&ctx, store.state(), parallelism).await;
        ctx.metrics.address_refreshes.inc();
        tracing::debug!(updated, "node address refresh done");
    }
}
