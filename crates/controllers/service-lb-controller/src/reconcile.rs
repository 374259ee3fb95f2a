//! The sync of one Service (ensure, backends update, cleanup), its error policy, and the
//! backends update of every load balancer after a node-set change. The decisions are in
//! [`crate::plan`]; this module does the I/O around them, in upstream's order.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use controller_kit::{
    dry_run::DryRun,
    events::Events,
    gateway::GatewayError,
    gateway_provider::ProviderWatch,
    load_balancers::{BackendNode, CloudLoadBalancers, Ensured, Notice},
    names::controllers::SERVICE_LB,
    patch::{Patches, WriteError, Writer},
    shards::Shards,
    spans,
    workqueue::WorkQueue,
};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, ObjectReference, Service};
use kube::{
    Api, Resource, ResourceExt,
    runtime::{controller::Action, reflector::ObjectRef, reflector::Store},
};
use tracing::Instrument as _;

use crate::{
    metrics::{FormerProviderLabels, Metrics, ProviderLabels},
    plan::{self, Decision, Synced},
};

/// First delay after a failed sync; it doubles on each further failure (upstream's service
/// queue: 5 s to 300 s).
pub const BACKOFF_BASE: Duration = Duration::from_secs(5);
/// Longest delay between attempts.
pub const BACKOFF_MAX: Duration = Duration::from_secs(300);

/// What every sync of the service controller gets.
pub struct Context {
    /// Kubernetes client (Services are written in their namespace).
    pub client: kube::Client,
    /// The cloud's load balancers (the gateway; a fake in tests).
    pub cloud: Arc<dyn CloudLoadBalancers>,
    /// `--cluster-name`, passed to every load-balancer call.
    pub cluster_name: String,
    /// `--load-balancer-class`.
    pub class: Option<String>,
    /// The shards this replica may act on.
    pub shards: Shards,
    /// Best-effort events.
    pub events: Events,
    /// The controller's metrics.
    pub metrics: Metrics,
    /// The Node cache.
    pub nodes: Store<Node>,
    /// What was last brought to the cloud, by `namespace/name`.
    synced: Mutex<HashMap<String, Synced>>,
    /// One sync at a time per Service, whoever triggered it (its queue or a node-set change).
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// The last failed sync per Service, for the exponential requeue.
    failures: Mutex<HashMap<String, Failure>>,
    /// Services to sync again through the queue (a backends update failed).
    retries: tokio::sync::mpsc::UnboundedSender<ObjectRef<Service>>,
    /// Which provider the gateway serves now.
    provider: ProviderWatch,
    /// Services reported as held by a former provider, and which.
    reported: Mutex<HashMap<String, FormerProviderLabels>>,
    /// Services that want a load balancer from a provider that serves none, reported once each
    /// (and which provider), waiting for one that does ([`recheck_provider`]).
    not_served: Mutex<HashMap<String, NotServed>>,
    /// The work queue's metrics (upstream's `service` queue), when the controller runs one.
    queue: Option<WorkQueue>,
    /// Shadow mode: the Service writes are planned, not made.
    dry_run: DryRun,
    /// The notices the provider last answered per Service, each told once in a Warning.
    told: Mutex<HashMap<String, BTreeSet<Notice>>>,
}

/// A Service waiting for a provider that serves load balancers.
#[derive(Debug, Clone)]
struct NotServed {
    /// The provider it was reported at.
    provider: String,
    /// The Service, to sync it again once load balancers are served.
    service: ObjectRef<Service>,
}

/// A failed sync, retried at `retry_at`: until then the same sync of the same Service is not
/// tried again, whatever wakes the queue (our own finalizer write, a status update), as upstream
/// queues a Service only for a change that needs the cloud.
#[derive(Debug, Clone)]
struct Failure {
    count: u32,
    service: Service,
    decision: Decision,
    retry_at: Instant,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A Service's key: `namespace/name`, as the work queue counts it.
pub fn key_of(svc: &Service) -> String {
    controller_kit::workqueue::key_of(svc)
}

/// The shard key of a Service: its UID (stable for the Service's life, unique across
/// recreations of one name).
pub fn shard_key(svc: &Service) -> String {
    svc.metadata.uid.clone().unwrap_or_else(|| key_of(svc))
}

impl Context {
    /// A context over these clients and handles; `retries` receives the Services whose
    /// backends update failed, to sync them again through the queue.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        client: kube::Client,
        cloud: Arc<dyn CloudLoadBalancers>,
        cluster_name: String,
        class: Option<String>,
        shards: Shards,
        events: Events,
        metrics: Metrics,
        nodes: Store<Node>,
        retries: tokio::sync::mpsc::UnboundedSender<ObjectRef<Service>>,
    ) -> Self {
        Self {
            client,
            cloud,
            cluster_name,
            class,
            shards,
            events,
            metrics,
            nodes,
            synced: Mutex::default(),
            locks: Mutex::default(),
            failures: Mutex::default(),
            retries,
            provider: ProviderWatch::default(),
            reported: Mutex::default(),
            not_served: Mutex::default(),
            queue: None,
            dry_run: DryRun::off(),
            told: Mutex::default(),
        }
    }

