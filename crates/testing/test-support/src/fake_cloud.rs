//! A cloud for controller tests.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use controller_kit::{
    gateway::{CloudInstances, GatewayError, Instance, NodeRef},
    load_balancers::{BackendNode, CloudLoadBalancers, Ensured, Notice, ServingProvider},
    routes::{CloudRoutes, Route},
};
use k8s_openapi::api::core::v1::{LoadBalancerIngress, LoadBalancerStatus, Service};

/// The cloud as the controllers see it through [`CloudInstances`], [`CloudLoadBalancers`] and
/// [`CloudRoutes`] (the routes are described at their methods).
///
/// Instances answer from a table: a node is looked up by its provider ID when it has one, else
/// by name; a key with no answer is `InstanceNotFound`, as the cloud says of an instance that
/// does not exist.
///
/// Load balancers live in a map by Service UID (like upstream's `fake.Cloud`): an ensure creates
/// one with the next free ingress IP (`203.0.113.1`, `.2`, …, or the Service's
/// `spec.loadBalancerIP`) and keeps the backends it was given; an update replaces the backends
/// of an existing one (`InvalidArgument` when there is none, as the simulator answers); a
/// delete removes it (nothing to delete is success). Every load-balancer call is recorded in
/// order ([`FakeCloud::load_balancer_calls`]) before it is answered, a failed one included.
#[derive(Default)]
pub struct FakeCloud {
    state: Mutex<State>,
    lb: Mutex<LbState>,
    routes: Mutex<RouteState>,
    /// The provider it says it is when asked ([`FakeCloud::serve_provider`]).
    provider: Mutex<Option<String>>,
}

#[derive(Default)]
struct State {
    answers: HashMap<String, Result<Instance, GatewayError>>,
    call_error: Option<GatewayError>,
    calls: Vec<Vec<NodeRef>>,
    latency: std::time::Duration,
}

/// A load-balancer operation of [`CloudLoadBalancers`], as recorded and as failed on demand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LoadBalancerOp {
    /// `GetLoadBalancer`.
    Get,
    /// `EnsureLoadBalancer`.
    Ensure,
    /// `UpdateLoadBalancer`.
    Update,
    /// `EnsureLoadBalancerDeleted`.
    Delete,
}

/// One load-balancer call as the fake cloud received it.
#[derive(Debug, Clone)]
pub struct LoadBalancerCall {
    /// Which operation.
    pub op: LoadBalancerOp,
    /// When it arrived (before any latency).
    pub at: Instant,
    /// The cluster name passed.
    pub cluster: String,
    /// The Service, as `namespace/name`.
    pub service: String,
    /// The Service's UID.
    pub uid: String,
    /// The backends' names, in the order given (`Ensure` and `Update`; empty for the others).
    pub nodes: Vec<String>,
}

impl LoadBalancerCall {
    /// The call in one line, for assertions: `Ensure default/web [n1 n2]`, `Get default/web`.
    pub fn describe(&self) -> String {
        match self.op {
            LoadBalancerOp::Ensure | LoadBalancerOp::Update => {
                format!("{:?} {} [{}]", self.op, self.service, self.nodes.join(" "))
            }
            LoadBalancerOp::Get | LoadBalancerOp::Delete => format!("{:?} {}", self.op, self.service),
        }
    }
}

/// A load balancer the fake cloud holds.
#[derive(Debug, Clone, PartialEq)]
pub struct FakeLoadBalancer {
    /// The Service it serves, as `namespace/name`.
    pub service: String,
    /// Its status, as every ensure and get answers it.
    pub status: LoadBalancerStatus,
    /// The backends it was last ensured or updated with.
    pub backends: Vec<BackendNode>,
}

impl FakeLoadBalancer {
    /// Its first ingress IP.
    pub fn ip(&self) -> Option<&str> {
        self.status
            .ingress
            .as_ref()
            .and_then(|i| i.first())
            .and_then(|i| i.ip.as_deref())
    }

    /// Its backends' names.
    pub fn backend_names(&self) -> Vec<String> {
        self.backends.iter().map(|b| b.name.clone()).collect()
    }
}

