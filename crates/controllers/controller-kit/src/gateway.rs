//! The typed client of the cloud-gateway: names its caller, retries transient failures with
//! backoff, reconnects by itself, and hands controllers plain Rust and Kubernetes types.
//!
//! The channel connects lazily and re-resolves the address on every reconnect, so a gateway
//! that is replaced (another vendor, a rolling update) is picked up without restarting the
//! controller.

use std::{collections::BTreeMap, path::PathBuf, time::Duration};

pub use crate::gateway_batching::BatchingLookups;
use crate::{
    dry_run::DryRun,
    gateway_balance::Balanced,
    gateway_provider::{ObserveProvider, ProviderWatch},
    gateway_tls::{self, ReloadingTlsConnector},
};
pub use gateway_api::error::GatewayError;
use gateway_api::{
    caller::NameCaller,
    v1::{
        self as pb, identity_client::IdentityClient, instance_lookup::Result as LookupResult,
        instances_client::InstancesClient, load_balancers_client::LoadBalancersClient,
        routes_client::RoutesClient,
    },
};
use k8s_openapi::api::core::v1::NodeAddress;
use tls_files::{ClientFiles, ReloadingClient};
use tonic::{
    Request, Status, metadata::MetadataValue, service::interceptor::InterceptedService, transport::Endpoint,
};
use tracing::{Instrument as _, field::Empty};

/// Most nodes sent in one BatchLookupInstances call (the gateway accepts up to 10 000).
pub(crate) const BATCH_CHUNK: usize = 1000;

/// How to reach the gateway.
#[derive(Debug, Clone, clap::Args)]
pub struct GatewayArgs {
    /// Address of the cloud-gateway's gRPC port.
    #[arg(
        long = "gateway-address",
        env = "CCM_GATEWAY_ADDRESS",
        default_value = "http://cloud-gateway:50051"
    )]
    pub address: String,
    /// Deadline of one gateway call, rate-limit queueing included.
    #[arg(long = "gateway-timeout", default_value = "30s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    /// Attempts for a call failing with a transient error (unavailable, throttled, deadline).
    #[arg(long = "gateway-retries", default_value_t = 4)]
    pub retries: u32,
    /// PEM CA bundle that signed the gateway's certificate; turns on TLS (use an https:// address).
    #[arg(long = "gateway-tls-ca-file")]
    pub tls_ca_file: Option<PathBuf>,
    /// PEM client certificate presented to the gateway (mutual TLS), with --gateway-tls-key-file.
    #[arg(
        long = "gateway-tls-cert-file",
        requires = "tls_key_file",
        requires = "tls_ca_file"
    )]
    pub tls_cert_file: Option<PathBuf>,
    /// PEM private key of --gateway-tls-cert-file.
    #[arg(long = "gateway-tls-key-file", requires = "tls_cert_file")]
    pub tls_key_file: Option<PathBuf>,
    /// Name to verify in the gateway's certificate; the address's host when unset.
    #[arg(long = "gateway-tls-server-name", requires = "tls_ca_file")]
    pub tls_server_name: Option<String>,
}

impl GatewayArgs {
    /// Plain-text settings for `address` (tests, the demo).
    pub fn plain(address: impl Into<String>) -> Self {
        Self {
            address: address.into(),
            timeout: Duration::from_secs(30),
            retries: 4,
            tls_ca_file: None,
            tls_cert_file: None,
            tls_key_file: None,
            tls_server_name: None,
        }
    }

    /// The TLS settings, read from their files now (and again whenever they change);
    /// `None` for plain text.
    fn tls(&self) -> Result<Option<ReloadingClient>, GatewayClientError> {
        let Some(ca) = &self.tls_ca_file else {
            return Ok(None);
        };
        if !self.address.starts_with("https://") {
            return Err(GatewayClientError::Tls(format!(
                "TLS needs an https:// gateway address, got {:?}",
                self.address
            )));
        }
        let identity = match (&self.tls_cert_file, &self.tls_key_file) {
            (Some(cert), Some(key)) => Some((cert.clone(), key.clone())),
            _ => None,
        };
        let files = ClientFiles {
            ca: ca.clone(),
            identity,
        };
        ReloadingClient::new(files)
            .map(Some)
            .map_err(|e| GatewayClientError::Tls(e.to_string()))
    }
}

