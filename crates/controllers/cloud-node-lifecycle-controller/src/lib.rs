//! `cloud-node-lifecycle-controller`: deletes Nodes whose cloud instance is gone and taints
//! Nodes whose instance is shut down.
//!
//! # Layout (every controller crate has the same files)
//! - [`config`]: the controller's flags and their validation.
//! - [`controller`]: the only wiring: the Node cache and the periodic pass.
//! - [`reconcile`]: [`reconcile::Context`] and the pass, with one batched cloud lookup: the I/O
//!   around the plans.
//! - [`plan`]: the per-node decision, table-tested against upstream's cases, and its patch.
//! - [`metrics`]: changes made to nodes, pass counts.

pub mod config;
pub mod controller;
pub mod metrics;
pub mod plan;
pub mod reconcile;
