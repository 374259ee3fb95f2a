//! The three capabilities by name, and why a provider switched one off.
//!
//! A provider built from a vendor CCM's configuration can be unable to serve one capability (a
//! setting it does not implement, a cloud without the API extension it needs) and still serve
//! the others: it then answers `None` for that capability and names the reason here, so that the
//! gateway shows it (`GetCapabilities`, its log and metrics) and the controllers that need it say
//! why they stay idle. A capability the provider does not implement at all has no reason.

use std::{collections::BTreeMap, fmt};

/// One of the capabilities a [`crate::Provider`] hands out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Capability {
    /// InstancesV2.
    Instances,
    /// Load balancers.
    LoadBalancers,
    /// Routes.
    Routes,
}

impl Capability {
    /// Every capability, in the order of `cloudgateway.v1.Capabilities`.
    pub const ALL: [Capability; 3] = [Self::Instances, Self::LoadBalancers, Self::Routes];

    /// The name of its field in `cloudgateway.v1.Capabilities` (`load_balancers`), also its key
    /// in `Capabilities.unavailable` and its metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Instances => "instances",
            Self::LoadBalancers => "load_balancers",
            Self::Routes => "routes",
        }
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The capabilities a provider switched off, each with its reason (one sentence naming the
/// setting or the missing cloud feature).
pub type SwitchedOff = BTreeMap<Capability, String>;