/// What the provider behind the gateway can do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capabilities {
    /// Provider name (scheme of its provider IDs).
    pub provider_name: String,
    /// InstancesV2.
    pub instances: bool,
    /// Load balancers.
    pub load_balancers: bool,
    /// Routes.
    pub routes: bool,
    /// The gateway honours the dry-run header on write calls.
    pub dry_run: bool,
    /// The prefix of the Service annotations the provider sets; empty: none.
    pub service_annotation_prefix: String,
    /// Why a capability is off, by its field name (`load_balancers`): the provider switched it
    /// off for a setting or a missing cloud feature. Empty from an older gateway.
    pub unavailable: std::collections::BTreeMap<String, String>,
}

/// How a Node is named to the cloud.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NodeRef {
    /// `metadata.name`.
    pub name: String,
    /// `spec.providerID`, empty when unset.
    pub provider_id: String,
}

/// The cloud's view of an instance.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct InstanceMetadata {
    /// `<provider>://<id>`.
    pub provider_id: String,
    /// Instance type.
    pub instance_type: String,
    /// Addresses in the cloud's order, as Kubernetes node addresses.
    pub addresses: Vec<NodeAddress>,
    /// Zone.
    pub zone: String,
    /// Region.
    pub region: String,
    /// Labels the provider wants on the Node (unfiltered).
    pub additional_labels: BTreeMap<String, String>,
}

/// An instance that exists.
#[derive(Debug, Clone, PartialEq)]
pub struct Instance {
    /// Its metadata.
    pub metadata: InstanceMetadata,
    /// Powered off.
    pub shutdown: bool,
}

/// The instance lookups the node controllers make: [`GatewayClient`] does them over gRPC, tests
/// use a fake configured by fields.
#[async_trait::async_trait]
pub trait CloudInstances: Send + Sync {
    /// Many nodes' instances, one answer per node in order. `Err(InstanceNotFound)` in a node's
    /// answer means the cloud says it definitely does not exist; the outer error fails the call.
    async fn lookup_instances(
        &self,
        nodes: &[NodeRef],
    ) -> Result<Vec<Result<Instance, GatewayError>>, GatewayError>;

    /// One node's instance.
    async fn instance(&self, node: &NodeRef) -> Result<Instance, GatewayError> {
        let mut answers = self.lookup_instances(std::slice::from_ref(node)).await?;
        match (answers.pop(), answers.is_empty()) {
            (Some(answer), true) => answer,
            _ => Err(GatewayError::Internal(
                "the gateway did not answer exactly one result".into(),
            )),
        }
    }
}

type Svc = InterceptedService<ObserveProvider<Balanced>, NameCaller>;

/// A connection to the cloud-gateway, cheap to clone.
#[derive(Clone)]
pub struct GatewayClient {
    identity: IdentityClient<Svc>,
    instances: InstancesClient<Svc>,
    pub(crate) load_balancers: LoadBalancersClient<Svc>,
    pub(crate) routes: RoutesClient<Svc>,
    timeout: Duration,
    retries: u32,
    provider: ProviderWatch,
    dry_run: DryRun,
    /// Sent with every load-balancer call ([`GatewayClient::with_cluster_id`]).
    pub(crate) cluster_id: String,
}

/// The gateway settings are unusable.
#[derive(Debug, thiserror::Error)]
pub enum GatewayClientError {
    /// The address does not parse as a URI.
    #[error("invalid gateway address {address:?}: {reason}")]
    InvalidAddress {
        /// The address given.
        address: String,
        /// Why it is invalid.
        reason: String,
    },
    /// The caller identity is not a valid header value.
    #[error("invalid caller identity {0:?}")]
    InvalidCaller(String),
    /// The TLS settings are unusable.
    #[error("gateway TLS: {0}")]
    Tls(String),
}