    /// In dry-run, every write of a Service (finalizer, status) is planned, not made.
    #[must_use]
    pub fn with_dry_run(mut self, dry_run: DryRun) -> Self {
        self.dry_run = dry_run;
        self
    }

    /// Reports to `queue` when a worker takes a Service, and each retry.
    #[must_use]
    pub fn with_queue(mut self, queue: WorkQueue) -> Self {
        self.queue = Some(queue);
        self
    }

    /// Follows `provider` (the gateway client's): load balancers are recorded as held by the
    /// provider of the moment, and Services held by another one are reported, not synced.
    #[must_use]
    pub fn with_provider(mut self, provider: ProviderWatch) -> Self {
        self.provider = provider;
        self
    }

    fn services(&self, svc: &Service) -> Api<Service> {
        Api::namespaced(self.client.clone(), &svc.namespace().unwrap_or_default())
    }

    fn writer(&self, shard: u32) -> Writer {
        Writer::new(SERVICE_LB, self.shards.fence(shard).clone())
            .with_dry_run(self.dry_run.clone())
            .with_bookkeeping_annotations(&[crate::plan::ANNOTATION_PROVIDER])
    }

    fn lock_for(&self, key: &str) -> Arc<tokio::sync::Mutex<()>> {
        lock(&self.locks).entry(key.to_owned()).or_default().clone()
    }

    fn record(&self, key: &str, service: &Service, nodes: BTreeMap<String, String>) {
        let synced = Synced {
            service: service.clone(),
            nodes,
        };
        lock(&self.synced).insert(key.to_owned(), synced);
    }

    fn forget(&self, key: &str) {
        lock(&self.synced).remove(key);
    }

    /// Whether some Service waits for a provider that serves load balancers.
    pub fn waits_for_load_balancers(&self) -> bool {
        !lock(&self.not_served).is_empty()
    }

    /// Whether this replica brought the Service's load balancer to the cloud.
    pub fn is_synced(&self, key: &str) -> bool {
        lock(&self.synced).contains_key(key)
    }

    /// Forgets what was synced for the Services of `shard`: it was just taken over, and the
    /// replica that had it may have changed the cloud since. Each is ensured anew.
    pub fn forget_shard(&self, shard: u32) {
        lock(&self.synced).retain(|_, s| self.shards.shard_of(&shard_key(&s.service)) != shard);
    }

    /// The backends now: the stable node set of the cache.
    pub fn backends(&self) -> Vec<BackendNode> {
        let nodes = self.nodes.state();
        plan::backends(nodes.iter().map(|n| &**n))
    }

    /// Runs `call` only while this replica owns `shard`, abandoning it when the ownership
    /// ends (the gRPC call is cancelled; another replica may then take over).
    async fn fenced<T>(
        &self,
        shard: u32,
        call: impl Future<Output = Result<T, GatewayError>>,
    ) -> Result<Result<T, GatewayError>, Error> {
        let fence = self.shards.fence(shard);
        if !fence.may_act() {
            return Err(Error::NotOwner);
        }
        tokio::select! {
            result = call => Ok(result),
            () = fence.lost() => Err(Error::NotOwner),
        }
    }
}

/// Why a Service could not be synced; it is requeued ([`error_policy`]).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A cloud call failed.
    #[error("failed to {action}: {source}")]
    Cloud {
        /// What the call was for, in upstream's words.
        action: &'static str,
        /// The gateway's error.
        #[source]
        source: GatewayError,
    },
    /// A write to the Service failed.
    #[error("failed to {action}: {source}")]
    Write {
        /// What the write was for, in upstream's words.
        action: &'static str,
        /// The write error.
        #[source]
        source: WriteError,
    },
    /// The backends update found no load balancer: it is created again.
    #[error("the load balancer is gone; ensuring it again")]
    LoadBalancerGone,
    /// This replica no longer owns the Service's shard; its new owner syncs it.
    #[error("this replica no longer owns the Service's shard")]
    NotOwner,
}

