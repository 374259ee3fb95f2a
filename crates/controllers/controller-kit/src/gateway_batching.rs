//! Merges a controller's concurrent one-node lookups into `BatchLookupInstances` calls, and
//! lets each call look ahead at the nodes about to be looked up.
//!
//! Why look ahead: the reconciles that wait for a call are at most `--concurrent-node-syncs`,
//! and they free their slots while the next call is already out, so calls alternate between
//! a few nodes and a full set. A call that also asks for the nodes still waiting for a worker
//! (the tainted ones the watch has delivered) answers them all: 1000 joining nodes cost
//! ceil(1000 / the gateway's batch size) provider calls instead of about twice that.

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::Duration,
};

use tokio::time::Instant;
use tracing::{Instrument as _, Span};

use crate::{
    gateway::{BATCH_CHUNK, CloudInstances, GatewayError, Instance, NodeRef},
    gateway_provider::ProviderWatch,
};

/// How long the node controller keeps an answer to a looked-ahead node for that node's
/// reconcile: no older than what the gateway's instance cache serves by default. Past it, the
/// reconcile asks again.
pub const LOOK_AHEAD_ANSWER_TTL: Duration = Duration::from_secs(10);

/// The nodes that will soon be looked up one by one (for the node controller: the nodes that
/// carry the uninitialized taint), as their reconciles will name them.
pub type PendingNodes = Arc<dyn Fn() -> Vec<NodeRef> + Send + Sync>;

/// Merges concurrent one-node lookups: while one call is out, the lookups that arrive wait
/// together and go out in the next call. Idle, a lookup goes out at once; busy, a call carries
/// every node that queued meanwhile (up to [`BATCH_CHUNK`]). With [`Self::looking_ahead`], a
/// call fills up with pending nodes, whose answers are kept for their reconciles. Batched
/// lookups pass straight through.
pub struct BatchingLookups {
    inner: Arc<dyn CloudInstances>,
    queue: Arc<Mutex<LookupQueue>>,
    look_ahead: Option<LookAhead>,
    provider: Option<ProviderWatch>,
}

/// What a call looks ahead at, how far, and how long the answers are kept.
#[derive(Clone)]
struct LookAhead {
    pending: PendingNodes,
    per_call: usize,
    keep_for: Duration,
}

type Reply = tokio::sync::oneshot::Sender<Result<Instance, GatewayError>>;

/// A lookup waiting to be sent: the node, where its answer goes, and the span of the reconcile
/// that asked (the batched call is its child, or links to it).
type Waiting = (NodeRef, Reply, Span);

#[derive(Default)]
struct LookupQueue {
    waiting: Vec<Waiting>,
    sending: bool,
    /// The nodes of the call that is out, with the replies waiting for each: a looked-ahead
    /// node has none until its reconcile asks (and joins the call instead of queueing).
    in_flight: HashMap<NodeRef, Vec<Reply>>,
    /// The latest answer for each node of a call. A call looks ahead at a node here again
    /// only once its answer has expired.
    answered: HashMap<NodeRef, Kept>,
}

/// An answer kept for a node's reconcile.
struct Kept {
    at: Instant,
    /// The instance, used once; `None` once used, or when it was not found or failed, or a
    /// lookup of the node's own had it (its next lookup asks again).
    instance: Option<Instance>,
    /// The provider the gateway served when it answered.
    provider: Option<String>,
}

/// Where a lookup's answer comes from.
enum Route {
    Answered(Instance),
    Wait { start_sender: bool },
}

impl BatchingLookups {
    /// Batches over `inner`.
    pub fn new(inner: Arc<dyn CloudInstances>) -> Self {
        Self {
            inner,
            queue: Arc::default(),
            look_ahead: None,
            provider: None,
        }
    }

    /// Uses a kept answer only while the gateway serves the provider that gave it: after a
    /// swap to another vendor, the reconcile asks the new one.
    pub fn answered_by(mut self, provider: ProviderWatch) -> Self {
        self.provider = Some(provider);
        self
    }

    /// Fills each call up to `per_call` nodes with `pending` nodes nobody asked for yet (0
    /// turns it off). Found instances are kept for their reconciles for `keep_for`; a node
    /// the cloud does not know, or whose answer failed, is asked again by its own reconcile.
    pub fn looking_ahead(mut self, pending: PendingNodes, per_call: usize, keep_for: Duration) -> Self {
        self.look_ahead = (per_call > 0).then(|| LookAhead {
            pending,
            per_call: per_call.min(BATCH_CHUNK),
            keep_for,
        });
        self
    }

    fn keep_for(&self) -> Duration {
        self.look_ahead
            .as_ref()
            .map_or(Duration::ZERO, |ahead| ahead.keep_for)
    }

    /// Sends the queue's lookups, a call at a time, until it is empty. Each call is a `batched
    /// lookup` span, the child of its first lookup's reconcile, linked to the others'.
    async fn send_queued(
        inner: Arc<dyn CloudInstances>,
        queue: Arc<Mutex<LookupQueue>>,
        look_ahead: Option<LookAhead>,
        provider: Option<ProviderWatch>,
    ) {
        loop {
            // Read before taking the lock: the lookups of every worker wait on it.
            let pending = look_ahead.as_ref().map(|ahead| (ahead.pending)());
            let Some((nodes, spans)) = next_call(&mut lock(&queue), look_ahead.as_ref(), pending) else {
                return;
            };
            let span = tracing::info_span!(parent: &spans[0], "batched lookup", nodes = nodes.len());
            for asked_by in &spans[1..] {
                telemetry::propagation::link(&span, asked_by);
            }
            let answers = match inner.lookup_instances(&nodes).instrument(span).await {
                Ok(answers) if answers.len() == nodes.len() => answers,
                Ok(answers) => {
                    let err = GatewayError::Internal(format!(
                        "the gateway answered {} results for {} nodes",
                        answers.len(),
                        nodes.len()
                    ));
                    vec![Err(err); nodes.len()]
                }
                Err(err) => vec![Err(err); nodes.len()],
            };
            let answered_by = provider.as_ref().and_then(ProviderWatch::current);
            deliver(&mut lock(&queue), nodes, answers, answered_by);
        }
    }
}

