//! `cloud-node-controller`: initializes Nodes from the cloud and keeps their addresses fresh.
//!
//! # Layout (every controller crate has the same files)
//! - [`config`]: the controller's flags and their validation.
//! - [`controller`]: the only wiring: the Node watch and queue, the periodic address refresh.
//! - [`reconcile`]: [`reconcile::Context`], the reconcile of one node, its error policy, and
//!   the refresh pass: the I/O around the plans.
//! - [`plan`]: every decision, pure and table-tested: the whole write for a node.
//! - [`metrics`]: upstream's two delay histograms and reconcile counts.

pub mod config;
pub mod controller;
pub mod metrics;
pub mod plan;
pub mod reconcile;