#[derive(Default)]
struct LbState {
    /// By Service UID (`namespace/name` for a Service without one).
    balancers: BTreeMap<String, FakeLoadBalancer>,
    calls: Vec<LoadBalancerCall>,
    errors: HashMap<LoadBalancerOp, GatewayError>,
    /// How many more ensures answer RETRY_AFTER, and the delay they ask for.
    retry_after: Option<(usize, Duration)>,
    latency: Duration,
    /// The last host part of an assigned ingress IP.
    last_ip: u8,
    /// What every ensure answers beside the status ([`FakeCloud::answer_with`]), and the
    /// annotation prefix the capabilities name.
    extras: Ensured,
    annotation_prefix: String,
}

fn lb_key(service: &Service) -> String {
    service
        .metadata
        .uid
        .clone()
        .filter(|uid| !uid.is_empty())
        .unwrap_or_else(|| service_name(service))
}

fn service_name(service: &Service) -> String {
    format!(
        "{}/{}",
        service.metadata.namespace.as_deref().unwrap_or_default(),
        service.metadata.name.as_deref().unwrap_or_default()
    )
}

fn ingress(ip: String) -> LoadBalancerStatus {
    LoadBalancerStatus {
        ingress: Some(vec![LoadBalancerIngress {
            ip: Some(ip),
            ..Default::default()
        }]),
    }
}

impl FakeCloud {
    /// An empty cloud: every lookup is `InstanceNotFound`.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Says it is `provider` when asked which provider it serves (`None`: does not say, the
    /// default).
    pub fn serve_provider(&self, provider: Option<&str>) {
        *self
            .provider
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = provider.map(str::to_owned);
    }

    /// Every ensure from now on also answers these annotations and notices, as a provider that
    /// writes annotations back (OpenStack) does; its capabilities name `prefix` as its own.
    pub fn answer_with(&self, prefix: &str, annotations: &[(&str, &str)], notices: &[(&str, &str)]) {
        let mut lb = self.lb();
        lb.annotation_prefix = prefix.to_owned();
        lb.extras = Ensured {
            status: LoadBalancerStatus::default(),
            annotations: annotations
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            notices: notices
                .iter()
                .map(|(reason, message)| Notice {
                    reason: (*reason).to_owned(),
                    message: (*message).to_owned(),
                })
                .collect(),
        };
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The instance answered for the node whose provider ID (or, without one, name) is `key`.
    pub fn set_instance(&self, key: &str, instance: Instance) {
        self.state().answers.insert(key.to_owned(), Ok(instance));
    }

    /// The error answered for the node keyed `key` alone.
    pub fn set_error(&self, key: &str, error: GatewayError) {
        self.state().answers.insert(key.to_owned(), Err(error));
    }

    /// Forgets `key`: it is `InstanceNotFound` from now on.
    pub fn remove(&self, key: &str) {
        self.state().answers.remove(key);
    }

    /// Makes every call fail as a whole with `error` (`None`: answer again).
    pub fn fail_calls(&self, error: Option<GatewayError>) {
        self.state().call_error = error;
    }

    /// Makes every call take `latency` (answered as of its end).
    pub fn set_latency(&self, latency: std::time::Duration) {
        self.state().latency = latency;
    }

    /// The nodes of every call so far, in order.
    pub fn calls(&self) -> Vec<Vec<NodeRef>> {
        self.state().calls.clone()
    }
}

#[async_trait::async_trait]
impl CloudInstances for FakeCloud {
    async fn lookup_instances(
        &self,
        nodes: &[NodeRef],
    ) -> Result<Vec<Result<Instance, GatewayError>>, GatewayError> {
        let latency = {
            let mut state = self.state();
            state.calls.push(nodes.to_vec());
            state.latency
        };
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        let state = self.state();
        if let Some(err) = &state.call_error {
            return Err(err.clone());
        }
        Ok(nodes
            .iter()
            .map(|node| {
                let key = if node.provider_id.is_empty() {
                    &node.name
                } else {
                    &node.provider_id
                };
                state
                    .answers
                    .get(key)
                    .cloned()
                    .unwrap_or_else(|| Err(GatewayError::InstanceNotFound(key.clone())))
            })
            .collect())
    }
}

/// The load balancers: configuration and what was asked.
impl FakeCloud {
    fn lb(&self) -> std::sync::MutexGuard<'_, LbState> {
        self.lb.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Makes every `op` call fail with `error` (`None`: answer again). An
    /// `ImplementedElsewhere` is answered like any other error.
    pub fn fail_load_balancer_calls(&self, op: LoadBalancerOp, error: Option<GatewayError>) {
        let mut lb = self.lb();
        match error {
            Some(error) => lb.errors.insert(op, error),
            None => lb.errors.remove(&op),
        };
    }