impl GatewayClient {
    /// A client for `caller` (one of [`crate::names::callers`]). Connects on first use and
    /// reconnects after failures by itself.
    pub fn new(args: &GatewayArgs, caller: &str) -> Result<Self, GatewayClientError> {
        let tls = args.tls()?;
        // Under TLS the connector does the handshake; tonic itself must see a plain URI (it
        // refuses https:// without its own, static, TLS settings).
        let address = match &tls {
            Some(_) => gateway_tls::plain_uri(&args.address),
            None => args.address.clone(),
        };
        let endpoint = gateway_endpoint(address).map_err(|e| GatewayClientError::InvalidAddress {
            address: args.address.clone(),
            reason: e.to_string(),
        })?;
        let host = endpoint
            .uri()
            .host()
            .unwrap_or_default()
            .trim_matches(['[', ']'])
            .to_owned();
        let port = endpoint.uri().port_u16().unwrap_or(80);
        // The server name to verify stays the gateway's name when dialing one of its addresses.
        let connector = tls.map(|tls| {
            ReloadingTlsConnector::new(
                tls,
                Some(args.tls_server_name.clone().unwrap_or_else(|| host.clone())),
            )
        });
        let dial = move |endpoint: Endpoint| match &connector {
            Some(connector) => endpoint.connect_with_connector_lazy(connector.clone()),
            None => endpoint.connect_lazy(),
        };
        let by_name = dial(endpoint.clone());
        let channel = Balanced::new(by_name, host, port, move |address| {
            // A socket address always makes a valid URI; the name's endpoint is the fallback.
            dial(gateway_endpoint(format!("http://{address}")).unwrap_or_else(|_| endpoint.clone()))
        });
        let provider = ProviderWatch::default();
        let channel = ObserveProvider::new(channel, provider.clone());
        let name =
            NameCaller::new(caller).ok_or_else(|| GatewayClientError::InvalidCaller(caller.to_owned()))?;
        Ok(Self {
            identity: IdentityClient::with_interceptor(channel.clone(), name.clone()),
            instances: InstancesClient::with_interceptor(channel.clone(), name.clone()),
            load_balancers: LoadBalancersClient::with_interceptor(channel.clone(), name.clone()),
            routes: RoutesClient::with_interceptor(channel, name),
            timeout: args.timeout,
            retries: args.retries.max(1),
            provider,
            dry_run: DryRun::off(),
            cluster_id: String::new(),
        })
    }

    /// Load-balancer calls carry the cluster's identity (the kube-system Namespace's UID), which
    /// a provider records on what it creates and uses to leave other clusters' alone.
    #[must_use]
    pub fn with_cluster_id(mut self, cluster_id: String) -> Self {
        self.cluster_id = cluster_id;
        self
    }

    /// In dry-run, write calls are sent with the dry-run header, and only to a gateway that
    /// honours it; what they would change is planned ([`GatewayClient::write_call`]).
    #[must_use]
    pub fn with_dry_run(mut self, dry_run: DryRun) -> Self {
        self.dry_run = dry_run;
        self
    }

    /// Whether this client is in dry-run.
    pub fn dry_run(&self) -> &DryRun {
        &self.dry_run
    }

    /// A write call's request: with the deadline, and with the dry-run header in dry-run.
    pub(crate) fn write_request<T>(&self, message: T, timeout: Duration) -> Request<T> {
        let mut request = with_timeout(message, timeout);
        if self.dry_run.enabled() {
            request
                .metadata_mut()
                .insert(gateway_api::DRY_RUN_HEADER, MetadataValue::from_static("true"));
        }
        request
    }

