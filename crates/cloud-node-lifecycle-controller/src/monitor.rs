//! The periodic pass: Ready nodes lose the shutdown taint; nodes that are not Ready are looked
//! up in the cloud in one batch, then deleted (instance definitely gone) or tainted (shut down).

use std::sync::LazyLock;

use controller_kit::{
    events::Events,
    gateway::GatewayClient,
    names::{TAINT_SHUTDOWN, controllers::CLOUD_NODE_LIFECYCLE},
    node::{has_taint, node_ref, object_ref, ready},
    patch::{Target, guarded_merge_patch, is_not_found},
    runner::Context,
};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Taint};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, Preconditions},
    runtime::{WatchStreamExt, reflector, watcher},
};
use prometheus_client::metrics::{counter::Counter, family::Family};
use serde_json::json;

use crate::{
    LifecycleArgs,
    plan::{self, Action},
};

static ACTIONS: LazyLock<Family<Vec<(String, String)>, Counter>> = LazyLock::new(|| {
    let family = Family::default();
    controller_kit::metrics::register(
        "cloud_node_lifecycle_controller_actions",
        "Changes made to nodes, by action (delete, add_shutdown_taint, remove_shutdown_taint)",
        family.clone(),
    );
    family
});

fn count(action: &str) {
    ACTIONS
        .get_or_create(&vec![("action".to_owned(), action.to_owned())])
        .inc();
}

/// Runs the monitor until `ctx.shutdown` is cancelled.
pub async fn run(ctx: Context, args: LifecycleArgs) {
    LazyLock::force(&ACTIONS);
    let api: Api<Node> = Api::all(ctx.client.clone());
    let (store, writer) = reflector::store();
    let watch = watcher(api.clone(), watcher::Config::default())
        .default_backoff()
        .reflect(writer)
        .for_each(|_| async {});
    let watch = tokio::spawn(watch);
    let monitor = Monitor {
        api,
        gateway: ctx.gateway.clone(),
        events: Events::new(ctx.client.clone(), CLOUD_NODE_LIFECYCLE, None),
    };
    if store.wait_until_ready().await.is_ok() {
        loop {
            monitor.pass(&store.state()).await;
            tokio::select! {
                () = ctx.shutdown.cancelled() => break,
                () = tokio::time::sleep(args.node_monitor_period) => {}
            }
        }
    }
    watch.abort();
}

/// One controller's view for a pass.
pub struct Monitor {
    /// Nodes API.
    pub api: Api<Node>,
    /// Gateway.
    pub gateway: GatewayClient,
    /// Event sink.
    pub events: Events,
}

impl Monitor {
    /// One pass over `nodes` (from the cache).
    pub async fn pass(&self, nodes: &[std::sync::Arc<Node>]) {
        let needing_lookup: Vec<usize> = (0..nodes.len())
            .filter(|&i| plan::needs_lookup(ready(&nodes[i])))
            .collect();
        let answers = if needing_lookup.is_empty() {
            Vec::new()
        } else {
            let refs: Vec<_> = needing_lookup.iter().map(|&i| node_ref(&nodes[i])).collect();
            match self.gateway.lookup_instances(&refs).await {
                Ok(answers) => answers,
                Err(err) => {
                    // Without answers nothing is deleted or tainted; Ready nodes are still handled.
                    tracing::warn!(error = %err, nodes = refs.len(), "cannot check instances of nodes that are not Ready");
                    Vec::new()
                }
            }
        };
        // The cloud's answer for each node, aligned with `nodes` (None: not looked up or no answer).
        let mut lookups: Vec<Option<&Result<_, _>>> = vec![None; nodes.len()];
        for (&i, answer) in needing_lookup.iter().zip(&answers) {
            lookups[i] = Some(answer);
        }
        let actions: Vec<(&Node, Action)> = nodes
            .iter()
            .zip(lookups)
            .map(|(n, lookup)| {
                let node: &Node = n;
                if let Some(Err(err)) = lookup
                    && !matches!(err, controller_kit::gateway::GatewayError::InstanceNotFound(_))
                {
                    tracing::warn!(node = %node.name_any(), error = %err, "error checking if node exists; leaving it");
                }
                (node, plan::decide(ready(node), has_taint(node, TAINT_SHUTDOWN), lookup))
            })
            .filter(|(_, action)| *action != Action::Nothing)
            .collect();
        futures::stream::iter(actions)
            .for_each_concurrent(8, |(node, action)| async move { self.act(node, action).await })
            .await;
    }

