//! The service controller's wiring: the shard leases, the Node watch and the node-set sync, the
//! Service watch and its work queue.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use controller_kit::{
    cluster_identity::cluster_identity,
    events::Events,
    names::{callers::SERVICE_CONTROLLER, controllers::SERVICE_LB},
    node_watch::watch_node_changes,
    runner::Runtime,
    shards::{Gained, Shards},
    workqueue::WorkQueue,
};
use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::{Node, Service};
use kube::{
    Api,
    runtime::{
        Controller, controller,
        reflector::{self, ObjectRef, Store},
        watcher,
    },
};
use tokio::sync::Notify;
use tokio_stream::wrappers::{UnboundedReceiverStream, WatchStream};
use tokio_util::sync::CancellationToken;

use crate::{
    config::{Config, NODE_SYNC_MAX_DELAY, PROVIDER_RECHECK, SHARDS},
    metrics::Metrics,
    plan,
    reconcile::{self, Context, shard_key},
};

/// Runs the controller until `runtime.shutdown` is cancelled, then lets the syncs in flight
/// finish and releases this replica's shards.
pub async fn run(runtime: Runtime, config: Config) {
    let args = &runtime.leader_args;
    let shards = if args.enabled {
        Shards::elected(SHARDS)
    } else {
        Shards::unconditional(SHARDS)
    };
    let release = CancellationToken::new();
    let leases = args.enabled.then(|| {
        // A dry-run replica's shard and member leases are its own.
        let group = runtime
            .dry_run
            .lease_name(&config.shard_group(SERVICE_LB, args.resource_name.as_deref()));
        let (shards, client, args, release) = (
            shards.clone(),
            runtime.lease_client.clone(),
            args.clone(),
            release.clone(),
        );
        tokio::spawn(async move { shards.run(client, &args, &group, release).await })
    });

    let (nodes, node_changes) = watch_backends(Api::all(runtime.client.clone()));
    let (retry, retries) = tokio::sync::mpsc::unbounded_channel();
    let instance = args.identity.clone().or_else(|| std::env::var("HOSTNAME").ok());
    // Upstream's queue name: the `workqueue_*{name="service"}` series match upstream's dashboards.
    let queue = WorkQueue::register(&runtime.metrics, "service");
    let cluster_id = cluster_identity(&runtime.client, &runtime.shutdown).await;
    let ctx = Arc::new(
        Context::new(
            runtime.client.clone(),
            Arc::new(runtime.gateway.clone().with_cluster_id(cluster_id)),
            runtime.cluster_name.clone(),
            config.load_balancer_class.clone(),
            shards.clone(),
            Events::new(runtime.client.clone(), SERVICE_CONTROLLER, instance)
                .with_dry_run(runtime.dry_run.clone()),
            Metrics::register(&runtime.metrics, &shards),
            nodes.clone(),
            retry,
        )
        .with_provider(runtime.gateway.provider().clone())
        .with_queue(queue.clone())
        .with_dry_run(runtime.dry_run.clone()),
    );

    // No Service is synced before the node set is known: its load balancer would get no backends.
    tokio::select! {
        () = runtime.shutdown.cancelled() => {}
        ready = nodes.wait_until_ready() => if ready.is_ok() {
            // What Controller::new does, with the queue counting what the watch delivers.
            let (store, writer) = reflector::store();
            let api = Api::<Service>::all(runtime.client.clone());
            let watch = queue.observe(reflector::reflector(
                writer,
                controller_kit::watch_backoff::retrying(watcher(api, watcher::Config::default())),
            ));
            let controller = Controller::for_stream(controller_kit::relist::applied_objects(watch), store)
                .trigger_backoff(controller_kit::watch_backoff::AlreadyBackedOff)
                .with_config(controller::Config::default().concurrency(config.concurrent_service_syncs));
            let services = controller.store();
            let node_sync = tokio::spawn(sync_on_node_changes(
                ctx.clone(),
                services.clone(),
                node_changes,
                config.node_sync_delay,
                usize::from(config.concurrent_service_syncs),
                runtime.shutdown.clone(),
            ));
            let recheck = tokio::spawn(recheck_provider(ctx.clone(), runtime.shutdown.clone()));
            let taken_over = taken_over(&ctx, &shards, services);
            // Another provider behind the gateway (a vendor swap): every Service is looked at
            // again, so those held by the former provider are reported (and those that waited
            // for load balancers, or for their provider to come back, are synced).
            let swapped = WatchStream::from_changes(runtime.gateway.provider().subscribe()).map(|_| ());
            controller
                .reconcile_on(queued(&queue, taken_over))
                .reconcile_on(queued(&queue, UnboundedReceiverStream::new(retries)))
                .reconcile_all_on(swapped)
                .graceful_shutdown_on(runtime.shutdown.clone().cancelled_owned())
                .run(reconcile::reconcile, reconcile::error_policy, ctx.clone())
                .for_each(|result| async move {
                    if let Err(err) = result {
                        tracing::debug!(error = %err, "reconcile failed");
                    }
                })
                .await;
            node_sync.abort();
            recheck.abort();
        }
    }
    // Every sync has finished (graceful shutdown): the shards may go to other replicas.
    release.cancel();
    if let Some(leases) = leases {
        let _ = leases.await;
    }
}