    /// A write call (`what`) on `object`, made as [`GatewayClient::with_retries`] does, its
    /// request built with [`GatewayClient::write_request`]. Not in dry-run: the answer.
    ///
    /// In dry-run: when the gateway does not honour the dry-run header (its capabilities say
    /// so), the call is not sent at all: the change is planned (`kind`, `object`, `summary`,
    /// reason "gateway cannot dry-run") and the answer is `Ok(None)`. Otherwise the call is
    /// sent dry, and when the answer (success or error) says the provider would have written,
    /// ONE change of `kind` is planned for `object`, carrying the woulds; an answer of 0 woulds
    /// plans nothing.
    ///
    /// # Errors
    /// The call's error, as [`GatewayClient::with_retries`].
    pub(crate) async fn write_call<T, F, Fut>(
        &self,
        what: &'static str,
        kind: &str,
        object: &str,
        summary: impl FnOnce() -> serde_json::Value,
        mut call: F,
    ) -> Result<Option<T>, GatewayError>
    where
        F: FnMut(Duration) -> Fut,
        Fut: std::future::Future<Output = Result<tonic::Response<T>, Status>>,
    {
        if !self.dry_run.enabled() {
            // A real write answered from a plan (a `--dry-run` gateway still serving, e.g. while
            // a rollout switches the shadow to the real install) did not happen: acting on it
            // would drop a finalizer over a load balancer that still exists. Retried.
            return self
                .with_retries(what, |timeout| {
                    let sent = call(timeout);
                    async move {
                        let response = sent.await?;
                        if dry_run_marker(response.metadata()).is_some() {
                            return Err(Status::unavailable(
                                "the gateway answered this write from a dry run; retrying until a gateway that writes answers",
                            ));
                        }
                        Ok(response)
                    }
                })
                .await
                .map(|r| Some(r.into_inner()));
        }
        if !self.capabilities().await?.dry_run {
            tracing::warn!(
                call = what,
                object,
                "dry-run: the gateway cannot dry-run; the call is not sent"
            );
            self.dry_run.plan(
                kind,
                object,
                serde_json::json!({
                    "call": what,
                    "request": summary(),
                    "reason": "gateway cannot dry-run",
                }),
            );
            return Ok(None);
        }
        let marker = std::sync::Mutex::new(None::<Option<(u64, serde_json::Value)>>);
        let answer = self
            .with_retries(what, |timeout| {
                let sent = call(timeout);
                let marker = &marker;
                async move {
                    let answer = sent.await;
                    let metadata = match &answer {
                        Ok(response) => response.metadata(),
                        Err(status) => status.metadata(),
                    };
                    // An error without the marker never reached a provider in a dry-run scope
                    // (transport, deadline, refusal): nothing is known to be written or planned.
                    let seen = match (&answer, dry_run_marker(metadata)) {
                        (Err(_), None) => None,
                        (_, marker) => Some(marker),
                    };
                    *marker.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = seen;
                    answer
                }
            })
            .await;
        match marker
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
        {
            Some(Some((0, _))) => {}
            Some(Some((_, woulds))) => {
                self.dry_run.plan(
                    kind,
                    object,
                    serde_json::json!({ "call": what, "woulds": woulds }),
                );
            }
            // Answered success without the marker: a gateway that ignored the header may have
            // written.
            Some(None) => {
                tracing::error!(
                    call = what,
                    object,
                    "dry-run: the gateway answered without the dry-run marker; it may have made the write"
                );
                self.dry_run.plan(
                    kind,
                    object,
                    serde_json::json!({
                        "call": what,
                        "request": summary(),
                        "reason": "the gateway answered without the dry-run marker",
                    }),
                );
            }
            None => {}
        }
        answer.map(|r| Some(r.into_inner()))
    }

