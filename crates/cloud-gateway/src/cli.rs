//! The command line: gateway settings and the provider choice. Cloud credentials and provider
//! configuration are read here, in the gateway, and nowhere else in the system.
//!
//! Each provider is a cargo feature of this crate (`simulator`, `aws`; both by default). A build
//! without a provider's feature keeps its flags, so `--help` still lists them under a heading that
//! says they need the feature, and `--provider` of it fails at start-up with
//! [`SetupError::NotBuiltIn`] (exit code 64) instead of clap's "unexpected argument".

use std::{net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

use provider::Provider;
use telemetry::{LogFormat, TraceArgs};
use token_bucket::Limit;

use crate::{
    GatewayConfig, Security, ServerFiles, adaptive::AdaptiveConfig, auth::Policy, lb_reads::LbReadConfig,
    lookups::LookupConfig, peers::PeerConfig,
};

/// `cloud-gateway` flags.
#[derive(Debug, Clone, clap::Parser)]
#[command(
    name = "cloud-gateway",
    version,
    about = "The only component that talks to the cloud: serves cloudgateway.v1 to the controllers."
)]
pub struct Args {
    /// gRPC listen address (cloudgateway.v1 and grpc.health.v1).
    #[arg(long, env = "CLOUD_GATEWAY_GRPC_LISTEN", default_value = "0.0.0.0:50051")]
    pub grpc_listen: SocketAddr,
    /// HTTP listen address (/healthz, /readyz, /metrics; the simulator's admin API).
    #[arg(long, env = "CLOUD_GATEWAY_HTTP_LISTEN", default_value = "0.0.0.0:10258")]
    pub http_listen: SocketAddr,
    /// Which cloud to call.
    #[arg(long, env = "CLOUD_GATEWAY_PROVIDER", value_enum, default_value = "simulator")]
    pub provider: ProviderKind,

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

    #[command(flatten)]
    #[allow(missing_docs)]
    pub simulator: SimulatorArgs,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub aws: AwsArgs,
}

/// The cloud behind the gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ProviderKind {
    /// The embedded simulated cloud (no account needed).
    #[cfg_attr(
        not(feature = "simulator"),
        value(
            help = "NOT IN THIS BUILD (needs the cargo feature `simulator`): the embedded simulated cloud"
        )
    )]
    Simulator,
    /// Amazon Web Services: EC2 instances, NLBs, VPC routes (or an AWS-compatible endpoint).
    #[cfg_attr(
        not(feature = "aws"),
        value(help = "NOT IN THIS BUILD (needs the cargo feature `aws`): Amazon Web Services")
    )]
    Aws,
    /// OpenStack: Nova instances, Neutron router routes, as openstack-cloud-controller-manager.
    #[cfg_attr(
        not(feature = "openstack"),
        value(help = "NOT IN THIS BUILD (needs the cargo feature `openstack`): OpenStack")
    )]
    Openstack,
}

impl ProviderKind {
    /// The `--provider` value, which is also the name of the cargo feature that builds it in.
    pub fn name(self) -> &'static str {
        match self {
            Self::Simulator => "simulator",
            Self::Aws => "aws",
            Self::Openstack => "openstack",
        }
    }
}

