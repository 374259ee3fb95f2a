//! [`Simulator`]: the simulated cloud behind the `provider` traits.
//!
//! Every API call passes one gate, in this order, as a real cloud's front end does:
//! 1. the rate limit (a token bucket for reads and another for writes): over it, the call is
//!    answered `Throttled` with the time to the next token, counted as throttled and not as
//!    accepted, and does nothing;
//! 2. the latency knob (plus jitter);
//! 3. the injected error rate of the operation (`Unavailable`);
//! 4. the operation itself; a change is persisted before the call returns.
//!
//! Admin actions (launching or stopping instances, reading the state) bypass the gate: they are
//! the operator's console, not the API the controllers use.

use std::{
    fs::{self, File, TryLockError},
    path::Path,
    sync::{Arc, Mutex, RwLock},
    time::{Duration, Instant},
};

use async_trait::async_trait;
use ipnet::IpNet;
use provider::{
    InstanceInfo, Instances, LoadBalancerNode, LoadBalancerObservation, LoadBalancerRead, LoadBalancerStatus,
    LoadBalancers, NodeRef, Provider, ProviderError, ProviderLimits, Route, Routes, ServiceSpec,
};
use rand::Rng;
use serde::Serialize;
use token_bucket::{Limit, TokenBucket};

use crate::{
    Capabilities, PROVIDER_NAME, SimulatorConfig, SimulatorError,
    inventory::{self, Inventory},
    knobs::{self, Knobs, KnobsPatch, RateLimit},
    ops::{
        self,
        instances::{Action, NewInstance},
    },
    state::{Instance, LoadBalancer, State},
    stats::{Recorder, Stats},
    store::Store,
};

/// Most Services' load balancers one read call carries, as AWS's DescribeLoadBalancers takes
/// 20 names.
pub const READ_BATCH: usize = 20;

/// The simulated cloud. Cheap to share behind an `Arc`; every method takes `&self`.
pub struct Simulator {
    store: Arc<Store>,
    knobs: RwLock<Arc<Knobs>>,
    limiter: Mutex<Limiter>,
    stats: Recorder,
    disabled: Capabilities,
    limits: ProviderLimits,
    /// Held open for the simulator's lifetime: its lock keeps a second simulator off the file.
    _lock: Option<File>,
}

/// Where the cloud is and what it hands out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CloudInfo {
    /// Provider name.
    pub provider: String,
    /// Region.
    pub region: String,
    /// Zones.
    pub zones: Vec<String>,
    /// Private subnet of instances.
    pub instance_subnet: IpNet,
    /// Load balancer address pool.
    pub load_balancer_pool: IpNet,
    /// State file, if persistent.
    pub state_file: Option<String>,
    /// Load balancers ever created.
    pub load_balancers_created: u64,
}

/// A route as the admin API lists it: with its cluster, across clusters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RouteView {
    /// Owning cluster.
    pub cluster: String,
    /// Route name.
    pub name: String,
    /// Target node.
    pub target_node: String,
    /// Destination CIDR.
    pub destination_cidr: String,
    /// The target has no live instance.
    pub blackhole: bool,
}

