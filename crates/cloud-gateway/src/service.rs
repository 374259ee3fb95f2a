//! The `cloudgateway.v1` gRPC services over a provider.

use std::sync::Arc;

use gateway_api::{PROVIDER_HEADER, error::GatewayError, v1 as pb};
use provider::Provider;
use tonic::{Request, Response, Status};

use crate::{
    auth::Authorizer,
    convert,
    dry_run::{self, DryRunLog},
    gate::ProviderGate,
    lb_reads::{self, LoadBalancerReads},
    lookups::InstanceLookups,
    metrics::{Metrics, RpcLabels},
    scheduler::Class,
};

/// Most nodes one BatchLookupInstances request may carry.
pub const MAX_BATCH_REQUEST: usize = 10_000;

/// Everything a call needs; shared by the four services.
pub struct GatewayService {
    provider: Arc<dyn Provider>,
    gate: Arc<ProviderGate>,
    lookups: Arc<InstanceLookups>,
    /// Load-balancer reads, batched across Services.
    lb_reads: Arc<LoadBalancerReads>,
    metrics: Arc<Metrics>,
    limits: pb::ProviderLimits,
    authorizer: Authorizer,
    /// Shadow mode: whether the gateway runs in dry-run, and every would so far.
    dry_run: Arc<DryRunLog>,
    /// The provider's name as the header every answer carries; `None` if it is no valid
    /// header value.
    provider_header: Option<tonic::metadata::AsciiMetadataValue>,
}

type RpcResult<T> = Result<Response<T>, Status>;

impl GatewayService {
    /// The services over `provider`.
    #[allow(clippy::too_many_arguments)] // the shared parts, each built once by the server
    pub fn new(
        provider: Arc<dyn Provider>,
        gate: Arc<ProviderGate>,
        lookups: Arc<InstanceLookups>,
        lb_reads: Arc<LoadBalancerReads>,
        metrics: Arc<Metrics>,
        limits: pb::ProviderLimits,
        authorizer: Authorizer,
        dry_run: Arc<DryRunLog>,
    ) -> Arc<Self> {
        let provider_header = provider.name().parse().ok();
        Arc::new(Self {
            provider,
            provider_header,
            gate,
            lookups,
            lb_reads,
            metrics,
            limits,
            authorizer,
            dry_run,
        })
    }

    /// Records the call's outcome and converts it for tonic.
    fn finish<T>(&self, method: &'static str, caller: &str, result: Result<T, GatewayError>) -> RpcResult<T> {
        let code = match &result {
            Ok(_) => tonic::Code::Ok,
            Err(err) => err.code(),
        };
        crate::trace::record_outcome(caller, code);
        self.metrics
            .rpc_calls
            .get_or_create(&RpcLabels {
                method,
                caller: caller.to_owned(),
                code: format!("{code:?}"),
            })
            .inc();
        match result {
            Ok(value) => Ok(Response::new(value)),
            Err(err) => {
                tracing::debug!(method, caller, error = %err, "call failed");
                Err(err.into())
            }
        }
    }

    fn load_balancers(&self) -> Result<&dyn provider::LoadBalancers, GatewayError> {
        self.provider.load_balancers().ok_or_else(|| {
            GatewayError::NotImplemented(format!("provider {} has no load balancers", self.provider.name()))
        })
    }

    fn routes(&self) -> Result<&dyn provider::Routes, GatewayError> {
        self.provider.routes().ok_or_else(|| {
            GatewayError::NotImplemented(format!("provider {} has no routes", self.provider.name()))
        })
    }

    fn instances_implemented(&self) -> Result<(), GatewayError> {
        match self.provider.instances() {
            Some(_) => Ok(()),
            None => Err(GatewayError::NotImplemented(format!(
                "provider {} has no instances",
                self.provider.name()
            ))),
        }
    }

    async fn lookup(
        &self,
        caller: &str,
        node: Option<pb::NodeRef>,
    ) -> Result<provider::InstanceInfo, GatewayError> {
        self.instances_implemented()?;
        let node = convert::node_ref(node)?;
        self.lookups.lookup(caller, node).await
    }
}

#[tonic::async_trait]
impl pb::identity_server::Identity for GatewayService {
    async fn get_capabilities(
        &self,
        request: Request<pb::GetCapabilitiesRequest>,
    ) -> RpcResult<pb::Capabilities> {
        self.handle("GetCapabilities", request, |_, _| async move {
            Ok(pb::Capabilities {
                provider_name: self.provider.name().to_owned(),
                instances: self.provider.instances().is_some(),
                load_balancers: self.provider.load_balancers().is_some(),
                routes: self.provider.routes().is_some(),
                limits: Some(self.limits),
                dry_run: self.provider.dry_run(),
                service_annotation_prefix: self
                    .provider
                    .load_balancers()
                    .map(|lbs| lbs.service_annotation_prefix().to_owned())
                    .unwrap_or_default(),
                unavailable: self
                    .provider
                    .switched_off()
                    .into_iter()
                    .map(|(capability, reason)| (capability.as_str().to_owned(), reason))
                    .collect(),
            })
        })
        .await
    }
}