/// `refs`, counted as queued by the work-queue metrics as they go to the controller.
fn queued(
    queue: &WorkQueue,
    refs: impl futures::Stream<Item = ObjectRef<Service>> + Send + 'static,
) -> impl futures::Stream<Item = ObjectRef<Service>> + Send + 'static {
    let queue = queue.clone();
    refs.inspect(move |r| {
        queue.added(format!(
            "{}/{}",
            r.namespace.as_deref().unwrap_or_default(),
            r.name
        ));
    })
}

/// The Services of each shard this replica takes over or acts on again, to sync them: syncs asked
/// for while it could not act were dropped. What the previous owner of a shard taken over synced
/// is forgotten: each of its Services is ensured anew.
fn taken_over(
    ctx: &Arc<Context>,
    shards: &Shards,
    services: Store<Service>,
) -> impl futures::Stream<Item = ObjectRef<Service>> + Send + 'static {
    let acquisitions = shards.acquisitions().map(UnboundedReceiverStream::new);
    let ctx = ctx.clone();
    stream::iter(acquisitions)
        .flatten()
        .flat_map(move |(shard, gained)| {
            if gained == Gained::Acquired {
                ctx.forget_shard(shard);
            }
            let refs: Vec<ObjectRef<Service>> = services
                .state()
                .iter()
                .filter(|svc| ctx.shards.shard_of(&shard_key(svc)) == shard)
                .map(|svc| ObjectRef::from_obj(&**svc))
                .collect();
            stream::iter(refs)
        })
}

/// While Services wait for a provider that serves load balancers or for their former provider:
/// asks the gateway every [`PROVIDER_RECHECK`] ([`reconcile::recheck_provider`]), so that a swap
/// back, which nothing else this controller does would notice while it makes no call for them,
/// syncs them within seconds.
async fn recheck_provider(ctx: Arc<Context>, shutdown: CancellationToken) {
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(PROVIDER_RECHECK) => {}
        }
        reconcile::recheck_provider(&ctx).await;
    }
}

/// Watches the Nodes into a cache and signals each change of the backends (a node added,
/// deleted, excluded, tainted for deletion, or with a new providerID), comparing each node with
/// what it was, not the whole set.
fn watch_backends(api: Api<Node>) -> (Store<Node>, Arc<Notify>) {
    let backend =
        |node: &Node| plan::is_backend(node).then(|| controller_kit::node::provider_id(node).to_owned());
    let (store, changed, _watch) = watch_node_changes(api, backend, true);
    (store, changed)
}

/// After each change of the backends, once the node set has been quiet for a moment: one
/// backends update of every load balancer whose backends changed.
async fn sync_on_node_changes(
    ctx: Arc<Context>,
    services: Store<Service>,
    changes: Arc<Notify>,
    quiet: Duration,
    parallelism: usize,
    shutdown: CancellationToken,
) {
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = changes.notified() => {}
        }
        // Nodes joining together cost one update per load balancer, not one per node.
        let first = Instant::now();
        while !quiet.is_zero() && first.elapsed() < NODE_SYNC_MAX_DELAY {
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = changes.notified() => {}
                () = tokio::time::sleep(quiet) => break,
            }
        }
        let candidates: Vec<Arc<Service>> = services
            .state()
            .into_iter()
            .filter(|svc| ctx.is_synced(&reconcile::key_of(svc)))
            .collect();
        let failed = reconcile::sync_nodes(&ctx, candidates, parallelism).await;
        tracing::debug!(failed, "node-set sync done");
    }
}
