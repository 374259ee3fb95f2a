//! The common life of a controller binary: flags, logging, clients, the side port, the
//! capability check, leader election, and shutdown.

use std::{future::Future, net::SocketAddr, sync::Arc, time::Duration};

use prometheus_client::metrics::{family::Family, gauge::Gauge};
use telemetry::{LogFormat, TraceArgs};
use tokio_util::sync::CancellationToken;

use side_port::{MetricsRegistry, Readiness};

use crate::{
    dry_run::DryRun,
    gateway::{Capabilities, GatewayArgs, GatewayClient},
    kube_client::{self, KubeArgs},
    leader::{self, LeaderElectionArgs, Leadership},
};

/// Flags every controller takes.
#[derive(Debug, Clone, clap::Args)]
pub struct CommonArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub kube: KubeArgs,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub gateway: GatewayArgs,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub leader: LeaderElectionArgs,
    /// Address of the `/healthz`, `/readyz`, `/metrics` port.
    #[arg(long = "http-listen", default_value = "0.0.0.0:10258")]
    pub http_listen: SocketAddr,
    /// Cluster name passed to load-balancer and route calls.
    #[arg(long = "cluster-name", default_value = "kubernetes")]
    pub cluster_name: String,
    /// Shadow mode: make no write to the Kubernetes API (no patch, delete, event or finalizer)
    /// and only dry-run write calls to the gateway; report each change it would make as a log
    /// line, in ccm_dry_run_planned_changes_total and at /dry-run on the HTTP port. Its leases
    /// are its own (the usual names plus `-dry-run`), so it runs beside the real controllers.
    #[arg(long = "dry-run", env = "CCM_DRY_RUN")]
    pub dry_run: bool,
    /// Log format.
    #[arg(long = "log-format", value_enum, default_value = "text")]
    pub log_format: LogFormat,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub traces: TraceArgs,
}

/// The provider capability a controller needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Needs {
    /// InstancesV2.
    Instances,
    /// Load balancers.
    LoadBalancers,
    /// Routes.
    Routes,
}

impl Needs {
    fn met_by(self, caps: &Capabilities) -> bool {
        match self {
            Self::Instances => caps.instances,
            Self::LoadBalancers => caps.load_balancers,
            Self::Routes => caps.routes,
        }
    }

    /// The capability's field name in `Capabilities` (its key in `unavailable`).
    fn key(self) -> &'static str {
        match self {
            Self::Instances => "instances",
            Self::LoadBalancers => "load_balancers",
            Self::Routes => "routes",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Self::Instances => "instances",
            Self::LoadBalancers => "load balancers",
            Self::Routes => "routes",
        }
    }
}

/// How the replicas of a controller share the work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replicas {
    /// One leader at a time does all the work (`--leader-elect`); the others stand by.
    LeaderElected,
    /// Every replica works on its own shards ([`crate::shards`]); the controller runs the
    /// shard leases itself, with [`Runtime::lease_client`] and [`Runtime::leader_args`].
    Sharded,
}

/// What the runner hands a controller: clients and the handles it owns for its whole run.
#[derive(Clone)]
pub struct Runtime {
    /// Kubernetes client, held to the client-side QPS limit.
    pub client: kube::Client,
    /// Gateway client.
    pub gateway: GatewayClient,
    /// Cluster name.
    pub cluster_name: String,
    /// Cancelled at shutdown.
    pub shutdown: CancellationToken,
    /// Whether this replica may write now (leader election).
    pub leadership: Leadership,
    /// The registry `/metrics` serves; the controller registers its metrics here.
    pub metrics: MetricsRegistry,
    /// A client with no client-side limit, for leases (a renewal never waits behind the
    /// controller's own requests).
    pub lease_client: kube::Client,
    /// The leader-election flags (durations, namespace, identity), which shard leases use too.
    pub leader_args: LeaderElectionArgs,
    /// Shadow mode: off, or what this controller planned instead of writing. The clients above
    /// are already in it (the gateway client's write calls are dry, the Kubernetes clients
    /// refuse writes); the controller hands it to its writers and events, and names its shard
    /// leases with [`DryRun::lease_name`].
    pub dry_run: DryRun,
}