impl Simulator {
    /// Opens the cloud: from the state file when it exists, else seeded from the inventory (or
    /// empty), and writes the state file at once so generated ids survive a restart.
    ///
    /// # Errors
    /// A bad inventory (the message names the file and line), an unreadable, corrupt or locked
    /// state file (the message names the file), or invalid knobs.
    pub fn open(config: SimulatorConfig) -> Result<Arc<Simulator>, SimulatorError> {
        config
            .knobs
            .validate()
            .map_err(|m| SimulatorError::Invalid(format!("knobs: {m}")))?;
        if config.limits.max_instance_batch == 0 {
            return Err(SimulatorError::Invalid(
                "max_instance_batch must be at least 1".into(),
            ));
        }
        let lock = match &config.state_file {
            Some(path) => Some(lock_state_file(path)?),
            None => None,
        };
        let loaded = match &config.state_file {
            Some(path) => State::load(path)?,
            None => None,
        };
        let state = match loaded {
            Some(state) => {
                if let Some(inv) = &config.inventory {
                    tracing::info!(
                        inventory = %inv.display(),
                        "the state file exists, so the inventory is not read (remove the state file to re-seed)"
                    );
                }
                state
            }
            None => {
                let inv = match &config.inventory {
                    Some(path) => inventory::load(path)?,
                    None => Inventory::default(),
                };
                inv.into_state(crate::state::now())
            }
        };
        let store = Arc::new(Store::new(
            state,
            config.state_file.clone(),
            config.durable_writes,
        ));
        store.save_now()?;
        let knobs = config.knobs.normalized();
        let mut limiter = Limiter::default();
        limiter.set(knobs.rate_limit, clock_now());
        Ok(Arc::new(Simulator {
            store,
            knobs: RwLock::new(Arc::new(knobs)),
            limiter: Mutex::new(limiter),
            stats: Recorder::default(),
            disabled: config.disabled,
            limits: config.limits,
            _lock: lock,
        }))
    }

