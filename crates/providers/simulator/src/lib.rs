//! The simulated cloud: the embedded default provider a new user runs with no cloud account, and
//! the cloud every test and the demo run against.
//!
//! It behaves like a real cloud where the controllers can tell: instances with ids, types, zones
//! and addresses that can be stopped and terminated; load balancers with an IP from a pool that
//! take time to provision; a route table; state that survives restarts; latency; its own API
//! rate limit that answers "throttled"; injectable failures.
//!
//! # Layout
//! - [`inventory`]: the YAML inventory that seeds a new cloud (errors name the line).
//! - [`state`]: the persisted model and its atomic JSON file.
//! - [`ipam`]: address allocation from a CIDR pool.
//! - [`ops`]: what each API call does to the state (pure, table-tested).
//! - [`knobs`]: latency, rate limit, error rates, provisioning delay; changeable while running.
//! - [`stats`]: call counters.
//! - [`cloud`]: [`Simulator`], which implements the `provider` traits through one gate per call
//!   (rate limit, latency, injected errors).
//! - [`admin`]: the admin HTTP API (`/simulator/v1/...`) the `cloud-sim` CLI talks to.
//! - [`console`]: the `cloud-sim` CLI itself (its binary only calls it).
//! - [`gateway_args`]: the `--simulator-*` flags and the simulator's registration with the gateway.

pub mod admin;
pub mod cloud;
pub mod console;
pub mod gateway_args;
pub mod inventory;
pub mod ipam;
pub mod knobs;
pub mod ops;
pub mod state;
pub mod stats;
mod store;

use std::path::PathBuf;

pub use admin::admin_router;
pub use cloud::{CloudInfo, RouteView, Simulator};
pub use inventory::InventoryError;
pub use knobs::{Knobs, KnobsPatch, RateLimit};
pub use ops::{instances::NewInstance, routes::NewRoute};
pub use provider::ProviderLimits;
pub use state::{Instance, InstanceState, LoadBalancer, LoadBalancerState, StateFileError};
pub use stats::{OperationStats, Stats};

/// The provider's name, and the scheme of its provider IDs (`simulator://<zone>/<id>`).
pub const PROVIDER_NAME: &str = "simulator";

/// How to open a simulated cloud.
#[derive(Debug, Clone)]
pub struct SimulatorConfig {
    /// Where the state lives. `None`: in memory only, gone when dropped.
    pub state_file: Option<PathBuf>,
    /// YAML inventory seeding the cloud when the state file does not exist yet. `None`: an
    /// empty cloud in the default region.
    pub inventory: Option<PathBuf>,
    /// Initial knobs.
    pub knobs: Knobs,
    /// Capabilities to switch off (the provider then answers `None` for them, as a vendor that
    /// lacks them would).
    pub disabled: Capabilities,
    /// fsync every state write (data and directory). Tests may turn it off for speed; a crash
    /// of the process still loses nothing, only a power cut could.
    pub durable_writes: bool,
    /// Limits announced to the gateway.
    pub limits: ProviderLimits,
}

impl Default for SimulatorConfig {
    fn default() -> Self {
        Self {
            state_file: None,
            inventory: None,
            knobs: Knobs::default(),
            disabled: Capabilities::default(),
            durable_writes: true,
            limits: ProviderLimits::default(),
        }
    }
}

/// A set of the provider capabilities.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Capabilities {
    /// InstancesV2.
    pub instances: bool,
    /// Load balancers.
    pub load_balancers: bool,
    /// Routes.
    pub routes: bool,
}

impl Capabilities {
    /// No capability.
    pub fn none() -> Self {
        Self::default()
    }

    /// Every capability.
    pub fn all() -> Self {
        Self {
            instances: true,
            load_balancers: true,
            routes: true,
        }
    }
}

/// Why opening the simulator or an admin action failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SimulatorError {
    /// The inventory is unusable; the message names the file and line.
    #[error(transparent)]
    Inventory(#[from] InventoryError),
    /// The state file is unusable; the message names the file.
    #[error(transparent)]
    StateFile(#[from] StateFileError),
    /// No such instance.
    #[error("{0}")]
    NotFound(String),
    /// The request conflicts with the current state (a name or address in use...).
    #[error("{0}")]
    Conflict(String),
    /// The request is malformed.
    #[error("{0}")]
    Invalid(String),
    /// Something that should not happen.
    #[error("{0}")]
    Internal(String),
}

impl SimulatorError {
    /// A short stable label: `inventory`, `state_file`, `not_found`, `conflict`, `invalid`,
    /// `internal`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Inventory(_) => "inventory",
            Self::StateFile(_) => "state_file",
            Self::NotFound(_) => "not_found",
            Self::Conflict(_) => "conflict",
            Self::Invalid(_) => "invalid",
            Self::Internal(_) => "internal",
        }
    }
}