/// Why a controller stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Flags or configuration are unusable (exit code 64).
    #[error("{0}")]
    Config(String),
    /// The side port could not be bound.
    #[error("cannot serve the health port: {0}")]
    Health(#[source] std::io::Error),
    /// Leadership was lost.
    #[error(transparent)]
    Leader(#[from] leader::LeaderError),
}

impl RunError {
    /// Process exit code: 64 for configuration errors (EX_USAGE), 1 otherwise.
    pub fn exit_code(&self) -> i32 {
        match self {
            Self::Config(_) => 64,
            _ => 1,
        }
    }
}

/// A controller's own flags, beside [`CommonArgs`].
pub trait ControllerConfig: clap::Args + Send + 'static {
    /// Checks what the types cannot.
    ///
    /// # Errors
    /// A message naming the flag.
    fn validate(&self) -> Result<(), String>;

    /// Why the controller's own flags switch it off (e.g. `--configure-cloud-routes=false`);
    /// `None` when it runs. Switched off, it stays up, ready and idle, saying why: it takes no
    /// lease and makes no gateway call.
    fn disabled(&self) -> Option<String> {
        None
    }

    /// What the controller reports, beyond its log line, while the provider has switched off
    /// the capability it needs (e.g. a Warning event on each object it cannot serve); `None`:
    /// the log line alone.
    fn switched_off_report(&self) -> Option<Arc<dyn SwitchedOffReport>> {
        None
    }
}

/// Reports, on the objects a controller cannot serve, that the provider switched off the
/// capability it needs. Called at each check of the capabilities while it stays off (about
/// every minute), so that objects created meanwhile are reported too; an implementation reports
/// each object once.
#[async_trait::async_trait]
pub trait SwitchedOffReport: Send + Sync {
    /// `reason` is the gateway's (`Capabilities.unavailable`), `provider` its provider's name.
    async fn report(&self, client: &kube::Client, dry_run: &DryRun, provider: &str, reason: &str);
}

/// What a controller binary is.
#[derive(Debug, Clone, Copy)]
pub struct Binary {
    /// Controller ID, binary name and default lease name ([`crate::names::controllers`]).
    pub name: &'static str,
    /// What it does, for `--help`.
    pub about: &'static str,
    /// Who it is to the gateway ([`crate::names::callers`]).
    pub caller: &'static str,
    /// The provider capability it needs.
    pub needs: Needs,
    /// How its replicas share the work.
    pub replicas: Replicas,
}

#[derive(clap::Parser)]
struct BinaryArgs<C: clap::Args> {
    #[command(flatten)]
    common: CommonArgs,
    #[command(flatten)]
    config: C,
}

/// The whole `main` of a controller binary: parses [`CommonArgs`] and the controller's `C`
/// (bad flags exit 64, saying why), then runs `work` under [`run`] until SIGTERM; a failure
/// exits with [`RunError::exit_code`].
pub async fn main<C, F, Fut>(binary: Binary, work: F)
where
    C: ControllerConfig,
    F: FnOnce(Runtime, C) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    use clap::{CommandFactory, FromArgMatches};
    let command = BinaryArgs::<C>::command()
        .name(binary.name)
        .bin_name(binary.name)
        .about(binary.about)
        .version(env!("CARGO_PKG_VERSION"));
    let parsed = BinaryArgs::<C>::from_arg_matches(&command.get_matches());
    let BinaryArgs { common, config } = parsed.unwrap_or_else(|err| err.exit());
    if let Err(err) = config.validate() {
        eprintln!("{}: {err}", binary.name);
        std::process::exit(64);
    }
    let report = config.switched_off_report();
    let result = match config.disabled() {
        Some(why) => idle(binary, common, why).await,
        None => run_reporting(binary, common, report, |runtime| work(runtime, config)).await,
    };
    if let Err(err) = result {
        eprintln!("{}: {err}", binary.name);
        std::process::exit(err.exit_code());
    }
}

/// Runs controller `binary` until SIGTERM: builds the clients, serves the side port, waits
/// until the provider offers what it needs (idle but ready meanwhile, saying why), then runs
/// `work`: while holding the leader lease, or at once for a sharded controller.
pub async fn run<F, Fut>(binary: Binary, args: CommonArgs, work: F) -> Result<(), RunError>
where
    F: FnOnce(Runtime) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    run_reporting(binary, args, None, work).await
}

/// [`run`], with what the controller reports while its capability is switched off.
pub async fn run_reporting<F, Fut>(
    binary: Binary,
    args: CommonArgs,
    report: Option<Arc<dyn SwitchedOffReport>>,
    work: F,
) -> Result<(), RunError>
where
    F: FnOnce(Runtime) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let telemetry = init_telemetry(binary, &args);
    let shutdown = CancellationToken::new();
    {
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            telemetry::shutdown_signal().await;
            shutdown.cancel();
        });
    }
    let result = run_until(binary, args, report, work, shutdown).await;
    // The last reconciles' spans go out before the process exits.
    telemetry.shutdown().await;
    result
}