impl Error {
    /// The delay the cloud asked for before the next attempt (a RETRY_AFTER answer); the
    /// Service is requeued after exactly that, not with the backoff.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Cloud {
                source: GatewayError::RetryAfter { after, .. },
                ..
            } => Some(*after),
            _ => None,
        }
    }

    /// The error's label in `service_lb_controller_reconcile_errors_total`.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::Cloud {
                source: GatewayError::InvalidArgument(_),
                ..
            } => "invalid_service",
            Self::Cloud {
                source: GatewayError::RetryAfter { .. },
                ..
            } => "retry_after",
            Self::Cloud {
                source: GatewayError::QuotaExceeded(_),
                ..
            } => "quota_exceeded",
            Self::Cloud { .. } => "cloud",
            Self::Write { .. } => "write",
            Self::LoadBalancerGone => "load_balancer_gone",
            Self::NotOwner => "not_owner",
        }
    }

    fn is_invalid_service(&self) -> bool {
        matches!(
            self,
            Self::Cloud {
                source: GatewayError::InvalidArgument(_),
                ..
            }
        )
    }
}

/// Who asked for a sync.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// The Service's queue: a change of the Service, a retry, a shard taken over.
    Queue,
    /// A node-set change: only the backends of load balancers this replica brought to the
    /// cloud are updated (the others are still being ensured, with their own backoff).
    NodeSync,
}

/// What a sync came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Synced, or nothing to do.
    Done,
    /// The same sync failed and its retry is due at this time.
    Waiting(Instant),
}

/// The work queue's reconcile of one Service.
///
/// # Errors
/// See [`Error`].
pub async fn reconcile(svc: Arc<Service>, ctx: Arc<Context>) -> Result<Action, Error> {
    let _work = ctx.queue.as_ref().map(|q| q.started_for(&*svc));
    match sync_service(&ctx, &svc, Trigger::Queue).await? {
        Outcome::Done => {
            lock(&ctx.failures).remove(&key_of(&svc));
            Ok(Action::await_change())
        }
        Outcome::Waiting(at) => Ok(Action::requeue(at.saturating_duration_since(Instant::now()))),
    }
}

/// Requeues a failed Service: after exactly the delay the cloud asked for (RETRY_AFTER);
/// a Service the cloud can never serve as it is, at the longest backoff (its next change
/// triggers a sync anyway); others, a used-up cloud quota among them, with exponential backoff
/// (5 s doubling, at most 300 s).
pub fn error_policy(svc: Arc<Service>, err: &Error, ctx: Arc<Context>) -> Action {
    if matches!(err, Error::NotOwner) {
        return Action::await_change();
    }
    ctx.metrics.reconcile.failed(err.metric_label());
    if let Some(queue) = &ctx.queue {
        queue.retried();
    }
    let key = key_of(&svc);
    let mut failures = lock(&ctx.failures);
    let count = failures.get(&key).map_or(0, |f| f.count).saturating_add(1);
    let delay = match (err.retry_after(), err) {
        (Some(after), _) => after,
        (None, Error::LoadBalancerGone) => Duration::ZERO,
        (None, err) if err.is_invalid_service() => BACKOFF_MAX,
        (None, _) => backoff(count),
    };
    let last = lock(&ctx.synced).get(&key).cloned();
    let decision = plan::decide(
        &svc,
        last.as_ref(),
        &plan::backend_identity(&ctx.backends()),
        ctx.class.as_deref(),
    );
    failures.insert(
        key.clone(),
        Failure {
            count,
            service: (*svc).clone(),
            decision,
            retry_at: Instant::now() + delay,
        },
    );
    tracing::warn!(service = %key, error = %err, retry_in = ?delay, "service sync failed");
    Action::requeue(delay)
}

/// The delay after `failures` consecutive failures: 5 s doubling, at most 300 s.
pub fn backoff(failures: u32) -> Duration {
    BACKOFF_BASE
        .saturating_mul(1u32 << failures.saturating_sub(1).min(10))
        .min(BACKOFF_MAX)
}

/// Syncs one Service if this replica owns its shard: one sync at a time per Service. A sync
/// that has something to do is the root span of its own trace (`sync service`: the Service,
/// its shard, what triggered it, the decision, the outcome); the gateway calls it makes are
/// its children.
///
/// # Errors
/// See [`Error`].
pub async fn sync_service(ctx: &Context, svc: &Service, trigger: Trigger) -> Result<Outcome, Error> {
    let key = key_of(svc);
    let shard = ctx.shards.shard_of(&shard_key(svc));
    let Some(_in_flight) = ctx.shards.begin(shard) else {
        return Ok(Outcome::Done); // another replica's shard
    };
    let service_lock = ctx.lock_for(&key);
    let _one_at_a_time = service_lock.lock().await;
    if let Some(former) = plan::former_provider(svc, ctx.provider.current().as_deref()) {
        held_by_former_provider(ctx, svc, shard, former).await?;
        return Ok(Outcome::Done);
    }
    if let Some(labels) = lock(&ctx.reported).remove(&key) {
        ctx.metrics.at_former_provider.remove(&labels);
    }
    let last = lock(&ctx.synced).get(&key).cloned();
    let backends = ctx.backends();
    let identity = plan::backend_identity(&backends);
    let decision = plan::decide(svc, last.as_ref(), &identity, ctx.class.as_deref());
    if decision == Decision::Nothing {
        lock(&ctx.not_served).remove(&key); // it no longer waits for a load balancer
    }
    // A node-set change only updates backends; ensures and cleanups are the queue's, with
    // their own backoff.
    let wanted = match trigger {
        Trigger::Queue => decision != Decision::Nothing,
        Trigger::NodeSync => decision == Decision::UpdateHosts,
    };
    if !wanted {
        return Ok(Outcome::Done);
    }
    if trigger == Trigger::Queue
        && let Some(at) = retry_pending(ctx, &key, svc, decision)
    {
        return Ok(Outcome::Waiting(at));
    }
    let _timer = ctx.metrics.reconcile.count_and_measure();
    let span = controller_kit::reconcile_span!(
        "sync service",
        SERVICE_LB,
        service = %key,
        shard,
        trigger = ?trigger,
        decision = ?decision,
    );
    let result = run_sync(ctx, svc, shard, decision, &backends)
        .instrument(span.clone())
        .await;
    spans::record_outcome(&span, &result, Error::metric_label);
    result.map(|()| Outcome::Done)
}

