//! The node controller's wiring: the Node watch and work queue, and the periodic address refresh.

use std::{sync::Arc, time::Duration};

use controller_kit::{
    events::Events, gateway::BatchingLookups, names::controllers::CLOUD_NODE, patch::Writer, runner::Runtime,
    workqueue::WorkQueue,
};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::{
    Api,
    runtime::{
        Controller, WatchStreamExt, controller,
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
    let ctx = Arc::new(
        Context::new(
            nodes.clone(),
            // Nodes initializing at once share BatchLookupInstances calls.
            Arc::new(BatchingLookups::new(Arc::new(runtime.gateway.clone()))),
            Writer::new(CLOUD_NODE, runtime.leadership.clone()),
            Events::new(runtime.client.clone(), CLOUD_NODE, None),
            Metrics::register(&runtime.metrics),
        )
        .with_queue(queue.clone()),
    );
    // What Controller::new does, with the queue counting what the watch delivers.
    let (store, writer) = reflector::store();
    let watch = queue.observe(reflector::reflector(
        writer,
        watcher(nodes, watcher::Config::default()),
    ));
    let controller = Controller::for_stream(watch.applied_objects(), store)
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
        tracing::debug!(updated, "node address refresh done");
    }
}
