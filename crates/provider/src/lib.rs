//! Cloud provider capabilities, modelled on k8s.io/cloud-provider's `cloudprovider.Interface`
//! and shaped for batching.
//!
//! # Layout
//! - [`Provider`]: the entry point a vendor implements; it hands out the capabilities it has.
//! - [`instances`]: InstancesV2 as one batched lookup (exists, shutdown and metadata at once).
//! - [`load_balancers`]: the LoadBalancer capability and the service/node views it works on.
//! - [`routes`]: pod-CIDR routes.
//! - [`capability`]: the capabilities by name, and why a provider switched one off.
//! - [`error`]: [`ProviderError`], the one error type every capability returns.
//! - [`dry_run`]: shadow mode: a provider's writes recorded as "woulds" instead of made.
//! - [`registration`]: how a provider crate offers its name, flags and constructor to the gateway.
//!
//! Nothing here does I/O and nothing here knows gRPC or Kubernetes client types: the gateway
//! converts wire types into these, and vendors convert these into cloud API calls.

pub mod capability;
pub mod converged;
pub mod dry_run;
pub mod error;
pub mod instances;
pub mod load_balancers;
pub mod registration;
pub mod routes;

pub use capability::{Capability, SwitchedOff};
pub use error::{ProviderError, Result};
pub use instances::{AddressType, InstanceInfo, InstanceMetadata, Instances, NodeAddress, NodeRef};
pub use load_balancers::{
    ExternalTrafficPolicy, IpFamily, LoadBalancerIngress, LoadBalancerNode, LoadBalancerObservation,
    LoadBalancerRead, LoadBalancerStatus, LoadBalancers, Protocol, ServiceNotice, ServicePort, ServiceSpec,
    default_load_balancer_name,
};
pub use routes::{Route, Routes};

/// A cloud vendor. Each capability is optional: a controller whose capability is missing stays
/// idle, as upstream's controllers do when `Interface.LoadBalancer()` returns `false`.
pub trait Provider: Send + Sync + 'static {
    /// Provider name; also the scheme of its provider IDs (`<name>://...`).
    fn name(&self) -> &str;
    /// Limits the gateway must respect when calling this provider.
    fn limits(&self) -> ProviderLimits;
    /// InstancesV2, if implemented.
    fn instances(&self) -> Option<&dyn Instances>;
    /// Load balancers, if implemented.
    fn load_balancers(&self) -> Option<&dyn LoadBalancers>;
    /// Routes, if implemented.
    fn routes(&self) -> Option<&dyn Routes>;
    /// Whether the provider calls [`dry_run::intercept`] before every write it makes, so a
    /// dry-run scope records its writes instead of letting them through. A provider that does
    /// not (the default) gets no write call in dry-run: the gateway refuses it.
    fn dry_run(&self) -> bool {
        false
    }
    /// The capabilities this provider switched off for a setting it was given or a feature its
    /// cloud lacks (it answers `None` for them), each with its reason. Empty by default: a
    /// capability answered `None` without a reason is one the provider does not implement.
    fn switched_off(&self) -> SwitchedOff {
        SwitchedOff::new()
    }
    /// Called once when the gateway stops, after its last call has ended or been abandoned:
    /// ends what the provider holds open at its cloud (vSphere's sessions, which count against
    /// vCenter's limit until they time out). Nothing by default.
    fn shutdown(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
        Box::pin(std::future::ready(()))
    }
}

/// Limits the provider imposes on its callers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProviderLimits {
    /// Most nodes one [`Instances::lookup_instances`] call may carry (AWS: 500 IDs per
    /// DescribeInstances).
    pub max_instance_batch: usize,
}

impl Default for ProviderLimits {
    fn default() -> Self {
        Self {
            max_instance_batch: 100,
        }
    }
}