#[tonic::async_trait]
impl pb::instances_server::Instances for GatewayService {
    async fn instance_exists(
        &self,
        request: Request<pb::InstanceRequest>,
    ) -> RpcResult<pb::InstanceExistsResponse> {
        self.handle("InstanceExists", request, |caller, req| async move {
            match self.lookup(&caller, req.node).await {
                Ok(_) => Ok(pb::InstanceExistsResponse { exists: true }),
                Err(GatewayError::InstanceNotFound(_)) => Ok(pb::InstanceExistsResponse { exists: false }),
                Err(err) => Err(err),
            }
        })
        .await
    }

    async fn instance_shutdown(
        &self,
        request: Request<pb::InstanceRequest>,
    ) -> RpcResult<pb::InstanceShutdownResponse> {
        self.handle("InstanceShutdown", request, |caller, req| async move {
            let instance = self.lookup(&caller, req.node).await?;
            Ok(pb::InstanceShutdownResponse {
                shutdown: instance.shutdown,
            })
        })
        .await
    }

    async fn instance_metadata(
        &self,
        request: Request<pb::InstanceRequest>,
    ) -> RpcResult<pb::InstanceMetadataResponse> {
        self.handle("InstanceMetadata", request, |caller, req| async move {
            let instance = self.lookup(&caller, req.node).await?;
            Ok(pb::InstanceMetadataResponse {
                metadata: Some(convert::metadata_to_pb(&instance.metadata)),
            })
        })
        .await
    }

    async fn batch_lookup_instances(
        &self,
        request: Request<pb::BatchLookupInstancesRequest>,
    ) -> RpcResult<pb::BatchLookupInstancesResponse> {
        self.handle("BatchLookupInstances", request, |caller, req| async move {
            self.batch(&caller, req.nodes).await
        })
        .await
    }
}

impl GatewayService {
    async fn batch(
        &self,
        caller: &str,
        nodes: Vec<pb::NodeRef>,
    ) -> Result<pb::BatchLookupInstancesResponse, GatewayError> {
        self.instances_implemented()?;
        if nodes.len() > MAX_BATCH_REQUEST {
            return Err(GatewayError::InvalidArgument(format!(
                "at most {MAX_BATCH_REQUEST} nodes per batch, got {}",
                nodes.len()
            )));
        }
        let refs = nodes
            .iter()
            .map(|n| convert::node_ref(Some(n.clone())))
            .collect::<Result<Vec<_>, _>>()?;
        let answers = self.lookups.lookup_many(caller, refs).await;
        let results = nodes
            .into_iter()
            .zip(answers)
            .map(|(node, answer)| pb::InstanceLookup {
                node: Some(node),
                result: Some(match answer {
                    Ok(info) => pb::instance_lookup::Result::Found(convert::found_to_pb(&info)),
                    Err(err) => pb::instance_lookup::Result::Error(err.to_item()),
                }),
            })
            .collect();
        Ok(pb::BatchLookupInstancesResponse { results })
    }
}

impl GatewayService {
    /// The common frame of a call: who calls and whether they may, the work, metrics and status
    /// conversion.
    async fn handle<Req, Resp, Fut>(
        &self,
        method: &'static str,
        request: Request<Req>,
        work: impl FnOnce(String, Req) -> Fut,
    ) -> RpcResult<Resp>
    where
        Fut: std::future::Future<Output = Result<Resp, GatewayError>>,
    {
        // Refused before any per-caller state exists: an unknown identity gets no queue, no
        // batch and no metric series of its own.
        let answered = match self.authorizer.authorize(&request, method) {
            Ok(caller) => {
                let result = work(caller.clone(), request.into_inner()).await;
                self.finish(method, &caller, result)
            }
            Err(denied) => Err(Status::from(denied)),
        };
        self.with_provider_name(answered)
    }