/// Settings of AWS (`--provider aws`). Credentials come only from the standard AWS chain
/// (environment, profile, web identity, instance metadata) of the gateway's process.
#[derive(Debug, Clone, clap::Args)]
#[cfg_attr(
    not(feature = "aws"),
    command(next_help_heading = "AWS options (NOT IN THIS BUILD: need the cargo feature `aws`)")
)]
pub struct AwsArgs {
    /// The vendor CCM's cloud config file. With `--provider openstack` (required there):
    /// openstack-cloud-controller-manager's `cloud.conf` (`[Global]`, `[Networking]`, `[Route]`,
    /// ...), see docs/openstack.md. With `--provider aws`: cloud-provider-aws's cloud-config file
    /// (gcfg INI: `[Global]`, `[ServiceOverride "n"]`), as its `--cloud-config` reads it; see docs/aws.md. The `--aws-*` flags given explicitly
    /// override the file's values (region, VPC, subnet, route table, cluster ID and legacy tag;
    /// `--aws-endpoint-url` replaces its `[ServiceOverride]` endpoints). Needs `--provider aws`.
    /// A malformed file stops the gateway, naming the line and key.
    #[arg(long = "cloud-config", value_name = "PATH")]
    pub cloud_config: Option<PathBuf>,
    /// Region; the standard chain's when unset.
    #[arg(long = "aws-region", env = "AWS_REGION")]
    pub region: Option<String>,
    /// Endpoint URL for EC2 and ELBv2 (an AWS-compatible cloud, or moto in tests).
    #[arg(long = "aws-endpoint-url", env = "AWS_ENDPOINT_URL")]
    pub endpoint_url: Option<String>,
    /// Route table for pod-CIDR routes; the table tagged `kubernetes.io/cluster/<cluster>` when unset.
    #[arg(long = "aws-route-table-id")]
    pub route_table_id: Option<String>,
    /// The cluster's VPC (narrows subnet discovery and lookups by name).
    #[arg(long = "aws-vpc-id")]
    pub vpc_id: Option<String>,
    /// Subnets for new load balancers, comma-separated; discovered by tags when unset.
    #[arg(long = "aws-subnet-ids", value_delimiter = ',')]
    pub subnet_ids: Vec<String>,
    /// Instance IDs per DescribeInstances call.
    #[arg(long = "aws-max-instance-batch", default_value_t = 500)]
    pub max_instance_batch: usize,
    /// SDK attempts per call for network errors and 5xx (throttling is never retried there).
    #[arg(long = "aws-max-attempts", default_value_t = 3)]
    pub max_attempts: u32,
    /// Bound of one AWS API call, retries included.
    #[arg(long = "aws-operation-timeout", default_value = "30s", value_parser = humantime::parse_duration)]
    pub operation_timeout: Duration,
    /// How long a load balancer found as its Service asks is trusted: within it, a sync of the
    /// unchanged Service reads only the load balancer and its tags; `0s` reads everything on
    /// every sync, as cloud-provider-aws does.
    #[arg(long = "aws-load-balancer-verify-period", default_value = "10m", value_parser = humantime::parse_duration)]
    pub verify_period: Duration,
    /// The cluster ID of AWS tags (`kubernetes.io/cluster/<id>`), as cloud-provider-aws's
    /// `KubernetesClusterID`; the controllers' `--cluster-name` when unset.
    #[arg(long = "aws-cluster-id")]
    pub cluster_id: Option<String>,
    /// Also tag new resources `KubernetesCluster=<id>`, as cloud-provider-aws does when its cloud
    /// config sets `KubernetesClusterTag` (clusters older than the `kubernetes.io/cluster/` key).
    /// Needs --aws-cluster-id. Resources carrying only the legacy tag are the cluster's either way.
    #[arg(long = "aws-legacy-cluster-tag", requires = "cluster_id")]
    pub legacy_cluster_tag: bool,
    /// Address families of node addresses, in order, comma-separated: `ipv4`, `ipv6`,
    /// `ipv4,ipv6` or `ipv6,ipv4` (cloud-provider-aws's `NodeIPFamilies`: IPv6-only and
    /// dual-stack nodes). Overrides the cloud-config file's; unset: the file's, else `ipv4`.
    #[arg(long = "aws-node-ip-families", value_delimiter = ',', value_enum)]
    pub node_ip_families: Vec<NodeIpFamily>,
}

/// An address family of node addresses, as cloud-provider-aws's `NodeIPFamilies` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum NodeIpFamily {
    /// The private and public IPv4 addresses and DNS names.
    Ipv4,
    /// The IPv6 addresses of the instance's network interfaces.
    Ipv6,
}

#[cfg(feature = "aws")]
impl NodeIpFamily {
    fn family(self) -> provider_aws::config::IpFamily {
        match self {
            Self::Ipv4 => provider_aws::config::IpFamily::V4,
            Self::Ipv6 => provider_aws::config::IpFamily::V6,
        }
    }
}