    /// Runs `call` with a deadline, retrying transient failures with exponential backoff.
    /// Every gateway call is idempotent, so a retry is always safe. `RetryAfter` is not retried
    /// here: the controller requeues with the delay the cloud asked for.
    pub(crate) async fn with_retries<T, F, Fut>(
        &self,
        what: &'static str,
        mut call: F,
    ) -> Result<T, GatewayError>
    where
        F: FnMut(Duration) -> Fut,
        Fut: std::future::Future<Output = Result<T, Status>>,
    {
        let started = tokio::time::Instant::now();
        let mut backoff = Duration::from_millis(200);
        let mut attempt = 1;
        loop {
            // Each attempt is a client span; the interceptor sends its trace context along.
            let span = tracing::info_span!(
                "gateway call",
                otel.name = format!("{}/{what}", rpc_service(what)),
                otel.kind = "client",
                otel.status_code = Empty,
                rpc.system = "grpc",
                rpc.service = rpc_service(what),
                rpc.method = what,
                rpc.grpc.status_code = Empty,
                attempt,
            );
            let answer = call(self.timeout).instrument(span.clone()).await;
            let code = answer.as_ref().map_or_else(Status::code, |_| tonic::Code::Ok);
            span.record("rpc.grpc.status_code", code as i32);
            if code != tonic::Code::Ok {
                span.record("otel.status_code", "ERROR");
            }
            let status = match answer {
                Ok(value) => return Ok(value),
                Err(status) => status,
            };
            // An unreachable gateway (a rollout, a vendor swap) is waited for until the call's
            // own timeout: the handover is invisible to the controller. Errors the gateway
            // answered count against the retries.
            let unreachable = is_unreachable(&status);
            let err = GatewayError::from(status);
            let again = if unreachable {
                started.elapsed() + backoff < self.timeout
            } else {
                is_transient(&err) && attempt < self.retries
            };
            if !again {
                return Err(err);
            }
            let wait = err.retry_after().unwrap_or(backoff).min(Duration::from_secs(10));
            tracing::debug!(what, attempt, unreachable, error = %err, ?wait, "gateway call failed; retrying");
            tokio::time::sleep(jitter(wait)).await;
            backoff = (backoff * 2).min(Duration::from_secs(if unreachable { 2 } else { 5 }));
            attempt += 1;
        }
    }

    /// Which provider the gateway serves, as its latest answer said.
    pub fn provider(&self) -> &ProviderWatch {
        &self.provider
    }

    /// What the provider implements.
    pub async fn capabilities(&self) -> Result<Capabilities, GatewayError> {
        let caps = self
            .with_retries("GetCapabilities", |timeout| {
                let mut c = self.identity.clone();
                async move {
                    c.get_capabilities(with_timeout(pb::GetCapabilitiesRequest {}, timeout))
                        .await
                }
            })
            .await?
            .into_inner();
        Ok(Capabilities {
            provider_name: caps.provider_name,
            instances: caps.instances,
            load_balancers: caps.load_balancers,
            routes: caps.routes,
            dry_run: caps.dry_run,
            service_annotation_prefix: caps.service_annotation_prefix,
            unavailable: caps.unavailable.into_iter().collect(),
        })
    }
}

#[async_trait::async_trait]
impl CloudInstances for GatewayClient {
    /// Sent in chunks; the gateway batches them into provider calls. Nodes whose answer is a
    /// transient error (the provider's call for them failed as a whole, or was throttled) are
    /// asked again with backoff, like a failed call, so a flaky cloud does not send them
    /// through the controller's slower requeue.
    async fn lookup_instances(
        &self,
        nodes: &[NodeRef],
    ) -> Result<Vec<Result<Instance, GatewayError>>, GatewayError> {
        let mut answers: Vec<Option<Result<Instance, GatewayError>>> = vec![None; nodes.len()];
        let mut pending: Vec<usize> = (0..nodes.len()).collect();
        let mut backoff = Duration::from_millis(200);
        for attempt in 1..=self.retries {
            let asked: Vec<NodeRef> = pending.iter().map(|&i| nodes[i].clone()).collect();
            let results = self.lookup_once(&asked).await?;
            let mut again = Vec::new();
            for (&i, result) in pending.iter().zip(results) {
                if attempt < self.retries && result.as_ref().is_err_and(is_transient) {
                    again.push(i);
                }
                answers[i] = Some(result);
            }
            if again.is_empty() {
                break;
            }
            tokio::time::sleep(jitter(backoff)).await;
            backoff = (backoff * 2).min(Duration::from_secs(5));
            pending = again;
        }
        Ok(answers
            .into_iter()
            .map(|a| a.unwrap_or_else(|| Err(GatewayError::Internal("no answer".into()))))
            .collect())
    }
}