    /// [`GatewayService::handle`] for a write call: in dry-run (the gateway's `--dry-run`, or the
    /// request's dry-run header) the work runs in a [`provider::dry_run::scope`], so the
    /// provider records its writes instead of making them; the woulds are logged, counted and
    /// kept, and the answer (success or error alike) carries the dry-run marker.
    async fn handle_write<Req, Resp, Fut>(
        &self,
        method: &'static str,
        request: Request<Req>,
        work: impl FnOnce(String, Req) -> Fut,
    ) -> RpcResult<Resp>
    where
        Fut: std::future::Future<Output = Result<Resp, GatewayError>>,
    {
        let dry = self.dry_run.gateway_dry_run() || dry_run::requested(request.metadata());
        if !dry {
            return self.handle(method, request, work).await;
        }
        if !self.provider.dry_run() {
            // Its writes would go through the scope unrecorded: refused, not made.
            return self.with_provider_name(Err(Status::failed_precondition(format!(
                "{method} in dry-run: provider {} cannot dry-run, so the write is not made",
                self.provider.name()
            ))));
        }
        // The caller, once authorized: a refused call did no work and gets no marker.
        let caller = std::sync::Mutex::new(None::<String>);
        let answered = provider::dry_run::scope(self.handle(method, request, |who, req| {
            *caller.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(who.clone());
            work(who, req)
        }));
        let (mut answer, woulds) = answered.await;
        let caller = caller
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(caller) = caller {
            self.dry_run.record(method, &caller, &woulds);
            let metadata = match &mut answer {
                Ok(response) => response.metadata_mut(),
                Err(status) => status.metadata_mut(),
            };
            dry_run::mark(metadata, &woulds);
        }
        answer
    }

    /// Every answer names the provider behind it ([`PROVIDER_HEADER`]).
    fn with_provider_name<T>(&self, mut answer: RpcResult<T>) -> RpcResult<T> {
        if let Some(name) = &self.provider_header {
            let metadata = match &mut answer {
                Ok(response) => response.metadata_mut(),
                Err(status) => status.metadata_mut(),
            };
            metadata.insert(PROVIDER_HEADER, name.clone());
        }
        answer
    }

    /// The provider's load balancers, the cluster name and the service of a request (with the
    /// cluster's identity), validated.
    fn lb_request(
        &self,
        cluster: &str,
        cluster_id: &str,
        service: Option<pb::Service>,
    ) -> Result<(&dyn provider::LoadBalancers, String, provider::ServiceSpec), GatewayError> {
        let mut spec = convert::service(service)?;
        spec.cluster_id = convert::cluster_id(cluster_id)?.to_owned();
        Ok((
            self.load_balancers()?,
            convert::cluster_name(cluster)?.to_owned(),
            spec,
        ))
    }
}

#[tonic::async_trait]
impl pb::load_balancers_server::LoadBalancers for GatewayService {
    async fn get_load_balancer(
        &self,
        request: Request<pb::GetLoadBalancerRequest>,
    ) -> RpcResult<pb::GetLoadBalancerResponse> {
        self.handle("GetLoadBalancer", request, |caller, req| async move {
            let (lbs, cluster, svc) = self.lb_request(&req.cluster_name, &req.cluster_id, req.service)?;
            let read = provider::LoadBalancerRead {
                service: svc.clone(),
                ensure_nodes: None,
            };
            // Batched with concurrent reads of other Services.
            let status = match self.lb_reads.read(&caller, &cluster, read).await? {
                provider::LoadBalancerObservation::Absent => None,
                provider::LoadBalancerObservation::Present(status)
                | provider::LoadBalancerObservation::Converged(status) => Some(status),
                // Not a get's answer: asked on its own.
                provider::LoadBalancerObservation::NeedsEnsure => {
                    self.gate
                        .call(Class::Read, &caller, "get_load_balancer", || {
                            lbs.get_load_balancer(&cluster, &svc)
                        })
                        .await?
                }
            };
            Ok(pb::GetLoadBalancerResponse {
                exists: status.is_some(),
                status: status.as_ref().map(convert::lb_status_to_pb),
            })
        })
        .await
    }

    async fn get_load_balancer_name(
        &self,
        request: Request<pb::GetLoadBalancerNameRequest>,
    ) -> RpcResult<pb::GetLoadBalancerNameResponse> {
        self.handle("GetLoadBalancerName", request, |_, req| async move {
            let (lbs, cluster, svc) = self.lb_request(&req.cluster_name, "", req.service)?;
            Ok(pb::GetLoadBalancerNameResponse {
                name: lbs.load_balancer_name(&cluster, &svc),
            })
        })
        .await
    }