    async fn act(&self, node: &Node, action: Action) {
        let name = node.name_any();
        match action {
            Action::Nothing => {}
            Action::Delete => self.delete(node).await,
            Action::AddShutdownTaint | Action::RemoveShutdownTaint => {
                let add = action == Action::AddShutdownTaint;
                let written =
                    guarded_merge_patch(&self.api, &name, Target::Main, CLOUD_NODE_LIFECYCLE, |fresh| {
                        shutdown_taint_patch(fresh, add)
                    })
                    .await;
                match written {
                    Ok(Some(_)) => {
                        count(if add {
                            "add_shutdown_taint"
                        } else {
                            "remove_shutdown_taint"
                        });
                        tracing::info!(node = %name, shutdown = add, "updated the shutdown taint");
                    }
                    Ok(None) => {}
                    Err(err) if err.is_not_found() => {}
                    Err(err) => tracing::warn!(node = %name, error = %err, "error patching node taints"),
                }
            }
        }
    }

    /// Deletes a node whose instance is gone. The node is read again first: if it became Ready
    /// meanwhile, or is another Node object with the same name, it is left alone.
    async fn delete(&self, node: &Node) {
        let name = node.name_any();
        let fresh = match self.api.get_opt(&name).await {
            Ok(Some(fresh)) => fresh,
            Ok(None) => return,
            Err(err) => {
                tracing::warn!(node = %name, error = %err, "cannot re-read node before deleting it; leaving it");
                return;
            }
        };
        if fresh.uid() != node.uid() || ready(&fresh) == Some(true) {
            return;
        }
        if !controller_kit::leader::may_act() {
            tracing::warn!(node = %name, "not deleting: this replica does not hold the leader lease");
            return;
        }
        tracing::info!(node = %name, "deleting node since it is no longer present in cloud provider");
        let reference = object_ref(&fresh);
        self.events
            .normal(
                &reference,
                "DeletingNode",
                "DeleteNode",
                format!("Deleting node {name} because it does not exist in the cloud provider"),
            )
            .await;
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: fresh.uid(),
                resource_version: None,
            }),
            ..Default::default()
        };
        match self.api.delete(&name, &params).await {
            Ok(_) => count("delete"),
            Err(err) if is_not_found(&err) => {}
            Err(err) => {
                tracing::warn!(node = %name, error = %err, "unable to delete node");
                self.events
                    .warning(
                        &reference,
                        "DeletingNodeFailed",
                        "DeleteNode",
                        format!("Failed deleting node {name}: {err}"),
                    )
                    .await;
            }
        }
    }
}

/// The merge patch adding or removing the shutdown taint, or `None` if already so. Other
/// taints are kept as they are (the resourceVersion guard makes replacing the list safe).
fn shutdown_taint_patch(node: &Node, add: bool) -> Option<serde_json::Value> {
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    let has = taints
        .iter()
        .any(|t| t.key == TAINT_SHUTDOWN && t.effect == "NoSchedule");
    let wanted: Vec<Taint> = match (add, has) {
        (true, false) => {
            let mut t = taints;
            t.push(Taint {
                key: TAINT_SHUTDOWN.into(),
                effect: "NoSchedule".into(),
                value: None,
                time_added: None,
            });
            t
        }
        (false, true) => taints
            .into_iter()
            .filter(|t| !(t.key == TAINT_SHUTDOWN && t.effect == "NoSchedule"))
            .collect(),
        _ => return None,
    };
    Some(json!({ "spec": { "taints": wanted } }))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::NodeSpec;

    use super::*;

    fn node_with(taints: &[(&str, &str)]) -> Node {
        Node {
            spec: Some(NodeSpec {
                taints: Some(
                    taints
                        .iter()
                        .map(|(k, e)| Taint {
                            key: (*k).into(),
                            effect: (*e).into(),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn the_shutdown_taint_is_added_and_removed_keeping_the_others() {
        let patch = shutdown_taint_patch(&node_with(&[("other", "NoExecute")]), true).unwrap();
        assert_eq!(
            patch,
            json!({"spec": {"taints": [{"key": "other", "effect": "NoExecute"}, {"key": TAINT_SHUTDOWN, "effect": "NoSchedule"}]}})
        );
        let patch = shutdown_taint_patch(
            &node_with(&[("other", "NoExecute"), (TAINT_SHUTDOWN, "NoSchedule")]),
            false,
        )
        .unwrap();
        assert_eq!(
            patch,
            json!({"spec": {"taints": [{"key": "other", "effect": "NoExecute"}]}})
        );
        assert_eq!(
            shutdown_taint_patch(&node_with(&[(TAINT_SHUTDOWN, "NoSchedule")]), true),
            None
        );
        assert_eq!(shutdown_taint_patch(&node_with(&[]), false), None);
    }
}