    /// The current knobs.
    pub fn knobs(&self) -> Knobs {
        Knobs::clone(&self.knobs.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// Replaces the knobs. Out-of-range values are clamped ([`Knobs::normalized`]); a changed
    /// rate limit keeps the tokens already earned (capped at the new burst).
    pub fn set_knobs(&self, knobs: Knobs) {
        let knobs = knobs.normalized();
        let mut slot = self.knobs.write().unwrap_or_else(|p| p.into_inner());
        self.limiter
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .set(knobs.rate_limit, clock_now());
        *slot = Arc::new(knobs);
    }

    /// Merges a partial update into the knobs and returns the result.
    ///
    /// # Errors
    /// An invalid value, explained; the knobs are then unchanged.
    pub fn update_knobs(&self, patch: &KnobsPatch) -> Result<Knobs, SimulatorError> {
        let mut slot = self.knobs.write().unwrap_or_else(|p| p.into_inner());
        let knobs = slot.merged(patch).map_err(SimulatorError::Invalid)?;
        self.limiter
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .set(knobs.rate_limit, clock_now());
        *slot = Arc::new(knobs.clone());
        Ok(knobs)
    }

    /// Counters since start or the last [`Simulator::reset_stats`].
    pub fn stats(&self) -> Stats {
        self.stats.snapshot()
    }

    /// Zeroes the counters.
    pub fn reset_stats(&self) {
        self.stats.reset();
    }

    /// Region, zones and pools.
    pub fn info(&self) -> CloudInfo {
        let s = self.store.snapshot();
        CloudInfo {
            provider: PROVIDER_NAME.into(),
            region: s.region.clone(),
            zones: s.zones.clone(),
            instance_subnet: s.instance_subnet,
            load_balancer_pool: s.load_balancer_pool,
            state_file: self.store.file().map(|p| p.display().to_string()),
            load_balancers_created: s.load_balancers_created,
        }
    }

    /// Every instance, terminated ones included, in launch order. (An inherent method: on a
    /// concrete `Simulator` it shadows `Provider::instances`; call that as
    /// `Provider::instances(&*sim)`.)
    pub fn instances(&self) -> Vec<Instance> {
        self.store.snapshot().instances.clone()
    }

    /// Every load balancer of every cluster, by name, with its state as of now.
    pub fn load_balancers(&self) -> Vec<LoadBalancer> {
        let now = crate::state::now();
        self.store
            .snapshot()
            .load_balancers
            .values()
            .map(|lb| LoadBalancer {
                state: lb.state_at(now),
                ..lb.clone()
            })
            .collect()
    }

    /// Every route of every cluster.
    pub fn routes(&self) -> Vec<RouteView> {
        let s = self.store.snapshot();
        let mut clusters: Vec<&str> = s.routes.iter().map(|r| r.cluster.as_str()).collect();
        clusters.sort_unstable();
        clusters.dedup();
        clusters
            .into_iter()
            .flat_map(|c| {
                ops::routes::list(&s, c).into_iter().map(move |r| RouteView {
                    cluster: c.to_string(),
                    name: r.name,
                    target_node: r.target_node,
                    destination_cidr: r.destination_cidr,
                    blackhole: r.blackhole,
                })
            })
            .collect()
    }

    /// Adds a route out of band (as an operator would); returns it as listed. Blocks on the
    /// state file write.
    ///
    /// # Errors
    /// `Invalid` (no cluster, a destination that is not a network CIDR, a target that is not a
    /// live instance), `Conflict` (the destination is routed already), `StateFile`.
    pub fn add_route(&self, spec: ops::routes::NewRoute) -> Result<RouteView, SimulatorError> {
        let cluster = spec.cluster.clone();
        let cidr = ops::routes::parse_cidr(&spec.destination_cidr)
            .map_err(|e| SimulatorError::Invalid(e.to_string()))?;
        self.store
            .mutate(move |s| ops::routes::add(s, &spec, crate::state::now()))??;
        self.routes()
            .into_iter()
            .find(|r| r.cluster == cluster && r.destination_cidr == cidr.to_string())
            .ok_or_else(|| SimulatorError::Internal("the route added is not listed".into()))
    }

    /// Launches a running instance. Blocks on the state file write.
    ///
    /// # Errors
    /// `Invalid` (bad name, zone, label, address outside the subnet), `Conflict` (name or
    /// address in use), `StateFile` (the change could not be saved and was not made).
    pub fn add_instance(&self, spec: NewInstance) -> Result<Instance, SimulatorError> {
        self.store.mutate(move |s| {
            let id = fresh_instance_id(s);
            ops::instances::launch(s, spec, id, crate::state::now())
        })?
    }

    /// Stops an instance (it still exists; lookups say `shutdown`).
    pub fn stop_instance(&self, id: &str) -> Result<Instance, SimulatorError> {
        self.act(id, Action::Stop)
    }

    /// Starts a stopped instance.
    pub fn start_instance(&self, id: &str) -> Result<Instance, SimulatorError> {
        self.act(id, Action::Start)
    }

    /// Terminates an instance for good (listed still; lookups say not found).
    pub fn terminate_instance(&self, id: &str) -> Result<Instance, SimulatorError> {
        self.act(id, Action::Terminate)
    }

    fn act(&self, id: &str, action: Action) -> Result<Instance, SimulatorError> {
        self.store.mutate(|s| ops::instances::act(s, id, action))?
    }

    /// The gate every API call passes first.
    async fn gate(&self, op: &'static str) -> Result<(), ProviderError> {
        let knobs = self.knobs.read().unwrap_or_else(|p| p.into_inner()).clone();
        {
            let mut limiter = self.limiter.lock().unwrap_or_else(|p| p.into_inner());
            // Read the clock under the lock, so recorded admission times are in order.
            let now = clock_now();
            match limiter.admit(knobs::is_write(op), now) {
                Ok(()) => self.stats.accepted(op, now),
                Err(retry_after) => {
                    self.stats.throttled(op);
                    tracing::debug!(op, ?retry_after, "simulated API call throttled");
                    return Err(ProviderError::Throttled {
                        retry_after,
                        message: "Request limit exceeded".into(),
                    });
                }
            }
        }
        let mut delay = knobs.latency;
        if !knobs.latency_jitter.is_zero() {
            delay += knobs.latency_jitter.mul_f64(rand::rng().random::<f64>());
        }
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        let p = knobs.error_rate_for(op);
        if p >= 1.0 || (p > 0.0 && rand::rng().random::<f64>() < p) {
            self.stats.injected(op);
            tracing::debug!(op, error_rate = p, "simulated API call failed on purpose");
            return Err(ProviderError::Unavailable(format!(
                "injected failure of {op} (error_rate {p})"
            )));
        }
        Ok(())
    }

    /// A write call's change: made through the store, or, in a dry-run scope
    /// ([`provider::dry_run`]), planned on a copy of the state. When the copy shows a change of
    /// the cloud (a load balancer or a route added, changed or removed), it is recorded as a
    /// "would" and not made, and the call answers what it would have answered; a call that
    /// would change nothing records nothing.
    async fn write<T, F>(&self, call: &'static str, target: &str, f: F) -> Result<T, ProviderError>
    where
        T: Send + 'static,
        F: FnOnce(&mut State) -> Result<T, ProviderError> + Clone + Send + 'static,
    {
        if provider::dry_run::active() {
            let before = self.store.snapshot();
            let mut after = State::clone(&before);
            let answer = (f.clone())(&mut after);
            let change = dry_run_change(&before, &after);
            if change.is_empty() || !provider::dry_run::intercept(PROVIDER_NAME, call, target, || change) {
                return answer;
            }
        }
        self.change(f).await
    }

    /// Applies a change through the store, off the async threads when it writes a file.
    async fn change<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut State) -> Result<T, ProviderError> + Send + 'static,
    ) -> Result<T, ProviderError> {
        let store = self.store.clone();
        let saved = if store.is_persistent() {
            tokio::task::spawn_blocking(move || store.mutate(f))
                .await
                .map_err(|e| ProviderError::Internal(format!("the state update did not finish: {e}")))?
        } else {
            store.mutate(f)
        };
        saved.map_err(|e| ProviderError::Internal(format!("the change was not made: {e}")))?
    }
}

/// What a write changed in the cloud, as compact JSON: each load balancer added or changed (as
/// it would be) or removed (`null`), and each route added or removed; empty when nothing that a
/// cloud API call would change did. Bookkeeping is left out (creation and provisioning times,
/// the provisioning state, which time alone moves on, the address cursors), so the same change
/// is described by the same text whenever it is planned.
pub(crate) fn dry_run_change(before: &State, after: &State) -> String {
    use serde_json::{Map, Value, json};
    fn lb_view(lb: &LoadBalancer) -> Value {
        let mut view = serde_json::to_value(lb).unwrap_or(Value::Null);
        if let Value::Object(fields) = &mut view {
            for bookkeeping in ["created_at", "ready_at", "state"] {
                fields.remove(bookkeeping);
            }
        }
        view
    }
    fn route_view(r: &crate::state::RouteRecord) -> Value {
        json!({
            "cluster": r.cluster,
            "name": r.name,
            "target_node": r.target_node,
            "destination_cidr": r.destination_cidr.to_string(),
        })
    }
    let mut lbs = Map::new();
    for (name, lb) in &after.load_balancers {
        let view = lb_view(lb);
        if before.load_balancers.get(name).map(lb_view).as_ref() != Some(&view) {
            lbs.insert(name.clone(), view);
        }
    }
    for name in before.load_balancers.keys() {
        if !after.load_balancers.contains_key(name) {
            lbs.insert(name.clone(), Value::Null);
        }
    }
    let views = |s: &State| s.routes.iter().map(route_view).collect::<Vec<_>>();
    let (routes_before, routes_after) = (views(before), views(after));
    let added: Vec<&Value> = routes_after
        .iter()
        .filter(|r| !routes_before.contains(r))
        .collect();
    let removed: Vec<&Value> = routes_before
        .iter()
        .filter(|r| !routes_after.contains(r))
        .collect();
    let mut change = Map::new();
    if !lbs.is_empty() {
        change.insert("load_balancers".into(), Value::Object(lbs));
    }
    if !added.is_empty() {
        change.insert("routes_added".into(), json!(added));
    }
    if !removed.is_empty() {
        change.insert("routes_removed".into(), json!(removed));
    }
    if change.is_empty() {
        String::new()
    } else {
        Value::Object(change).to_string()
    }
}

/// A random id no instance has, `i-0` and 16 hex digits like EC2's.
fn fresh_instance_id(s: &State) -> String {
    let mut rng = rand::rng();
    loop {
        let id = format!("i-0{:016x}", rng.random::<u64>());
        if !s.instances.iter().any(|i| i.id == id) {
            return id;
        }
    }
}

/// Creates the state file's directory and takes `<state file>.lock`, so two simulators never
/// write one file (the lock goes with the process, even on a crash).
fn lock_state_file(path: &Path) -> Result<File, SimulatorError> {
    let err = |message: String| crate::state::StateFileError {
        path: path.to_path_buf(),
        message,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        fs::create_dir_all(dir).map_err(|e| err(format!("its directory cannot be created: {e}")))?;
    }
    let mut lock_path = path.as_os_str().to_owned();
    lock_path.push(".lock");
    let file = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| err(format!("its lock file cannot be opened: {e}")))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(TryLockError::WouldBlock) => Err(err(
            "is in use by another simulator (its .lock file is held); stop that one first".into(),
        )
        .into()),
        Err(TryLockError::Error(e)) => Err(err(format!("its lock file cannot be locked: {e}")).into()),
    }
}

