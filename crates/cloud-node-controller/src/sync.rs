//! The reconcile of one node: initial sync of a tainted node, beta→GA labels of an initialized one.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use controller_kit::{
    events::Events,
    gateway::{GatewayClient, GatewayError},
    names::{TAINT_UNINITIALIZED, controllers::CLOUD_NODE},
    node::{has_taint, node_ref, object_ref},
    patch::{Target, WriteError, guarded_merge_patch},
    runner::Context,
};
use k8s_openapi::{api::core::v1::Node, jiff::Timestamp};
use kube::{Api, ResourceExt, runtime::controller::Action};
use serde_json::json;

use crate::{metrics, plan};

/// What reconciles share.
pub struct State {
    api: Api<Node>,
    gateway: GatewayClient,
    events: Events,
    /// Consecutive failures per node, for exponential requeue.
    failures: Mutex<HashMap<String, u32>>,
}

impl State {
    /// State for the controller's run.
    pub fn new(ctx: &Context) -> Self {
        Self {
            api: Api::all(ctx.client.clone()),
            gateway: ctx.gateway.clone(),
            events: Events::new(ctx.client.clone(), CLOUD_NODE, None),
            failures: Mutex::new(HashMap::new()),
        }
    }

    fn failures(&self) -> std::sync::MutexGuard<'_, HashMap<String, u32>> {
        self.failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Why a node could not be synced; it is retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// The cloud lookup failed (the node stays tainted).
    #[error("failed to get instance metadata for node {node}: {source}")]
    Metadata {
        /// Node name.
        node: String,
        /// The gateway's error.
        #[source]
        source: GatewayError,
    },
    /// The node cannot be initialized yet.
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

/// Reconciles one node.
pub async fn reconcile(node: Arc<Node>, state: Arc<State>) -> Result<Action, SyncError> {
    let name = node.name_any();
    let result = if has_taint(&node, TAINT_UNINITIALIZED) {
        initialize(&node, &state).await
    } else {
        reconcile_labels(&name, &state).await
    };
    if result.is_ok() {
        state.failures().remove(&name);
    }
    result.map(|()| Action::await_change())
}

/// Requeues a failed node with exponential backoff (1 s doubling, at most 5 min).
pub fn error_policy(node: Arc<Node>, err: &SyncError, state: Arc<State>) -> Action {
    let name = node.name_any();
    let mut failures = state.failures();
    let count = failures.entry(name.clone()).or_insert(0);
    *count = count.saturating_add(1);
    let delay = Duration::from_secs(1u64 << (*count - 1).min(9)).min(Duration::from_secs(300));
    tracing::warn!(node = %name, error = %err, retry_in = ?delay, "node sync failed");
    Action::requeue(delay)
}

async fn reconcile_labels(name: &str, state: &State) -> Result<(), SyncError> {
    let written = guarded_merge_patch(&state.api, name, Target::Main, CLOUD_NODE, |fresh| {
        let labels = plan::ga_labels_from_beta(fresh);
        (!labels.is_empty()).then(|| json!({ "metadata": { "labels": labels } }))
    })
    .await;
    match written {
        Ok(_) => Ok(()),
        Err(err) if err.is_not_found() => Ok(()),
        Err(source) => Err(SyncError::Write {
            node: name.to_owned(),
            source,
        }),
    }
}

async fn initialize(node: &Node, state: &State) -> Result<(), SyncError> {
    let name = node.name_any();
    tracing::info!(node = %name, "initializing node with cloud provider");
    let instance = state
        .gateway
        .instance(&node_ref(node))
        .await
        .map_err(|source| SyncError::Metadata {
            node: name.clone(),
            source,
        })?;
    let cloud = instance.metadata;
    // Refuse early (keeping the taint) when the node cannot be initialized from this answer.
    plan::initialize(node, &cloud)?;

    // Addresses first: once the taint is gone, the node is complete.
    let mut not_yet = None;
    let addresses = guarded_merge_patch(&state.api, &name, Target::Status, CLOUD_NODE, |fresh| {
        match plan::wanted_addresses(fresh, &cloud.addresses) {
            Ok(Some(wanted)) if plan::addresses_differ(fresh, &wanted) => {
                Some(json!({ "status": { "addresses": wanted } }))
            }
            Ok(_) => None,
            Err(e) => {
                not_yet = Some(e);
                None
            }
        }
    })
    .await;
    finish_write(&name, addresses)?;
    if let Some(e) = not_yet {
        return Err(e.into());
    }

    let mut not_yet = None;
    let mut untainted = false;
    let written = guarded_merge_patch(&state.api, &name, Target::Main, CLOUD_NODE, |fresh| {
        if !has_taint(fresh, TAINT_UNINITIALIZED) {
            return None; // someone (another replica, an admin) finished already
        }
        match plan::initialize(fresh, &cloud) {
            Ok(init) => {
                untainted = true;
                Some(init.node_patch)
            }
            Err(e) => {
                not_yet = Some(e);
                None
            }
        }
    })
    .await;
    let written = finish_write(&name, written)?;
    if let Some(e) = not_yet {
        return Err(e.into());
    }
    if untainted && written.is_some() {
        metrics::TAINT_REMOVAL_DELAY.observe(age_seconds(node));
        state
            .events
            .normal(
                &object_ref(node),
                "Synced",
                "InitializeNode",
                "Node synced successfully".into(),
            )
            .await;
        metrics::INITIAL_SYNC_DELAY.observe(age_seconds(node));
        tracing::info!(node = %name, provider_id = %cloud.provider_id, "successfully initialized node with cloud provider");
    }
    Ok(())
}

/// A write's outcome: a node deleted meanwhile is no error (there is nothing left to sync).
fn finish_write(name: &str, written: Result<Option<Node>, WriteError>) -> Result<Option<Node>, SyncError> {
    match written {
        Ok(node) => Ok(node),
        Err(err) if err.is_not_found() => Ok(None),
        Err(source) => Err(SyncError::Write {
            node: name.to_owned(),
            source,
        }),
    }
}

fn age_seconds(node: &Node) -> f64 {
    node.metadata
        .creation_timestamp
        .as_ref()
        .map(|t| Timestamp::now().duration_since(t.0).as_secs_f64().max(0.0))
        .unwrap_or(0.0)
}
