//! The lifecycle controller's wiring: a Node cache and the periodic pass over it.

use std::sync::Arc;

use controller_kit::{
    events::Events, names::controllers::CLOUD_NODE_LIFECYCLE, patch::Writer, runner::Runtime,
};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::{
    Api,
    runtime::{WatchStreamExt, reflector, watcher},
};

use crate::{
    config::Config,
    metrics::Metrics,
    reconcile::{self, Context},
};

/// Runs the controller until `runtime.shutdown` is cancelled: once the cache is filled, a pass
/// every `--node-monitor-period` after the last one ended.
pub async fn run(runtime: Runtime, config: Config) {
    let nodes: Api<Node> = Api::all(runtime.client.clone());
    let ctx = Context::new(
        nodes.clone(),
        Arc::new(runtime.gateway.clone()),
        Writer::new(CLOUD_NODE_LIFECYCLE, runtime.leadership.clone()).with_dry_run(runtime.dry_run.clone()),
        Events::new(runtime.client.clone(), CLOUD_NODE_LIFECYCLE, None).with_dry_run(runtime.dry_run.clone()),
        Metrics::register(&runtime.metrics),
    );
    let (store, writer) = reflector::store();
    let watch = controller_kit::watch_backoff::retrying(watcher(nodes, watcher::Config::default()))
        .reflect(writer)
        .for_each(|_| async {});
    let watch = tokio::spawn(watch);
    if store.wait_until_ready().await.is_ok() {
        loop {
            reconcile::monitor_nodes(&ctx, &store.state()).await;
            tokio::select! {
                () = runtime.shutdown.cancelled() => break,
                () = tokio::time::sleep(config.node_monitor_period) => {}
            }
        }
    }
    watch.abort();
}
