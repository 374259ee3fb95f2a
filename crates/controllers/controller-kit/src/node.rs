//! Reading Nodes: readiness, taints, and how the cloud knows them.

use k8s_openapi::api::core::v1::{Node, ObjectReference};
use kube::Resource;

use crate::gateway::NodeRef;

/// `Ready` condition status: `Some(true)` Ready, `Some(false)` NotReady or Unknown, `None` when
/// the node has no Ready condition at all (kubelet has not reported yet).
pub fn ready(node: &Node) -> Option<bool> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status == "True")
}

/// Whether the node carries a taint with `key`.
pub fn has_taint(node: &Node, key: &str) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|taints| taints.iter().any(|t| t.key == key))
}

/// `spec.providerID`, empty when unset.
pub fn provider_id(node: &Node) -> &str {
    node.spec
        .as_ref()
        .and_then(|s| s.provider_id.as_deref())
        .unwrap_or_default()
}

/// How the gateway should look the node up.
pub fn node_ref(node: &Node) -> NodeRef {
    NodeRef {
        name: node.metadata.name.clone().unwrap_or_default(),
        provider_id: provider_id(node).to_owned(),
    }
}

/// Reference for events about the node (events about cluster-scoped objects go to `default`).
pub fn object_ref(node: &Node) -> ObjectReference {
    node.object_ref(&())
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{NodeCondition, NodeSpec, NodeStatus, Taint};

    use super::*;

    fn node(conditions: Option<Vec<(&str, &str)>>, taints: &[&str]) -> Node {
        Node {
            spec: Some(NodeSpec {
                taints: Some(
                    taints
                        .iter()
                        .map(|k| Taint {
                            key: (*k).into(),
                            effect: "NoSchedule".into(),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            status: Some(NodeStatus {
                conditions: conditions.map(|cs| {
                    cs.into_iter()
                        .map(|(t, s)| NodeCondition {
                            type_: t.into(),
                            status: s.into(),
                            ..Default::default()
                        })
                        .collect()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn readiness_reads_the_ready_condition() {
        assert_eq!(ready(&node(Some(vec![("Ready", "True")]), &[])), Some(true));
        assert_eq!(ready(&node(Some(vec![("Ready", "False")]), &[])), Some(false));
        assert_eq!(ready(&node(Some(vec![("Ready", "Unknown")]), &[])), Some(false));
        assert_eq!(ready(&node(Some(vec![("MemoryPressure", "False")]), &[])), None);
        assert_eq!(ready(&node(None, &[])), None);
    }

    #[test]
    fn taints_are_found_by_key() {
        let n = node(None, &["a", "b"]);
        assert!(has_taint(&n, "b"));
        assert!(!has_taint(&n, "c"));
        assert!(!has_taint(&Node::default(), "a"));
    }
}