    /// Makes the next `count` ensures answer RETRY_AFTER `after` (the cloud still provisioning),
    /// changing nothing; this comes before any error set by
    /// [`FakeCloud::fail_load_balancer_calls`].
    pub fn retry_after_ensures(&self, count: usize, after: Duration) {
        self.lb().retry_after = (count > 0).then_some((count, after));
    }

    /// Makes every load-balancer call take `latency` (answered as of its end).
    pub fn set_load_balancer_latency(&self, latency: Duration) {
        self.lb().latency = latency;
    }

    /// Puts a load balancer for `service` in the cloud without a call (as if ensured before),
    /// with the next free ingress IP and no backends; returns its status.
    pub fn add_load_balancer(&self, service: &Service) -> LoadBalancerStatus {
        let mut lb = self.lb();
        lb.upsert(service, &[]).status
    }

    /// The load balancer of the Service with `uid`.
    pub fn load_balancer(&self, uid: &str) -> Option<FakeLoadBalancer> {
        self.lb().balancers.get(uid).cloned()
    }

    /// Every load balancer, by Service UID.
    pub fn load_balancers(&self) -> BTreeMap<String, FakeLoadBalancer> {
        self.lb().balancers.clone()
    }

    /// Every load-balancer call so far, in order.
    pub fn load_balancer_calls(&self) -> Vec<LoadBalancerCall> {
        self.lb().calls.clone()
    }

    /// [`FakeCloud::load_balancer_calls`], each as [`LoadBalancerCall::describe`] says it.
    pub fn described_load_balancer_calls(&self) -> Vec<String> {
        self.lb().calls.iter().map(LoadBalancerCall::describe).collect()
    }

    /// Forgets the calls so far (the load balancers stay).
    pub fn clear_load_balancer_calls(&self) {
        self.lb().calls.clear();
    }

    /// Records the call, waits the latency, then gives the state to answer from, or the error
    /// configured for `op`.
    async fn lb_call(
        &self,
        op: LoadBalancerOp,
        cluster: &str,
        service: &Service,
        nodes: &[BackendNode],
    ) -> Result<std::sync::MutexGuard<'_, LbState>, GatewayError> {
        let latency = {
            let mut lb = self.lb();
            lb.calls.push(LoadBalancerCall {
                op,
                at: Instant::now(),
                cluster: cluster.to_owned(),
                service: service_name(service),
                uid: service.metadata.uid.clone().unwrap_or_default(),
                nodes: nodes.iter().map(|n| n.name.clone()).collect(),
            });
            lb.latency
        };
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        let mut lb = self.lb();
        if op == LoadBalancerOp::Ensure
            && let Some((count, after)) = lb.retry_after
        {
            lb.retry_after = (count > 1).then_some((count - 1, after));
            return Err(GatewayError::RetryAfter {
                after,
                message: format!(
                    "the load balancer of {} is being provisioned",
                    service_name(service)
                ),
            });
        }
        match lb.errors.get(&op) {
            Some(err) => Err(err.clone()),
            None => Ok(lb),
        }
    }
}

impl LbState {
    /// Creates or updates the load balancer of `service` over `nodes`: a new one gets the
    /// Service's `loadBalancerIP` or the next free IP, an existing one keeps its IP unless the
    /// Service asks for another.
    fn upsert(&mut self, service: &Service, nodes: &[BackendNode]) -> FakeLoadBalancer {
        let key = lb_key(service);
        let requested = service
            .spec
            .as_ref()
            .and_then(|s| s.load_balancer_ip.clone())
            .filter(|ip| !ip.is_empty());
        let existing = self.balancers.get(&key).and_then(|b| b.ip().map(str::to_owned));
        let ip = match (requested, existing) {
            (Some(ip), _) | (None, Some(ip)) => ip,
            (None, None) => {
                self.last_ip = self.last_ip.wrapping_add(1);
                format!("203.0.113.{}", self.last_ip)
            }
        };
        let balancer = FakeLoadBalancer {
            service: service_name(service),
            status: ingress(ip),
            backends: nodes.to_vec(),
        };
        self.balancers.insert(key, balancer.clone());
        balancer
    }
}

