//! Periodic address refresh of initialized nodes, with one batched cloud lookup per period
//! instead of upstream's one call per node (the classic cause of cloud API throttling at scale).

use std::time::Duration;

use controller_kit::{
    gateway::GatewayClient,
    names::{TAINT_UNINITIALIZED, controllers::CLOUD_NODE},
    node::{has_taint, node_ref},
    patch::{Target, guarded_merge_patch},
};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::{Api, ResourceExt, runtime::reflector::Store};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::plan;

/// Refreshes addresses every period.
pub struct Refresher {
    /// The controller's node cache.
    pub store: Store<Node>,
    /// Nodes API.
    pub api: Api<Node>,
    /// Gateway.
    pub gateway: GatewayClient,
    /// Period (`--node-status-update-frequency`).
    pub period: Duration,
    /// Parallel patches.
    pub parallelism: u16,
}

impl Refresher {
    /// Runs until cancelled: once the cache is filled, then every period after a pass ends.
    pub async fn run(self, shutdown: CancellationToken) {
        if self.store.wait_until_ready().await.is_err() {
            return;
        }
        loop {
            let updated = self.refresh_once().await;
            tracing::debug!(updated, "node address refresh done");
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(self.period) => {}
            }
        }
    }

    /// One pass over every initialized node; returns how many nodes got new addresses.
    pub async fn refresh_once(&self) -> usize {
        let nodes: Vec<_> = self
            .store
            .state()
            .into_iter()
            .filter(|n| !has_taint(n, TAINT_UNINITIALIZED))
            .collect();
        if nodes.is_empty() {
            return 0;
        }
        let refs: Vec<_> = nodes.iter().map(|n| node_ref(n)).collect();
        let answers = match self.gateway.lookup_instances(&refs).await {
            Ok(answers) => answers,
            Err(err) => {
                tracing::warn!(error = %err, nodes = nodes.len(), "cannot look up instances for the address refresh");
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
            .map(|(node, cloud)| async move { self.update_addresses(&node.name_any(), &cloud).await })
            .buffer_unordered(usize::from(self.parallelism.max(1)))
            .filter(|updated| std::future::ready(*updated))
            .count()
            .await
    }

    async fn update_addresses(&self, name: &str, cloud: &[k8s_openapi::api::core::v1::NodeAddress]) -> bool {
        let written = guarded_merge_patch(&self.api, name, Target::Status, CLOUD_NODE, |fresh| {
            if has_taint(fresh, TAINT_UNINITIALIZED) {
                return None;
            }
            match plan::wanted_addresses(fresh, cloud) {
                Ok(Some(wanted)) if plan::addresses_differ(fresh, &wanted) => {
                    Some(json!({ "status": { "addresses": wanted } }))
                }
                Ok(_) => None,
                Err(err) => {
                    tracing::warn!(node = %name, error = %err, "failed to update node addresses");
                    None
                }
            }
        })
        .await;
        match written {
            Ok(Some(_)) => {
                tracing::info!(node = %name, "updated node addresses from the cloud");
                true
            }
            Ok(None) => false,
            Err(err) if err.is_not_found() => false,
            Err(err) => {
                tracing::warn!(node = %name, error = %err, "error patching node with cloud addresses");
                false
            }
        }
    }
}
