//! Instance lookups: a short-lived cache, joining lookups already in flight, and merging
//! concurrent lookups of one caller into batched provider calls.
//!
//! A lookup that misses the cache either joins an identical lookup already in flight (from any
//! caller) or is added to its caller's pending batch. A batch goes to the provider when it is
//! full or when the batching window since its first lookup has passed, whichever is first; it
//! waits for its caller's turn at the rate limiter like any other call, so batching never lets a
//! caller jump the fair queue. A batch whose every waiter has gone away is dropped before it
//! spends a token.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use gateway_api::error::GatewayError;
use provider::{InstanceInfo, NodeRef, Provider};
use tokio::sync::watch;

use crate::{gate::ProviderGate, metrics::Metrics, scheduler::Class};

/// The answer for one node.
pub type LookupResult = Result<InstanceInfo, GatewayError>;

/// Batching and caching settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LookupConfig {
    /// Most nodes per provider call (further capped by the provider's own limit).
    pub batch_size: usize,
    /// How long a batch waits for more lookups after its first one.
    pub batch_window: Duration,
    /// How long a found instance is served from the cache; zero turns the cache off.
    pub cache_ttl: Duration,
}

impl Default for LookupConfig {
    fn default() -> Self {
        Self {
            batch_size: 100,
            batch_window: Duration::from_millis(5),
            cache_ttl: Duration::from_secs(10),
        }
    }
}

/// Cache and in-flight key of a node: its provider ID when known, else its name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum NodeKey {
    ProviderId(String),
    Name(String),
}

impl NodeKey {
    fn of(node: &NodeRef) -> Self {
        if node.provider_id.is_empty() {
            Self::Name(node.name.clone())
        } else {
            Self::ProviderId(node.provider_id.clone())
        }
    }
}

type Slot = Arc<watch::Sender<Option<LookupResult>>>;

#[derive(Default)]
struct Pending {
    nodes: Vec<(NodeKey, NodeRef)>,
    /// Bumped each time the batch is sent, so a stale window timer does nothing.
    generation: u64,
}

#[derive(Default)]
struct State {
    cache: HashMap<NodeKey, (Instant, InstanceInfo)>,
    in_flight: HashMap<NodeKey, Slot>,
    pending: HashMap<Arc<str>, Pending>,
}

/// Coalescing instance lookups over a provider.
pub struct InstanceLookups {
    provider: Arc<dyn Provider>,
    gate: Arc<ProviderGate>,
    metrics: Arc<Metrics>,
    config: LookupConfig,
    state: Mutex<State>,
}

