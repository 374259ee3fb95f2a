//! `cloud-node-lifecycle-controller`: deletes Nodes whose cloud instance is gone and taints
//! Nodes whose instance is shut down.
//!
//! # Layout
//! - [`plan`]: the per-node decision, table-tested against upstream's cases.
//! - [`monitor`]: the periodic pass over the node cache, with one batched cloud lookup.

use std::time::Duration;

pub mod monitor;
pub mod plan;

/// The lifecycle controller's own flags (upstream names and defaults).
#[derive(Debug, Clone, clap::Args)]
pub struct LifecycleArgs {
    /// Period of the pass over nodes that are not Ready.
    #[arg(long = "node-monitor-period", default_value = "5s", value_parser = humantime::parse_duration)]
    pub node_monitor_period: Duration,
}

impl LifecycleArgs {
    /// Checks the values types cannot.
    pub fn validate(&self) -> Result<(), String> {
        if self.node_monitor_period.is_zero() {
            return Err("--node-monitor-period must be positive".into());
        }
        Ok(())
    }
}