/// Logging, and trace export when configured (`--otlp-endpoint` or `OTEL_EXPORTER_OTLP_*`).
fn init_telemetry(binary: Binary, args: &CommonArgs) -> telemetry::Telemetry {
    let settings = telemetry::Settings {
        service: binary.name,
        version: env!("CARGO_PKG_VERSION"),
        format: args.log_format,
        default_filter: "info",
    };
    telemetry::init(settings, &args.traces)
}

/// [`run`] with an explicit shutdown token (tests cancel it).
pub async fn run_until<F, Fut>(
    binary: Binary,
    args: CommonArgs,
    report: Option<Arc<dyn SwitchedOffReport>>,
    work: F,
    shutdown: CancellationToken,
) -> Result<(), RunError>
where
    F: FnOnce(Runtime) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let name = binary.name;
    args.leader.validate().map_err(RunError::Config)?;
    let metrics = MetricsRegistry::new();
    let dry_run = if args.dry_run {
        tracing::warn!(
            controller = name,
            "dry-run: no write to the Kubernetes API, dry-run calls to the gateway; planned changes are logged, counted (ccm_dry_run_planned_changes_total) and listed at /dry-run"
        );
        DryRun::on(name, &metrics)
    } else {
        DryRun::off()
    };
    let clients = kube_client::clients_for(&args.kube, &dry_run)
        .await
        .map_err(|e| RunError::Config(e.to_string()))?;
    let gateway = GatewayClient::new(&args.gateway, binary.caller)
        .map_err(|e| RunError::Config(e.to_string()))?
        .with_dry_run(dry_run.clone());
    // The leader lease of a dry-run replica is its own.
    let mut leader_args = args.leader.clone();
    if dry_run.enabled() {
        let lease = leader_args.resource_name.as_deref().unwrap_or(name);
        leader_args.resource_name = Some(dry_run.lease_name(lease));
    }
    let leader_elected = binary.replicas == Replicas::LeaderElected && args.leader.enabled;
    let leadership = if leader_elected {
        Leadership::elected()
    } else {
        Leadership::unconditional()
    };
    if binary.replicas == Replicas::LeaderElected {
        metrics.register(
            "leader_election_master_status",
            "1 while this replica holds the leader lease, 0 otherwise",
            leadership.gauge(),
        );
    }
    let readiness = Readiness::new();
    let health = side_port::serve_with(
        args.http_listen,
        readiness.clone(),
        metrics.clone(),
        dry_run.router(),
        shutdown.clone().cancelled_owned(),
    )
    .await
    .map_err(RunError::Health)?;
    readiness.set_ready();

    let provider_info = Family::<ProviderLabels, Gauge>::default();
    metrics.register(
        "gateway_provider_info",
        "1 for the provider the cloud-gateway serves now, 0 for providers it served before (a vendor swap)",
        provider_info.clone(),
    );
    let result = tokio::select! {
        () = shutdown.cancelled() => Ok(()),
        () = wait_for_capability(&gateway, binary.needs, name, report.as_ref().map(|r| (r.as_ref(), &clients.limited, &dry_run))) => {
            tokio::spawn(follow_provider(gateway.clone(), binary.needs, name, provider_info));
            let runtime = Runtime {
                client: clients.limited,
                gateway,
                cluster_name: args.cluster_name.clone(),
                shutdown: shutdown.clone(),
                leadership: leadership.clone(),
                metrics,
                lease_client: clients.elector.clone(),
                leader_args: args.leader.clone(),
                dry_run: dry_run.clone(),
            };
            let work = work(runtime);
            match binary.replicas {
                Replicas::LeaderElected => {
                    let shutdown = shutdown.clone().cancelled_owned();
                    leader::run_as_leader(clients.elector, &leader_args, name, &leadership, work, shutdown)
                        .await
                        .map_err(RunError::from)
                }
                // The controller stops by itself at shutdown, after its in-flight work.
                Replicas::Sharded => {
                    work.await;
                    Ok(())
                }
            }
        }
    };
    shutdown.cancel();
    let _ = health.await;
    tracing::info!(controller = name, "stopped");
    result
}

