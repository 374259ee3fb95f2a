//! The route controller's own flags (upstream names and defaults where upstream has the
//! concept) and their validation.

use std::time::Duration;

use controller_kit::runner::ControllerConfig;

use crate::plan::ClusterCidrs;

/// The longest node changes wait for quiet before the routes are reconciled anyway (KEP-5237's
/// bound: in a burst of node events, never worse than a 10 s interval).
pub const NODE_SYNC_MAX_DELAY: Duration = Duration::from_secs(10);

/// How a reconcile is triggered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// On node changes (added, deleted, `spec.podCIDRs` or `status.addresses` changed), plus
    /// the periodic resync.
    Watch,
    /// Only every `--route-reconciliation-period`, whatever happens: upstream's default (its
    /// watch-based mode is behind the `CloudControllerManagerWatchBasedRoutesReconciliation`
    /// feature gate). For comparison (`make bench`).
    Periodic,
}

/// Flags of `node-route-controller` beyond the common ones.
#[derive(Debug, Clone, clap::Args)]
pub struct Config {
    /// The pod network's CIDRs, comma-separated: one, or one IPv4 and one IPv6 (dual-stack).
    /// Only routes inside them are created or deleted; routes outside are never touched.
    /// Required when --configure-cloud-routes is true.
    #[arg(long = "cluster-cidr")]
    pub cluster_cidr: Option<String>,
    /// Period of the safety resync (one ListRoutes when nothing changed); node changes are
    /// reconciled at once.
    #[arg(long = "route-reconciliation-period", default_value = "10s", value_parser = humantime::parse_duration)]
    pub route_reconciliation_period: Duration,
    /// Whether to manage routes at all; false: the controller stays up, ready and idle.
    #[arg(long = "configure-cloud-routes", default_value_t = true, action = clap::ArgAction::Set)]
    pub configure_cloud_routes: bool,
    /// Cloud operations (creates and deletes) at once (upstream's maxConcurrentRouteOperations).
    #[arg(long = "concurrent-route-operations", default_value_t = 200)]
    pub concurrent_route_operations: u16,
    /// How long node changes must stay quiet before the routes are reconciled (at most 10 s
    /// after the first change), so that nodes joining together cost one ListRoutes. `0s`: at
    /// once.
    #[arg(long = "node-sync-delay", default_value = "1s", value_parser = humantime::parse_duration)]
    pub node_sync_delay: Duration,
    /// `watch` (node changes and the periodic resync) or `periodic` (upstream's default: a full
    /// reconcile every period and on nothing else).
    #[arg(long = "route-reconciliation-mode", value_enum, default_value = "watch")]
    pub mode: Mode,
}

impl Config {
    /// The parsed `--cluster-cidr`.
    ///
    /// # Errors
    /// A message naming the flag (none given, unparsable, more than two, two of one family).
    pub fn cluster_cidrs(&self) -> Result<ClusterCidrs, String> {
        let given = self.cluster_cidr.as_deref().unwrap_or_default();
        if given.trim().is_empty() {
            return Err(
                "--cluster-cidr is required when --configure-cloud-routes is true: the pod network's CIDR \
                 (e.g. 10.244.0.0/16), or an IPv4 and an IPv6 one, comma-separated, for dual-stack"
                    .into(),
            );
        }
        ClusterCidrs::parse(given).map_err(|e| format!("--cluster-cidr {given:?}: {e}"))
    }
}

impl ControllerConfig for Config {
    /// Checks what the types cannot.
    ///
    /// # Errors
    /// A message naming the flag.
    fn validate(&self) -> Result<(), String> {
        if self.configure_cloud_routes {
            self.cluster_cidrs()?;
        }
        if self.route_reconciliation_period.is_zero() {
            return Err("--route-reconciliation-period must be positive".into());
        }
        if self.concurrent_route_operations == 0 {
            return Err("--concurrent-route-operations must be at least 1".into());
        }
        if self.node_sync_delay > NODE_SYNC_MAX_DELAY {
            return Err(format!(
                "--node-sync-delay must be at most {NODE_SYNC_MAX_DELAY:?}"
            ));
        }
        Ok(())
    }

    fn disabled(&self) -> Option<String> {
        (!self.configure_cloud_routes).then(|| {
            "--configure-cloud-routes=false: no route is created or deleted and no NetworkUnavailable \
             condition is written"
                .to_owned()
        })
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        config: Config,
    }

    fn parse(args: &[&str]) -> Config {
        Cli::parse_from(std::iter::once("node-route-controller").chain(args.iter().copied())).config
    }

    #[test]
    fn defaults_are_upstreams() {
        let c = parse(&["--cluster-cidr", "10.244.0.0/16"]);
        assert_eq!(c.route_reconciliation_period, Duration::from_secs(10));
        assert!(c.configure_cloud_routes);
        assert_eq!(c.concurrent_route_operations, 200);
        assert_eq!(c.mode, Mode::Watch);
        assert_eq!(c.node_sync_delay, Duration::from_secs(1));
        assert_eq!(c.validate(), Ok(()));
        assert_eq!(c.disabled(), None);
    }

    #[test]
    fn the_cluster_cidr_is_required_and_checked_and_errors_name_the_flag() {
        let cases: [(&[&str], Option<&str>); 9] = [
            (&[], Some("--cluster-cidr is required")),
            (&["--cluster-cidr", ""], Some("--cluster-cidr is required")),
            (&["--cluster-cidr", "10.244.0.0/16,fd00:10::/56"], None),
            (&["--cluster-cidr", "10.244.0.0/16, fd00:10::/56"], None),
            (&["--cluster-cidr", "banana"], Some("--cluster-cidr \"banana\"")),
            (
                &["--cluster-cidr", "10.244.0.0/16,10.245.0.0/16"],
                Some("one IPv4 and one IPv6"),
            ),
            (
                &["--cluster-cidr", "10.244.0.0/16,fd00::/56,10.1.0.0/16"],
                Some("at most two"),
            ),
            // Host bits are dropped, as upstream does.
            (&["--cluster-cidr", "10.244.1.5/16"], None),
            // Off: nothing to route, so no CIDR is needed.
            (&["--configure-cloud-routes=false"], None),
        ];
        for (args, want) in cases {
            match (parse(args).validate(), want) {
                (Ok(()), None) => {}
                (Err(got), Some(want)) => assert!(got.contains(want), "{args:?}: {got}"),
                (got, want) => panic!("{args:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn switched_off_it_says_why() {
        let c = parse(&["--configure-cloud-routes=false"]);
        assert!(c.disabled().unwrap().contains("--configure-cloud-routes=false"));
    }

    #[test]
    fn other_flags_are_checked() {
        for (args, want) in [
            (
                &["--route-reconciliation-period", "0s"][..],
                "--route-reconciliation-period",
            ),
            (
                &["--concurrent-route-operations", "0"],
                "--concurrent-route-operations",
            ),
            (&["--node-sync-delay", "11s"], "--node-sync-delay"),
        ] {
            let mut all = vec!["--cluster-cidr", "10.244.0.0/16"];
            all.extend_from_slice(args);
            let err = parse(&all).validate().unwrap_err();
            assert!(err.contains(want), "{args:?}: {err}");
        }
        let periodic = parse(&[
            "--cluster-cidr",
            "10.0.0.0/8",
            "--route-reconciliation-mode",
            "periodic",
        ]);
        assert_eq!(periodic.mode, Mode::Periodic);
    }
}
