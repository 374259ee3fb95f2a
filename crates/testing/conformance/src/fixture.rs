//! What the cases need besides the gateway's address: the cloud state the gateway must report
//! (instances running, stopped, terminated...) and, where the harness can, ways to arrange or
//! observe the cloud behind the gateway's back.
//!
//! Two kinds of fixtures implement [`CloudFixture`]: a provider's in-process contract test
//! (`contract-tests`), which creates a fresh instance whenever a case asks and reads the cloud
//! through the provider's own API, and [`crate::FileFixture`], a YAML description of a cloud the
//! gateway already serves, used by the `cloudgateway-conformance` binary.

use std::collections::BTreeMap;

use async_trait::async_trait;
use serde::Deserialize;

use crate::Target;

/// An instance of the fixture, described the way a Node knows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestInstance {
    /// The Node name that the gateway resolves to this instance when the providerID is empty.
    pub node_name: String,
    /// The instance's provider ID.
    pub provider_id: String,
    /// Expected instance type.
    #[serde(default)]
    pub instance_type: String,
    /// Expected zone.
    #[serde(default)]
    pub zone: String,
    /// Expected region.
    #[serde(default)]
    pub region: String,
    /// An address the instance must report as its InternalIP.
    #[serde(default)]
    pub internal_ip: String,
}

/// The capabilities the gateway must claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectedCapabilities {
    /// InstancesV2.
    #[serde(default = "yes")]
    pub instances: bool,
    /// Load balancers.
    #[serde(default = "yes")]
    pub load_balancers: bool,
    /// Routes.
    #[serde(default = "yes")]
    pub routes: bool,
}

fn yes() -> bool {
    true
}

impl Default for ExpectedCapabilities {
    fn default() -> Self {
        Self {
            instances: true,
            load_balancers: true,
            routes: true,
        }
    }
}

/// A capability of the contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capability {
    /// The Instances service.
    Instances,
    /// The LoadBalancers service.
    LoadBalancers,
    /// The Routes service.
    Routes,
}

impl Capability {
    /// Every capability.
    pub const ALL: [Capability; 3] = [Self::Instances, Self::LoadBalancers, Self::Routes];

    /// Its name in fixtures and messages.
    pub fn name(self) -> &'static str {
        match self {
            Self::Instances => "instances",
            Self::LoadBalancers => "load_balancers",
            Self::Routes => "routes",
        }
    }
}

impl ExpectedCapabilities {
    /// Whether `capability` is expected.
    pub fn has(&self, capability: Capability) -> bool {
        match capability {
            Capability::Instances => self.instances,
            Capability::LoadBalancers => self.load_balancers,
            Capability::Routes => self.routes,
        }
    }
}

/// Why a case did not run: the fixture lacks what it needs. Not a failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skip(pub String);

impl Skip {
    /// A skip saying `why`.
    pub fn because(why: impl Into<String>) -> Self {
        Self(why.into())
    }
}

/// A case that ran to the end: passed, perhaps with a note on what it could not check.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pass {
    /// What the case could not check with this fixture, if anything.
    pub note: Option<String>,
}

/// What a case returns; a breach of the contract is a panic with a message saying what.
pub type CaseResult = Result<Pass, Skip>;

/// A fully checked pass.
pub fn pass() -> CaseResult {
    Ok(Pass::default())
}

/// A pass that says what it could not check.
pub fn pass_with(note: impl Into<String>) -> CaseResult {
    Ok(Pass {
        note: Some(note.into()),
    })
}

/// A gateway under contract test and the cloud behind it.
///
/// Methods returning `Result<_, Skip>` may decline: the cases that need them are then skipped
/// (the `cloudgateway-conformance` binary prints SKIP with the reason; an in-process
/// `contract_suite!` fails, since a provider's own tests must play every case).
#[async_trait]
pub trait CloudFixture: Send + Sync {
    /// Where the gateway listens.
    fn target(&self) -> &Target;
    /// Expected `Capabilities.provider_name`.
    fn provider_name(&self) -> &str;
    /// The capabilities the gateway must claim (default: all three).
    fn capabilities(&self) -> ExpectedCapabilities {
        ExpectedCapabilities::default()
    }
    /// The cluster name of load balancer and route calls. In-process fixtures give each case its
    /// own, so cases cannot see each other's resources.
    fn cluster_name(&self) -> String;

    /// A running instance; a different one on each call when the fixture has several.
    async fn running_instance(&self) -> Result<TestInstance, Skip>;
    /// A stopped instance.
    async fn stopped_instance(&self) -> Result<TestInstance, Skip>;
    /// A terminated instance.
    async fn terminated_instance(&self) -> Result<TestInstance, Skip>;
    /// A well-formed provider ID of an instance that never existed.
    fn unknown_provider_id(&self) -> Result<String, Skip>;

    /// Load balancers the cloud holds for `cluster`, counted through the cloud's own API;
    /// `None` when the fixture cannot see the cloud (the cases then ask the gateway only).
    async fn load_balancer_count(&self, _cluster: &str) -> Option<usize> {
        None
    }
    /// Provider IDs (or instance IDs) of the backends of the load balancer named `name`,
    /// through the cloud's own API; `None` when the fixture cannot see the cloud.
    async fn load_balancer_backends(&self, _name: &str) -> Option<Vec<String>> {
        None
    }
    /// Annotations that make the gateway leave a service to another controller.
    fn implemented_elsewhere_annotations(&self) -> Result<BTreeMap<String, String>, Skip>;
    /// Annotations and a `loadBalancerIP` the gateway must refuse as invalid.
    fn invalid_service(&self) -> Result<(BTreeMap<String, String>, String), Skip>;

    /// Makes new load balancers take `seconds` to provision, so ensure answers RETRY_AFTER.
    async fn slow_provisioning(&self, seconds: u64) -> Result<(), Skip>;
    /// Makes the cloud answer "throttled" to every call.
    async fn throttle_everything(&self) -> Result<(), Skip>;

    /// A destination CIDR for routes and the node to route it to.
    async fn route_target(&self) -> Result<(String, TestInstance), Skip>;

    /// Undoes what the last case arranged (throttling, slow provisioning) when the fixture
    /// outlives the case; the runner calls it after every case.
    async fn after_case(&self) -> Result<(), String> {
        Ok(())
    }
}
