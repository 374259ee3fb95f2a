//! InstancesV2, batched: one lookup answers exists, shutdown and metadata for many nodes.

use std::collections::BTreeMap;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::{ProviderError, Result};

/// How a Kubernetes Node is named to the cloud: by `spec.providerID` first, then by name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct NodeRef {
    /// `metadata.name` of the Node.
    pub name: String,
    /// `spec.providerID`; empty when not set yet.
    pub provider_id: String,
}

impl NodeRef {
    /// A node known only by name.
    pub fn by_name(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            provider_id: String::new(),
        }
    }

    /// A node with a provider ID.
    pub fn new(name: impl Into<String>, provider_id: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            provider_id: provider_id.into(),
        }
    }
}

/// core/v1 NodeAddressType.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum AddressType {
    /// `Hostname`
    Hostname,
    /// `InternalIP`
    InternalIP,
    /// `ExternalIP`
    ExternalIP,
    /// `InternalDNS`
    InternalDNS,
    /// `ExternalDNS`
    ExternalDNS,
}

impl AddressType {
    /// The name Kubernetes uses in `status.addresses[].type`.
    pub fn as_k8s_str(self) -> &'static str {
        match self {
            Self::Hostname => "Hostname",
            Self::InternalIP => "InternalIP",
            Self::ExternalIP => "ExternalIP",
            Self::InternalDNS => "InternalDNS",
            Self::ExternalDNS => "ExternalDNS",
        }
    }

    /// Parses the Kubernetes name.
    pub fn from_k8s_str(s: &str) -> Option<Self> {
        [
            Self::Hostname,
            Self::InternalIP,
            Self::ExternalIP,
            Self::InternalDNS,
            Self::ExternalDNS,
        ]
        .into_iter()
        .find(|t| t.as_k8s_str() == s)
    }
}

/// One node address.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct NodeAddress {
    /// Kind of address.
    #[serde(rename = "type")]
    pub kind: AddressType,
    /// The address itself.
    pub address: String,
}

impl NodeAddress {
    /// Builds an address.
    pub fn new(kind: AddressType, address: impl Into<String>) -> Self {
        Self {
            kind,
            address: address.into(),
        }
    }
}

/// cloudprovider.InstanceMetadata.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct InstanceMetadata {
    /// `<provider>://<id>`; never empty for an existing instance.
    pub provider_id: String,
    /// e.g. `m5.large`.
    pub instance_type: String,
    /// Addresses in the provider's preferred order.
    pub addresses: Vec<NodeAddress>,
    /// Failure domain.
    pub zone: String,
    /// Region.
    pub region: String,
    /// Extra labels the provider wants on the Node.
    pub additional_labels: BTreeMap<String, String>,
}

/// What the cloud knows of an existing instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceInfo {
    /// Its metadata.
    pub metadata: InstanceMetadata,
    /// Powered off (stopped). A shut-down instance still exists.
    pub shutdown: bool,
}

/// InstancesV2 in batched form.
///
/// One call answers InstanceExists, InstanceShutdown and InstanceMetadata for many nodes, so the
/// gateway can merge concurrent lookups into a few cloud API calls.
#[async_trait]
pub trait Instances: Send + Sync {
    /// Looks up `nodes` (at most [`crate::ProviderLimits::max_instance_batch`]).
    ///
    /// # Guarantees
    /// The answer has exactly one entry per requested node, in request order. A node's entry is
    /// `Err(ProviderError::InstanceNotFound)` only when the cloud says definitely that the instance
    /// does not exist; a stopped instance is `Ok` with `shutdown: true`.
    ///
    /// # Errors
    /// The outer error fails the whole batch (throttled, cloud unreachable); a per-node problem
    /// goes in that node's entry.
    async fn lookup_instances(&self, nodes: &[NodeRef]) -> Result<Vec<Result<InstanceInfo, ProviderError>>>;
}