impl GatewayClient {
    /// One BatchLookupInstances call per chunk of `nodes`; one answer per node, in order.
    async fn lookup_once(
        &self,
        nodes: &[NodeRef],
    ) -> Result<Vec<Result<Instance, GatewayError>>, GatewayError> {
        let mut answers = Vec::with_capacity(nodes.len());
        for chunk in nodes.chunks(BATCH_CHUNK) {
            let request = pb::BatchLookupInstancesRequest {
                nodes: chunk
                    .iter()
                    .map(|n| pb::NodeRef {
                        name: n.name.clone(),
                        provider_id: n.provider_id.clone(),
                    })
                    .collect(),
            };
            let results = self
                .with_retries("BatchLookupInstances", |timeout| {
                    let mut c = self.instances.clone();
                    let request = with_timeout(request.clone(), timeout);
                    async move { c.batch_lookup_instances(request).await }
                })
                .await?
                .into_inner()
                .results;
            if results.len() != chunk.len() {
                return Err(GatewayError::Internal(format!(
                    "the gateway answered {} results for {} nodes",
                    results.len(),
                    chunk.len()
                )));
            }
            answers.extend(results.into_iter().map(lookup_from_pb));
        }
        Ok(answers)
    }
}

/// An endpoint of the gateway with the client's connection settings.
fn gateway_endpoint(uri: String) -> Result<Endpoint, tonic::transport::Error> {
    Ok(Endpoint::from_shared(uri)?
        .connect_timeout(Duration::from_secs(5))
        .http2_keep_alive_interval(Duration::from_secs(30))
        .keep_alive_timeout(Duration::from_secs(10))
        .keep_alive_while_idle(true)
        .tcp_nodelay(true))
}

/// A dry-run answer's marker: the number of woulds and the woulds (a JSON array; as text when
/// it does not parse); `None` when the answer carries no marker.
fn dry_run_marker(metadata: &tonic::metadata::MetadataMap) -> Option<(u64, serde_json::Value)> {
    let count = metadata
        .get(gateway_api::DRY_RUN_HEADER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let woulds = metadata
        .get(gateway_api::DRY_RUN_WOULDS_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(|text| serde_json::from_str(text).unwrap_or_else(|_| serde_json::Value::String(text.to_owned())))
        .unwrap_or(serde_json::Value::Null);
    Some((count, woulds))
}

/// Whether the call never reached a gateway (nothing answered: no typed detail, no provider
/// header), as during a rollout or a swap at the same address.
fn is_unreachable(status: &Status) -> bool {
    matches!(status.code(), tonic::Code::Unavailable | tonic::Code::Unknown)
        && status.details().is_empty()
        && status.metadata().get(gateway_api::PROVIDER_HEADER).is_none()
}

/// The gRPC service of contract method `method`, for span names.
fn rpc_service(method: &str) -> &'static str {
    use gateway_api::v1::{identity_server, instances_server, load_balancers_server, routes_server};
    match method {
        "GetCapabilities" => identity_server::SERVICE_NAME,
        "InstanceExists" | "InstanceShutdown" | "InstanceMetadata" | "BatchLookupInstances" => {
            instances_server::SERVICE_NAME
        }
        "ListRoutes" | "CreateRoute" | "DeleteRoute" => routes_server::SERVICE_NAME,
        _ => load_balancers_server::SERVICE_NAME,
    }
}

/// Whether asking again soon can succeed (RETRY_AFTER is not: the cloud named its delay, and
/// the controller requeues after exactly that). Nor is a used-up quota (QUOTA_EXCEEDED): it is
/// retryable, but not within seconds; the controller requeues it with its error backoff.
fn is_transient(err: &GatewayError) -> bool {
    matches!(
        err,
        GatewayError::Unavailable(_) | GatewayError::Throttled { .. } | GatewayError::DeadlineExceeded(_)
    )
}

/// One node's answer. "Found" without metadata is an error, not an instance without labels or
/// addresses: a node initialized from it would lose its taint with nothing set (upstream skips
/// such a node and retries).
fn lookup_from_pb(lookup: pb::InstanceLookup) -> Result<Instance, GatewayError> {
    match lookup.result {
        Some(LookupResult::Found(pb::FoundInstance {
            metadata: Some(metadata),
            shutdown,
        })) => Ok(Instance {
            metadata: metadata_from_pb(metadata),
            shutdown,
        }),
        Some(LookupResult::Found(_)) => Err(GatewayError::Internal(
            "the gateway answered found without instance metadata".into(),
        )),
        Some(LookupResult::Error(item)) => Err(GatewayError::from_item(&item)),
        None => Err(GatewayError::Internal(
            "the gateway answered an empty result".into(),
        )),
    }
}

pub(crate) fn with_timeout<T>(message: T, timeout: Duration) -> Request<T> {
    let mut request = Request::new(message);
    request.set_timeout(timeout);
    request
}

/// Up to ±20% random spread, so that many controllers do not retry in lockstep.
fn jitter(d: Duration) -> Duration {
    let factor = 0.8 + rand::random::<f64>() * 0.4;
    d.mul_f64(factor)
}

pub(crate) fn address_type(kind: i32) -> &'static str {
    match pb::AddressType::try_from(kind) {
        Ok(pb::AddressType::Hostname) => "Hostname",
        Ok(pb::AddressType::InternalIp) => "InternalIP",
        Ok(pb::AddressType::ExternalIp) => "ExternalIP",
        Ok(pb::AddressType::InternalDns) => "InternalDNS",
        Ok(pb::AddressType::ExternalDns) => "ExternalDNS",
        Ok(pb::AddressType::Unspecified) | Err(_) => "",
    }
}

