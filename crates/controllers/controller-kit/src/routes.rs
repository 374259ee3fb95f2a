//! The cloud's routes as the route controller sees them: a trait over the gateway's `Routes`
//! service (a fake in tests), with routes as plain Rust and Kubernetes types. The protobuf types
//! stop here.

use gateway_api::v1 as pb;
use k8s_openapi::api::core::v1::NodeAddress;

use crate::gateway::{GatewayClient, GatewayError, address_type_to_pb, addresses_from_pb, with_timeout};

/// cloudprovider.Route: a route that sends a node's pod CIDR to that node.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Route {
    /// The provider's name for the route; set by the provider, ignored on create.
    pub name: String,
    /// Name of the target Node (empty when the provider no longer knows the target).
    pub target_node: String,
    /// The pod CIDR routed, e.g. `10.244.1.0/24`.
    pub destination_cidr: String,
    /// The route's target is gone; the route controller deletes blackholes.
    pub blackhole: bool,
    /// Addresses of the target node, for providers that route to addresses (sent on create;
    /// listed by providers that know them).
    pub target_node_addresses: Vec<NodeAddress>,
    /// `spec.providerID` of the target Node: sent on create (the provider finds the target by
    /// it first); listed by providers that know the instance a route points at, so a route is
    /// matched to its Node even when the Node is not named as the cloud names the instance.
    /// Empty: unknown.
    pub target_provider_id: String,
}

/// cloudprovider.Routes, over the gateway. Every call is idempotent: creating a route that
/// exists with the same target succeeds, deleting one that does not exist succeeds.
#[async_trait::async_trait]
pub trait CloudRoutes: Send + Sync {
    /// The cluster's routes; never those of another cluster.
    async fn list_routes(&self, cluster: &str) -> Result<Vec<Route>, GatewayError>;

    /// Creates `route`; `name_hint` is the target Node's UID, from which providers derive the
    /// route's name.
    ///
    /// # Errors
    /// `InvalidArgument` (the cloud cannot route this: a destination another route holds, a
    /// target it does not know), `RetryAfter`, or a transient error.
    async fn create_route(&self, cluster: &str, name_hint: &str, route: &Route) -> Result<(), GatewayError>;

    /// Deletes the cluster's route to `route.destination_cidr`.
    async fn delete_route(&self, cluster: &str, route: &Route) -> Result<(), GatewayError>;
}

#[async_trait::async_trait]
impl CloudRoutes for GatewayClient {
    async fn list_routes(&self, cluster: &str) -> Result<Vec<Route>, GatewayError> {
        let request = pb::ListRoutesRequest {
            cluster_name: cluster.to_owned(),
        };
        let answer = self
            .with_retries("ListRoutes", |timeout| {
                let mut c = self.routes.clone();
                let request = with_timeout(request.clone(), timeout);
                async move { c.list_routes(request).await }
            })
            .await?
            .into_inner();
        Ok(answer.routes.into_iter().map(route_from_pb).collect())
    }

    async fn create_route(&self, cluster: &str, name_hint: &str, route: &Route) -> Result<(), GatewayError> {
        let request = pb::CreateRouteRequest {
            cluster_name: cluster.to_owned(),
            name_hint: name_hint.to_owned(),
            route: Some(route_to_pb(route)),
        };
        let object = crate::dry_run::object_name("Route", None, &route.destination_cidr);
        let summary = || serde_json::json!({ "name_hint": name_hint, "target_node": route.target_node });
        self.write_call("CreateRoute", "route_create", &object, summary, |timeout| {
            let mut c = self.routes.clone();
            let request = self.write_request(request.clone(), timeout);
            async move { c.create_route(request).await }
        })
        .await?;
        Ok(())
    }

    async fn delete_route(&self, cluster: &str, route: &Route) -> Result<(), GatewayError> {
        let request = pb::DeleteRouteRequest {
            cluster_name: cluster.to_owned(),
            route: Some(route_to_pb(route)),
        };
        let object = crate::dry_run::object_name("Route", None, &route.destination_cidr);
        let summary = || serde_json::json!({ "target_node": route.target_node });
        self.write_call("DeleteRoute", "route_delete", &object, summary, |timeout| {
            let mut c = self.routes.clone();
            let request = self.write_request(request.clone(), timeout);
            async move { c.delete_route(request).await }
        })
        .await?;
        Ok(())
    }
}

fn route_from_pb(route: pb::Route) -> Route {
    Route {
        name: route.name,
        target_node: route.target_node,
        destination_cidr: route.destination_cidr,
        blackhole: route.blackhole,
        target_node_addresses: addresses_from_pb(route.target_node_addresses),
        target_provider_id: route.target_provider_id,
    }
}

fn route_to_pb(route: &Route) -> pb::Route {
    pb::Route {
        name: route.name.clone(),
        target_node: route.target_node.clone(),
        destination_cidr: route.destination_cidr.clone(),
        blackhole: route.blackhole,
        target_node_addresses: route
            .target_node_addresses
            .iter()
            // The gateway refuses an address without a type; one the contract cannot name is
            // left out rather than failing the create.
            .filter(|a| address_type_to_pb(&a.type_) != pb::AddressType::Unspecified)
            .map(|a| pb::NodeAddress {
                r#type: address_type_to_pb(&a.type_).into(),
                address: a.address.clone(),
            })
            .collect(),
        target_provider_id: route.target_provider_id.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn address(t: &str, a: &str) -> NodeAddress {
        NodeAddress {
            type_: t.into(),
            address: a.into(),
        }
    }

    #[test]
    fn a_route_crosses_the_wire_unchanged_but_for_addresses_the_contract_cannot_name() {
        let route = Route {
            name: "kubernetes-uid-1".into(),
            target_node: "node-1".into(),
            destination_cidr: "10.244.1.0/24".into(),
            blackhole: true,
            target_node_addresses: vec![
                address("InternalIP", "10.0.0.1"),
                address("Hostname", "node-1"),
                address("SomethingNew", "x"),
            ],
            target_provider_id: "aws:///us-east-1a/i-0abc".into(),
        };
        let back = route_from_pb(route_to_pb(&route));
        assert_eq!(
            back,
            Route {
                target_node_addresses: route.target_node_addresses[..2].to_vec(),
                ..route
            }
        );
    }
}
