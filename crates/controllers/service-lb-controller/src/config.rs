//! The service controller's own flags (upstream names where upstream has the concept) and their
//! validation.

use std::{sync::Arc, time::Duration};

use controller_kit::{
    runner::{ControllerConfig, SwitchedOffReport},
    shards::shard_of,
};

/// Shards the Services are split into: at most this many replicas share the work. Fixed, so that
/// every replica, of any version, puts a Service in the same shard (a replica with another count
/// would reconcile Services another replica owns).
pub const SHARDS: u32 = 16;

/// The longest a node-set change waits for quiet before the backends are updated anyway.
pub const NODE_SYNC_MAX_DELAY: Duration = Duration::from_secs(10);

/// While Services wait for a provider that serves load balancers (or for their former provider),
/// how often the gateway is asked which provider it serves now (one question, however many wait).
pub const PROVIDER_RECHECK: Duration = Duration::from_secs(10);

/// Flags of `service-lb-controller` beyond the common ones.
#[derive(Debug, Clone, clap::Args)]
pub struct Config {
    /// Services synced in parallel by each replica (upstream's default is 1). High enough that
    /// the gateway's write limit, not this controller, is the bottleneck.
    #[arg(long = "concurrent-service-syncs", default_value_t = 50)]
    pub concurrent_service_syncs: u16,
    /// Serve only Services with this `spec.loadBalancerClass`; unset, only Services without a
    /// class (upstream's behaviour). Installs serving different classes run side by side.
    #[arg(long = "load-balancer-class")]
    pub load_balancer_class: Option<String>,
    /// How long the node set must stay unchanged before the load balancers' backends are
    /// updated (at most 10 s after the first change), so that nodes joining together cost one
    /// update per load balancer. `0s`: at once, as upstream.
    #[arg(long = "node-sync-delay", default_value = "1s", value_parser = humantime::parse_duration)]
    pub node_sync_delay: Duration,
}

impl Config {
    /// The shard leases' group name: the leader-election resource name when given, else the
    /// controller's name, with the class's hash so that two installs serving different classes
    /// in one namespace never share shards.
    pub fn shard_group(&self, name: &str, resource_name: Option<&str>) -> String {
        match (resource_name, &self.load_balancer_class) {
            (Some(given), _) => given.to_owned(),
            (None, None) => name.to_owned(),
            (None, Some(class)) => format!("{name}-{:08x}", shard_of(class, u32::MAX)),
        }
    }
}

impl ControllerConfig for Config {
    /// Checks what the types cannot.
    ///
    /// # Errors
    /// A message naming the flag.
    fn validate(&self) -> Result<(), String> {
        if self.node_sync_delay > NODE_SYNC_MAX_DELAY {
            return Err(format!(
                "--node-sync-delay must be at most {NODE_SYNC_MAX_DELAY:?}"
            ));
        }
        if self.concurrent_service_syncs == 0 {
            return Err("--concurrent-service-syncs must be at least 1".into());
        }
        if let Some(class) = &self.load_balancer_class
            && (class.is_empty() || class.len() > 253 || class.contains(char::is_whitespace))
        {
            return Err(format!(
                "--load-balancer-class {class:?} is not a valid class name (a label-style key, e.g. example.com/internal)"
            ));
        }
        Ok(())
    }

    /// A Warning event on each Service of its class while load balancers are switched off.
    fn switched_off_report(&self) -> Option<Arc<dyn SwitchedOffReport>> {
        Some(crate::switched_off::SwitchedOffServices::new(
            self.load_balancer_class.clone(),
        ))
    }
}
