//! `service-lb-controller`: cloud load balancers for `type: LoadBalancer` Services, as
//! upstream's service controller, with the work shared by any number of replicas.
//!
//! # Layout (every controller crate has the same files)
//! - [`config`]: the controller's flags and their validation.
//! - [`controller`]: the only wiring: the Service and Node watches, the shard leases, the
//!   node-set sync.
//! - [`reconcile`]: [`reconcile::Context`], the sync of one Service, its error policy, and the
//!   backends update after a node-set change: the I/O around the plans.
//! - [`plan`]: every decision, pure and table-tested.
//! - [`metrics`]: upstream's four service-controller metrics, shard ownership and handovers.
//! - [`switched_off`]: a Warning on each Service while the provider has load balancers off.

pub mod config;
pub mod controller;
pub mod metrics;
pub mod plan;
pub mod reconcile;
pub mod switched_off;
