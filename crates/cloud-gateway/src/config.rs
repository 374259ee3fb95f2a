//! The gateway's settings, validated once at start-up.

use std::time::Duration;

use token_bucket::Limit;

use crate::{
    adaptive::AdaptiveConfig,
    auth::{Policy, Security},
    lb_reads::LbReadConfig,
    lookups::LookupConfig,
    peers::PeerConfig,
};

/// The longest `--peer-probe-interval` accepted: the replicas' shares follow membership that
/// much later.
pub const MAX_PEER_PROBE_INTERVAL: Duration = Duration::from_secs(300);

/// Everything that shapes how the gateway calls its provider.
#[derive(Debug, Clone, PartialEq)]
pub struct GatewayConfig {
    /// Token bucket for reads (lookups, lists, gets).
    pub read_limit: Limit,
    /// Token bucket for writes (ensure, update, delete, create).
    pub write_limit: Limit,
    /// Adaptive slowdown on "throttled" answers.
    pub adaptive: AdaptiveConfig,
    /// Instance lookup batching and cache.
    pub lookups: LookupConfig,
    /// Batching of load-balancer reads.
    pub lb_reads: LbReadConfig,
    /// Upper bound of any call, queueing included, when the client sets no shorter deadline.
    pub max_call_duration: Duration,
    /// How long in-flight calls may finish after a shutdown signal.
    pub shutdown_grace: Duration,
    /// How callers are authenticated and authorized.
    pub security: Security,
    /// The other gateway replicas to share the provider limits with; alone when `None`.
    pub peers: Option<PeerConfig>,
    /// Shadow mode (`--dry-run`): every write call is planned and answered, its provider writes
    /// recorded as woulds and not made ([`crate::dry_run`]). Reads are served as usual.
    pub dry_run: bool,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        Self {
            read_limit: Limit {
                rate: 20.0,
                burst: 40.0,
            },
            write_limit: Limit {
                rate: 5.0,
                burst: 10.0,
            },
            adaptive: AdaptiveConfig::default(),
            lookups: LookupConfig::default(),
            lb_reads: LbReadConfig::default(),
            max_call_duration: Duration::from_secs(120),
            shutdown_grace: Duration::from_secs(20),
            security: Security::InsecurePlaintext {
                policy: Policy::default(),
            },
            peers: None,
            dry_run: false,
        }
    }
}

impl GatewayConfig {
    /// Checks the settings that types cannot; the message names the setting.
    pub fn validate(&self) -> Result<(), String> {
        Limit::new(self.read_limit.rate, self.read_limit.burst).map_err(|e| format!("read limit: {e}"))?;
        Limit::new(self.write_limit.rate, self.write_limit.burst).map_err(|e| format!("write limit: {e}"))?;
        let a = &self.adaptive;
        if !(a.decrease > 0.0 && a.decrease < 1.0) {
            return Err(format!(
                "throttle decrease must be between 0 and 1 (exclusive), got {}",
                a.decrease
            ));
        }
        if !(a.min_factor > 0.0 && a.min_factor <= 1.0) {
            return Err(format!(
                "throttle min factor must be in (0, 1], got {}",
                a.min_factor
            ));
        }
        if !(a.recovery_per_second.is_finite() && a.recovery_per_second > 0.0) {
            return Err(format!(
                "throttle recovery must be positive, got {}",
                a.recovery_per_second
            ));
        }
        if self.lookups.batch_size == 0 {
            return Err("instance batch size must be at least 1".into());
        }
        if self.lb_reads.batch_size == 0 {
            return Err("load balancer batch size must be at least 1".into());
        }
        if self.max_call_duration.is_zero() {
            return Err("max call duration must be positive".into());
        }
        if let Some(peers) = &self.peers
            && (peers.interval.is_zero() || peers.interval > MAX_PEER_PROBE_INTERVAL)
        {
            return Err(format!(
                "peer probe interval must be positive and at most {MAX_PEER_PROBE_INTERVAL:?} (a dead \
                 replica's share comes back only after it), got {:?}",
                peers.interval
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        GatewayConfig::default().validate().unwrap();
    }

    #[test]
    fn bad_settings_are_named() {
        type Mutation = fn(&mut GatewayConfig);
        fn peers(interval: Duration) -> Option<PeerConfig> {
            Some(PeerConfig {
                targets: vec!["127.0.0.1:1".into()],
                interval,
            })
        }
        let cases: [(&str, Mutation); 8] = [
            // Found by fuzzing the command line: `--peer-probe-interval 18446744073709551615s`
            // was accepted, then overflowed computing the warm-up at start.
            ("peer probe interval", |c| {
                c.peers = peers(Duration::from_secs(u64::MAX))
            }),
            ("peer probe interval", |c| c.peers = peers(Duration::ZERO)),
            ("read limit", |c| c.read_limit.rate = 0.0),
            ("write limit", |c| c.write_limit.burst = 0.0),
            ("decrease", |c| c.adaptive.decrease = 1.0),
            ("min factor", |c| c.adaptive.min_factor = 0.0),
            ("batch size", |c| c.lookups.batch_size = 0),
            ("max call duration", |c| c.max_call_duration = Duration::ZERO),
        ];
        for (what, mutate) in cases {
            let mut c = GatewayConfig::default();
            mutate(&mut c);
            let err = c.validate().unwrap_err();
            assert!(err.contains(what), "{what}: {err}");
        }
    }
}