/// A controller its flags switch off: serves the side port, ready, says why, and waits for
/// SIGTERM.
async fn idle(binary: Binary, args: CommonArgs, why: String) -> Result<(), RunError> {
    let telemetry = init_telemetry(binary, &args);
    let shutdown = CancellationToken::new();
    let readiness = Readiness::new();
    let health = side_port::serve(
        args.http_listen,
        readiness.clone(),
        MetricsRegistry::new(),
        shutdown.clone().cancelled_owned(),
    )
    .await
    .map_err(RunError::Health)?;
    readiness.set_ready();
    tracing::warn!(controller = binary.name, "{why}; staying idle");
    telemetry::shutdown_signal().await;
    shutdown.cancel();
    let _ = health.await;
    tracing::info!(controller = binary.name, "stopped");
    telemetry.shutdown().await;
    Ok(())
}

/// Returns once the provider offers `needs`. Until then the controller is idle (still ready,
/// so a rollout does not hang on it) and says why; it asks again every minute, and at once when
/// an answer shows the gateway now serves another provider (a vendor swapped in at the same
/// address), so a provider that has the capability is picked up within seconds.
///
/// When the provider switched the capability off, the log line names its reason, and `report`
/// (with the Kubernetes client and the dry-run state) reports it on the objects left unserved.
async fn wait_for_capability(
    gateway: &GatewayClient,
    needs: Needs,
    name: &str,
    report: Option<(&dyn SwitchedOffReport, &kube::Client, &DryRun)>,
) {
    let mut swapped = gateway.provider().subscribe();
    let mut delay = Duration::from_secs(1);
    loop {
        match gateway.capabilities().await {
            Ok(caps) if needs.met_by(&caps) => {
                tracing::info!(controller = name, provider = %caps.provider_name, "provider offers {}; starting", needs.describe());
                return;
            }
            Ok(caps) => {
                match caps.unavailable.get(needs.key()) {
                    Some(reason) => {
                        tracing::warn!(
                            controller = name,
                            provider = %caps.provider_name,
                            reason = %reason,
                            "provider switched {} off: {reason}; staying idle until it is back (asking again in 60s, or at once when the gateway serves another provider)",
                            needs.describe()
                        );
                        if let Some((report, client, dry_run)) = report {
                            report.report(client, dry_run, &caps.provider_name, reason).await;
                        }
                    }
                    None => tracing::warn!(
                        controller = name,
                        provider = %caps.provider_name,
                        "provider does not implement {}; staying idle until it does (asking again in 60s, or at once when the gateway serves another provider)",
                        needs.describe()
                    ),
                }
                delay = Duration::from_secs(60);
            }
            Err(err) => {
                tracing::warn!(controller = name, error = %err, ?delay, "cannot reach the cloud-gateway yet");
            }
        }
        swapped.mark_unchanged();
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            _ = swapped.changed() => {}
        }
        delay = (delay * 2).min(Duration::from_secs(60));
    }
}

/// While the controller runs: when the gateway starts serving another provider, says so, counts
/// it (`gateway_provider_info{provider}`), and warns if the new one lacks what the controller
/// needs (its calls then fail until one that has it is back).
async fn follow_provider(
    gateway: GatewayClient,
    needs: Needs,
    name: &'static str,
    info: Family<ProviderLabels, Gauge>,
) {
    let mut swapped = gateway.provider().subscribe();
    let mut seen: Vec<String> = Vec::new();
    loop {
        if let Some(provider) = swapped.borrow_and_update().clone() {
            if !seen.contains(&provider) {
                seen.push(provider.clone());
            }
            for name in &seen {
                let labels = ProviderLabels {
                    provider: name.clone(),
                };
                info.get_or_create(&labels).set(i64::from(*name == provider));
            }
        }
        if swapped.changed().await.is_err() {
            return;
        }
        match gateway.capabilities().await {
            Ok(caps) if needs.met_by(&caps) => {
                tracing::info!(controller = name, provider = %caps.provider_name, "the gateway now serves another provider; it offers {}", needs.describe());
            }
            Ok(caps) => tracing::warn!(
                controller = name,
                provider = %caps.provider_name,
                "the gateway now serves a provider that does not implement {}; calls fail until one that does is back",
                needs.describe()
            ),
            Err(err) => {
                tracing::warn!(controller = name, error = %err, "the gateway now serves another provider; cannot read its capabilities")
            }
        }
    }
}

/// Labels of `gateway_provider_info` (and of other per-provider series).
#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
pub struct ProviderLabels {
    /// Provider name.
    pub provider: String,
}