    async fn ensure_load_balancer(
        &self,
        request: Request<pb::EnsureLoadBalancerRequest>,
    ) -> RpcResult<pb::EnsureLoadBalancerResponse> {
        let no_load_balancer_yet = lb_reads::no_load_balancer_yet(request.metadata());
        self.handle_write("EnsureLoadBalancer", request, |caller, req| async move {
            let (lbs, cluster, svc) = self.lb_request(&req.cluster_name, &req.cluster_id, req.service)?;
            let nodes = convert::lb_nodes(req.nodes)?;
            // The check an ensure starts with, batched with concurrent Services' reads: a load
            // balancer already as asked is answered without a write turn.
            if lb_reads::check_before_ensure(lbs.checks_before_ensure(), no_load_balancer_yet)
                && let provider::LoadBalancerObservation::Converged(status) = self
                    .lb_reads
                    .read(
                        &caller,
                        &cluster,
                        provider::LoadBalancerRead {
                            service: svc.clone(),
                            ensure_nodes: Some(nodes.clone()),
                        },
                    )
                    .await?
            {
                return Ok(convert::ensured_to_pb(
                    &status,
                    lbs.service_notices(&cluster, &svc),
                    lbs.service_annotation_prefix(),
                ));
            }
            let status = self
                .gate
                .call(Class::Write, &caller, "ensure_load_balancer", || {
                    lbs.ensure_load_balancer(&cluster, &svc, &nodes)
                })
                .await?;
            Ok(convert::ensured_to_pb(
                &status,
                lbs.service_notices(&cluster, &svc),
                lbs.service_annotation_prefix(),
            ))
        })
        .await
    }

    async fn update_load_balancer(
        &self,
        request: Request<pb::UpdateLoadBalancerRequest>,
    ) -> RpcResult<pb::UpdateLoadBalancerResponse> {
        self.handle_write("UpdateLoadBalancer", request, |caller, req| async move {
            let (lbs, cluster, svc) = self.lb_request(&req.cluster_name, &req.cluster_id, req.service)?;
            let nodes = convert::lb_nodes(req.nodes)?;
            self.gate
                .call(Class::Write, &caller, "update_load_balancer", || {
                    lbs.update_load_balancer(&cluster, &svc, &nodes)
                })
                .await?;
            Ok(pb::UpdateLoadBalancerResponse {})
        })
        .await
    }

    async fn ensure_load_balancer_deleted(
        &self,
        request: Request<pb::EnsureLoadBalancerDeletedRequest>,
    ) -> RpcResult<pb::EnsureLoadBalancerDeletedResponse> {
        self.handle_write("EnsureLoadBalancerDeleted", request, |caller, req| async move {
            let (lbs, cluster, svc) = self.lb_request(&req.cluster_name, &req.cluster_id, req.service)?;
            let deleted = self
                .gate
                .call(Class::Write, &caller, "delete_load_balancer", || {
                    lbs.ensure_load_balancer_deleted(&cluster, &svc)
                })
                .await;
            // The contract forbids ImplementedElsewhere here: whatever a provider says, a delete
            // must never leave the finalizer stuck on that pretext.
            match deleted {
                Err(GatewayError::ImplementedElsewhere(msg)) => Err(GatewayError::Internal(format!(
                    "provider answered ImplementedElsewhere to a delete, which the contract forbids: {msg}"
                ))),
                other => other.map(|()| pb::EnsureLoadBalancerDeletedResponse {}),
            }
        })
        .await
    }
}

#[tonic::async_trait]
impl pb::routes_server::Routes for GatewayService {
    async fn list_routes(
        &self,
        request: Request<pb::ListRoutesRequest>,
    ) -> RpcResult<pb::ListRoutesResponse> {
        self.handle("ListRoutes", request, |caller, req| async move {
            let routes = self.routes()?;
            let cluster = convert::cluster_name(&req.cluster_name)?;
            let list = self
                .gate
                .call(Class::Read, &caller, "list_routes", || {
                    routes.list_routes(cluster)
                })
                .await?;
            Ok(pb::ListRoutesResponse {
                routes: list.iter().map(convert::route_to_pb).collect(),
            })
        })
        .await
    }

    async fn create_route(
        &self,
        request: Request<pb::CreateRouteRequest>,
    ) -> RpcResult<pb::CreateRouteResponse> {
        self.handle_write("CreateRoute", request, |caller, req| async move {
            let routes = self.routes()?;
            let cluster = convert::cluster_name(&req.cluster_name)?;
            let route = convert::route(req.route, true)?;
            if req.name_hint.is_empty() {
                return Err(GatewayError::InvalidArgument(
                    "name_hint (the node UID) is required".into(),
                ));
            }
            self.gate
                .call(Class::Write, &caller, "create_route", || {
                    routes.create_route(cluster, &req.name_hint, &route)
                })
                .await?;
            Ok(pb::CreateRouteResponse {})
        })
        .await
    }

    async fn delete_route(
        &self,
        request: Request<pb::DeleteRouteRequest>,
    ) -> RpcResult<pb::DeleteRouteResponse> {
        self.handle_write("DeleteRoute", request, |caller, req| async move {
            let routes = self.routes()?;
            let cluster = convert::cluster_name(&req.cluster_name)?;
            let route = convert::route(req.route, false)?;
            self.gate
                .call(Class::Write, &caller, "delete_route", || {
                    routes.delete_route(cluster, &route)
                })
                .await?;
            Ok(pb::DeleteRouteResponse {})
        })
        .await
    }
}
