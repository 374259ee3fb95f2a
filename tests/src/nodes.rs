//! Nodes in tests: their labels, taints, providerID and NetworkUnavailable condition, whether the
//! cloud node controller initialized one; giving one a pod CIDR, waiting for one to be deleted.

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::wait_for;

/// The taint kubelet `--cloud-provider=external` registers a Node with, until the cloud node
/// controller initializes it.
pub const TAINT_UNINITIALIZED: &str = "node.cloudprovider.kubernetes.io/uninitialized";

/// The value of label `key`.
pub fn label<'a>(node: &'a Node, key: &str) -> Option<&'a str> {
    node.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

/// Whether the node has a taint with `key`.
pub fn has_taint(node: &Node, key: &str) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == key))
}

/// The node's providerID, empty when it has none.
pub fn provider_id(node: &Node) -> &str {
    node.spec
        .as_ref()
        .and_then(|s| s.provider_id.as_deref())
        .unwrap_or_default()
}

/// The node once initialized: no uninitialized taint, a providerID, an InternalIP.
pub fn initialized(node: Node) -> Option<Node> {
    let has_internal_ip = node
        .status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .is_some_and(|a| a.iter().any(|a| a.type_ == "InternalIP"));
    (!has_taint(&node, TAINT_UNINITIALIZED) && !provider_id(&node).is_empty() && has_internal_ip)
        .then_some(node)
}

/// `(status, reason)` of the node's NetworkUnavailable condition.
pub fn network_unavailable(node: &Node) -> Option<(String, String)> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "NetworkUnavailable")
        .map(|c| (c.status.clone(), c.reason.clone().unwrap_or_default()))
}

/// Gives Node `name` the pod CIDR `cidr`, as kube-controller-manager's node IPAM does.
pub async fn set_pod_cidr(nodes: &Api<Node>, name: &str, cidr: &str) {
    let patch = json!({"spec": {"podCIDR": cidr, "podCIDRs": [cidr]}});
    nodes
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("pod CIDR of {name}: {e}"));
}

/// Waits up to 90 s until Node `name` is gone; `why` names the wait.
pub async fn wait_gone(nodes: &Api<Node>, name: &str, why: &str) {
    wait_for(why, Duration::from_secs(90), || {
        let nodes = nodes.clone();
        async move { matches!(nodes.get_opt(name).await, Ok(None)).then_some(()) }
    })
    .await;
}
