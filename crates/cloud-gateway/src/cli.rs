//! The command line: the gateway's own flags plus every registered provider's
//! ([`crate::providers`]), and the provider built from them. Cloud credentials and provider
//! configuration are read by the provider crates, in the gateway's process and nowhere else.
//!
//! A provider left out of the build (its cargo feature off) stays a valid `--provider` value:
//! choosing it, or giving one of its `--<provider>-*` flags, fails at start-up with
//! [`SetupError::NotBuiltIn`] (exit code 64) naming the feature, instead of clap's "unexpected
//! argument".

use std::{net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

use clap::{CommandFactory, FromArgMatches, builder::PossibleValue};
use provider::{Provider, registration::CloudConfig};
use telemetry::{LogFormat, TraceArgs};
use token_bucket::Limit;

use crate::{
    GatewayConfig, Security, ServerFiles,
    adaptive::AdaptiveConfig,
    auth::Policy,
    lb_reads::LbReadConfig,
    lookups::LookupConfig,
    peers::PeerConfig,
    providers::{self, Entry},
};

/// `cloud-gateway`'s command line: [`GatewayArgs`] and the chosen provider's flags.
#[derive(Debug, Clone)]
pub struct Args {
    /// The gateway's own flags.
    pub gateway: GatewayArgs,
    /// Everything parsed, for the provider to read its own flags from.
    matches: clap::ArgMatches,
}

impl CommandFactory for Args {
    fn command() -> clap::Command {
        with_providers(GatewayArgs::command())
    }

    fn command_for_update() -> clap::Command {
        with_providers(GatewayArgs::command_for_update())
    }
}

impl FromArgMatches for Args {
    fn from_arg_matches(matches: &clap::ArgMatches) -> Result<Self, clap::Error> {
        Ok(Self {
            gateway: GatewayArgs::from_arg_matches(matches)?,
            matches: matches.clone(),
        })
    }

    fn update_from_arg_matches(&mut self, matches: &clap::ArgMatches) -> Result<(), clap::Error> {
        self.gateway.update_from_arg_matches(matches)?;
        self.matches = matches.clone();
        Ok(())
    }
}

impl clap::Parser for Args {}

/// The gateway's command with `--provider`'s values and every built-in provider's flags.
fn with_providers(command: clap::Command) -> clap::Command {
    let values = providers::PROVIDERS.iter().map(|entry| match entry {
        Entry::Built(registration) => PossibleValue::new(registration.name()).help(registration.about()),
        Entry::NotBuilt(name) => {
            PossibleValue::new(*name).help(format!("NOT IN THIS BUILD (needs the cargo feature `{name}`)"))
        }
    });
    let readers: Vec<String> = providers::built()
        .filter_map(|r| {
            let required = if matches!(r.cloud_config(), CloudConfig::Required(_)) {
                " (required)"
            } else {
                ""
            };
            Some(format!(
                "--provider {}: {}{required}",
                r.name(),
                r.cloud_config().what()?
            ))
        })
        .collect();
    let command = command
        .mut_arg("provider", |arg| {
            arg.value_parser(clap::builder::PossibleValuesParser::new(values))
        })
        .mut_arg("cloud_config", |arg| {
            arg.help(format!(
                "The vendor CCM's own configuration file, read as that CCM reads it; a malformed \
                 file stops the gateway, naming the line and key. {}",
                readers.join("; ")
            ))
        });
    providers::built().fold(command, |command, registration| registration.flags(command))
}

/// When clap refused a flag of a provider this build left out (`--aws-region` without the `aws`
/// feature), the start-up error that says so.
pub fn flag_of_a_provider_not_built(err: &clap::Error) -> Option<SetupError> {
    if err.kind() != clap::error::ErrorKind::UnknownArgument {
        return None;
    }
    let clap::error::ContextValue::String(flag) = err.get(clap::error::ContextKind::InvalidArg)? else {
        return None;
    };
    providers::PROVIDERS.iter().find_map(|entry| match entry {
        Entry::NotBuilt(name) if flag.starts_with(&format!("--{name}-")) => {
            Some(SetupError::NotBuiltIn { provider: name })
        }
        _ => None,
    })
}

/// The gateway's own flags (the providers add theirs: [`Args`]).
#[derive(Debug, Clone, clap::Parser)]
#[command(
    name = "cloud-gateway",
    version,
    about = "The only component that talks to the cloud: serves cloudgateway.v1 to the controllers."
)]
pub struct GatewayArgs {
    /// gRPC listen address (cloudgateway.v1 and grpc.health.v1).
    #[arg(long, env = "CLOUD_GATEWAY_GRPC_LISTEN", default_value = "0.0.0.0:50051")]
    pub grpc_listen: SocketAddr,
    /// HTTP listen address (/healthz, /readyz, /metrics; the simulator's admin API).
    #[arg(long, env = "CLOUD_GATEWAY_HTTP_LISTEN", default_value = "0.0.0.0:10258")]
    pub http_listen: SocketAddr,
    /// Which cloud to call.
    #[arg(long, env = "CLOUD_GATEWAY_PROVIDER", default_value = "simulator")]
    pub provider: String,
    /// The vendor CCM's own configuration file, read as that CCM reads it, for the providers
    /// that take one (`--help` lists them). A malformed file stops the gateway, naming the line
    /// and key.
    #[arg(long = "cloud-config", value_name = "PATH")]
    pub cloud_config: Option<PathBuf>,