fn lock(queue: &Mutex<LookupQueue>) -> MutexGuard<'_, LookupQueue> {
    queue.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The next call's nodes (the waiting lookups first, then looked-ahead ones among `pending`)
/// and the spans of the reconciles in it; `None`, and the sender stops, when nobody waits.
fn next_call(
    queue: &mut LookupQueue,
    look_ahead: Option<&LookAhead>,
    pending: Option<Vec<NodeRef>>,
) -> Option<(Vec<NodeRef>, Vec<Span>)> {
    queue.waiting.retain(|(_, reply, _)| !reply.is_closed());
    if queue.waiting.is_empty() {
        queue.sending = false;
        return None;
    }
    let keep_for = look_ahead.map_or(Duration::ZERO, |ahead| ahead.keep_for);
    queue.answered.retain(|_, kept| kept.at.elapsed() <= keep_for);
    let take = queue.waiting.len().min(BATCH_CHUNK);
    let mut nodes = Vec::with_capacity(take);
    let mut spans = Vec::with_capacity(take);
    for (node, reply, span) in queue.waiting.drain(..take) {
        let replies = queue.in_flight.entry(node.clone()).or_default();
        if replies.is_empty() {
            nodes.push(node);
        }
        replies.push(reply);
        spans.push(span);
    }
    if let (Some(LookAhead { per_call, .. }), Some(pending)) = (look_ahead, pending) {
        let room = per_call.saturating_sub(nodes.len());
        let still_waiting: HashSet<&NodeRef> = queue.waiting.iter().map(|(node, _, _)| node).collect();
        let ahead: Vec<NodeRef> = pending
            .into_iter()
            .filter(|node| {
                !queue.in_flight.contains_key(node)
                    && !queue.answered.contains_key(node)
                    && !still_waiting.contains(node)
            })
            .take(room)
            .collect();
        for node in ahead {
            queue.in_flight.insert(node.clone(), Vec::new());
            nodes.push(node);
        }
    }
    Some((nodes, spans))
}

/// Hands each answer to the lookups that wait for it; an answer nobody waits for yet is kept
/// for its reconcile. Every node of the call is then skipped when looking ahead, for
/// the time answers are kept.
fn deliver(
    queue: &mut LookupQueue,
    nodes: Vec<NodeRef>,
    answers: Vec<Result<Instance, GatewayError>>,
    provider: Option<String>,
) {
    let at = Instant::now();
    for (node, answer) in nodes.into_iter().zip(answers) {
        let replies = queue.in_flight.remove(&node).unwrap_or_default();
        let mut instance = None;
        if replies.is_empty() {
            instance = answer.ok();
        } else {
            for reply in replies {
                let _ = reply.send(answer.clone());
            }
        }
        // Either way no call looks ahead at it while the watch has not shown it initialized.
        let provider = provider.clone();
        queue.answered.insert(
            node,
            Kept {
                at,
                instance,
                provider,
            },
        );
    }
}

#[async_trait::async_trait]
impl CloudInstances for BatchingLookups {
    async fn lookup_instances(
        &self,
        nodes: &[NodeRef],
    ) -> Result<Vec<Result<Instance, GatewayError>>, GatewayError> {
        self.inner.lookup_instances(nodes).await
    }

    async fn instance(&self, node: &NodeRef) -> Result<Instance, GatewayError> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let keep_for = self.keep_for();
        let provider = self.provider.as_ref().map(ProviderWatch::current);
        let route = {
            let mut queue = lock(&self.queue);
            // A used answer leaves its mark: calls do not look ahead at the node again
            // before the watch shows it initialized; a retry of its reconcile asks itself.
            let kept = queue
                .answered
                .get_mut(node)
                .filter(|kept| {
                    kept.at.elapsed() <= keep_for && provider.as_ref().is_none_or(|now| *now == kept.provider)
                })
                .and_then(|kept| kept.instance.take());
            match kept {
                Some(instance) => Route::Answered(instance),
                None => match queue.in_flight.get_mut(node) {
                    Some(replies) => {
                        replies.push(reply);
                        Route::Wait { start_sender: false }
                    }
                    None => {
                        queue.waiting.push((node.clone(), reply, Span::current()));
                        Route::Wait {
                            start_sender: !std::mem::replace(&mut queue.sending, true),
                        }
                    }
                },
            }
        };
        match route {
            Route::Answered(instance) => return Ok(instance),
            Route::Wait { start_sender: true } => {
                tokio::spawn(Self::send_queued(
                    self.inner.clone(),
                    self.queue.clone(),
                    self.look_ahead.clone(),
                    self.provider.clone(),
                ));
            }
            Route::Wait { start_sender: false } => {}
        }
        answer.await.unwrap_or_else(|_| {
            Err(GatewayError::Unavailable(
                "the instance lookup was dropped; retry".into(),
            ))
        })
    }
}