#[async_trait::async_trait]
impl CloudLoadBalancers for FakeCloud {
    async fn get_load_balancer(
        &self,
        cluster: &str,
        service: &Service,
    ) -> Result<Option<LoadBalancerStatus>, GatewayError> {
        let lb = self.lb_call(LoadBalancerOp::Get, cluster, service, &[]).await?;
        Ok(lb.balancers.get(&lb_key(service)).map(|b| b.status.clone()))
    }

    async fn ensure_load_balancer(
        &self,
        cluster: &str,
        service: &Service,
        nodes: &[BackendNode],
    ) -> Result<Ensured, GatewayError> {
        let mut lb = self
            .lb_call(LoadBalancerOp::Ensure, cluster, service, nodes)
            .await?;
        let status = lb.upsert(service, nodes).status;
        Ok(Ensured {
            status,
            ..lb.extras.clone()
        })
    }

    async fn update_load_balancer(
        &self,
        cluster: &str,
        service: &Service,
        nodes: &[BackendNode],
    ) -> Result<(), GatewayError> {
        let mut lb = self
            .lb_call(LoadBalancerOp::Update, cluster, service, nodes)
            .await?;
        match lb.balancers.get_mut(&lb_key(service)) {
            Some(balancer) => {
                balancer.backends = nodes.to_vec();
                Ok(())
            }
            None => Err(GatewayError::InvalidArgument(format!(
                "the load balancer of service {} does not exist",
                service_name(service)
            ))),
        }
    }

    async fn ensure_load_balancer_deleted(
        &self,
        cluster: &str,
        service: &Service,
    ) -> Result<(), GatewayError> {
        let mut lb = self
            .lb_call(LoadBalancerOp::Delete, cluster, service, &[])
            .await?;
        lb.balancers.remove(&lb_key(service));
        Ok(())
    }

    async fn current_provider(&self) -> Result<Option<String>, GatewayError> {
        Ok(self
            .provider
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone())
    }

    async fn serving_provider(&self) -> Result<ServingProvider, GatewayError> {
        Ok(ServingProvider {
            name: self.current_provider().await?,
            load_balancers: true,
            annotation_prefix: self.lb().annotation_prefix.clone(),
        })
    }
}

/// A route operation of [`CloudRoutes`], as recorded and as failed on demand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RouteOp {
    /// `ListRoutes`.
    List,
    /// `CreateRoute`.
    Create,
    /// `DeleteRoute`.
    Delete,
}

/// One route call as the fake cloud received it.
#[derive(Debug, Clone)]
pub struct RouteCall {
    /// Which operation.
    pub op: RouteOp,
    /// When it arrived (before any latency).
    pub at: Instant,
    /// The cluster name passed.
    pub cluster: String,
    /// The name hint of a create (the node's UID); empty for the others.
    pub name_hint: String,
    /// The route of a create or delete; empty for a list.
    pub route: Route,
}

impl RouteCall {
    /// The call in one line, for assertions: `List`, `Create node-1 10.244.1.0/24`,
    /// `Delete 10.244.9.0/24`.
    pub fn describe(&self) -> String {
        match self.op {
            RouteOp::List => "List".into(),
            RouteOp::Create => format!(
                "Create {} {}",
                self.route.target_node, self.route.destination_cidr
            ),
            RouteOp::Delete => format!("Delete {}", self.route.destination_cidr),
        }
    }
}

#[derive(Default)]
struct RouteState {
    /// Every cluster's routes, as (cluster, route), a destination at most once (one route
    /// table, as the simulator's).
    table: Vec<(String, Route)>,
    calls: Vec<RouteCall>,
    errors: HashMap<RouteOp, GatewayError>,
    /// Creates and deletes of these destinations fail with the error.
    cidr_errors: HashMap<String, GatewayError>,
    latency: Duration,
}