/// The sync `decision` of `svc`, and its Warning when an ensure or a cleanup failed.
async fn run_sync(
    ctx: &Context,
    svc: &Service,
    shard: u32,
    decision: Decision,
    backends: &[BackendNode],
) -> Result<(), Error> {
    let key = key_of(svc);
    // Who worked on what, and when: replicas never overlap on a Service (the e2e test reads it).
    tracing::info!(service = %key, shard, ?decision, "service sync started");
    let regarding = svc.object_ref(&());
    // Every decision that calls the cloud first asks which provider serves now: the backends
    // update too (a former vendor's load balancer was once "updated" at the new vendor).
    let holder = match decision {
        Decision::Nothing => Ok(None),
        _ => provider_now(ctx, svc, shard).await.map(Some),
    };
    if let Ok(Some(Holder::Serving { .. } | Holder::Former(_))) = &holder {
        lock(&ctx.not_served).remove(&key);
    }
    let result = match holder {
        Ok(None) => Ok(()),
        Ok(Some(Holder::Serving {
            provider,
            annotation_prefix,
        })) => match decision {
            Decision::Ensure => {
                let serving = Serving {
                    provider: provider.as_deref(),
                    annotation_prefix: &annotation_prefix,
                };
                ensure(ctx, svc, shard, backends, &regarding, serving).await
            }
            Decision::UpdateHosts => update_hosts(ctx, svc, shard, backends, &regarding).await,
            Decision::Cleanup => cleanup(ctx, svc, shard, &regarding).await,
            Decision::Nothing => Ok(()),
        },
        Ok(Some(Holder::Former(former))) => held_by_former_provider(ctx, svc, shard, former).await,
        // Nothing is written and nothing asked of a provider without load balancers; a Service
        // to clean up is left to the cloud's answer (its finalizer stays: its load balancer, if
        // any, was made by a provider that did not name itself).
        Ok(Some(Holder::NoLoadBalancers(provider))) if decision != Decision::Cleanup => {
            not_served(ctx, svc, &regarding, provider).await;
            Ok(())
        }
        Ok(Some(Holder::NoLoadBalancers(_))) => cleanup(ctx, svc, shard, &regarding).await,
        Err(err) => Err(err),
    };
    tracing::info!(service = %key, shard, ok = result.is_ok(), "service sync finished");
    // RETRY_AFTER is the cloud still at work (Octavia provisioning): the Service is requeued
    // after that delay, and no failure is reported for it.
    if let Err(err) = &result
        && matches!(decision, Decision::Ensure | Decision::Cleanup)
        && !matches!(err, Error::NotOwner)
        && err.retry_after().is_none()
    {
        let note = format!("Error syncing load balancer: {err}");
        ctx.events
            .warning(&regarding, "SyncLoadBalancerFailed", "SyncLoadBalancer", note)
            .await;
    }
    result
}

/// Where a Service's load balancer is to be synced, as the gateway answers now.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Holder {
    /// At the provider serving now.
    Serving {
        /// Its name, when it says.
        provider: Option<String>,
        /// The prefix of the Service annotations it sets.
        annotation_prefix: String,
    },
    /// At this former provider, which the Service records: reported, not synced here.
    Former(String),
    /// Nowhere: the provider serving now (named) serves no load balancers.
    NoLoadBalancers(String),
}