/// The rate limit state: the knob's value and the buckets that enforce it. Reads and writes
/// draw from separate buckets of that limit each, as AWS throttles its non-mutating and
/// mutating API actions separately (so a burst of writes does not starve the reads that
/// decide them, and the other way round).
#[derive(Default)]
struct Limiter {
    limit: Option<RateLimit>,
    reads: Option<TokenBucket>,
    writes: Option<TokenBucket>,
}

impl Limiter {
    fn set(&mut self, limit: Option<RateLimit>, now: Instant) {
        if self.limit == limit {
            return;
        }
        self.limit = limit;
        let limit = limit
            .filter(|l| !l.is_closed())
            .and_then(|l| Limit::new(l.rate, l.burst).ok());
        for bucket in [&mut self.reads, &mut self.writes] {
            match (limit, bucket.as_mut()) {
                (Some(l), Some(b)) => b.set_limit(l, now),
                (Some(l), None) => *bucket = Some(TokenBucket::new(l, now)),
                // closed (or, after normalization, impossible: invalid)
                (None, _) => *bucket = None,
            }
        }
    }

    /// `Err(time to the next token)`, `Err(None)` when closed.
    fn admit(&mut self, write: bool, now: Instant) -> Result<(), Option<Duration>> {
        let bucket = if write { &mut self.writes } else { &mut self.reads };
        match (&self.limit, bucket) {
            (None, _) => Ok(()),
            (Some(_), Some(b)) => b.try_acquire(now).map_err(Some),
            (Some(_), None) => Err(None),
        }
    }
}

