//! Load-balancer reads merged across Services into batched provider calls.
//!
//! Every Service's sync reads its load balancer first (a get, or the check an ensure starts
//! with: is the load balancer already as asked?). One by one, 1000 Services after a restart cost
//! 1000 provider reads (AWS: 2000 calls). Here concurrent reads of one caller, one cluster and one
//! [`provider::LoadBalancers::read_batch_key`] (AWS: Classic vs ELBv2) wait together and go out as
//! one [`provider::LoadBalancers::read_load_balancers`] call of up to a batch's worth (AWS: 20
//! names, one DescribeLoadBalancers and one DescribeTags).
//!
//! The batching rules are the instance lookups' ([`crate::lookups`]): a pending batch waits for
//! its caller's turn at the read rate limiter like any other call (no jumping the fair queue) and
//! keeps taking reads until then. Idle, a read goes out at once; under load every token carries a
//! full batch. One rule more, because a restart's reads come in a burst the rate limit may not
//! slow down (a burst of 40 tokens would carry 40 single reads): a batch that is not full waits
//! while a call of its kind is in flight, and takes what arrived meanwhile; a full one never
//! waits. So the first read of a burst goes alone, and the rest in full batches. A waiting batch
//! whose every waiter has gone away gives its place up before it spends a token. Each read gets
//! its own answer: a read that fails alone fails alone; a call that fails as a whole gives every
//! read of it that error.
//!
//! An ensure of a Service the service controller says shows no sign of a load balancer yet
//! ([`gateway_api::NO_LOAD_BALANCER_YET_HEADER`]: a Service just created) skips the read: it
//! could only answer "absent", and would add a read call's latency (and the wait for the call in
//! flight) to every new Service's sync. The provider's ensure reads for itself, so a load
//! balancer made before a crash is still found and no second one is made.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use gateway_api::error::GatewayError;
use provider::{LoadBalancerObservation, LoadBalancerRead, Provider};
use tokio::sync::oneshot;

use crate::{gate::ProviderGate, metrics::Metrics, scheduler::Class};

/// The answer for one read.
pub type ReadResult = Result<LoadBalancerObservation, GatewayError>;

/// How often a batch waiting for its turn checks whether anyone still waits for it.
const ABANDON_CHECK: Duration = Duration::from_millis(50);

/// Batching settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LbReadConfig {
    /// Most reads per provider call (further capped by the provider's own limit); 1 turns
    /// batching off.
    pub batch_size: usize,
}

impl Default for LbReadConfig {
    fn default() -> Self {
        Self { batch_size: 20 }
    }
}

/// Reads that may share a provider call: one caller's (fair queue), one cluster's (the call
/// carries one cluster name), one batch key's.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct BatchKey {
    caller: Arc<str>,
    cluster: String,
    group: String,
}

type Pending = (LoadBalancerRead, oneshot::Sender<ReadResult>);

#[derive(Default)]
struct Waiting {
    reads: Vec<Pending>,
    batches: usize,
    /// Provider calls of this key in flight.
    in_flight: usize,
}

/// Whether a batch may go for its turn now: when full, or when no call of its kind is in flight
/// (else it waits for that call and takes what arrives meanwhile).
fn may_go(pending: usize, batch_size: usize, in_flight: usize) -> bool {
    pending >= batch_size || in_flight == 0
}

/// Whether an ensure starts with the batched read: when the provider can answer it
/// ([`provider::LoadBalancers::checks_before_ensure`]) and the Service may have a load balancer
/// (the client did not say it shows no sign of one).
pub fn check_before_ensure(provider_checks: bool, no_load_balancer_yet: bool) -> bool {
    provider_checks && !no_load_balancer_yet
}