#[cfg(feature = "aws")]
impl AwsArgs {
    /// The provider settings: the cloud-config file's (if any) under the flags given, and what
    /// the file has that has no effect (logged once by [`Args::provider`]).
    pub fn config(&self) -> Result<(provider_aws::AwsConfig, Vec<String>), SetupError> {
        let (mut config, mut notices) = match &self.cloud_config {
            Some(path) => {
                let file = provider_aws::cloud_config::read(path)?;
                let config = file.to_aws_config().map_err(|mut e| {
                    e.path = Some(path.display().to_string());
                    e
                })?;
                (config, file.notices().iter().map(ToString::to_string).collect())
            }
            None => (provider_aws::AwsConfig::default(), Vec::new()),
        };
        if let Some(region) = &self.region {
            config.region = region.clone();
        }
        if let Some(url) = &self.endpoint_url {
            if !config.service_endpoints.is_empty() {
                notices.push(format!(
                    "--aws-endpoint-url {url} replaces the file's [ServiceOverride] endpoints"
                ));
                config.service_endpoints.clear();
            }
            config.endpoint_url = Some(url.clone());
        }
        if self.route_table_id.is_some() {
            config.route_table_id = self.route_table_id.clone();
        }
        if self.vpc_id.is_some() {
            config.vpc_id = self.vpc_id.clone();
        }
        if !self.subnet_ids.is_empty() {
            config.subnet_ids = self.subnet_ids.clone();
        }
        if self.cluster_id.is_some() {
            config.cluster_id = self.cluster_id.clone();
        }
        config.legacy_cluster_tag |= self.legacy_cluster_tag;
        config.max_instance_batch = self.max_instance_batch;
        config.max_attempts = self.max_attempts;
        config.operation_timeout = self.operation_timeout;
        config.verify_period = self.verify_period;
        if !self.node_ip_families.is_empty() {
            config.node_ip_families = self.node_ip_families.iter().map(|f| f.family()).collect();
        }
        Ok((config, notices))
    }
}

/// Settings of the simulated cloud (`--provider simulator`).
#[derive(Debug, Clone, clap::Args)]
#[cfg_attr(
    not(feature = "simulator"),
    command(next_help_heading = "Simulator options (NOT IN THIS BUILD: need the cargo feature `simulator`)")
)]
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
    /// writes each; unlimited when unset.
    #[arg(long = "simulator-rate-limit", value_parser = parse_rate_limit)]
    pub rate_limit: Option<(f64, f64)>,
    /// Injected failure probability per operation, `OP=P` (e.g. `describe_instances=0.5`, `*=0.1`); repeatable.
    #[arg(long = "simulator-error-rate", value_parser = parse_error_rate)]
    pub error_rate: Vec<(String, f64)>,
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

fn parse_rate_limit(s: &str) -> Result<(f64, f64), String> {
    let (rate, burst) = s
        .split_once('/')
        .ok_or_else(|| format!("expected RATE/BURST, got {s:?}"))?;
    let rate: f64 = rate
        .trim()
        .parse()
        .map_err(|_| format!("rate {rate:?} is not a number"))?;
    let burst: f64 = burst
        .trim()
        .parse()
        .map_err(|_| format!("burst {burst:?} is not a number"))?;
    Ok((rate, burst))
}

