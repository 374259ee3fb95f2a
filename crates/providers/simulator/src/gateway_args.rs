//! The simulator as the gateway runs it (`cloud-gateway --provider simulator`): its
//! `--simulator-*` flags and their [`Registration`].

use std::{path::Path, path::PathBuf, time::Duration};

use provider::registration::{Built, Registration, SetupError};

use crate::{
    Capabilities, Knobs, PROVIDER_NAME, Simulator, SimulatorConfig, admin_router,
    knobs::{RateLimitSetting, parse_error_rate},
};

/// The simulator's entry in the gateway's provider list.
pub static REGISTRATION: SimulatorRegistration = SimulatorRegistration;

/// See [`REGISTRATION`].
pub struct SimulatorRegistration;

#[async_trait::async_trait]
impl Registration for SimulatorRegistration {
    fn name(&self) -> &'static str {
        PROVIDER_NAME
    }

    fn about(&self) -> &'static str {
        "The embedded simulated cloud (no account needed)."
    }

    fn flags(&self, command: clap::Command) -> clap::Command {
        <SimulatorArgs as clap::Args>::augment_args(command.next_help_heading("Simulator options"))
    }

    async fn build(&self, flags: &clap::ArgMatches, _: Option<&Path>) -> Result<Built, SetupError> {
        let args = <SimulatorArgs as clap::FromArgMatches>::from_arg_matches(flags)?;
        let sim =
            Simulator::open(args.config()?).map_err(|e| format!("cannot open the simulated cloud: {e}"))?;
        let admin = admin_router(sim.clone());
        Ok(Built {
            http: Some(admin),
            ..Built::provider(sim)
        })
    }
}

/// Settings of the simulated cloud (`--provider simulator`).
#[derive(Debug, Clone, clap::Args)]
pub struct SimulatorArgs {
    /// State file; the cloud survives restarts. In memory only when unset.
    #[arg(long = "simulator-state", env = "SIMULATOR_STATE")]
    pub state: Option<PathBuf>,
    /// YAML inventory seeding a new cloud (used when the state file does not exist yet).
    #[arg(long = "simulator-inventory", env = "SIMULATOR_INVENTORY")]
    pub inventory: Option<PathBuf>,
    /// Latency added to every simulated API call.
    #[arg(long = "simulator-latency", default_value = "0s", value_parser = humantime::parse_duration)]
    pub latency: Duration,
    /// The simulated cloud's own API rate limit, `RATE/BURST` (e.g. `50/100`), for reads and for
    /// writes each; `0` throttles every call; unlimited when unset or `off`.
    #[arg(long = "simulator-rate-limit")]
    pub rate_limit: Option<RateLimitSetting>,
    /// Injected failure probability per operation, `OP=P` (e.g. `describe_instances=0.5`, `*=0.1`); repeatable.
    #[arg(long = "simulator-error-rate", value_parser = parse_error_rate)]
    pub error_rate: Vec<(String, Option<f64>)>,
    /// How long a new load balancer takes to provision.
    #[arg(long = "simulator-lb-provision-delay", default_value = "0s", value_parser = humantime::parse_duration)]
    pub lb_provision_delay: Duration,
    /// Capabilities to switch off (`instances`, `load-balancers`, `routes`); repeatable.
    #[arg(long = "simulator-disable", value_enum)]
    pub disable: Vec<Capability>,
    /// Most nodes per batched lookup the simulated cloud accepts.
    #[arg(long = "simulator-max-batch", default_value_t = 100)]
    pub max_batch: usize,
    /// Skip fsync of state writes (tests, demos on slow disks).
    #[arg(long = "simulator-no-fsync")]
    pub no_fsync: bool,
}

/// A provider capability.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Capability {
    /// InstancesV2.
    Instances,
    /// Load balancers.
    LoadBalancers,
    /// Routes.
    Routes,
}

impl SimulatorArgs {
    /// The simulated cloud these flags describe, validated.
    pub fn config(&self) -> Result<SimulatorConfig, String> {
        let knobs = Knobs {
            latency: self.latency,
            rate_limit: self.rate_limit.and_then(|setting| setting.0),
            error_rate: self
                .error_rate
                .iter()
                .filter_map(|(operation, p)| Some((operation.clone(), (*p)?)))
                .collect(),
            lb_provision_delay: self.lb_provision_delay,
            ..Default::default()
        };
        knobs
            .validate()
            .map_err(|e| format!("invalid configuration: simulator knobs: {e}"))?;
        Ok(SimulatorConfig {
            state_file: self.state.clone(),
            inventory: self.inventory.clone(),
            knobs,
            disabled: Capabilities {
                instances: self.disable.contains(&Capability::Instances),
                load_balancers: self.disable.contains(&Capability::LoadBalancers),
                routes: self.disable.contains(&Capability::Routes),
            },
            durable_writes: !self.no_fsync,
            limits: provider::ProviderLimits {
                max_instance_batch: self.max_batch.max(1),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RateLimit;

    fn parse(argv: &[&str]) -> Result<SimulatorArgs, clap::Error> {
        provider::registration::parse_flags(argv)
    }

    #[test]
    fn simulator_flags_parse() {
        let args = parse(&[
            "--simulator-rate-limit",
            "50/100",
            "--simulator-error-rate",
            "describe_instances=0.5",
            "--simulator-error-rate",
            "*=0.1",
            "--simulator-disable",
            "routes",
            "--simulator-latency",
            "20ms",
        ])
        .unwrap();
        let config = args.config().unwrap();
        assert_eq!(config.knobs.rate_limit, Some(RateLimit::new(50.0, 100.0)));
        assert_eq!(config.knobs.error_rate.get("describe_instances"), Some(&0.5));
        assert!(config.disabled.routes && !config.disabled.instances);
        assert_eq!(config.knobs.latency, Duration::from_millis(20));
    }

    #[test]
    fn bad_values_are_refused_with_the_setting_named() {
        assert!(parse(&["--simulator-rate-limit", "fast"]).is_err());
        assert!(parse(&["--simulator-error-rate", "x"]).is_err());
        let args = parse(&["--simulator-error-rate", "describe_instances=1.5"]).unwrap();
        assert!(args.config().unwrap_err().contains("simulator knobs"));
    }
}