#[async_trait]
impl Instances for Simulator {
    async fn lookup_instances(
        &self,
        nodes: &[NodeRef],
    ) -> Result<Vec<Result<InstanceInfo, ProviderError>>, ProviderError> {
        self.gate("describe_instances").await?;
        if nodes.len() > self.limits.max_instance_batch {
            return Err(ProviderError::InvalidArgument(format!(
                "{} nodes in one lookup; at most {} are allowed",
                nodes.len(),
                self.limits.max_instance_batch
            )));
        }
        Ok(ops::instances::lookup(&self.store.snapshot(), nodes))
    }
}

#[async_trait]
impl LoadBalancers for Simulator {
    async fn get_load_balancer(
        &self,
        cluster: &str,
        service: &ServiceSpec,
    ) -> Result<Option<LoadBalancerStatus>, ProviderError> {
        self.gate("get_load_balancer").await?;
        Ok(ops::load_balancers::get(
            &self.store.snapshot(),
            cluster,
            service,
            crate::state::now(),
        ))
    }

    /// Like AWS's Describe calls: one call reads up to [`READ_BATCH`] Services' load balancers.
    fn max_read_batch(&self) -> usize {
        READ_BATCH
    }

    fn checks_before_ensure(&self) -> bool {
        true
    }

    async fn read_load_balancers(
        &self,
        cluster: &str,
        reads: &[LoadBalancerRead],
    ) -> Result<Vec<Result<LoadBalancerObservation, ProviderError>>, ProviderError> {
        if reads.len() > READ_BATCH {
            return Err(ProviderError::InvalidArgument(format!(
                "{} load balancers asked in one read; at most {READ_BATCH}",
                reads.len()
            )));
        }
        self.gate("read_load_balancers").await?;
        let state = self.store.snapshot();
        let now = crate::state::now();
        Ok(reads
            .iter()
            .map(|read| ops::load_balancers::observe(&state, cluster, read, now))
            .collect())
    }