/// Whether a request carries [`gateway_api::NO_LOAD_BALANCER_YET_HEADER`] set to `true`
/// (anything else, or nothing, is no hint).
pub fn no_load_balancer_yet(metadata: &tonic::metadata::MetadataMap) -> bool {
    metadata
        .get(gateway_api::NO_LOAD_BALANCER_YET_HEADER)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

/// Batched load-balancer reads over a provider.
pub struct LoadBalancerReads {
    provider: Arc<dyn Provider>,
    gate: Arc<ProviderGate>,
    metrics: Arc<Metrics>,
    batch_size: usize,
    pending: Mutex<HashMap<BatchKey, Waiting>>,
    /// Woken when a provider call ends (a waiting partial batch may go).
    call_ended: tokio::sync::Notify,
}

impl LoadBalancerReads {
    /// Reads over `provider`.
    pub fn new(
        provider: Arc<dyn Provider>,
        gate: Arc<ProviderGate>,
        metrics: Arc<Metrics>,
        config: LbReadConfig,
    ) -> Arc<Self> {
        let provider_max = provider
            .load_balancers()
            .map_or(1, provider::LoadBalancers::max_read_batch);
        Arc::new(Self {
            batch_size: config.batch_size.clamp(1, provider_max.max(1)),
            provider,
            gate,
            metrics,
            pending: Mutex::new(HashMap::new()),
            call_ended: tokio::sync::Notify::new(),
        })
    }

    /// Most reads per provider call.
    pub fn batch_size(&self) -> usize {
        self.batch_size
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<BatchKey, Waiting>> {
        self.pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Reads one Service's load balancer for `caller`, in a batch with concurrent reads.
    pub async fn read(self: &Arc<Self>, caller: &str, cluster: &str, read: LoadBalancerRead) -> ReadResult {
        let Some(lbs) = self.provider.load_balancers() else {
            return Err(GatewayError::NotImplemented(format!(
                "provider {} has no load balancers",
                self.provider.name()
            )));
        };
        let key = BatchKey {
            caller: Arc::from(caller),
            cluster: cluster.to_owned(),
            group: lbs.read_batch_key(cluster, &read.service),
        };
        let (tx, rx) = oneshot::channel();
        {
            let mut pending = self.lock();
            let waiting = pending.entry(key.clone()).or_default();
            waiting.reads.push((read, tx));
            let needed = waiting.reads.len().div_ceil(self.batch_size);
            let missing = needed.saturating_sub(waiting.batches);
            waiting.batches += missing;
            for _ in 0..missing {
                tokio::spawn(self.clone().run_batch(key.clone()));
            }
        }
        rx.await.unwrap_or_else(|_| {
            Err(GatewayError::Unavailable(
                "the load balancer read was aborted; retry".into(),
            ))
        })
    }

    /// One batch: waits for the caller's turn, takes up to a batch's worth of the key's pending
    /// reads, calls the provider and answers them.
    async fn run_batch(self: Arc<Self>, key: BatchKey) {
        let admitted = tokio::select! {
            admitted = async {
                self.worth_sending(&key).await;
                self.gate.admit(Class::Read, &key.caller).await
            } => admitted,
            () = self.not_needed(&key) => return,
        };
        let batch = self.take_batch(&key);
        if batch.is_empty() {
            return;
        }
        let _in_flight = InFlight::start(&self, &key);
        let (reads, senders): (Vec<LoadBalancerRead>, Vec<_>) = batch.into_iter().unzip();
        let answers = match admitted {
            Ok(()) => {
                #[allow(clippy::cast_precision_loss)] // a batch is far below 2^52 reads
                self.metrics.lb_read_batch_size.observe(reads.len() as f64);
                self.call_provider(&key.cluster, &reads).await
            }
            Err(err) => reads.iter().map(|_| Err(err.clone())).collect(),
        };
        for (tx, answer) in senders.into_iter().zip(answers) {
            // The caller may have gone away.
            let _ = tx.send(answer);
        }
    }

    /// Completes when the key's batch may go ([`may_go`]).
    async fn worth_sending(&self, key: &BatchKey) {
        loop {
            let ended = self.call_ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            {
                let pending = self.lock();
                let Some(w) = pending.get(key) else {
                    return;
                };
                if may_go(w.reads.len(), self.batch_size, w.in_flight) {
                    return;
                }
            }
            ended.await;
        }
    }

    /// Completes when the key's pending reads no longer need this waiting batch (their waiters
    /// went away): it then leaves the queue before spending a token.
    async fn not_needed(&self, key: &BatchKey) {
        loop {
            tokio::time::sleep(ABANDON_CHECK).await;
            let mut pending = self.lock();
            let Some(w) = pending.get_mut(key) else {
                return;
            };
            w.reads.retain(|(_, tx)| !tx.is_closed());
            if w.reads.len().div_ceil(self.batch_size) < w.batches {
                w.batches -= 1;
                if w.reads.is_empty() && w.batches == 0 && w.in_flight == 0 {
                    pending.remove(key);
                }
                return;
            }
        }
    }

    /// Up to a batch of the key's pending reads, oldest first, for a batch whose turn came.
    fn take_batch(&self, key: &BatchKey) -> Vec<Pending> {
        let mut pending = self.lock();
        let Some(w) = pending.get_mut(key) else {
            return Vec::new();
        };
        w.batches = w.batches.saturating_sub(1);
        w.reads.retain(|(_, tx)| !tx.is_closed());
        let take = w.reads.len().min(self.batch_size);
        let batch: Vec<Pending> = w.reads.drain(..take).collect();
        if w.reads.is_empty() && w.batches == 0 && w.in_flight == 0 {
            pending.remove(key);
        }
        batch
    }

    /// One provider call for `reads` (the caller's turn has come); always one answer per read,
    /// in order.
    async fn call_provider(&self, cluster: &str, reads: &[LoadBalancerRead]) -> Vec<ReadResult> {
        let Some(lbs) = self.provider.load_balancers() else {
            return reads
                .iter()
                .map(|_| Err(GatewayError::NotImplemented("load balancers".into())))
                .collect();
        };
        let result = self
            .gate
            .call_admitted(Class::Read, "read_load_balancers", || {
                lbs.read_load_balancers(cluster, reads)
            })
            .await;
        match result {
            Ok(answers) if answers.len() == reads.len() => {
                // A read throttled on its own (a provider reading one by one) slows the gateway
                // down as a throttled call does.
                if answers
                    .iter()
                    .any(|a| a.as_ref().is_err_and(provider::ProviderError::is_throttled))
                {
                    self.metrics.provider_throttled.inc();
                    self.gate.scheduler().on_throttled(Class::Read);
                }
                answers
                    .into_iter()
                    .map(|a| a.map_err(crate::convert::provider_error))
                    .collect()
            }
            Ok(answers) => {
                let err = GatewayError::Internal(format!(
                    "provider answered {} results for {} load balancer reads",
                    answers.len(),
                    reads.len()
                ));
                reads.iter().map(|_| Err(err.clone())).collect()
            }
            Err(err) => reads.iter().map(|_| Err(err.clone())).collect(),
        }
    }
}

/// A provider call of a key in flight, counted while it lives.
struct InFlight<'a> {
    reads: &'a LoadBalancerReads,
    key: &'a BatchKey,
}

impl<'a> InFlight<'a> {
    fn start(reads: &'a LoadBalancerReads, key: &'a BatchKey) -> Self {
        reads.lock().entry(key.clone()).or_default().in_flight += 1;
        Self { reads, key }
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        let mut pending = self.reads.lock();
        if let Some(w) = pending.get_mut(self.key) {
            w.in_flight = w.in_flight.saturating_sub(1);
            if w.reads.is_empty() && w.batches == 0 && w.in_flight == 0 {
                pending.remove(self.key);
            }
        }
        drop(pending);
        self.reads.call_ended.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    //! Paused time throughout: batches form exactly as the bucket's schedule says.

    use std::time::Instant;

    use async_trait::async_trait;
    use provider::{
        Instances, LoadBalancerIngress, LoadBalancerNode, LoadBalancerStatus, LoadBalancers, ProviderError,
        ProviderLimits, Routes, ServiceSpec,
    };
    use token_bucket::Limit;

    use super::*;
    use crate::{adaptive::AdaptiveConfig, scheduler::Scheduler};

    /// A cloud of load balancers named by UID: `c…` Classic, `n…` NLB (different batch keys),
    /// `gone…` missing, `bad…` failing alone. Records each batched call as (key, size).
    #[derive(Default)]
    struct StubCloud {
        calls: Mutex<Vec<(String, usize)>>,
    }

    fn status(uid: &str) -> LoadBalancerStatus {
        LoadBalancerStatus {
            ingress: vec![LoadBalancerIngress {
                ip: String::new(),
                hostname: format!("{uid}.elb"),
                ip_mode: String::new(),
            }],
            ..LoadBalancerStatus::default()
        }
    }

    #[async_trait]
    impl LoadBalancers for StubCloud {
        async fn get_load_balancer(
            &self,
            _: &str,
            _: &ServiceSpec,
        ) -> provider::Result<Option<LoadBalancerStatus>> {
            unreachable!("reads are batched")
        }
        async fn ensure_load_balancer(
            &self,
            _: &str,
            _: &ServiceSpec,
            _: &[LoadBalancerNode],
        ) -> provider::Result<LoadBalancerStatus> {
            unreachable!()
        }
        async fn update_load_balancer(
            &self,
            _: &str,
            _: &ServiceSpec,
            _: &[LoadBalancerNode],
        ) -> provider::Result<()> {
            unreachable!()
        }
        async fn ensure_load_balancer_deleted(&self, _: &str, _: &ServiceSpec) -> provider::Result<()> {
            unreachable!()
        }
        fn read_batch_key(&self, _: &str, service: &ServiceSpec) -> String {
            if service.uid.starts_with('n') {
                "nlb"
            } else {
                "classic"
            }
            .to_owned()
        }
        fn max_read_batch(&self) -> usize {
            20
        }
        async fn read_load_balancers(
            &self,
            _: &str,
            reads: &[LoadBalancerRead],
        ) -> provider::Result<Vec<provider::Result<LoadBalancerObservation>>> {
            let key = self.read_batch_key("", &reads[0].service);
            assert!(
                reads.iter().all(|r| self.read_batch_key("", &r.service) == key),
                "one key per batch"
            );
            self.calls.lock().unwrap().push((key, reads.len()));
            tokio::time::sleep(Duration::from_millis(50)).await;
            Ok(reads
                .iter()
                .map(|r| {
                    let uid = &r.service.uid;
                    if uid.starts_with("gone") {
                        Ok(LoadBalancerObservation::Absent)
                    } else if uid.starts_with("bad") {
                        Err(ProviderError::InvalidArgument(format!("{uid} is broken")))
                    } else if r.ensure_nodes.is_some() {
                        Ok(LoadBalancerObservation::Converged(status(uid)))
                    } else {
                        Ok(LoadBalancerObservation::Present(status(uid)))
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
            None
        }
        fn load_balancers(&self) -> Option<&dyn LoadBalancers> {
            Some(self)
        }
        fn routes(&self) -> Option<&dyn Routes> {
            None
        }
    }

    fn reads(cloud: Arc<StubCloud>, limit: Limit) -> Arc<LoadBalancerReads> {
        let metrics = Arc::new(Metrics::new());
        let scheduler = Scheduler::start(limit, limit, AdaptiveConfig::default(), metrics.clone());
        let gate = Arc::new(ProviderGate::new(scheduler, metrics.clone()));
        LoadBalancerReads::new(cloud, gate, metrics, LbReadConfig { batch_size: 100 })
    }

    fn get(uid: &str) -> LoadBalancerRead {
        LoadBalancerRead {
            service: ServiceSpec {
                uid: uid.into(),
                ..Default::default()
            },
            ensure_nodes: None,
        }
    }

    fn ensure(uid: &str) -> LoadBalancerRead {
        LoadBalancerRead {
            ensure_nodes: Some(Vec::new()),
            ..get(uid)
        }
    }

    fn sorted_calls(cloud: &StubCloud) -> Vec<(String, usize)> {
        let mut calls = cloud.calls.lock().unwrap().clone();
        calls.sort();
        calls
    }

    #[test]
    fn a_batch_goes_when_full_or_when_nothing_of_its_kind_is_in_flight() {
        // (pending reads, calls in flight, may go)
        let cases = [
            (1, 0, true),
            (19, 0, true),
            (1, 1, false),
            (19, 2, false),
            (20, 1, true),
            (45, 1, true),
        ];
        for (pending, in_flight, want) in cases {
            assert_eq!(
                may_go(pending, 20, in_flight),
                want,
                "{pending} pending, {in_flight} in flight"
            );
        }
    }

    #[test]
    fn an_ensure_reads_first_unless_the_provider_cannot_answer_or_the_service_shows_no_load_balancer() {
        // (provider checks, client says no load balancer yet, read first)
        let cases = [
            (true, false, true),
            (true, true, false),
            (false, false, false),
            (false, true, false),
        ];
        for (provider_checks, no_lb_yet, want) in cases {
            assert_eq!(
                check_before_ensure(provider_checks, no_lb_yet),
                want,
                "provider checks {provider_checks}, no load balancer yet {no_lb_yet}"
            );
        }
    }

    #[test]
    fn only_a_true_header_is_the_hint() {
        // (header value, hint)
        let cases = [
            (None, false),
            (Some("true"), true),
            (Some(" TRUE "), true),
            (Some("false"), false),
            (Some(""), false),
            (Some("yes"), false),
        ];
        for (value, want) in cases {
            let mut metadata = tonic::metadata::MetadataMap::new();
            if let Some(value) = value {
                metadata.insert(gateway_api::NO_LOAD_BALANCER_YET_HEADER, value.parse().unwrap());
            }
            assert_eq!(no_load_balancer_yet(&metadata), want, "{value:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_the_rate_limit_lets_through_goes_in_full_batches_after_the_first_read() {
        let cloud = Arc::new(StubCloud::default());
        // Tokens enough for every read alone: only the in-flight rule batches them.
        let r = reads(cloud.clone(), Limit::new(1000.0, 1000.0).unwrap());
        let first = {
            let r = r.clone();
            tokio::spawn(async move { r.read("service-controller", "c", get("c0")).await })
        };
        // The first read's call is in flight (50 ms) while 45 more arrive.
        tokio::time::sleep(Duration::from_millis(10)).await;
        let rest = futures::future::join_all(
            (1..46).map(|i| r.read("service-controller", "c", get(&format!("c{i}")))),
        );
        let (first, rest) = tokio::join!(first, rest);
        assert!(first.unwrap().is_ok() && rest.iter().all(Result::is_ok));
        let calls: Vec<usize> = cloud.calls.lock().unwrap().iter().map(|(_, n)| *n).collect();
        assert_eq!(
            calls,
            [1, 20, 20, 5],
            "the partial batch waited for the first call"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn under_load_n_reads_cost_ceil_n_over_20_calls_per_key() {
        let cloud = Arc::new(StubCloud::default());
        // One call every 100 ms, no burst beyond one: every read is asked before the first
        // batch's turn.
        let r = reads(cloud.clone(), Limit::new(10.0, 1.0).unwrap());
        assert_eq!(r.batch_size(), 20, "the provider's limit caps the configured 100");
        let uids: Vec<String> = (0..45)
            .map(|i| format!("c{i}"))
            .chain((0..30).map(|i| format!("n{i}")))
            .collect();
        let answers = futures::future::join_all(uids.iter().enumerate().map(|(i, uid)| {
            let read = if i % 2 == 0 { ensure(uid) } else { get(uid) };
            r.read("service-controller", "c", read)
        }))
        .await;
        for (i, (uid, answer)) in uids.iter().zip(answers).enumerate() {
            let want = if i % 2 == 0 {
                LoadBalancerObservation::Converged(status(uid))
            } else {
                LoadBalancerObservation::Present(status(uid))
            };
            assert_eq!(answer.unwrap(), want, "{uid}");
        }
        // ceil(45/20) Classic + ceil(30/20) NLB calls, each full but the last of its key.
        assert_eq!(
            sorted_calls(&cloud),
            [
                ("classic".to_owned(), 5),
                ("classic".to_owned(), 20),
                ("classic".to_owned(), 20),
                ("nlb".to_owned(), 10),
                ("nlb".to_owned(), 20),
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_read_that_fails_alone_gets_its_own_answer() {
        let cloud = Arc::new(StubCloud::default());
        let r = reads(cloud.clone(), Limit::new(10.0, 1.0).unwrap());
        let uids: Vec<String> = (0..18)
            .map(|i| format!("c{i}"))
            .chain(["gone1".to_owned(), "bad1".to_owned()])
            .collect();
        let answers =
            futures::future::join_all(uids.iter().map(|uid| r.read("service-controller", "c", get(uid))))
                .await;
        assert_eq!(sorted_calls(&cloud), [("classic".to_owned(), 20)]);
        for (uid, answer) in uids.iter().zip(answers) {
            match uid.as_str() {
                "gone1" => assert_eq!(answer.unwrap(), LoadBalancerObservation::Absent),
                "bad1" => assert!(
                    matches!(answer, Err(GatewayError::InvalidArgument(_))),
                    "{answer:?}"
                ),
                _ => assert_eq!(answer.unwrap(), LoadBalancerObservation::Present(status(uid))),
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn callers_and_clusters_never_share_a_call_and_an_idle_read_goes_out_alone() {
        let cloud = Arc::new(StubCloud::default());
        let r = reads(cloud.clone(), Limit::new(10.0, 10.0).unwrap());
        r.read("service-controller", "c", get("c1")).await.unwrap();
        r.read("service-controller", "c", get("c2")).await.unwrap();
        assert_eq!(cloud.calls.lock().unwrap().len(), 2, "idle: each at once");
        cloud.calls.lock().unwrap().clear();
        let (a, b, c) = tokio::join!(
            r.read("service-controller", "c", get("c1")),
            r.read("service-controller-2", "c", get("c2")),
            r.read("service-controller", "other", get("c3")),
        );
        assert!(a.is_ok() && b.is_ok() && c.is_ok());
        assert_eq!(sorted_calls(&cloud).len(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiting_batch_nobody_waits_for_spends_no_call() {
        let cloud = Arc::new(StubCloud::default());
        // One token, then one every 10 s: the second read would wait.
        let r = reads(cloud.clone(), Limit::new(0.1, 1.0).unwrap());
        r.read("service-controller", "c", get("c1")).await.unwrap();
        let gave_up = tokio::time::timeout(
            Duration::from_millis(100),
            r.read("service-controller", "c", get("c2")),
        )
        .await;
        assert!(gave_up.is_err(), "the caller went away");
        let deadline = Instant::now() + Duration::from_secs(5);
        while !r.lock().is_empty() {
            assert!(Instant::now() < deadline, "the abandoned batch still waits");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(cloud.calls.lock().unwrap().len(), 1);
    }
}