impl InstanceLookups {
    /// Lookups over `provider`, which must implement instances.
    pub fn new(
        provider: Arc<dyn Provider>,
        gate: Arc<ProviderGate>,
        metrics: Arc<Metrics>,
        mut config: LookupConfig,
    ) -> Arc<Self> {
        config.batch_size = config
            .batch_size
            .clamp(1, provider.limits().max_instance_batch.max(1));
        Arc::new(Self {
            provider,
            gate,
            metrics,
            config,
            state: Mutex::new(State::default()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Looks `node` up for `caller`.
    pub async fn lookup(self: &Arc<Self>, caller: &str, node: NodeRef) -> LookupResult {
        let key = NodeKey::of(&node);
        let mut rx = {
            let mut state = self.lock();
            if let Some(info) = self.cached(&mut state, &key) {
                self.metrics.cache_hits.inc();
                return Ok(info);
            }
            self.metrics.cache_misses.inc();
            if let Some(slot) = state.in_flight.get(&key) {
                self.metrics.coalesced_saved.inc();
                slot.subscribe()
            } else {
                let (tx, rx) = watch::channel(None);
                state.in_flight.insert(key.clone(), Arc::new(tx));
                self.add_to_batch(&mut state, caller, key, node);
                rx
            }
        };
        match rx.wait_for(Option::is_some).await {
            Ok(answer) => answer.clone().unwrap_or_else(|| Err(aborted())),
            Err(_) => Err(aborted()),
        }
    }

    fn cached(&self, state: &mut State, key: &NodeKey) -> Option<InstanceInfo> {
        if self.config.cache_ttl.is_zero() {
            return None;
        }
        match state.cache.get(key) {
            Some((at, info)) if at.elapsed() < self.config.cache_ttl => Some(info.clone()),
            Some(_) => {
                state.cache.remove(key);
                None
            }
            None => None,
        }
    }

    fn add_to_batch(self: &Arc<Self>, state: &mut State, caller: &str, key: NodeKey, node: NodeRef) {
        let caller: Arc<str> = Arc::from(caller);
        let pending = state.pending.entry(caller.clone()).or_default();
        pending.nodes.push((key, node));
        if pending.nodes.len() >= self.config.batch_size {
            let batch = std::mem::take(&mut pending.nodes);
            pending.generation += 1;
            tokio::spawn(self.clone().run_batch(caller, batch));
        } else if pending.nodes.len() == 1 {
            let generation = pending.generation;
            let this = self.clone();
            tokio::spawn(async move {
                tokio::time::sleep(this.config.batch_window).await;
                this.flush_window(caller, generation);
            });
        }
    }

    /// Sends the caller's batch when its window closes, unless it already went out.
    fn flush_window(self: &Arc<Self>, caller: Arc<str>, generation: u64) {
        let batch = {
            let mut state = self.lock();
            let Some(pending) = state.pending.get_mut(&caller) else {
                return;
            };
            if pending.generation != generation || pending.nodes.is_empty() {
                return;
            }
            pending.generation += 1;
            std::mem::take(&mut pending.nodes)
        };
        tokio::spawn(self.clone().run_batch(caller, batch));
    }

    async fn run_batch(self: Arc<Self>, caller: Arc<str>, batch: Vec<(NodeKey, NodeRef)>) {
        let slots: Vec<Slot> = {
            let state = self.lock();
            batch
                .iter()
                .filter_map(|(key, _)| state.in_flight.get(key).cloned())
                .collect()
        };
        // Every node in the batch but the first rides along for free.
        self.metrics
            .coalesced_saved
            .inc_by(batch.len().saturating_sub(1) as u64);
        let nodes: Vec<NodeRef> = batch.iter().map(|(_, node)| node.clone()).collect();
        let everyone_left = futures::future::join_all(slots.iter().map(|slot| slot.closed()));
        let answers = tokio::select! {
            answers = self.call_provider(&caller, &nodes) => answers,
            _ = everyone_left => {
                let mut state = self.lock();
                for (key, _) in &batch {
                    state.in_flight.remove(key);
                }
                return;
            }
        };
        let now = Instant::now();
        let mut state = self.lock();
        for ((key, _), answer) in batch.into_iter().zip(answers) {
            if let Ok(info) = &answer
                && !self.config.cache_ttl.is_zero()
            {
                // Only under the key it was asked by: an answer for a provider ID says nothing
                // about which instance carries the node's name now (names are reused).
                state.cache.insert(key.clone(), (now, info.clone()));
            }
            if let Some(slot) = state.in_flight.remove(&key) {
                slot.send_replace(Some(answer));
            }
        }
        if state.cache.len() > 4 * self.config.batch_size.max(1024) {
            let ttl = self.config.cache_ttl;
            state.cache.retain(|_, (at, _)| at.elapsed() < ttl);
        }
    }

    /// One provider call for `nodes`; always one answer per node, in order.
    async fn call_provider(&self, caller: &str, nodes: &[NodeRef]) -> Vec<LookupResult> {
        let Some(instances) = self.provider.instances() else {
            return nodes
                .iter()
                .map(|_| Err(GatewayError::NotImplemented("instances".into())))
                .collect();
        };
        let result = self
            .gate
            .call(Class::Read, caller, "lookup_instances", || {
                instances.lookup_instances(nodes)
            })
            .await;
        match result {
            Ok(answers) if answers.len() == nodes.len() => answers
                .into_iter()
                .map(|a| a.map_err(crate::convert::provider_error))
                .collect(),
            Ok(answers) => {
                let err = batch_failure(GatewayError::Internal(format!(
                    "provider answered {} results for {} nodes",
                    answers.len(),
                    nodes.len()
                )));
                nodes.iter().map(|_| Err(err.clone())).collect()
            }
            Err(err) => {
                let err = batch_failure(err);
                nodes.iter().map(|_| Err(err.clone())).collect()
            }
        }
    }
}

/// The error every node of a batch gets when the provider's call failed as a whole. It must be
/// retryable and never `InstanceNotFound`: only a per-node answer may say that an instance is
/// gone (the lifecycle controller deletes Nodes on it), and a whole call failing says nothing
/// about any one node.
fn batch_failure(err: GatewayError) -> GatewayError {
    if err.is_retryable() {
        err
    } else {
        GatewayError::Unavailable(format!("the provider's batched instance lookup failed: {err}"))
    }
}

fn aborted() -> GatewayError {
    GatewayError::Unavailable("the instance lookup was aborted; retry".into())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use async_trait::async_trait;
    use provider::{InstanceMetadata, Instances, LoadBalancers, ProviderError, ProviderLimits, Routes};
    use token_bucket::Limit;

    use super::*;
    use crate::{adaptive::AdaptiveConfig, scheduler::Scheduler};

    /// A cloud whose instances are named; a test can swap the machine behind a name, or make the
    /// whole batched call fail.
    #[derive(Default)]
    struct StubCloud {
        /// name → provider ID of the instance carrying it now.
        names: Mutex<BTreeMap<String, String>>,
        /// When set, every batched call fails with it.
        fail_batch: Mutex<Option<ProviderError>>,
    }

    impl StubCloud {
        fn name_instance(&self, name: &str, provider_id: &str) {
            self.names.lock().unwrap().insert(name.into(), provider_id.into());
        }

        fn info(provider_id: &str) -> InstanceInfo {
            InstanceInfo {
                metadata: InstanceMetadata {
                    provider_id: provider_id.into(),
                    ..Default::default()
                },
                shutdown: false,
            }
        }
    }

    #[async_trait]
    impl Instances for StubCloud {
        async fn lookup_instances(
            &self,
            nodes: &[NodeRef],
        ) -> provider::Result<Vec<Result<InstanceInfo, ProviderError>>> {
            // Let lookups from several callers pile up on the in-flight call.
            tokio::time::sleep(Duration::from_millis(50)).await;
            if let Some(err) = self.fail_batch.lock().unwrap().clone() {
                return Err(err);
            }
            let names = self.names.lock().unwrap();
            Ok(nodes
                .iter()
                .map(|node| {
                    let live = |id: &String| names.values().any(|v| v == id);
                    match (&node.provider_id, names.get(&node.name)) {
                        (id, _) if !id.is_empty() && live(id) => Ok(Self::info(id)),
                        (id, _) if !id.is_empty() => Err(ProviderError::InstanceNotFound(id.clone())),
                        (_, Some(id)) => Ok(Self::info(id)),
                        (_, None) => Err(ProviderError::InstanceNotFound(node.name.clone())),
                    }
                })
                .collect())
        }
    }

    impl Provider for StubCloud {
        fn name(&self) -> &str {
            "stub"
        }
        fn limits(&self) -> ProviderLimits {
            ProviderLimits::default()
        }
        fn instances(&self) -> Option<&dyn Instances> {
            Some(self)
        }
        fn load_balancers(&self) -> Option<&dyn LoadBalancers> {
            None
        }
        fn routes(&self) -> Option<&dyn Routes> {
            None
        }
    }

    fn lookups(cloud: Arc<StubCloud>) -> Arc<InstanceLookups> {
        let metrics = Arc::new(Metrics::new());
        let limit = Limit::new(1000.0, 1000.0).unwrap();
        let scheduler = Scheduler::start(limit, limit, AdaptiveConfig::default(), metrics.clone());
        let gate = Arc::new(ProviderGate::new(scheduler, metrics.clone()));
        InstanceLookups::new(cloud, gate, metrics, LookupConfig::default())
    }

    #[tokio::test]
    async fn a_failed_batch_is_never_instance_not_found_for_its_nodes() {
        let cloud = Arc::new(StubCloud::default());
        cloud.name_instance("a", "stub://i-a");
        let lookups = lookups(cloud.clone());
        for failure in [
            ProviderError::InstanceNotFound("the whole call".into()),
            ProviderError::InvalidArgument("bad filter".into()),
            ProviderError::Internal("garbled answer".into()),
            ProviderError::Unavailable("cloud down".into()),
        ] {
            *cloud.fail_batch.lock().unwrap() = Some(failure.clone());
            // Two callers: the second joins the first one's call in flight.
            let (first, second) =
                tokio::join!(lookups.lookup("node-controller", NodeRef::by_name("a")), async {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    lookups.lookup("service-controller", NodeRef::by_name("a")).await
                },);
            for answer in [first, second] {
                let err = answer.expect_err("the batch failed");
                assert!(
                    err.is_retryable() && !matches!(err, GatewayError::InstanceNotFound(_)),
                    "{failure:?} became {err:?}"
                );
            }
        }
        // Per-node answers still say not-found.
        *cloud.fail_batch.lock().unwrap() = None;
        let gone = lookups.lookup("node-controller", NodeRef::by_name("gone")).await;
        assert!(matches!(gone, Err(GatewayError::InstanceNotFound(_))), "{gone:?}");
    }

    #[tokio::test]
    async fn a_reused_name_resolves_to_the_new_instance_within_the_cache_ttl() {
        let cloud = Arc::new(StubCloud::default());
        cloud.name_instance("a", "stub://i-1");
        let lookups = lookups(cloud.clone());
        let first = lookups
            .lookup("node-controller", NodeRef::new("a", "stub://i-1"))
            .await
            .unwrap();
        assert_eq!(first.metadata.provider_id, "stub://i-1");
        // i-1 is terminated; a new machine takes the name, well within the cache TTL.
        cloud.name_instance("a", "stub://i-2");
        let by_name = lookups
            .lookup("node-controller", NodeRef::by_name("a"))
            .await
            .unwrap();
        assert_eq!(by_name.metadata.provider_id, "stub://i-2");
    }
}