    /// Provider reads (lookups, lists) allowed per second.
    #[arg(long, default_value_t = 20.0)]
    pub read_rate: f64,
    /// Burst of provider reads.
    #[arg(long, default_value_t = 40.0)]
    pub read_burst: f64,
    /// Provider writes (ensure, update, delete, create) allowed per second.
    #[arg(long, default_value_t = 5.0)]
    pub write_rate: f64,
    /// Burst of provider writes.
    #[arg(long, default_value_t = 10.0)]
    pub write_burst: f64,
    /// Most nodes per batched instance lookup (the provider's own limit also applies).
    #[arg(long, default_value_t = 100)]
    pub instance_batch_size: usize,
    /// Most Services per batched load-balancer read (the provider's own limit also applies:
    /// AWS 20); 1 turns batching off.
    #[arg(long, default_value_t = 20)]
    pub load_balancer_batch_size: usize,
    /// Whether an instance lookup joins an identical one already in flight (from any caller).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub instance_coalescing: bool,
    /// How long a found instance is served from the cache; 0s turns the cache off.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub instance_cache_ttl: Duration,
    /// Factor applied to the rate when the provider answers "throttled".
    #[arg(long, default_value_t = 0.5)]
    pub throttle_decrease: f64,
    /// Lowest share of the configured rate adaptive slowdown may go to.
    #[arg(long, default_value_t = 0.05)]
    pub throttle_min_factor: f64,
    /// Share of the configured rate regained per second without throttling.
    #[arg(long, default_value_t = 0.05)]
    pub throttle_recovery_per_second: f64,
    /// Upper bound of a call, queueing included, when the client sets no shorter deadline.
    #[arg(long, default_value = "120s", value_parser = humantime::parse_duration)]
    pub max_call_duration: Duration,
    /// How long in-flight calls may finish after SIGTERM.
    #[arg(long, default_value = "20s", value_parser = humantime::parse_duration)]
    pub shutdown_grace: Duration,
    /// Log format.
    #[arg(long, value_enum, default_value = "text")]
    pub log_format: LogFormat,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub traces: TraceArgs,
    /// PEM certificate of the gRPC port (mutual TLS, with --tls-key-file and
    /// --tls-client-ca-file). Re-read when it changes: a rotated certificate needs no restart.
    #[arg(long, requires_all = ["tls_key_file", "tls_client_ca_file"], conflicts_with = "insecure_plaintext")]
    pub tls_cert_file: Option<PathBuf>,
    /// PEM private key of --tls-cert-file.
    #[arg(long, requires = "tls_cert_file")]
    pub tls_key_file: Option<PathBuf>,
    /// PEM CA bundle: every client must present a certificate it signed. The certificate's
    /// identity (its URI SAN, else its CN) is the caller, authorized by the policy.
    #[arg(long, requires = "tls_cert_file")]
    pub tls_client_ca_file: Option<PathBuf>,
    /// YAML authorization policy: which certificate identities are which caller and may make
    /// which calls. Default: the controllers by service-account name (or CN), each allowed
    /// its own calls only.
    #[arg(long)]
    pub authorization_policy: Option<PathBuf>,
    /// The gateway replicas' HTTP side ports, `host:port`, comma-separated (a headless Service
    /// name resolves to all of them, this replica included): the live replicas share the
    /// provider limits, each taking 1/N. Alone when unset.
    #[arg(long, value_delimiter = ',')]
    pub peers: Vec<String>,
    /// How often the peers are probed.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    pub peer_probe_interval: Duration,
    /// Serve gRPC in plain text with no authentication: anyone who reaches the port can call
    /// the cloud with the gateway's credentials. Only for local development, tests and demos.
    #[arg(long)]
    pub insecure_plaintext: bool,
    /// Shadow mode: answer every write call (ensure, update, delete, create) from a plan and
    /// make no write to the cloud; each write the provider would make is logged, counted
    /// (cloudgateway_dry_run_woulds_total) and listed at /dry-run on the HTTP port. Reads are
    /// served as usual. Without it, a call carrying the `cloudgateway-dry-run: true` header is
    /// still answered so (a controller in --dry-run is safe with a normal gateway).
    #[arg(long, env = "CLOUD_GATEWAY_DRY_RUN")]
    pub dry_run: bool,
}

