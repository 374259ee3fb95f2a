//! Test objects in one line each.

use std::collections::BTreeMap;

use controller_kit::gateway::{Instance, InstanceMetadata};
use k8s_openapi::{
    api::core::v1::{Node, NodeAddress, NodeCondition, NodeSpec, NodeStatus, Taint},
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};

/// A Node as kubelet registers it, changed one field at a time.
#[derive(Debug, Clone)]
pub struct NodeBuilder(Node);

impl NodeBuilder {
    /// A node named `name` with no taints, no conditions, no addresses.
    pub fn new(name: &str) -> Self {
        Self(Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: Some(NodeSpec::default()),
            status: Some(NodeStatus::default()),
        })
    }

    /// With `spec.providerID`.
    pub fn provider_id(mut self, id: &str) -> Self {
        self.spec().provider_id = Some(id.into());
        self
    }

    /// With a label.
    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.0
            .metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(key.into(), value.into());
        self
    }

    /// With an annotation.
    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        self.0
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(key.into(), value.into());
        self
    }

    /// With a `NoSchedule` taint `key` (value `true`, as kubelet sets the uninitialized one).
    pub fn taint(mut self, key: &str) -> Self {
        self.spec().taints.get_or_insert_with(Vec::new).push(Taint {
            key: key.into(),
            value: Some("true".into()),
            effect: "NoSchedule".into(),
            time_added: None,
        });
        self
    }

    /// With exactly these taints' keys (all `NoSchedule`); `&[]` removes them all.
    pub fn taints(mut self, keys: &[&str]) -> Self {
        self.spec().taints = Some(Vec::new());
        keys.iter().fold(self, |node, key| node.taint(key))
    }

    /// With a `Ready` condition, `True` or `False`.
    pub fn ready(mut self, ready: bool) -> Self {
        let status = self.status();
        let conditions = status.conditions.get_or_insert_with(Vec::new);
        conditions.retain(|c| c.type_ != "Ready");
        conditions.push(NodeCondition {
            type_: "Ready".into(),
            status: if ready { "True" } else { "False" }.into(),
            ..Default::default()
        });
        self
    }

    /// With these `(type, address)` pairs as `status.addresses`.
    pub fn addresses(mut self, addresses: &[(&str, &str)]) -> Self {
        self.status().addresses = Some(addresses.iter().map(|(t, a)| address(t, a)).collect());
        self
    }

    /// The node.
    pub fn build(self) -> Node {
        self.0
    }

    fn spec(&mut self) -> &mut NodeSpec {
        self.0.spec.get_or_insert_with(Default::default)
    }

    fn status(&mut self) -> &mut NodeStatus {
        self.0.status.get_or_insert_with(Default::default)
    }
}

/// A node address.
pub fn address(type_: &str, address: &str) -> NodeAddress {
    NodeAddress {
        type_: type_.into(),
        address: address.into(),
    }
}

/// A running instance as the cloud describes it, changed one field at a time.
#[derive(Debug, Clone)]
pub struct InstanceBuilder(Instance);

impl InstanceBuilder {
    /// A running `sim.large` in `zone-a` of `region-1` with provider ID `provider_id`.
    pub fn new(provider_id: &str) -> Self {
        Self(Instance {
            metadata: InstanceMetadata {
                provider_id: provider_id.into(),
                instance_type: "sim.large".into(),
                addresses: Vec::new(),
                zone: "zone-a".into(),
                region: "region-1".into(),
                additional_labels: BTreeMap::new(),
            },
            shutdown: false,
        })
    }

    /// With an address.
    pub fn address(mut self, type_: &str, addr: &str) -> Self {
        self.0.metadata.addresses.push(address(type_, addr));
        self
    }

    /// With an additional label.
    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.0.metadata.additional_labels.insert(key.into(), value.into());
        self
    }

    /// Powered off.
    pub fn shut_down(mut self) -> Self {
        self.0.shutdown = true;
        self
    }

    /// The instance.
    pub fn build(self) -> Instance {
        self.0
    }

    /// Its metadata alone.
    pub fn metadata(self) -> InstanceMetadata {
        self.0.metadata
    }
}
