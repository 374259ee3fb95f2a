//! Instance lookups: a short-lived cache, joining lookups already in flight, and merging
//! concurrent lookups of one caller into batched provider calls.
//!
//! A lookup that misses the cache either joins an identical lookup already in flight (from any
//! caller) or joins its caller's pending lookups. Batching follows the rate limit: a pending
//! batch waits for its caller's turn at the rate limiter like any other call (so batching never
//! lets a caller jump the fair queue) and keeps taking lookups until that turn comes; then it
//! goes out with up to a batch's worth. Idle, a lookup goes out at once; under load every token
//! carries a full batch, so N concurrent lookups cost about N / batch size calls. A waiting
//! batch whose every waiter has gone away gives its place up before it spends a token.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use gateway_api::error::GatewayError;
use provider::{InstanceInfo, NodeRef, Provider};
use tokio::sync::watch;
use tracing::{Instrument as _, Span, field::Empty};

use crate::{gate::ProviderGate, metrics::Metrics, scheduler::Class};

/// The answer for one node.
pub type LookupResult = Result<InstanceInfo, GatewayError>;

/// How often a batch waiting for its turn checks whether anyone still waits for it.
const ABANDON_CHECK: Duration = Duration::from_millis(50);

/// Batching and caching settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LookupConfig {
    /// Most nodes per provider call (further capped by the provider's own limit); 1 turns
    /// batching off.
    pub batch_size: usize,
    /// How long a found instance is served from the cache; zero turns the cache off.
    pub cache_ttl: Duration,
    /// Whether a lookup joins an identical one already in flight.
    pub coalesce: bool,
}