/// Why the gateway cannot start.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// A setting is invalid.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The provider asked for was left out of this build (its cargo feature was off).
    #[error(
        "--provider {provider} is not in this build: it was compiled without the cargo feature \
         `{provider}`. Build cloud-gateway with it, e.g. `cargo build -p cloud-gateway --features \
         {provider}` (the default features include every provider, as in `make build` and the \
         release images)"
    )]
    NotBuiltIn {
        /// The `--provider` value, also the missing feature's name.
        provider: &'static str,
    },
    /// The provider cannot be set up (a bad setting, a cloud config file unreadable, malformed
    /// or refused, no credentials); its message names the provider, the file, line and key.
    #[error("{0}")]
    Provider(provider::registration::SetupError),
    /// A provider that needs the vendor CCM's file was started without `--cloud-config`.
    #[error("--provider {provider} needs --cloud-config: {what}")]
    NoCloudConfig {
        /// The `--provider` value.
        provider: &'static str,
        /// What file it needs.
        what: &'static str,
    },
}

impl Args {
    /// The gateway settings, validated.
    pub fn gateway_config(&self) -> Result<GatewayConfig, SetupError> {
        if let Some(Entry::Built(registration)) = providers::find(&self.gateway.provider) {
            match (registration.cloud_config(), &self.gateway.cloud_config) {
                (CloudConfig::Unused, Some(path)) => {
                    let takers: Vec<&str> = providers::built()
                        .filter(|r| r.cloud_config() != CloudConfig::Unused)
                        .map(|r| r.name())
                        .collect();
                    return Err(SetupError::Config(format!(
                        "--cloud-config {} is a vendor CCM's configuration file: it needs --provider {} (the provider is {})",
                        path.display(),
                        takers.join(" or "),
                        registration.name()
                    )));
                }
                (CloudConfig::Required(what), None) => {
                    return Err(SetupError::NoCloudConfig {
                        provider: registration.name(),
                        what,
                    });
                }
                _ => {}
            }
        }
        let read_limit = Limit::new(self.gateway.read_rate, self.gateway.read_burst)
            .map_err(|e| SetupError::Config(format!("read limit: {e}")))?;
        let write_limit = Limit::new(self.gateway.write_rate, self.gateway.write_burst)
            .map_err(|e| SetupError::Config(format!("write limit: {e}")))?;
        let config = GatewayConfig {
            read_limit,
            write_limit,
            adaptive: AdaptiveConfig {
                decrease: self.gateway.throttle_decrease,
                min_factor: self.gateway.throttle_min_factor,
                recovery_per_second: self.gateway.throttle_recovery_per_second,
                ..AdaptiveConfig::default()
            },
            lookups: LookupConfig {
                batch_size: self.gateway.instance_batch_size,
                cache_ttl: self.gateway.instance_cache_ttl,
                coalesce: self.gateway.instance_coalescing,
            },
            lb_reads: LbReadConfig {
                batch_size: self.gateway.load_balancer_batch_size,
            },
            max_call_duration: self.gateway.max_call_duration,
            shutdown_grace: self.gateway.shutdown_grace,
            security: self.security()?,
            peers: (!self.gateway.peers.is_empty()).then(|| PeerConfig {
                targets: self.gateway.peers.clone(),
                interval: self.gateway.peer_probe_interval,
            }),
            dry_run: self.gateway.dry_run,
        };
        config.validate().map_err(SetupError::Config)?;
        Ok(config)
    }

