//! What a provider's contract test supplies: a gateway on that provider, and ways to arrange
//! and inspect cloud state that only the provider's own API can do.

use std::collections::BTreeMap;

use async_trait::async_trait;

use crate::RunningGateway;

/// An instance created by the fixture, described the way a Node would know it.
#[derive(Debug, Clone)]
pub struct TestInstance {
    /// The Node name that the provider resolves to this instance when the providerID is empty.
    pub node_name: String,
    /// The instance's provider ID.
    pub provider_id: String,
    /// Expected instance type.
    pub instance_type: String,
    /// Expected zone.
    pub zone: String,
    /// Expected region.
    pub region: String,
    /// An address the instance must report (its private IP).
    pub internal_ip: String,
}

/// A provider under contract test. Every case gets a fresh fixture.
#[async_trait]
pub trait CloudFixture: Send + Sync {
    /// The gateway serving this provider.
    fn gateway(&self) -> &RunningGateway;
    /// Expected `Capabilities.provider_name`.
    fn provider_name(&self) -> &str;
    /// A cluster name no other test uses, so cases cannot see each other's resources.
    fn cluster_name(&self) -> String;

    /// Starts a running instance.
    async fn running_instance(&self) -> TestInstance;
    /// Starts an instance and stops it.
    async fn stopped_instance(&self) -> TestInstance;
    /// Starts an instance and terminates it.
    async fn terminated_instance(&self) -> TestInstance;
    /// A well-formed provider ID of an instance that never existed.
    fn unknown_provider_id(&self) -> String;

    /// Load balancers the cloud holds for `cluster` (counted through the provider's own API).
    async fn load_balancer_count(&self, cluster: &str) -> usize;
    /// Provider IDs (or instance IDs) of the backends of the load balancer named `name`.
    async fn load_balancer_backends(&self, name: &str) -> Vec<String>;
    /// Annotations that make the provider leave a service to another controller.
    fn implemented_elsewhere_annotations(&self) -> BTreeMap<String, String>;
    /// Annotations and a `loadBalancerIP` the provider must refuse as invalid.
    fn invalid_service(&self) -> (BTreeMap<String, String>, String);

    /// Makes new load balancers take `seconds` to provision, so ensure answers RETRY_AFTER.
    /// `None`: this provider cannot be made to; its `contract_suite!` must then declare
    /// `slow_provisioning: unsupported("why")` so the case is ignored, not passed.
    async fn slow_provisioning(&self, seconds: u64) -> Option<()>;
    /// Makes the cloud answer "throttled" to every call. `None`: cannot (the case fails: every
    /// provider's tests must be able to play a throttling cloud, e.g. through a proxy).
    async fn throttle_everything(&self) -> Option<()>;

    /// A destination CIDR for routes and the node to route it to.
    async fn route_target(&self) -> (String, TestInstance);
}
