//! Routes that send a node's pod CIDR to that node.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::{NodeAddress, Result};

/// cloudprovider.Route.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Route {
    /// The provider's name for the route (set by the provider).
    pub name: String,
    /// Name of the target Node.
    pub target_node: String,
    /// The pod CIDR routed to the node.
    pub destination_cidr: String,
    /// The route's target is gone.
    pub blackhole: bool,
    /// Target node addresses, for providers that route to addresses.
    pub target_node_addresses: Vec<NodeAddress>,
    /// `spec.providerID` of the target Node: sent with a create (the provider finds the target
    /// by it first), and listed by providers that know the instance a route points at, so that
    /// the route controller matches a route to its Node even when the Node is not named as the
    /// cloud names the instance (kops, kubelet `--hostname-override`). Empty: unknown.
    #[serde(default)]
    pub target_provider_id: String,
}

/// cloudprovider.Routes.
#[async_trait]
pub trait Routes: Send + Sync {
    /// The cluster's routes; never those of another cluster.
    async fn list_routes(&self, cluster: &str) -> Result<Vec<Route>>;
    /// Creates a route; `name_hint` is the target Node's UID. Creating a route that already exists
    /// with the same target succeeds.
    async fn create_route(&self, cluster: &str, name_hint: &str, route: &Route) -> Result<()>;
    /// Deletes a route; deleting one that does not exist succeeds.
    async fn delete_route(&self, cluster: &str, route: &Route) -> Result<()>;
}