    async fn ensure_load_balancer(
        &self,
        cluster: &str,
        service: &ServiceSpec,
        nodes: &[LoadBalancerNode],
    ) -> Result<LoadBalancerStatus, ProviderError> {
        self.gate("ensure_load_balancer").await?;
        let delay = self
            .knobs
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .lb_provision_delay;
        let target = provider::default_load_balancer_name(&service.uid);
        let (cluster, service, nodes) = (cluster.to_string(), service.clone(), nodes.to_vec());
        self.write("ensure_load_balancer", &target, move |s| {
            ops::load_balancers::ensure(s, &cluster, &service, &nodes, delay, crate::state::now())
        })
        .await
    }

    async fn update_load_balancer(
        &self,
        cluster: &str,
        service: &ServiceSpec,
        nodes: &[LoadBalancerNode],
    ) -> Result<(), ProviderError> {
        self.gate("update_load_balancer").await?;
        let target = provider::default_load_balancer_name(&service.uid);
        let (cluster, service, nodes) = (cluster.to_string(), service.clone(), nodes.to_vec());
        self.write("update_load_balancer", &target, move |s| {
            ops::load_balancers::update(s, &cluster, &service, &nodes)
        })
        .await
    }

    async fn ensure_load_balancer_deleted(
        &self,
        cluster: &str,
        service: &ServiceSpec,
    ) -> Result<(), ProviderError> {
        self.gate("delete_load_balancer").await?;
        let target = provider::default_load_balancer_name(&service.uid);
        let (cluster, service) = (cluster.to_string(), service.clone());
        self.write("delete_load_balancer", &target, move |s| {
            ops::load_balancers::delete(s, &cluster, &service)
        })
        .await
    }
}

#[async_trait]
impl Routes for Simulator {
    async fn list_routes(&self, cluster: &str) -> Result<Vec<Route>, ProviderError> {
        self.gate("list_routes").await?;
        Ok(ops::routes::list(&self.store.snapshot(), cluster))
    }

    async fn create_route(&self, cluster: &str, name_hint: &str, route: &Route) -> Result<(), ProviderError> {
        self.gate("create_route").await?;
        let target = route.destination_cidr.clone();
        let (cluster, name_hint, route) = (cluster.to_string(), name_hint.to_string(), route.clone());
        self.write("create_route", &target, move |s| {
            ops::routes::create(s, &cluster, &name_hint, &route, crate::state::now())
        })
        .await
    }

    async fn delete_route(&self, cluster: &str, route: &Route) -> Result<(), ProviderError> {
        self.gate("delete_route").await?;
        let target = route.destination_cidr.clone();
        let (cluster, route) = (cluster.to_string(), route.clone());
        self.write("delete_route", &target, move |s| {
            ops::routes::delete(s, &cluster, &route)
        })
        .await
    }
}

impl Provider for Simulator {
    fn name(&self) -> &str {
        PROVIDER_NAME
    }

    fn limits(&self) -> ProviderLimits {
        self.limits
    }

    fn instances(&self) -> Option<&dyn Instances> {
        (!self.disabled.instances).then_some(self as &dyn Instances)
    }

    fn load_balancers(&self) -> Option<&dyn LoadBalancers> {
        (!self.disabled.load_balancers).then_some(self as &dyn LoadBalancers)
    }

    fn routes(&self) -> Option<&dyn Routes> {
        (!self.disabled.routes).then_some(self as &dyn Routes)
    }

    fn dry_run(&self) -> bool {
        true
    }
}
/// Now, on tokio's clock: the system's outside tests; a test with paused time drives the
/// simulated cloud's rate limit, latency and recorded admission times together with the
/// gateway's, exactly.
fn clock_now() -> Instant {
    tokio::time::Instant::now().into_std()
}