/// Before an ensure (which records the provider before its first cloud call), a backends
/// update, or a cleanup (which lets the record go): the provider the gateway serves now, asked of
/// it, and whether it holds the Service's load balancer. The last answer's provider may predate
/// a gateway swap under way (no gateway answering yet, or none asked since): an ensure would
/// record the former vendor and make the load balancer at the new one (then never updated, and
/// left there when the Service goes), a backends update would go to a vendor that does not hold
/// the load balancer, a cleanup would "delete" a former vendor's load balancer at the new one and
/// let the Service go with no report. (A swap between this answer and the next call,
/// milliseconds apart, is not covered.)
async fn provider_now(ctx: &Context, svc: &Service, shard: u32) -> Result<Holder, Error> {
    let asked = ctx
        .fenced(shard, ctx.cloud.serving_provider())
        .await?
        .map_err(|source| Error::Cloud {
            action: "ask the gateway which provider it serves",
            source,
        })?;
    if let Some(name) = &asked.name {
        ctx.provider.observe(name);
    }
    let provider = asked.name.or_else(|| ctx.provider.current());
    Ok(match plan::former_provider(svc, provider.as_deref()) {
        Some(former) => Holder::Former(former),
        None if !asked.load_balancers => {
            Holder::NoLoadBalancers(provider.unwrap_or_else(|| "(unnamed)".into()))
        }
        None => Holder::Serving {
            provider,
            annotation_prefix: asked.annotation_prefix,
        },
    })
}

/// A Service that wants a load balancer while the provider serves none: nothing is written to
/// it (no finalizer, no provider record: the provider makes nothing), and it is reported once per
/// provider (a Warning and a log line). It is synced again when a provider that serves load
/// balancers is back ([`recheck_provider`], or the swap's resync of every Service).
async fn not_served(ctx: &Context, svc: &Service, regarding: &ObjectReference, provider: String) {
    let key = key_of(svc);
    let waiting = NotServed {
        provider: provider.clone(),
        service: ObjectRef::from_obj(svc),
    };
    let before = lock(&ctx.not_served).insert(key.clone(), waiting);
    if before.is_some_and(|b| b.provider == provider) {
        return;
    }
    tracing::warn!(service = %key, provider, "the provider serves no load balancers; the service waits for one that does");
    let note = format!(
        "The gateway serves provider {provider}, which has no load balancers: none is made for this Service, and nothing is written to it, until a provider with load balancers serves."
    );
    ctx.events
        .warning(regarding, "LoadBalancersNotServed", "EnsureLoadBalancer", note)
        .await;
}

/// While some Service waits for a provider that serves load balancers, or is reported as held
/// by a former provider (which may come back): asks the gateway once which provider it serves.
/// An answer naming another provider than the last one resyncs every Service (the controller
/// follows the provider watch); when the provider serves load balancers, every Service that
/// waited for them is also sent back to the queue (a gateway of the same provider that gained
/// them is no swap). Returns how many were sent back.
///
/// One question however many Services wait, and none when none does: this controller makes no
/// call of its own for them, so without it a swap back would go unnoticed until some other
/// Service changed.
pub async fn recheck_provider(ctx: &Context) -> usize {
    if !ctx.waits_for_load_balancers() && lock(&ctx.reported).is_empty() {
        return 0;
    }
    let serving = match ctx.cloud.serving_provider().await {
        Ok(serving) => serving,
        Err(err) => {
            tracing::debug!(error = %err, "cannot ask the gateway which provider it serves");
            return 0;
        }
    };
    if let Some(name) = &serving.name {
        ctx.provider.observe(name);
    }
    if !serving.load_balancers {
        return 0;
    }
    // Taken, not kept: a Service deleted meanwhile is not waited for forever (the queue drops
    // it); one whose provider still serves none is reported again.
    let waiting: Vec<ObjectRef<Service>> = lock(&ctx.not_served).drain().map(|(_, w)| w.service).collect();
    if !waiting.is_empty() {
        tracing::info!(provider = ?serving.name, services = waiting.len(), "the provider serves load balancers; syncing the services that waited for one");
    }
    waiting
        .into_iter()
        .filter(|service| ctx.retries.send(service.clone()).is_ok())
        .count()
}

/// When the same sync of the same Service (no change that needs the cloud since) failed and
/// its retry is not due yet: the time it is due.
fn retry_pending(ctx: &Context, key: &str, svc: &Service, decision: Decision) -> Option<Instant> {
    let failures = lock(&ctx.failures);
    let failure = failures.get(key)?;
    let same = failure.decision == decision
        && failure.service.metadata.deletion_timestamp.is_some() == svc.metadata.deletion_timestamp.is_some()
        && !plan::needs_update(&failure.service, svc, ctx.class.as_deref());
    // A little early is due: the queue's own requeue must not find itself too soon.
    let due = failure
        .retry_at
        .checked_sub(Duration::from_millis(50))
        .unwrap_or(failure.retry_at);
    (same && Instant::now() < due).then_some(failure.retry_at)
}

