//! `cloud-node-controller`: initializes Nodes from the cloud and keeps their addresses fresh.
//!
//! # Layout
//! - [`plan`]: pure decisions (labels, providerID, taints, addresses) with table tests.
//! - [`sync`]: the reconcile of one node (initial sync, or beta→GA labels) and its writes.
//! - [`refresh`]: the periodic address refresh, with batched cloud lookups.
//! - [`metrics`]: upstream's two delay histograms.

use std::{sync::Arc, time::Duration};

use controller_kit::runner::Context;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::{
    Api,
    runtime::{Controller, controller, watcher},
};

pub mod metrics;
pub mod plan;
pub mod refresh;
pub mod sync;

/// The node controller's own flags (upstream names and defaults).
#[derive(Debug, Clone, clap::Args)]
pub struct NodeControllerArgs {
    /// Nodes initialized in parallel.
    #[arg(long = "concurrent-node-syncs", default_value_t = 1)]
    pub concurrent_node_syncs: u16,
    /// Period of the address refresh of initialized nodes.
    #[arg(long = "node-status-update-frequency", default_value = "5m", value_parser = humantime::parse_duration)]
    pub node_status_update_frequency: Duration,
    /// Address patches in parallel during a refresh; 0 means `--concurrent-node-syncs`.
    #[arg(long = "concurrent-node-status-updates", default_value_t = 0)]
    pub concurrent_node_status_updates: u16,
}

impl NodeControllerArgs {
    /// Checks the values types cannot.
    pub fn validate(&self) -> Result<(), String> {
        if self.concurrent_node_syncs == 0 {
            return Err("--concurrent-node-syncs must be at least 1".into());
        }
        if self.node_status_update_frequency.is_zero() {
            return Err("--node-status-update-frequency must be positive".into());
        }
        Ok(())
    }
}

/// Runs the controller until `ctx.shutdown` is cancelled.
pub async fn run(ctx: Context, args: NodeControllerArgs) {
    metrics::register();
    let api: Api<Node> = Api::all(ctx.client.clone());
    let state = Arc::new(sync::State::new(&ctx));
    let controller = Controller::new(api.clone(), watcher::Config::default())
        .with_config(controller::Config::default().concurrency(args.concurrent_node_syncs));
    let refresher = refresh::Refresher {
        store: controller.store(),
        api,
        gateway: ctx.gateway.clone(),
        period: args.node_status_update_frequency,
        parallelism: match args.concurrent_node_status_updates {
            0 => args.concurrent_node_syncs,
            n => n,
        },
    };
    let refresh = tokio::spawn(refresher.run(ctx.shutdown.clone()));
    controller
        .graceful_shutdown_on(ctx.shutdown.clone().cancelled_owned())
        .run(sync::reconcile, sync::error_policy, state)
        .for_each(|result| async move {
            if let Err(err) = result {
                tracing::debug!(error = %err, "reconcile failed");
            }
        })
        .await;
    refresh.abort();
}