/// The routes: configuration and what was asked. They behave like the simulator's: one table
/// for every cluster, a destination routed at most once; a create of a destination routed to
/// the same node by the same cluster is done already, to another one is `InvalidArgument`; a
/// route is named `<cluster>-<name hint>`; a delete removes the cluster's route to the
/// destination (none is success). Every call is recorded in order
/// ([`FakeCloud::route_calls`]) before it is answered, a failed one included.
impl FakeCloud {
    fn rt(&self) -> std::sync::MutexGuard<'_, RouteState> {
        self.routes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Puts `route` in the cloud for `cluster` without a call (made out of band, or before);
    /// it replaces any route to the same destination.
    pub fn add_route(&self, cluster: &str, route: Route) {
        let mut rt = self.rt();
        rt.table
            .retain(|(_, r)| r.destination_cidr != route.destination_cidr);
        rt.table.push((cluster.to_owned(), route));
    }

    /// Every route of `cluster`, in creation order.
    pub fn routes_of(&self, cluster: &str) -> Vec<Route> {
        self.rt()
            .table
            .iter()
            .filter(|(c, _)| c == cluster)
            .map(|(_, r)| r.clone())
            .collect()
    }

    /// `cluster`'s routes as `target cidr` strings, sorted, for assertions.
    pub fn described_routes(&self, cluster: &str) -> Vec<String> {
        let mut routes: Vec<String> = self
            .routes_of(cluster)
            .iter()
            .map(|r| format!("{} {}", r.target_node, r.destination_cidr))
            .collect();
        routes.sort();
        routes
    }

    /// Makes every `op` call fail with `error` (`None`: answer again).
    pub fn fail_route_calls(&self, op: RouteOp, error: Option<GatewayError>) {
        let mut rt = self.rt();
        match error {
            Some(error) => rt.errors.insert(op, error),
            None => rt.errors.remove(&op),
        };
    }

    /// Makes creates and deletes of destination `cidr` fail with `error` (`None`: answer again).
    pub fn fail_routes_to(&self, cidr: &str, error: Option<GatewayError>) {
        let mut rt = self.rt();
        match error {
            Some(error) => rt.cidr_errors.insert(cidr.to_owned(), error),
            None => rt.cidr_errors.remove(cidr),
        };
    }

    /// Makes every route call take `latency` (answered as of its end).
    pub fn set_route_latency(&self, latency: Duration) {
        self.rt().latency = latency;
    }

    /// Every route call so far, in order.
    pub fn route_calls(&self) -> Vec<RouteCall> {
        self.rt().calls.clone()
    }

    /// [`FakeCloud::route_calls`], each as [`RouteCall::describe`] says it.
    pub fn described_route_calls(&self) -> Vec<String> {
        self.rt().calls.iter().map(RouteCall::describe).collect()
    }

    /// Forgets the calls so far (the routes stay).
    pub fn clear_route_calls(&self) {
        self.rt().calls.clear();
    }

    /// Records the call, waits the latency, then gives the state to answer from, or the error
    /// configured for `op` or for the route's destination.
    async fn route_call(
        &self,
        op: RouteOp,
        cluster: &str,
        name_hint: &str,
        route: &Route,
    ) -> Result<std::sync::MutexGuard<'_, RouteState>, GatewayError> {
        let latency = {
            let mut rt = self.rt();
            rt.calls.push(RouteCall {
                op,
                at: Instant::now(),
                cluster: cluster.to_owned(),
                name_hint: name_hint.to_owned(),
                route: route.clone(),
            });
            rt.latency
        };
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        let rt = self.rt();
        let by_cidr = (op != RouteOp::List)
            .then(|| rt.cidr_errors.get(&route.destination_cidr))
            .flatten();
        match rt.errors.get(&op).or(by_cidr) {
            Some(err) => Err(err.clone()),
            None => Ok(rt),
        }
    }
}