    fn security(&self) -> Result<Security, SetupError> {
        let policy = match &self.gateway.authorization_policy {
            Some(path) => Policy::from_file(path).map_err(SetupError::Config)?,
            None => Policy::default(),
        };
        match (&self.gateway.tls_cert_file, &self.gateway.tls_key_file, &self.gateway.tls_client_ca_file) {
            (Some(cert), Some(key), Some(client_ca)) => Ok(Security::MutualTls {
                files: ServerFiles {
                    cert: cert.clone(),
                    key: key.clone(),
                    client_ca: client_ca.clone(),
                },
                policy,
            }),
            _ if self.gateway.insecure_plaintext => {
                tracing::warn!(
                    "INSECURE: --insecure-plaintext serves gRPC without TLS or authentication; anyone who reaches the port acts with the cloud credentials. Use mutual TLS (--tls-cert-file, --tls-key-file, --tls-client-ca-file) outside local development."
                );
                Ok(Security::InsecurePlaintext { policy })
            }
            _ => Err(SetupError::Config(
                "the gRPC port needs mutual TLS (--tls-cert-file, --tls-key-file, --tls-client-ca-file), or --insecure-plaintext for local development".into(),
            )),
        }
    }

    /// Builds the provider, plus any HTTP routes it serves (the simulator's admin API), and logs
    /// once what its settings have without effect. Fails with [`SetupError::NotBuiltIn`] for a
    /// provider this build does not include.
    pub async fn provider(&self) -> Result<(Arc<dyn Provider>, Option<axum::Router>), SetupError> {
        let registration = match providers::find(&self.gateway.provider) {
            Some(Entry::Built(registration)) => registration,
            Some(Entry::NotBuilt(provider)) => return Err(SetupError::NotBuiltIn { provider }),
            None => {
                return Err(SetupError::Config(format!(
                    "unknown --provider {}",
                    self.gateway.provider
                )));
            }
        };
        let cloud_config = self.gateway.cloud_config.as_deref();
        let built = registration
            .build(&self.matches, cloud_config)
            .await
            .map_err(SetupError::Provider)?;
        if !built.notices.is_empty() {
            tracing::warn!(
                "cloud config {}: settings without effect: {}",
                cloud_config.unwrap_or(std::path::Path::new("")).display(),
                built.notices.join("; ")
            );
        }
        Ok((built.provider, built.http))
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[test]
    fn without_mutual_tls_the_gateway_needs_the_insecure_flag() {
        let err = Args::parse_from(["cloud-gateway"])
            .gateway_config()
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("mutual TLS") && err.contains("--insecure-plaintext"),
            "{err}"
        );
        let config = Args::parse_from(["cloud-gateway", "--insecure-plaintext"])
            .gateway_config()
            .unwrap();
        assert!(matches!(config.security, Security::InsecurePlaintext { .. }));
        // TLS without a client CA would leave callers unauthenticated: refused by the flags.
        assert!(
            Args::try_parse_from(["cloud-gateway", "--tls-cert-file", "c", "--tls-key-file", "k"]).is_err()
        );
        let mtls = Args::parse_from([
            "cloud-gateway",
            "--tls-cert-file",
            "c.pem",
            "--tls-key-file",
            "k.pem",
            "--tls-client-ca-file",
            "ca.pem",
        ]);
        assert!(matches!(
            mtls.gateway_config().unwrap().security,
            Security::MutualTls { .. }
        ));
        assert!(
            Args::try_parse_from([
                "cloud-gateway",
                "--insecure-plaintext",
                "--tls-cert-file",
                "c.pem",
                "--tls-key-file",
                "k.pem",
                "--tls-client-ca-file",
                "ca.pem",
            ])
            .is_err()
        );
    }

