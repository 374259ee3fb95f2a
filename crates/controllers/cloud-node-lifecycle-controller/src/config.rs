//! The lifecycle controller's own flags (upstream names and defaults) and their validation.

use std::time::Duration;

use controller_kit::runner::ControllerConfig;

/// Flags of `cloud-node-lifecycle-controller` beyond the common ones.
#[derive(Debug, Clone, clap::Args)]
pub struct Config {
    /// Period of the pass over nodes that are not Ready.
    #[arg(long = "node-monitor-period", default_value = "5s", value_parser = humantime::parse_duration)]
    pub node_monitor_period: Duration,
}

impl ControllerConfig for Config {
    /// Checks what the types cannot.
    ///
    /// # Errors
    /// A message naming the flag.
    fn validate(&self) -> Result<(), String> {
        if self.node_monitor_period.is_zero() {
            return Err("--node-monitor-period must be positive".into());
        }
        Ok(())
    }
}