#[async_trait::async_trait]
impl CloudRoutes for FakeCloud {
    async fn list_routes(&self, cluster: &str) -> Result<Vec<Route>, GatewayError> {
        let rt = self
            .route_call(RouteOp::List, cluster, "", &Route::default())
            .await?;
        Ok(rt
            .table
            .iter()
            .filter(|(c, _)| c == cluster)
            .map(|(_, r)| r.clone())
            .collect())
    }

    async fn create_route(&self, cluster: &str, name_hint: &str, route: &Route) -> Result<(), GatewayError> {
        let mut rt = self
            .route_call(RouteOp::Create, cluster, name_hint, route)
            .await?;
        if let Some((c, existing)) = rt
            .table
            .iter()
            .find(|(_, r)| r.destination_cidr == route.destination_cidr)
        {
            return if c == cluster && existing.target_node == route.target_node {
                Ok(())
            } else {
                Err(GatewayError::InvalidArgument(format!(
                    "destination {} is already routed to node {} by cluster {c:?}",
                    route.destination_cidr, existing.target_node
                )))
            };
        }
        rt.table.push((
            cluster.to_owned(),
            Route {
                name: format!("{cluster}-{name_hint}"),
                blackhole: false,
                ..route.clone()
            },
        ));
        Ok(())
    }