/// A guarded write of the Service, planned by `plan` from the watched copy `svc` (and from a
/// fresh read after a conflict). Returns the Service as it now is: as written or, when there was
/// nothing to write, as the plan last saw it; `None` when it is gone.
///
/// After a conflict the plan last saw the fresh read, not `svc`: a sync that went on with the
/// stale copy once made a load balancer for a Service retyped to ClusterIP (or being deleted)
/// meanwhile, without a finalizer, which nothing ever cleaned up.
async fn write_service(
    writer: &Writer,
    api: &Api<Service>,
    svc: &Service,
    action: &'static str,
    mut plan: impl FnMut(&Service) -> Patches,
) -> Result<Option<Service>, Error> {
    let mut seen: Option<Service> = None;
    let result = writer
        .write_from(api, svc, |fresh| {
            seen = Some(fresh.clone());
            Ok::<_, std::convert::Infallible>(plan(fresh))
        })
        .await;
    match result {
        Ok(Some(written)) => Ok(Some(written)),
        Ok(None) => Ok(Some(seen.unwrap_or_else(|| svc.clone()))),
        Err(err) if err.is_not_found() => Ok(None),
        Err(WriteError::NotLeading) => Err(Error::NotOwner),
        Err(source) => Err(Error::Write { action, source }),
    }
}

/// Upstream's ensure: the event, the finalizer before any cloud call, EnsureLoadBalancer over
/// the backends, the event, then the status if it changed. Only at a provider that serves load
/// balancers: the finalizer and the provider record are written for a load balancer about to be
/// made, never for a call bound to fail (a Service recorded at a provider that never made
/// anything was then held for it after the next swap).
async fn ensure(
    ctx: &Context,
    svc: &Service,
    shard: u32,
    backends: &[BackendNode],
    regarding: &ObjectReference,
    serving: Serving<'_>,
) -> Result<(), Error> {
    let key = key_of(svc);
    let provider = serving.provider;
    ctx.events
        .normal(
            regarding,
            "EnsuringLoadBalancer",
            "EnsureLoadBalancer",
            "Ensuring load balancer".into(),
        )
        .await;
    let api = ctx.services(svc);
    let writer = ctx.writer(shard);
    let class = ctx.class.as_deref();
    // Judged on the copy the finalizer's write last planned from: a finalizer another replica
    // wrote meanwhile counts.
    let mut no_load_balancer_yet = plan::shows_no_load_balancer(svc);
    let with_finalizer = write_service(
        &writer,
        &api,
        svc,
        "add load balancer cleanup finalizer",
        |fresh| {
            no_load_balancer_yet = plan::shows_no_load_balancer(fresh);
            // Changed meanwhile so that it wants no load balancer: its next sync cleans up.
            if !plan::wants_load_balancer(fresh, class) || fresh.metadata.deletion_timestamp.is_some() {
                return Patches::default();
            }
            plan::add_finalizer(fresh, provider).unwrap_or_default()
        },
    )
    .await?;
    let Some(current) = with_finalizer else {
        return Ok(()); // deleted meanwhile
    };
    if !plan::wants_load_balancer(&current, class) || current.metadata.deletion_timestamp.is_some() {
        return Ok(()); // changed meanwhile (the write found it so): the sync of that change cleans up
    }
    if backends.is_empty() {
        ctx.events
            .warning(
                regarding,
                "UnAvailableLoadBalancer",
                "EnsureLoadBalancer",
                "There are no available nodes for LoadBalancer".into(),
            )
            .await;
    }
    let identity = plan::backend_identity(backends);
    let ensure = async {
        if no_load_balancer_yet {
            ctx.cloud
                .ensure_new_load_balancer(&ctx.cluster_name, &current, backends)
                .await
        } else {
            ctx.cloud
                .ensure_load_balancer(&ctx.cluster_name, &current, backends)
                .await
        }
    };
    let ensured = ctx.fenced(shard, ensure).await?;
    let Ensured {
        status,
        annotations,
        notices,
    } = match ensured {
        Ok(ensured) => ensured,
        Err(GatewayError::ImplementedElsewhere(why)) => {
            tracing::info!(service = %key, why, "the load balancer is implemented elsewhere; leaving it alone");
            ctx.record(&key, svc, identity);
            return Ok(());
        }
        Err(source) => {
            return Err(Error::Cloud {
                action: "ensure load balancer",
                source,
            });
        }
    };
    tell_notices(ctx, &key, regarding, notices).await;
    ctx.events
        .normal(
            regarding,
            "EnsuredLoadBalancer",
            "EnsureLoadBalancer",
            "Ensured load balancer".into(),
        )
        .await;
    write_service(&writer, &api, &current, "update load balancer status", |fresh| {
        Patches {
            status: plan::status_patch(fresh, &status),
            main: plan::provider_annotations(fresh, &annotations, serving.annotation_prefix)
                .map(|set| plan::annotations_patch(&set)),
        }
    })
    .await?;
    // Recorded with the annotations the provider set, so that their own write is no change
    // that needs the cloud.
    let mut synced = svc.clone();
    if let Some(set) = plan::provider_annotations(svc, &annotations, serving.annotation_prefix) {
        synced.metadata.annotations.get_or_insert_default().extend(set);
    }
    ctx.record(&key, &synced, identity);
    Ok(())
}