    #[test]
    fn defaults_build_a_valid_config() {
        let args = Args::parse_from(["cloud-gateway", "--insecure-plaintext"]);
        let config = args.gateway_config().unwrap();
        assert_eq!(
            config.read_limit,
            Limit {
                rate: 20.0,
                burst: 40.0
            }
        );
        assert_eq!(config.lookups.cache_ttl, Duration::from_secs(10));
        assert_eq!(args.gateway.provider, "simulator");
    }

    #[cfg(all(feature = "aws", feature = "openstack"))]
    #[test]
    fn the_cloud_config_needs_provider_aws() {
        let args = Args::parse_from([
            "cloud-gateway",
            "--insecure-plaintext",
            "--cloud-config",
            "/etc/kubernetes/cloud.conf",
        ]);
        let err = args.gateway_config().unwrap_err().to_string();
        assert!(
            err.contains("--cloud-config /etc/kubernetes/cloud.conf")
                && err.contains("needs --provider aws or openstack")
                && err.contains("the provider is simulator"),
            "{err}"
        );
        let args = Args::parse_from([
            "cloud-gateway",
            "--insecure-plaintext",
            "--provider=aws",
            "--cloud-config=/etc/kubernetes/cloud.conf",
        ]);
        args.gateway_config().unwrap();
    }

    #[cfg(feature = "openstack")]
    #[test]
    fn provider_openstack_needs_occms_cloud_conf() {
        let args = Args::parse_from(["cloud-gateway", "--insecure-plaintext", "--provider=openstack"]);
        let err = args.gateway_config().unwrap_err().to_string();
        assert!(err.contains("--provider openstack needs --cloud-config"), "{err}");
    }

    /// The providers' flags parse beside the gateway's, and reach the provider chosen.
    #[cfg(all(feature = "simulator", feature = "aws"))]
    #[test]
    fn every_providers_flags_parse_beside_the_gateways() {
        let args = Args::parse_from([
            "cloud-gateway",
            "--provider=aws",
            "--aws-region=eu-west-1",
            "--simulator-rate-limit=50/100",
            "--read-rate=7",
        ]);
        assert_eq!(args.gateway.provider, "aws");
        assert_eq!(args.gateway.read_rate, 7.0);
        let err = Args::try_parse_from(["cloud-gateway", "--provider=gce"]).unwrap_err();
        assert!(err.to_string().contains("gce"), "{err}");
    }

    #[test]
    fn bad_values_are_refused_with_the_setting_named() {
        let args = Args::parse_from(["cloud-gateway", "--insecure-plaintext", "--read-rate", "0"]);
        assert!(
            args.gateway_config()
                .unwrap_err()
                .to_string()
                .contains("read limit")
        );
        #[cfg(feature = "simulator")]
        assert!(Args::try_parse_from(["cloud-gateway", "--simulator-rate-limit", "fast"]).is_err());
    }

    /// A provider left out of the build is still a valid `--provider` value, and its flags are
    /// told apart from typos, so the refusal names the feature instead of clap's "unexpected
    /// argument".
    #[cfg(not(feature = "aws"))]
    #[tokio::test]
    async fn aws_without_its_feature_is_refused_naming_the_feature() {
        let args = Args::parse_from(["cloud-gateway", "--provider", "aws"]);
        let err = args.provider().await.err().expect("refused").to_string();
        assert!(err.contains("cargo feature `aws`"), "{err}");
        assert!(err.contains("--features aws"), "{err}");
        let err = Args::try_parse_from(["cloud-gateway", "--provider", "aws", "--aws-region", "eu-west-1"])
            .unwrap_err();
        let err = flag_of_a_provider_not_built(&err).expect("told").to_string();
        assert!(err.contains("cargo feature `aws`"), "{err}");
        let err = Args::try_parse_from(["cloud-gateway", "--awz-region", "eu-west-1"]).unwrap_err();
        assert!(flag_of_a_provider_not_built(&err).is_none());
    }

    #[cfg(not(feature = "simulator"))]
    #[tokio::test]
    async fn the_simulator_without_its_feature_is_refused_naming_the_feature() {
        let args = Args::parse_from(["cloud-gateway", "--provider", "simulator"]);
        let err = args.provider().await.err().expect("refused").to_string();
        assert!(err.contains("cargo feature `simulator`"), "{err}");
    }
}