impl Default for LookupConfig {
    fn default() -> Self {
        Self {
            batch_size: 100,
            cache_ttl: Duration::from_secs(10),
            coalesce: true,
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

/// How a registered lookup gets its answer.
enum Wait {
    /// From the cache, at once.
    Cached(InstanceInfo),
    /// From a provider call of its own (in a batch).
    Answer(watch::Receiver<Option<LookupResult>>),
    /// From an identical lookup already in flight.
    Joined(watch::Receiver<Option<LookupResult>>),
}

/// A lookup waiting for a batch: its key, the node, where its answer goes, and the span of the
/// request that asked (a batch links to the requests it carries).
type PendingLookup = (NodeKey, NodeRef, Slot, Span);

/// One caller's lookups waiting for a provider call, and the batches waiting for a turn at
/// the rate limiter to carry them.
#[derive(Default)]
struct Pending {
    nodes: Vec<PendingLookup>,
    waiting_batches: usize,
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
    /// The id of the next batch (in spans).
    next_batch: AtomicU64,
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
            next_batch: AtomicU64::new(1),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Looks `node` up for `caller`.
    pub async fn lookup(self: &Arc<Self>, caller: &str, node: NodeRef) -> LookupResult {
        let mut answers = self.lookup_many(caller, vec![node]).await;
        answers.pop().unwrap_or_else(|| Err(aborted()))
    }

    /// Looks `nodes` up for `caller`, one answer per node in order. They join the caller's
    /// pending lookups together, so one request's nodes share provider calls. Traced as an
    /// `instance lookups` span: cache hits and misses, lookups that joined one in flight, and
    /// the batch that carried them (the batches it started are its children).
    pub async fn lookup_many(self: &Arc<Self>, caller: &str, nodes: Vec<NodeRef>) -> Vec<LookupResult> {
        let span = tracing::info_span!(
            "instance lookups",
            caller,
            nodes = nodes.len(),
            cache.hits = Empty,
            cache.misses = Empty,
            joined_in_flight = Empty,
            batch.id = Empty,
            batch.size = Empty,
        );
        let waits: Vec<Wait> = span.in_scope(|| {
            let mut state = self.lock();
            let waits: Vec<Wait> = nodes
                .into_iter()
                .map(|node| self.register(&mut state, caller, node))
                .collect();
            self.ensure_batches(&mut state, caller);
            let hits = waits.iter().filter(|w| matches!(w, Wait::Cached(_))).count();
            let joined = waits.iter().filter(|w| matches!(w, Wait::Joined(_))).count();
            span.record("cache.hits", hits);
            span.record("cache.misses", waits.len() - hits);
            span.record("joined_in_flight", joined);
            waits
        });
        self.answers(waits).instrument(span).await
    }

    async fn answers(&self, waits: Vec<Wait>) -> Vec<LookupResult> {
        futures::future::join_all(waits.into_iter().map(|wait| async move {
            match wait {
                Wait::Answer(mut rx) | Wait::Joined(mut rx) => match rx.wait_for(Option::is_some).await {
                    Ok(answer) => answer.clone().unwrap_or_else(|| Err(aborted())),
                    Err(_) => Err(aborted()),
                },
                Wait::Cached(cached) => Ok(cached),
            }
        }))
        .await
    }

    /// The cached answer, or a receiver for the answer of an identical lookup in flight or of
    /// a new pending one.
    fn register(&self, state: &mut State, caller: &str, node: NodeRef) -> Wait {
        let key = NodeKey::of(&node);
        if let Some(info) = self.cached(state, &key) {
            self.metrics.cache_hits.inc();
            return Wait::Cached(info);
        }
        self.metrics.cache_misses.inc();
        if self.config.coalesce
            && let Some(slot) = state.in_flight.get(&key)
        {
            self.metrics.coalesced_saved.inc();
            return Wait::Joined(slot.subscribe());
        }
        let (tx, rx) = watch::channel(None);
        let slot = Arc::new(tx);
        if self.config.coalesce {
            state.in_flight.insert(key.clone(), slot.clone());
        }
        let caller: Arc<str> = Arc::from(caller);
        state
            .pending
            .entry(caller)
            .or_default()
            .nodes
            .push((key, node, slot, Span::current()));
        Wait::Answer(rx)
    }

    fn cached(&self, state: &mut State, key: &NodeKey) -> Option<InstanceInfo> {
        if self.config.cache_ttl.is_zero() {
            return None;
        }
        match state.cache.get(key) {
            Some((at, info)) if crate::clock::now().duration_since(*at) < self.config.cache_ttl => {
                Some(info.clone())
            }
            Some(_) => {
                state.cache.remove(key);
                None
            }
            None => None,
        }
    }

    /// Starts batches until the caller's waiting ones can carry every pending lookup.
    fn ensure_batches(self: &Arc<Self>, state: &mut State, caller: &str) {
        let Some((caller, pending)) = state.pending.get_key_value(caller) else {
            return;
        };
        let caller = caller.clone();
        let needed = pending.nodes.len().div_ceil(self.config.batch_size);
        let missing = needed.saturating_sub(pending.waiting_batches);
        if let Some(pending) = state.pending.get_mut(&caller) {
            pending.waiting_batches += missing;
        }
        for _ in 0..missing {
            // A child of the request that needed it; it links to the other requests it carries.
            let id = self.next_batch.fetch_add(1, Ordering::Relaxed);
            let span = tracing::info_span!(
                "lookup batch",
                caller = &*caller,
                batch.id = id,
                batch.size = Empty
            );
            let started_by = Span::current().id();
            tokio::spawn(
                self.clone()
                    .run_batch(caller.clone(), Membership { id, started_by })
                    .instrument(span),
            );
        }
    }

    /// One batch: waits for the caller's turn, takes up to a batch's worth of the caller's
    /// pending lookups, calls the provider and answers them.
    async fn run_batch(self: Arc<Self>, caller: Arc<str>, membership: Membership) {
        let admitted = match self.provider.instances() {
            None => Err(GatewayError::NotImplemented("instances".into())),
            Some(_) => tokio::select! {
                admitted = self.gate.admit(Class::Read, &caller) => admitted,
                () = self.not_needed(&caller) => return,
            },
        };
        let batch = self.take_batch(&caller);
        if batch.is_empty() {
            return;
        }
        membership.record(&batch);
        let answers = match admitted {
            Ok(()) => {
                #[allow(clippy::cast_precision_loss)] // a batch is far below 2^52 nodes
                self.metrics.batch_size.observe(batch.len() as f64);
                self.call_provider(&batch).await
            }
            Err(err) => batch.iter().map(|_| Err(err.clone())).collect(),
        };
        // Every node in the batch but the first rides along for free.
        self.metrics
            .coalesced_saved
            .inc_by(batch.len().saturating_sub(1) as u64);
        let now = crate::clock::now();
        let mut state = self.lock();
        for ((key, _, slot, _), answer) in batch.into_iter().zip(answers) {
            if let Ok(info) = &answer
                && !self.config.cache_ttl.is_zero()
            {
                // Only under the key it was asked by: an answer for a provider ID says nothing
                // about which instance carries the node's name now (names are reused).
                state.cache.insert(key.clone(), (now, info.clone()));
            }
            forget_in_flight(&mut state.in_flight, &key, &slot);
            slot.send_replace(Some(answer));
        }
        if state.cache.len() > 4 * self.config.batch_size.max(1024) {
            let ttl = self.config.cache_ttl;
            state.cache.retain(|_, (at, _)| now.duration_since(*at) < ttl);
        }
    }

    /// Completes when the caller's pending lookups no longer need this waiting batch (their
    /// waiters went away): it then leaves the queue before spending a token.
    async fn not_needed(&self, caller: &Arc<str>) {
        loop {
            tokio::time::sleep(ABANDON_CHECK).await;
            let mut state = self.lock();
            let State {
                pending, in_flight, ..
            } = &mut *state;
            let Some(p) = pending.get_mut(caller) else {
                return;
            };
            drop_abandoned(&mut p.nodes, in_flight);
            if p.nodes.len().div_ceil(self.config.batch_size) < p.waiting_batches {
                p.waiting_batches -= 1;
                if p.nodes.is_empty() && p.waiting_batches == 0 {
                    pending.remove(caller);
                }
                return;
            }
        }
    }

    /// Up to a batch of the caller's pending lookups, oldest first, for a batch whose turn came.
    fn take_batch(&self, caller: &Arc<str>) -> Vec<PendingLookup> {
        let mut state = self.lock();
        let State {
            pending, in_flight, ..
        } = &mut *state;
        let Some(p) = pending.get_mut(caller) else {
            return Vec::new();
        };
        p.waiting_batches = p.waiting_batches.saturating_sub(1);
        drop_abandoned(&mut p.nodes, in_flight);
        let take = p.nodes.len().min(self.config.batch_size);
        let batch: Vec<_> = p.nodes.drain(..take).collect();
        if p.nodes.is_empty() && p.waiting_batches == 0 {
            pending.remove(caller);
        }
        batch
    }

    /// One provider call for `batch` (the caller's turn has come); always one answer per
    /// node, in order.
    async fn call_provider(&self, batch: &[PendingLookup]) -> Vec<LookupResult> {
        let Some(instances) = self.provider.instances() else {
            return batch
                .iter()
                .map(|_| Err(GatewayError::NotImplemented("instances".into())))
                .collect();
        };
        let nodes: Vec<NodeRef> = batch.iter().map(|(_, node, _, _)| node.clone()).collect();
        let result = self
            .gate
            .call_admitted(Class::Read, "lookup_instances", || {
                instances.lookup_instances(&nodes)
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

/// Which batch a batch is, and the request (its span) that started it.
struct Membership {
    id: u64,
    started_by: Option<tracing::Id>,
}

impl Membership {
    /// Tells the batch's span (the current one) its size and links it to every other request
    /// it carries; tells each request's span which batch carried it.
    fn record(&self, batch: &[PendingLookup]) {
        let span = Span::current();
        span.record("batch.size", batch.len());
        let mut seen = std::collections::HashSet::new();
        for (_, _, _, request) in batch {
            let Some(request_id) = request.id() else {
                continue; // not traced
            };
            if !seen.insert(request_id.into_u64()) {
                continue;
            }
            request.record("batch.id", self.id);
            request.record("batch.size", batch.len());
            if self.started_by.as_ref().map(tracing::Id::into_u64) != Some(request_id.into_u64()) {
                telemetry::propagation::link(&span, request);
            }
        }
    }
}

/// Drops pending lookups nobody waits for any more (their callers went away), and their
/// in-flight entries, so no later lookup joins a slot that will never be answered.
fn drop_abandoned(nodes: &mut Vec<PendingLookup>, in_flight: &mut HashMap<NodeKey, Slot>) {
    nodes.retain(|(key, _, slot, _)| {
        let wanted = slot.receiver_count() > 0;
        if !wanted {
            forget_in_flight(in_flight, key, slot);
        }
        wanted
    });
}

/// Removes `key`'s in-flight entry if it is `slot` (not a newer lookup of the same key).
fn forget_in_flight(in_flight: &mut HashMap<NodeKey, Slot>, key: &NodeKey, slot: &Slot) {
    if in_flight.get(key).is_some_and(|s| Arc::ptr_eq(s, slot)) {
        in_flight.remove(key);
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
    //! Paused time throughout: batches form exactly as the bucket's schedule says.

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
        /// The size of every batched call so far.
        calls: Mutex<Vec<usize>>,
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
            self.calls.lock().unwrap().push(nodes.len());
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
        limited_lookups(cloud, Limit::new(1000.0, 1000.0).unwrap())
    }

    fn limited_lookups(cloud: Arc<StubCloud>, limit: Limit) -> Arc<InstanceLookups> {
        let metrics = Arc::new(Metrics::new());
        let scheduler = Scheduler::start(limit, limit, AdaptiveConfig::default(), metrics.clone());
        let gate = Arc::new(ProviderGate::new(scheduler, metrics.clone()));
        InstanceLookups::new(cloud, gate, metrics, LookupConfig::default())
    }

    #[tokio::test(start_paused = true)]
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
            let calls_before = cloud.calls.lock().unwrap().len();
            // Two callers: the second joins the first one's call in flight.
            let (first, second) =
                tokio::join!(lookups.lookup("node-controller", NodeRef::by_name("a")), async {
                    let deadline = Instant::now() + Duration::from_secs(5);
                    while !lookups.lock().in_flight.contains_key(&NodeKey::Name("a".into())) {
                        assert!(Instant::now() < deadline, "the first lookup never went in flight");
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                    lookups.lookup("service-controller", NodeRef::by_name("a")).await
                },);
            assert_eq!(
                cloud.calls.lock().unwrap().len(),
                calls_before + 1,
                "the second lookup joined the first one's call"
            );
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

    #[tokio::test(start_paused = true)]
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

    #[tokio::test(start_paused = true)]
    async fn under_load_every_token_carries_a_full_batch() {
        let cloud = Arc::new(StubCloud::default());
        for i in 0..250 {
            cloud.name_instance(&format!("n{i}"), &format!("stub://i-{i}"));
        }
        // One call every 100 ms, no burst beyond one.
        let lookups = limited_lookups(cloud.clone(), Limit::new(10.0, 1.0).unwrap());
        let answers = futures::future::join_all(
            (0..250).map(|i| lookups.lookup("node-controller", NodeRef::by_name(format!("n{i}")))),
        )
        .await;
        assert!(answers.iter().all(Result::is_ok));
        // All 250 asked before the batch got its turn (join_all polls each once first), so
        // every token carried a full batch: ceil(250 / 100) calls, every node asked once.
        // Exact: with the clock paused, no batch is sealed early by a slow machine.
        assert_eq!(*cloud.calls.lock().unwrap(), [100, 100, 50]);
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_lookup_goes_out_at_once_alone() {
        let cloud = Arc::new(StubCloud::default());
        cloud.name_instance("a", "stub://i-a");
        cloud.name_instance("b", "stub://i-b");
        let lookups = limited_lookups(cloud.clone(), Limit::new(10.0, 10.0).unwrap());
        lookups
            .lookup("node-controller", NodeRef::by_name("a"))
            .await
            .unwrap();
        lookups
            .lookup("node-controller", NodeRef::by_name("b"))
            .await
            .unwrap();
        assert_eq!(*cloud.calls.lock().unwrap(), [1, 1]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiting_batch_nobody_waits_for_spends_no_call() {
        let cloud = Arc::new(StubCloud::default());
        cloud.name_instance("a", "stub://i-a");
        // One token, then one every 10 s: the second lookup would wait.
        let lookups = limited_lookups(cloud.clone(), Limit::new(0.1, 1.0).unwrap());
        lookups
            .lookup("node-controller", NodeRef::by_name("a"))
            .await
            .unwrap();
        let gave_up = tokio::time::timeout(
            Duration::from_millis(100),
            lookups.lookup("node-controller", NodeRef::by_name("b")),
        )
        .await;
        assert!(gave_up.is_err(), "the caller went away");
        // The batch notices and leaves the queue; nothing stays pending.
        let deadline = Instant::now() + Duration::from_secs(5);
        while lookups.lock().pending.contains_key("node-controller") {
            assert!(Instant::now() < deadline, "the abandoned batch still waits");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(lookups.lock().in_flight.is_empty());
        assert_eq!(*cloud.calls.lock().unwrap(), [1]);
    }
}