/// A Kubernetes address type on the wire; `Unspecified` for one the contract cannot name.
pub(crate) fn address_type_to_pb(kind: &str) -> pb::AddressType {
    match kind {
        "Hostname" => pb::AddressType::Hostname,
        "InternalIP" => pb::AddressType::InternalIp,
        "ExternalIP" => pb::AddressType::ExternalIp,
        "InternalDNS" => pb::AddressType::InternalDns,
        "ExternalDNS" => pb::AddressType::ExternalDns,
        _ => pb::AddressType::Unspecified,
    }
}

/// Addresses from the wire, without those of a type this controller does not know (they could
/// neither go into a Node nor be compared).
pub(crate) fn addresses_from_pb(addresses: Vec<pb::NodeAddress>) -> Vec<NodeAddress> {
    addresses
        .into_iter()
        .filter_map(|a| {
            let kind = address_type(a.r#type);
            (!kind.is_empty()).then(|| NodeAddress {
                type_: kind.to_owned(),
                address: a.address,
            })
        })
        .collect()
}

fn metadata_from_pb(m: pb::InstanceMetadata) -> InstanceMetadata {
    InstanceMetadata {
        provider_id: m.provider_id,
        instance_type: m.instance_type,
        addresses: addresses_from_pb(m.addresses),
        zone: m.zone,
        region: m.region,
        additional_labels: m.additional_labels.into_iter().collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(metadata: Option<pb::InstanceMetadata>) -> pb::InstanceLookup {
        pb::InstanceLookup {
            result: Some(LookupResult::Found(pb::FoundInstance {
                metadata,
                shutdown: false,
            })),
            ..Default::default()
        }
    }

    #[test]
    fn a_used_up_quota_is_left_to_the_controllers_backoff_unlike_throttling() {
        let quota = GatewayError::QuotaExceeded("TooManyLoadBalancers".into());
        assert!(quota.is_retryable());
        assert!(!is_transient(&quota), "not retried within the call");
        let throttled = GatewayError::Throttled {
            retry_after: None,
            message: "slow down".into(),
        };
        assert!(is_transient(&throttled));
    }

    #[test]
    fn found_without_metadata_is_an_error_not_an_empty_instance() {
        let answer = lookup_from_pb(found(None));
        assert!(matches!(answer, Err(GatewayError::Internal(_))), "{answer:?}");
        let metadata = pb::InstanceMetadata {
            provider_id: "sim://zone-a/i-1".into(),
            ..Default::default()
        };
        let answer = lookup_from_pb(found(Some(metadata))).unwrap();
        assert_eq!(answer.metadata.provider_id, "sim://zone-a/i-1");
        assert!(lookup_from_pb(pb::InstanceLookup::default()).is_err());
    }
}