/// The provider serving a Service's ensure.
#[derive(Debug, Clone, Copy)]
struct Serving<'a> {
    /// Its name, when it says.
    provider: Option<&'a str>,
    /// The prefix of the Service annotations it sets.
    annotation_prefix: &'a str,
}

/// The provider's notices for a Service (a value read other than written, as its vendor's CCM
/// reads it), each told once in a Warning: again only once it was answered without it since.
async fn tell_notices(ctx: &Context, key: &str, regarding: &ObjectReference, notices: Vec<Notice>) {
    let answered: BTreeSet<Notice> = notices.into_iter().collect();
    let new: Vec<Notice> = {
        let mut told = lock(&ctx.told);
        let before = told.get(key);
        let new = answered
            .iter()
            .filter(|n| before.is_none_or(|b| !b.contains(*n)))
            .cloned()
            .collect();
        if answered.is_empty() {
            told.remove(key);
        } else {
            told.insert(key.to_owned(), answered);
        }
        new
    };
    for notice in new {
        tracing::warn!(service = %key, reason = notice.reason, "{}", notice.message);
        ctx.events
            .warning(regarding, &notice.reason, "EnsureLoadBalancer", notice.message)
            .await;
    }
}

/// Upstream's backends update after a node-set change: UpdateLoadBalancer, then the event. A
/// failure forgets what was synced, so the Service's next sync ensures it whole.
async fn update_hosts(
    ctx: &Context,
    svc: &Service,
    shard: u32,
    backends: &[BackendNode],
    regarding: &ObjectReference,
) -> Result<(), Error> {
    let key = key_of(svc);
    let started = Instant::now();
    ctx.metrics.loadbalancer_sync.inc();
    let updated = ctx
        .fenced(
            shard,
            ctx.cloud.update_load_balancer(&ctx.cluster_name, svc, backends),
        )
        .await;
    let outcome = match updated? {
        Ok(()) | Err(GatewayError::ImplementedElsewhere(_)) => {
            if backends.is_empty() {
                ctx.events
                    .warning(
                        regarding,
                        "UnAvailableLoadBalancer",
                        "UpdateLoadBalancer",
                        "There are no available nodes for LoadBalancer".into(),
                    )
                    .await;
            } else {
                ctx.events
                    .normal(
                        regarding,
                        "UpdatedLoadBalancer",
                        "UpdateLoadBalancer",
                        "Updated load balancer with new hosts".into(),
                    )
                    .await;
            }
            if let Some(last) = lock(&ctx.synced).get_mut(&key) {
                last.nodes = plan::backend_identity(backends);
            }
            Ok(())
        }
        // The cloud at work on it (Octavia applying the change): the same update again after
        // its delay, with no failure reported or counted.
        Err(source @ GatewayError::RetryAfter { .. }) => Err(Error::Cloud {
            action: "update load balancer hosts",
            source,
        }),
        Err(source) => {
            ctx.forget(&key);
            // Upstream counts a failure only while the load balancer still exists.
            let exists = ctx
                .fenced(shard, ctx.cloud.get_load_balancer(&ctx.cluster_name, svc))
                .await?;
            if matches!(exists, Ok(None)) {
                Err(Error::LoadBalancerGone)
            } else {
                ctx.metrics.nodesync_error.inc();
                let note = format!(
                    "Error updating load balancer with new hosts {} [node names limited, total number of nodes: {}], error: {source}",
                    plan::loggable_node_names(backends),
                    backends.len()
                );
                ctx.events
                    .warning(regarding, "UpdateLoadBalancerFailed", "UpdateLoadBalancer", note)
                    .await;
                Err(Error::Cloud {
                    action: "update load balancer hosts",
                    source,
                })
            }
        }
    };
    ctx.metrics
        .update_host_latency
        .observe(started.elapsed().as_secs_f64());
    outcome
}

