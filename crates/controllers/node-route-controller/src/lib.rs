//! `node-route-controller`: a route in the cloud for each Node's pod CIDR inside
//! `--cluster-cidr`, as upstream's route controller, and the Nodes' `NetworkUnavailable`
//! condition. Reconciled when a node is added or deleted or its pod CIDRs or addresses change,
//! with a periodic safety resync that costs one ListRoutes when nothing changed.
//!
//! # Layout (every controller crate has the same files)
//! - [`config`]: the controller's flags and their validation.
//! - [`controller`]: the only wiring: the Node watch and cache, what triggers a reconcile, the
//!   debounce and the resync.
//! - [`reconcile`]: [`reconcile::Context`] and one reconcile of the whole cluster: the list, the
//!   cloud operations, the condition writes, the error policy.
//! - [`plan`]: every decision, pure and table-tested against upstream's cases.
//! - [`metrics`]: upstream's `route_controller_route_sync_total`, operations, reconcile counts.

pub mod config;
pub mod controller;
pub mod metrics;
pub mod plan;
pub mod reconcile;
