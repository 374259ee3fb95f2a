//! The node controller's own flags (upstream names and defaults) and their validation.

use std::time::Duration;

use controller_kit::runner::ControllerConfig;

/// Flags of `cloud-node-controller` beyond the common ones.
#[derive(Debug, Clone, clap::Args)]
pub struct Config {
    /// Nodes initialized in parallel (upstream's default is 1). With the look-ahead the
    /// cloud lookups need no more workers; 50 keep the API writes flowing (at 5000 joining
    /// nodes, 100 were no faster and cost 6 MiB more).
    #[arg(long = "concurrent-node-syncs", default_value_t = 50)]
    pub concurrent_node_syncs: u16,
    /// Nodes one cloud lookup may carry: a lookup also asks for other nodes still awaiting
    /// initialization, up to this many in all, and keeps their answers (at most 10 s) for
    /// their reconciles, so joining nodes cost about one provider call per gateway batch.
    /// 0 looks up only the nodes being reconciled (upstream asks one node at a time).
    #[arg(long = "lookup-ahead", default_value_t = 1000)]
    pub lookup_ahead: u16,
    /// Period of the address refresh of initialized nodes.
    #[arg(long = "node-status-update-frequency", default_value = "5m", value_parser = humantime::parse_duration)]
    pub node_status_update_frequency: Duration,
    /// Address patches in parallel during a refresh; 0 means `--concurrent-node-syncs`.
    #[arg(long = "concurrent-node-status-updates", default_value_t = 0)]
    pub concurrent_node_status_updates: u16,
}

impl Config {
    /// Address patches in parallel during a refresh.
    pub fn status_update_parallelism(&self) -> usize {
        usize::from(match self.concurrent_node_status_updates {
            0 => self.concurrent_node_syncs,
            n => n,
        })
    }
}

impl ControllerConfig for Config {
    /// Checks what the types cannot.
    ///
    /// # Errors
    /// A message naming the flag.
    fn validate(&self) -> Result<(), String> {
        if self.concurrent_node_syncs == 0 {
            return Err("--concurrent-node-syncs must be at least 1".into());
        }
        if self.node_status_update_frequency.is_zero() {
            return Err("--node-status-update-frequency must be positive".into());
        }
        Ok(())
    }
}