fn parse_error_rate(s: &str) -> Result<(String, f64), String> {
    let (op, p) = s
        .split_once('=')
        .ok_or_else(|| format!("expected OP=PROBABILITY, got {s:?}"))?;
    let p: f64 = p
        .trim()
        .parse()
        .map_err(|_| format!("probability {p:?} is not a number"))?;
    Ok((op.trim().to_owned(), p))
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
    /// The simulated cloud cannot be opened (bad inventory, unreadable state).
    #[cfg(feature = "simulator")]
    #[error("cannot open the simulated cloud: {0}")]
    Simulator(#[from] provider_simulator::SimulatorError),
    /// AWS cannot be set up (no region, no credentials, bad setting).
    #[cfg(feature = "aws")]
    #[error("cannot set up AWS: {0}")]
    Aws(#[from] provider_aws::AwsSetupError),
    /// The vendor CCM's cloud config file is unreadable, malformed or refused; the message names
    /// the file, line and key.
    #[error("{0}")]
    CloudConfig(#[from] gcfg::Error),
    /// OpenStack cannot be set up (Keystone refused us, no endpoint, no router); OCCM's
    /// cloud.conf errors come as [`SetupError::CloudConfig`] (the same gcfg reader).
    #[cfg(feature = "openstack")]
    #[error("cannot set up OpenStack: {0}")]
    OpenStack(#[from] provider_openstack::provider::SetupError),
    /// `--provider openstack` without `--cloud-config`.
    #[error("--provider openstack needs --cloud-config: openstack-cloud-controller-manager's cloud.conf")]
    NoCloudConfig,
}

impl Args {
    /// The gateway settings, validated.
    pub fn gateway_config(&self) -> Result<GatewayConfig, SetupError> {
        if !matches!(self.provider, ProviderKind::Aws | ProviderKind::Openstack)
            && let Some(path) = &self.aws.cloud_config
        {
            return Err(SetupError::Config(format!(
                "--cloud-config {} is a vendor CCM's configuration file: it needs --provider aws or openstack (the provider is {})",
                path.display(),
                self.provider.name()
            )));
        }
        if self.provider == ProviderKind::Openstack && self.aws.cloud_config.is_none() {
            return Err(SetupError::NoCloudConfig);
        }
        let read_limit = Limit::new(self.read_rate, self.read_burst)
            .map_err(|e| SetupError::Config(format!("read limit: {e}")))?;
        let write_limit = Limit::new(self.write_rate, self.write_burst)
            .map_err(|e| SetupError::Config(format!("write limit: {e}")))?;
        let config = GatewayConfig {
            read_limit,
            write_limit,
            adaptive: AdaptiveConfig {
                decrease: self.throttle_decrease,
                min_factor: self.throttle_min_factor,
                recovery_per_second: self.throttle_recovery_per_second,
                ..AdaptiveConfig::default()
            },
            lookups: LookupConfig {
                batch_size: self.instance_batch_size,
                cache_ttl: self.instance_cache_ttl,
                coalesce: self.instance_coalescing,
            },
            lb_reads: LbReadConfig {
                batch_size: self.load_balancer_batch_size,
            },
            max_call_duration: self.max_call_duration,
            shutdown_grace: self.shutdown_grace,
            security: self.security()?,
            peers: (!self.peers.is_empty()).then(|| PeerConfig {
                targets: self.peers.clone(),
                interval: self.peer_probe_interval,
            }),
            dry_run: self.dry_run,
        };
        config.validate().map_err(SetupError::Config)?;
        Ok(config)
    }

    fn security(&self) -> Result<Security, SetupError> {
        let policy = match &self.authorization_policy {
            Some(path) => Policy::from_file(path).map_err(SetupError::Config)?,
            None => Policy::default(),
        };
        match (&self.tls_cert_file, &self.tls_key_file, &self.tls_client_ca_file) {
            (Some(cert), Some(key), Some(client_ca)) => Ok(Security::MutualTls {
                files: ServerFiles {
                    cert: cert.clone(),
                    key: key.clone(),
                    client_ca: client_ca.clone(),
                },
                policy,
            }),
            _ if self.insecure_plaintext => {
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

    /// Builds the provider, plus any HTTP routes it serves (the simulator's admin API).
    /// Fails with [`SetupError::NotBuiltIn`] for a provider this build does not include.
    pub async fn provider(&self) -> Result<(Arc<dyn Provider>, Option<axum::Router>), SetupError> {
        match self.provider {
            #[cfg(feature = "simulator")]
            ProviderKind::Simulator => {
                let sim = provider_simulator::Simulator::open(self.simulator.config()?)?;
                let admin = provider_simulator::admin_router(sim.clone());
                Ok((sim, Some(admin)))
            }
            #[cfg(feature = "aws")]
            ProviderKind::Aws => {
                let (config, notices) = self.aws.config()?;
                if !notices.is_empty() {
                    tracing::warn!(
                        "cloud config {}: settings without effect: {}",
                        self.aws
                            .cloud_config
                            .as_deref()
                            .unwrap_or(std::path::Path::new(""))
                            .display(),
                        notices.join("; ")
                    );
                }
                let aws = provider_aws::AwsProvider::new(config).await?;
                Ok((aws, None))
            }
            #[cfg(feature = "openstack")]
            ProviderKind::Openstack => {
                let path = self
                    .aws
                    .cloud_config
                    .as_deref()
                    .ok_or(SetupError::NoCloudConfig)?;
                let file = provider_openstack::cloud_config::read(path)?;
                let regional = provider_openstack::cloud_config::regional_from_env(
                    std::env::var(provider_openstack::cloud_config::REGIONAL_ENV)
                        .ok()
                        .as_deref(),
                );
                let config = file.to_config(regional).map_err(|e| e.in_file(path))?;
                let notices: Vec<String> = file.notices().iter().map(ToString::to_string).collect();
                if !notices.is_empty() {
                    tracing::warn!(
                        "cloud config {}: settings without effect: {}",
                        path.display(),
                        notices.join("; ")
                    );
                }
                let openstack = provider_openstack::OpenStackProvider::connect(&config).await?;
                Ok((openstack, None))
            }
            #[cfg(not(all(feature = "simulator", feature = "aws", feature = "openstack")))]
            missing => Err(SetupError::NotBuiltIn {
                provider: missing.name(),
            }),
        }
    }
}

#[cfg(feature = "simulator")]
impl SimulatorArgs {
    fn config(&self) -> Result<provider_simulator::SimulatorConfig, SetupError> {
        let knobs = provider_simulator::Knobs {
            latency: self.latency,
            rate_limit: self
                .rate_limit
                .map(|(rate, burst)| provider_simulator::RateLimit::new(rate, burst)),
            error_rate: self.error_rate.iter().cloned().collect(),
            lb_provision_delay: self.lb_provision_delay,
            ..Default::default()
        };
        knobs
            .validate()
            .map_err(|e| SetupError::Config(format!("simulator knobs: {e}")))?;
        Ok(provider_simulator::SimulatorConfig {
            state_file: self.state.clone(),
            inventory: self.inventory.clone(),
            knobs,
            disabled: provider_simulator::Capabilities {
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
    }

    #[cfg(feature = "simulator")]
    #[test]
    fn simulator_flags_parse() {
        let args = Args::parse_from([
            "cloud-gateway",
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
        ]);
        let config = args.simulator.config().unwrap();
        assert_eq!(
            config.knobs.rate_limit,
            Some(provider_simulator::RateLimit::new(50.0, 100.0))
        );
        assert_eq!(config.knobs.error_rate.get("describe_instances"), Some(&0.5));
        assert!(config.disabled.routes && !config.disabled.instances);
        assert_eq!(config.knobs.latency, Duration::from_millis(20));
    }

    #[cfg(feature = "aws")]
    #[test]
    fn aws_flags_parse() {
        let args = Args::parse_from([
            "cloud-gateway",
            "--provider",
            "aws",
            "--aws-region",
            "eu-west-1",
            "--aws-endpoint-url",
            "http://127.0.0.1:5000",
            "--aws-subnet-ids",
            "subnet-a,subnet-b",
        ]);
        assert_eq!(args.provider, ProviderKind::Aws);
        let (config, _) = args.aws.config().unwrap();
        assert_eq!(config.region, "eu-west-1");
        assert_eq!(config.subnet_ids, ["subnet-a", "subnet-b"]);
        assert_eq!(config.max_instance_batch, 500);
        assert_eq!((config.cluster_id, config.legacy_cluster_tag), (None, false));

        let args = Args::parse_from([
            "cloud-gateway",
            "--provider=aws",
            "--aws-cluster-id=prod-1",
            "--aws-legacy-cluster-tag",
        ]);
        let (config, _) = args.aws.config().unwrap();
        assert_eq!(config.cluster_id.as_deref(), Some("prod-1"));
        assert!(config.legacy_cluster_tag);
        let err = Args::try_parse_from(["cloud-gateway", "--aws-legacy-cluster-tag"]).unwrap_err();
        assert!(err.to_string().contains("--aws-cluster-id"), "{err}");
    }

    #[test]
    #[cfg(feature = "aws")]
    fn aws_node_ip_families_parse_in_order() {
        use provider_aws::config::IpFamily::{V4, V6};
        let families = |flag: Option<&str>| {
            let mut argv = vec!["cloud-gateway", "--provider=aws"];
            argv.extend(flag);
            Args::try_parse_from(argv).map(|a| a.aws.config().unwrap().0.node_ip_families)
        };
        assert_eq!(families(None).unwrap(), [V4], "upstream's default");
        assert_eq!(families(Some("--aws-node-ip-families=ipv6")).unwrap(), [V6]);
        assert_eq!(
            families(Some("--aws-node-ip-families=ipv4,ipv6")).unwrap(),
            [V4, V6]
        );
        assert_eq!(
            families(Some("--aws-node-ip-families=ipv6,ipv4")).unwrap(),
            [V6, V4]
        );
        let err = families(Some("--aws-node-ip-families=ipv4,inet6")).unwrap_err();
        assert!(err.to_string().contains("inet6"), "{err}");
    }

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

    #[cfg(feature = "aws")]
    fn cloud_config_file(text: &str) -> tempfile::NamedTempFile {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), text).unwrap();
        file
    }

    #[cfg(feature = "aws")]
    #[test]
    fn the_cloud_config_is_read_and_explicit_flags_override_it() {
        let file = cloud_config_file(
            "[Global]\nRegion = eu-west-1\nVPC = vpc-file\nSubnetID = subnet-file\nKubernetesClusterTag = old\n\
             ElbSecurityGroup = sg-shared\nNodeIPFamilies = ipv6\nUnknownKey = 1\n\
             [ServiceOverride \"1\"]\nService = ec2\nRegion = eu-west-1\nURL = https://ec2.internal\nSigningRegion = eu-west-1\n",
        );
        let path = file.path().to_str().unwrap();
        let args = Args::parse_from(["cloud-gateway", "--provider=aws", "--cloud-config", path]);
        let (config, notices) = args.aws.config().unwrap();
        assert_eq!(config.region, "eu-west-1");
        assert_eq!(config.vpc_id.as_deref(), Some("vpc-file"));
        assert_eq!(config.subnet_ids, ["subnet-file"]);
        assert_eq!(
            (config.cluster_id.as_deref(), config.legacy_cluster_tag),
            (Some("old"), true)
        );
        assert_eq!(
            config.load_balancers.elb_security_group.as_deref(),
            Some("sg-shared")
        );
        assert_eq!(config.node_ip_families, [provider_aws::config::IpFamily::V6]);
        assert_eq!(config.service_endpoints.len(), 1);
        assert_eq!(config.max_instance_batch, 500);
        assert_eq!(notices.len(), 1);
        assert!(notices[0].contains("line 8: [Global] UnknownKey"), "{notices:?}");

        let args = Args::parse_from([
            "cloud-gateway",
            "--provider=aws",
            "--cloud-config",
            path,
            "--aws-region=us-east-2",
            "--aws-vpc-id=vpc-flag",
            "--aws-subnet-ids=subnet-a,subnet-b",
            "--aws-cluster-id=new",
            "--aws-endpoint-url=http://127.0.0.1:5000",
            "--aws-max-instance-batch=100",
        ]);
        let (config, notices) = args.aws.config().unwrap();
        assert_eq!(config.region, "us-east-2");
        assert_eq!(config.vpc_id.as_deref(), Some("vpc-flag"));
        assert_eq!(config.subnet_ids, ["subnet-a", "subnet-b"]);
        // The flag's ID, still with the file's legacy tag.
        assert_eq!(
            (config.cluster_id.as_deref(), config.legacy_cluster_tag),
            (Some("new"), true)
        );
        assert_eq!(config.endpoint_url.as_deref(), Some("http://127.0.0.1:5000"));
        assert!(config.service_endpoints.is_empty());
        assert!(
            notices
                .iter()
                .any(|n| n.contains("replaces the file's [ServiceOverride]")),
            "{notices:?}"
        );
        // Settings the file does not have keep the flags' defaults.
        assert_eq!(config.max_instance_batch, 100);
        assert_eq!(
            config.load_balancers.elb_security_group.as_deref(),
            Some("sg-shared")
        );
    }

    #[test]
    fn provider_openstack_needs_occms_cloud_conf() {
        let args = Args::parse_from(["cloud-gateway", "--insecure-plaintext", "--provider=openstack"]);
        let err = args.gateway_config().unwrap_err().to_string();
        assert!(err.contains("--provider openstack needs --cloud-config"), "{err}");
    }

    /// OCCM's cloud.conf: a malformed value, a key we refuse (clouds.yaml) and a missing
    /// required key stop the gateway before any call, naming the file, the line and the key.
    #[cfg(feature = "openstack")]
    #[tokio::test]
    async fn a_malformed_or_refused_openstack_cloud_conf_stops_start_up_naming_file_line_and_key() {
        const GLOBAL: &str = "[Global]\nauth-url = http://127.0.0.1:1/v3\nusername = u\npassword = p\ntenant-name = t\ndomain-name = Default\nregion = r\n";
        for (text, needle) in [
            (format!("{GLOBAL}[LoadBalancer]\nmonitor-delay = 5\n"), "line 9"),
            (format!("{GLOBAL}use-clouds = true\n"), "use-clouds"),
            (
                "[Global]\nauth-url = http://127.0.0.1:1/v3\n".to_owned(),
                "region",
            ),
        ] {
            let file = tempfile::NamedTempFile::new().unwrap();
            std::fs::write(file.path(), &text).unwrap();
            let path = file.path().to_str().unwrap();
            let args = Args::parse_from([
                "cloud-gateway",
                "--provider=openstack",
                "--insecure-plaintext",
                "--cloud-config",
                path,
            ]);
            let err = args.provider().await.err().expect("refused").to_string();
            assert!(err.contains(path) && err.contains(needle), "{text}: {err}");
        }
    }

    #[cfg(feature = "aws")]
    #[tokio::test]
    async fn a_malformed_or_refused_cloud_config_stops_start_up_naming_file_line_and_key() {
        for (text, needle) in [
            (
                "[Global]\nRegion = eu-west-1\nDisableSecurityGroupIngress = maybe\n",
                "line 3, [Global] DisableSecurityGroupIngress",
            ),
            (
                "[Global]\nRegion = eu-west-1\n\n\nNLBSecurityGroupMode = Managed\n",
                "line 5, [Global] NLBSecurityGroupMode",
            ),
            ("[Global\n", "line 1"),
        ] {
            let file = cloud_config_file(text);
            let path = file.path().to_str().unwrap();
            let args = Args::parse_from([
                "cloud-gateway",
                "--provider=aws",
                "--insecure-plaintext",
                "--cloud-config",
                path,
            ]);
            let err = args.provider().await.err().expect("refused").to_string();
            assert!(err.contains(path) && err.contains(needle), "{err}");
        }
        let args = Args::parse_from([
            "cloud-gateway",
            "--provider=aws",
            "--cloud-config",
            "/nonexistent/cloud.conf",
        ]);
        let err = args.provider().await.err().expect("refused").to_string();
        assert!(
            err.contains("/nonexistent/cloud.conf") && err.contains("cannot read it"),
            "{err}"
        );
    }

    #[test]
    fn bad_values_are_refused_with_the_setting_named() {
        assert!(Args::try_parse_from(["cloud-gateway", "--simulator-rate-limit", "fast"]).is_err());
        assert!(Args::try_parse_from(["cloud-gateway", "--simulator-error-rate", "x"]).is_err());
        let args = Args::parse_from(["cloud-gateway", "--insecure-plaintext", "--read-rate", "0"]);
        assert!(
            args.gateway_config()
                .unwrap_err()
                .to_string()
                .contains("read limit")
        );
        #[cfg(feature = "simulator")]
        {
            let args = Args::parse_from([
                "cloud-gateway",
                "--simulator-error-rate",
                "describe_instances=1.5",
            ]);
            assert!(
                args.simulator
                    .config()
                    .unwrap_err()
                    .to_string()
                    .contains("simulator knobs")
            );
        }
    }

    /// A provider left out of the build is still a valid `--provider` value (with its flags), so
    /// the refusal comes from start-up, naming the feature, not from clap.
    #[cfg(not(feature = "aws"))]
    #[tokio::test]
    async fn aws_without_its_feature_is_refused_naming_the_feature() {
        let args = Args::parse_from(["cloud-gateway", "--provider", "aws", "--aws-region", "eu-west-1"]);
        let err = args.provider().await.err().expect("refused").to_string();
        assert!(err.contains("cargo feature `aws`"), "{err}");
        assert!(err.contains("--features aws"), "{err}");
    }

    #[cfg(not(feature = "simulator"))]
    #[tokio::test]
    async fn the_simulator_without_its_feature_is_refused_naming_the_feature() {
        let args = Args::parse_from(["cloud-gateway", "--provider", "simulator"]);
        let err = args.provider().await.err().expect("refused").to_string();
        assert!(err.contains("cargo feature `simulator`"), "{err}");
    }
}