    async fn delete_route(&self, cluster: &str, route: &Route) -> Result<(), GatewayError> {
        let mut rt = self.route_call(RouteOp::Delete, cluster, "", route).await?;
        rt.table
            .retain(|(c, r)| !(c == cluster && r.destination_cidr == route.destination_cidr));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ServiceBuilder;

    fn route(target: &str, cidr: &str) -> Route {
        Route {
            target_node: target.into(),
            destination_cidr: cidr.into(),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn routes_are_per_cluster_one_per_destination_and_fail_on_demand() {
        let cloud = FakeCloud::new();
        cloud
            .create_route("c", "uid-1", &route("n1", "10.244.1.0/24"))
            .await
            .unwrap();
        cloud
            .create_route("c", "uid-1", &route("n1", "10.244.1.0/24"))
            .await
            .unwrap();
        let taken = cloud
            .create_route("other", "uid-9", &route("n9", "10.244.1.0/24"))
            .await
            .unwrap_err();
        assert!(matches!(taken, GatewayError::InvalidArgument(_)), "{taken:?}");
        cloud.add_route("other", route("n9", "10.9.0.0/24"));
        let listed = cloud.list_routes("c").await.unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].name, "c-uid-1");

        let down = GatewayError::Unavailable("down".into());
        cloud.fail_routes_to("10.244.1.0/24", Some(down.clone()));
        assert_eq!(
            cloud
                .delete_route("c", &route("", "10.244.1.0/24"))
                .await
                .unwrap_err(),
            down
        );
        cloud.fail_routes_to("10.244.1.0/24", None);
        cloud
            .delete_route("other", &route("", "10.244.1.0/24"))
            .await
            .unwrap();
        assert_eq!(
            cloud.described_routes("c"),
            ["n1 10.244.1.0/24"],
            "not the other cluster's to delete"
        );
        cloud
            .delete_route("c", &route("", "10.244.1.0/24"))
            .await
            .unwrap();
        assert!(cloud.routes_of("c").is_empty());
        cloud.fail_route_calls(RouteOp::List, Some(down.clone()));
        assert_eq!(cloud.list_routes("c").await.unwrap_err(), down);
        assert_eq!(
            cloud.described_route_calls(),
            [
                "Create n1 10.244.1.0/24",
                "Create n1 10.244.1.0/24",
                "Create n9 10.244.1.0/24",
                "List",
                "Delete 10.244.1.0/24",
                "Delete 10.244.1.0/24",
                "Delete 10.244.1.0/24",
                "List",
            ]
        );
    }

    fn backend(name: &str) -> BackendNode {
        BackendNode {
            name: name.into(),
            ..Default::default()
        }
    }

    fn ip(status: &LoadBalancerStatus) -> &str {
        status.ingress.as_ref().unwrap()[0].ip.as_deref().unwrap()
    }

    #[tokio::test]
    async fn an_ensure_creates_once_keeps_the_ip_and_the_backends_it_was_given() {
        let cloud = FakeCloud::new();
        let web = ServiceBuilder::new("web").build();
        let db = ServiceBuilder::new("db").build();

        assert_eq!(cloud.get_load_balancer("c", &web).await.unwrap(), None);
        let first = cloud
            .ensure_load_balancer("c", &web, &[backend("n1")])
            .await
            .unwrap()
            .status;
        let again = cloud
            .ensure_load_balancer("c", &web, &[backend("n1"), backend("n2")])
            .await
            .unwrap()
            .status;
        let other = cloud.ensure_load_balancer("c", &db, &[]).await.unwrap().status;

        assert_eq!(ip(&first), "203.0.113.1");
        assert_eq!(first, again, "the same load balancer");
        assert_eq!(ip(&other), "203.0.113.2");
        let balancer = cloud.load_balancer("uid-web").unwrap();
        assert_eq!(balancer.backend_names(), ["n1", "n2"]);
        assert_eq!(balancer.service, "default/web");
        assert_eq!(cloud.get_load_balancer("c", &web).await.unwrap(), Some(first));
        assert_eq!(
            cloud.described_load_balancer_calls(),
            [
                "Get default/web",
                "Ensure default/web [n1]",
                "Ensure default/web [n1 n2]",
                "Ensure default/db []",
                "Get default/web",
            ]
        );
        let requested = ServiceBuilder::new("pinned")
            .load_balancer_ip("198.51.100.9")
            .build();
        let status = cloud
            .ensure_load_balancer("c", &requested, &[])
            .await
            .unwrap()
            .status;
        assert_eq!(ip(&status), "198.51.100.9");
    }

    #[tokio::test]
    async fn update_and_delete_change_what_exists_and_fail_on_demand() {
        let cloud = FakeCloud::new();
        let web = ServiceBuilder::new("web").build();
        let missing = cloud.update_load_balancer("c", &web, &[]).await.unwrap_err();
        assert!(matches!(missing, GatewayError::InvalidArgument(_)), "{missing:?}");

        cloud.add_load_balancer(&web);
        cloud
            .update_load_balancer("c", &web, &[backend("n3")])
            .await
            .unwrap();
        assert_eq!(cloud.load_balancer("uid-web").unwrap().backend_names(), ["n3"]);

        let down = GatewayError::Unavailable("down".into());
        cloud.fail_load_balancer_calls(LoadBalancerOp::Delete, Some(down.clone()));
        assert_eq!(
            cloud.ensure_load_balancer_deleted("c", &web).await.unwrap_err(),
            down
        );
        assert!(
            cloud.load_balancer("uid-web").is_some(),
            "a failed delete keeps it"
        );
        cloud.get_load_balancer("c", &web).await.unwrap();

        cloud.fail_load_balancer_calls(LoadBalancerOp::Delete, None);
        cloud.ensure_load_balancer_deleted("c", &web).await.unwrap();
        cloud.ensure_load_balancer_deleted("c", &web).await.unwrap();
        assert!(cloud.load_balancers().is_empty());
        let ops: Vec<LoadBalancerOp> = cloud.load_balancer_calls().iter().map(|c| c.op).collect();
        assert_eq!(
            ops,
            [
                LoadBalancerOp::Update,
                LoadBalancerOp::Update,
                LoadBalancerOp::Delete,
                LoadBalancerOp::Get,
                LoadBalancerOp::Delete,
                LoadBalancerOp::Delete,
            ],
            "failed calls are recorded too"
        );
    }

    #[tokio::test]
    async fn retry_after_answers_the_next_ensures_then_they_succeed() {
        let cloud = FakeCloud::new();
        let web = ServiceBuilder::new("web").build();
        cloud.retry_after_ensures(2, Duration::from_secs(7));
        for _ in 0..2 {
            let err = cloud.ensure_load_balancer("c", &web, &[]).await.unwrap_err();
            assert!(
                matches!(err, GatewayError::RetryAfter { after, .. } if after == Duration::from_secs(7)),
                "{err:?}"
            );
        }
        assert!(cloud.load_balancers().is_empty(), "nothing created meanwhile");
        cloud.ensure_load_balancer("c", &web, &[]).await.unwrap();
        assert_eq!(cloud.load_balancer_calls().len(), 3);
    }
}