/// Upstream's cleanup: if the load balancer exists, the event; its deletion; then the finalizer
/// and the status go, and the event.
///
/// Unlike upstream, the provider is asked to delete also when it reports no load balancer: what
/// was made for the Service may outlive it (a security group, a target group, the nodes' rules,
/// or a load balancer of the type the Service asked for before), and the provider cleans up from
/// what exists. Deleting nothing succeeds.
async fn cleanup(ctx: &Context, svc: &Service, shard: u32, regarding: &ObjectReference) -> Result<(), Error> {
    let key = key_of(svc);
    let exists = ctx
        .fenced(shard, ctx.cloud.get_load_balancer(&ctx.cluster_name, svc))
        .await?
        .map_err(|source| Error::Cloud {
            action: "check if load balancer exists before cleanup",
            source,
        })?;
    if exists.is_some() {
        ctx.events
            .normal(
                regarding,
                "DeletingLoadBalancer",
                "DeleteLoadBalancer",
                "Deleting load balancer".into(),
            )
            .await;
    }
    match ctx
        .fenced(
            shard,
            ctx.cloud.ensure_load_balancer_deleted(&ctx.cluster_name, svc),
        )
        .await?
    {
        Ok(()) | Err(GatewayError::ImplementedElsewhere(_)) => {}
        Err(source) => {
            return Err(Error::Cloud {
                action: "delete load balancer",
                source,
            });
        }
    }
    let api = ctx.services(svc);
    write_service(
        &ctx.writer(shard),
        &api,
        svc,
        "remove load balancer cleanup finalizer",
        plan::remove_finalizer_and_status,
    )
    .await?;
    ctx.forget(&key);
    lock(&ctx.locks).remove(&key);
    lock(&ctx.told).remove(&key);
    ctx.events
        .normal(
            regarding,
            "DeletedLoadBalancer",
            "DeleteLoadBalancer",
            "Deleted load balancer".into(),
        )
        .await;
    Ok(())
}

/// A Service whose load balancer lives at a provider the gateway no longer serves (a vendor
/// swap): reported once (a Warning and a metric), neither re-provisioned nor deleted at the
/// provider of the moment. When it is deleted, its finalizer goes (the Service is not held
/// forever) and the load balancer left behind is reported and counted.
async fn held_by_former_provider(
    ctx: &Context,
    svc: &Service,
    shard: u32,
    former: String,
) -> Result<(), Error> {
    let key = key_of(svc);
    let labels = FormerProviderLabels {
        namespace: svc.namespace().unwrap_or_default(),
        name: svc.name_any(),
        provider: former.clone(),
    };
    let now = ctx.provider.current().unwrap_or_default();
    let regarding = svc.object_ref(&());
    if plan::needs_cleanup(svc) {
        write_service(
            &ctx.writer(shard),
            &ctx.services(svc),
            svc,
            "remove load balancer cleanup finalizer",
            plan::remove_finalizer_and_status,
        )
        .await?;
        ctx.metrics.at_former_provider.remove(&labels);
        lock(&ctx.reported).remove(&key);
        ctx.forget(&key);
        ctx.metrics
            .orphaned
            .get_or_create(&ProviderLabels {
                provider: former.clone(),
            })
            .inc();
        let note = format!(
            "The load balancer was left at provider {former}: the gateway now serves {now}, which cannot delete it. Delete it at {former}."
        );
        ctx.events
            .warning(&regarding, "LoadBalancerOrphaned", "DeleteLoadBalancer", note)
            .await;
        return Ok(());
    }
    ctx.metrics.at_former_provider.get_or_create(&labels).set(1);
    let first = lock(&ctx.reported).insert(key.clone(), labels).is_none();
    if first {
        tracing::warn!(service = %key, former, now, "the load balancer lives at a provider the gateway no longer serves");
        let note = format!(
            "The load balancer lives at provider {former}, but the gateway now serves {now}: it is neither updated nor deleted here. Delete it at {former}, or remove the annotation {} to provision one at {now}.",
            plan::ANNOTATION_PROVIDER
        );
        ctx.events
            .warning(
                &regarding,
                "LoadBalancerAtFormerProvider",
                "SyncLoadBalancer",
                note,
            )
            .await;
    }
    Ok(())
}

/// After a node-set change: every load balancer this replica brought to the cloud whose
/// backends changed is updated once, `parallelism` at a time. A failed update sends its Service
/// back to the queue, which ensures it whole (upstream's retry). Returns how many failed.
pub async fn sync_nodes(ctx: &Context, services: Vec<Arc<Service>>, parallelism: usize) -> usize {
    let started = Instant::now();
    let failed = futures::stream::iter(services)
        .map(|svc| async move {
            match sync_service(ctx, &svc, Trigger::NodeSync).await {
                Ok(_) | Err(Error::NotOwner) => false,
                Err(err) if err.retry_after().is_some() => {
                    tracing::info!(service = %key_of(&svc), error = %err, "backends update under way in the cloud; asking again");
                    let _ = ctx.retries.send(ObjectRef::from_obj(&*svc));
                    false
                }
                Err(err) => {
                    tracing::warn!(service = %key_of(&svc), error = %err, "backends update failed; syncing the service again");
                    let _ = ctx.retries.send(ObjectRef::from_obj(&*svc));
                    true
                }
            }
        })
        .buffer_unordered(parallelism.max(1))
        .filter(|failed| std::future::ready(*failed))
        .count()
        .await;
    ctx.metrics
        .nodesync_latency
        .observe(started.elapsed().as_secs_f64());
    failed
}
