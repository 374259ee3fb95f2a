//! Admission to the provider: one token bucket per call class (reads, writes), handed out
//! round-robin between callers, so a flood from one controller cannot starve another.
//!
//! Every provider call first waits here for its turn. A caller's turn comes once per round over
//! all callers that have calls waiting, whatever the length of its own queue: a controller with
//! 1000 queued load-balancer updates and one with a single instance lookup alternate.
//! A waiter that is dropped (deadline passed, client went away) leaves the queue without
//! spending a token.

use std::{
    collections::{HashMap, VecDeque},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use prometheus_client::metrics::gauge::Gauge;
use token_bucket::{Limit, TokenBucket};
use tokio::sync::{Notify, oneshot};
use tracing::{Instrument as _, field::Empty};

use crate::{
    adaptive::{AdaptiveConfig, AdaptiveFactor},
    metrics::{ClassLabels, Metrics, QueueLabels},
};

/// Which bucket a provider call draws from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Class {
    /// Lookups and lists.
    Read,
    /// Calls that change the cloud.
    Write,
}

impl Class {
    /// Metric label.
    pub fn label(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
        }
    }
}

/// The gateway stopped; no more turns are handed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the gateway is shutting down")]
pub struct SchedulerClosed;

/// Admission control for the provider.
pub struct Scheduler {
    read: Arc<ClassQueue>,
    write: Arc<ClassQueue>,
}

impl Scheduler {
    /// Creates the scheduler and starts one dispatcher task per class on the current runtime.
    pub fn start(read: Limit, write: Limit, adaptive: AdaptiveConfig, metrics: Arc<Metrics>) -> Arc<Self> {
        let read = ClassQueue::new(Class::Read, read, adaptive, metrics.clone());
        let write = ClassQueue::new(Class::Write, write, adaptive, metrics);
        tokio::spawn(read.clone().dispatch());
        tokio::spawn(write.clone().dispatch());
        Arc::new(Self { read, write })
    }

    fn queue(&self, class: Class) -> &Arc<ClassQueue> {
        match class {
            Class::Read => &self.read,
            Class::Write => &self.write,
        }
    }

    /// Waits for `caller`'s turn to make one provider call of `class`. Cancel-safe: dropping the
    /// future gives the place up without spending a token. Traced as a `fair queue wait` span:
    /// how many calls of the class (and of this caller) were waiting when it joined.
    pub async fn admit(&self, class: Class, caller: &str) -> Result<(), SchedulerClosed> {
        let span = tracing::info_span!(
            "fair queue wait",
            class = class.label(),
            caller,
            queue.waiting = Empty,
            queue.waiting_of_caller = Empty,
        );
        let queue = self.queue(class);
        let enqueued = crate::clock::now();
        let (rx, waiting, of_caller) = queue.enqueue(caller)?;
        span.record("queue.waiting", waiting);
        span.record("queue.waiting_of_caller", of_caller);
        let result = rx.instrument(span).await.map_err(|_| SchedulerClosed);
        if result.is_ok() {
            queue
                .metrics
                .queue_wait
                .get_or_create(&QueueLabels {
                    class: class.label(),
                    caller: caller.to_owned(),
                })
                .observe(crate::clock::now().duration_since(enqueued).as_secs_f64());
        }
        result
    }

    /// Tells the scheduler the provider answered "throttled" to a call of `class`.
    pub fn on_throttled(&self, class: Class) {
        self.queue(class).on_throttled();
    }

    /// The rate (calls/s) `class` is allowed right now.
    pub fn current_rate(&self, class: Class) -> f64 {
        self.queue(class).current_rate()
    }

    /// This replica's share of the configured limits (1 / the live gateway replicas): the
    /// replicas together never exceed what the provider allows.
    pub fn set_share(&self, share: f64) {
        let share = share.clamp(f64::MIN_POSITIVE, 1.0);
        for queue in [&self.read, &self.write] {
            let mut state = queue.lock();
            if (state.share - share).abs() > f64::EPSILON {
                state.share = share;
                let rate = ClassQueue::apply_factor(&mut state, crate::clock::now());
                drop(state);
                queue
                    .metrics
                    .rate_limit
                    .get_or_create(&ClassLabels {
                        class: queue.class.label(),
                    })
                    .set(rate);
                queue.wake.notify_one();
            }
        }
    }

    /// Stops handing out turns; every waiter gets [`SchedulerClosed`].
    pub fn close(&self) {
        self.read.close();
        self.write.close();
    }
}

struct ClassQueue {
    class: Class,
    state: Mutex<QueueState>,
    wake: Notify,
    metrics: Arc<Metrics>,
}

struct QueueState {
    configured: Limit,
    bucket: TokenBucket,
    adaptive: AdaptiveFactor,
    /// This replica's share of `configured` (1 when alone).
    share: f64,
    /// Waiters per caller, oldest first.
    waiting: HashMap<Arc<str>, VecDeque<oneshot::Sender<()>>>,
    /// Callers with waiters, in turn order.
    turns: VecDeque<Arc<str>>,
    /// Callers that ever waited here, with their `queue_depth` series (bounded: only the
    /// policy's callers get a name of their own).
    seen: Vec<(Arc<str>, Gauge)>,
    closed: bool,
}

/// What the dispatcher does next.
enum Step {
    Idle,
    Wait(Duration),
    Closed,
}

impl ClassQueue {
    fn new(class: Class, limit: Limit, adaptive: AdaptiveConfig, metrics: Arc<Metrics>) -> Arc<Self> {
        let now = crate::clock::now();
        metrics
            .rate_limit
            .get_or_create(&ClassLabels { class: class.label() })
            .set(limit.rate);
        Arc::new(Self {
            class,
            state: Mutex::new(QueueState {
                configured: limit,
                bucket: TokenBucket::new(limit, now),
                adaptive: AdaptiveFactor::new(adaptive),
                share: 1.0,
                waiting: HashMap::new(),
                turns: VecDeque::new(),
                seen: Vec::new(),
                closed: false,
            }),
            wake: Notify::new(),
            metrics,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, QueueState> {
        // A panic while holding this lock cannot leave the queue inconsistent in a way that
        // matters more than stopping all admissions would, so poisoning is ignored.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn depth_gauge(&self, caller: &str) -> Gauge {
        self.metrics
            .queue_depth
            .get_or_create(&QueueLabels {
                class: self.class.label(),
                caller: caller.to_owned(),
            })
            .clone()
    }

    /// Queues a waiter for `caller`; also says how many calls of the class, and of `caller`,
    /// were waiting before it.
    fn enqueue(&self, caller: &str) -> Result<(oneshot::Receiver<()>, usize, usize), SchedulerClosed> {
        let (tx, rx) = oneshot::channel();
        let (waiting, of_caller, depth) = {
            let mut state = self.lock();
            if state.closed {
                return Err(SchedulerClosed);
            }
            let waiting: usize = state.waiting.values().map(VecDeque::len).sum();
            let caller: Arc<str> = Arc::from(caller);
            let queue = state.waiting.entry(caller.clone()).or_default();
            queue.push_back(tx);
            let of_caller = queue.len() - 1;
            let depth = match state.seen.iter().find(|(seen, _)| *seen == caller) {
                Some((_, depth)) => depth.clone(),
                None => {
                    let depth = self.depth_gauge(&caller);
                    state.seen.push((caller.clone(), depth.clone()));
                    depth
                }
            };
            if of_caller == 0 {
                state.turns.push_back(caller);
            }
            (waiting, of_caller, depth)
        };
        depth.inc();
        self.wake.notify_one();
        Ok((rx, waiting, of_caller))
    }

    fn on_throttled(&self) {
        let now = crate::clock::now();
        let mut state = self.lock();
        if state.adaptive.on_throttled(now) {
            let rate = Self::apply_factor(&mut state, now);
            tracing::warn!(
                class = self.class.label(),
                rate,
                "provider throttled us; lowering the gateway's rate"
            );
            self.metrics
                .rate_limit
                .get_or_create(&ClassLabels {
                    class: self.class.label(),
                })
                .set(rate);
        }
    }

    fn current_rate(&self) -> f64 {
        self.lock().bucket.limit().rate
    }

    /// Re-derives the bucket's limit from the configured one, the adaptive factor and this
    /// replica's share.
    fn apply_factor(state: &mut QueueState, now: Instant) -> f64 {
        let factor = state.adaptive.factor(now) * state.share;
        let limit = Limit {
            rate: state.configured.rate * factor,
            burst: (state.configured.burst * factor).max(1.0),
        };
        if limit != state.bucket.limit() {
            state.bucket.set_limit(limit, now);
        }
        limit.rate
    }

    fn close(&self) {
        let mut state = self.lock();
        state.closed = true;
        // Dropping the senders wakes every waiter with an error.
        state.waiting.clear();
        state.turns.clear();
        drop(state);
        self.wake.notify_one();
    }

    /// Hands out turns, one token each, round-robin over callers.
    async fn dispatch(self: Arc<Self>) {
        loop {
            match self.try_grant() {
                Step::Closed => return,
                Step::Idle => self.wake.notified().await,
                Step::Wait(d) => {
                    // Wake early only to notice close(); a new waiter cannot make a token appear.
                    tokio::select! {
                        () = tokio::time::sleep(d) => {}
                        () = self.wake.notified() => {}
                    }
                }
            }
        }
    }

    /// Grants as many turns as there are tokens; says what to wait for next.
    fn try_grant(&self) -> Step {
        let now = crate::clock::now();
        let mut state = self.lock();
        if state.closed {
            return Step::Closed;
        }
        let before = state.bucket.limit().rate;
        let rate = Self::apply_factor(&mut state, now);
        if (rate - before).abs() > f64::EPSILON {
            self.metrics
                .rate_limit
                .get_or_create(&ClassLabels {
                    class: self.class.label(),
                })
                .set(rate);
        }
        let step = loop {
            if state.turns.is_empty() {
                break Step::Idle;
            }
            let wait = state.bucket.time_to_token(now);
            if !wait.is_zero() {
                break Step::Wait(wait);
            }
            let Some(waiter) = Self::next_waiter(&mut state) else {
                break Step::Idle;
            };
            if state.bucket.try_acquire(now).is_ok() {
                // If the waiter went away since next_waiter looked, the token is lost; that only
                // makes us slower than the limit, never faster.
                let _ = waiter.send(());
            }
        };
        for (caller, gauge) in &state.seen {
            let depth = state.waiting.get(caller).map_or(0, VecDeque::len);
            gauge.set(i64::try_from(depth).unwrap_or(i64::MAX));
        }
        step
    }

    /// Pops the next live waiter in round-robin order, dropping cancelled ones. The caller whose
    /// turn it was goes to the back of the line if it has more waiting.
    fn next_waiter(state: &mut QueueState) -> Option<oneshot::Sender<()>> {
        while let Some(caller) = state.turns.pop_front() {
            let Some(queue) = state.waiting.get_mut(&caller) else {
                continue;
            };
            let mut found = None;
            while let Some(tx) = queue.pop_front() {
                if !tx.is_closed() {
                    found = Some(tx);
                    break;
                }
            }
            if queue.is_empty() {
                state.waiting.remove(&caller);
            } else {
                state.turns.push_back(caller);
            }
            if found.is_some() {
                return found;
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn scheduler(rate: f64, burst: f64) -> Arc<Scheduler> {
        let limit = Limit::new(rate, burst).unwrap();
        Scheduler::start(limit, limit, AdaptiveConfig::default(), Arc::new(Metrics::new()))
    }

    // Paused time: the clock moves only when every task waits, so turns come exactly on the
    // bucket's schedule and the counts below are exact, however busy the machine.

    #[tokio::test(start_paused = true)]
    async fn a_flooding_caller_gets_only_its_share() {
        let s = scheduler(100.0, 1.0);
        // A queues 300 calls (3 s of work at 100/s), counting its turns.
        let a_turns = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut flood = Vec::new();
        for _ in 0..300 {
            let (s, a_turns) = (s.clone(), a_turns.clone());
            flood.push(tokio::spawn(async move {
                s.admit(Class::Read, "a").await.unwrap();
                a_turns.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }));
        }
        tokio::task::yield_now().await;
        // B makes 10 calls one after another: each waits for one turn of A's, then has its own.
        let started = crate::clock::now();
        for _ in 0..10 {
            s.admit(Class::Read, "b").await.unwrap();
        }
        let took = crate::clock::now().duration_since(started);
        // The first token was in the bucket (A took it); then a token every 10 ms, alternating.
        assert_eq!(took, Duration::from_millis(190), "FIFO would take 3 s");
        assert_eq!(
            a_turns.load(std::sync::atomic::Ordering::SeqCst),
            10,
            "A and B alternate"
        );
        s.close();
    }

    #[tokio::test(start_paused = true)]
    async fn turns_never_exceed_the_bucket_in_any_window_and_use_it_all() {
        let s = scheduler(40.0, 8.0);
        let granted = Arc::new(Mutex::new(Vec::new()));
        let until = crate::clock::now() + Duration::from_secs(2);
        let callers: Vec<_> = (0..10)
            .map(|i| {
                let (s, granted) = (s.clone(), granted.clone());
                tokio::spawn(async move {
                    while crate::clock::now() < until {
                        s.admit(Class::Read, &format!("caller-{i}")).await.unwrap();
                        granted.lock().unwrap().push(crate::clock::now());
                    }
                })
            })
            .collect();
        for c in callers {
            c.await.unwrap();
        }
        let granted = granted.lock().unwrap().clone();
        for window_ms in [50, 100, 250, 500, 1000, 2000] {
            let window = Duration::from_millis(window_ms);
            let bound = (40.0 * window.as_secs_f64() + 8.0).floor() as usize;
            let seen = token_bucket::max_in_window(&granted, window);
            assert!(
                seen <= bound,
                "{seen} turns in {window_ms} ms; the bucket allows {bound}"
            );
        }
        // The burst at once, then a turn every 25 ms: all of the allowance by the end (2 s).
        // (The callers still waiting then get theirs later.)
        assert_eq!(granted.iter().filter(|t| **t <= until).count(), 8 + 80);
        s.close();
    }

    #[tokio::test(start_paused = true)]
    async fn abandoned_waiters_spend_no_tokens() {
        let s = scheduler(10.0, 1.0);
        s.admit(Class::Write, "a").await.unwrap(); // empty the bucket
        let started = crate::clock::now();
        for _ in 0..20 {
            // Each gives up long before a token (100 ms) could come.
            let _ = tokio::time::timeout(Duration::from_millis(1), s.admit(Class::Write, "a")).await;
        }
        s.admit(Class::Write, "b").await.unwrap();
        // B got the next token, 100 ms after the first: none went to the 20 that left.
        assert_eq!(
            crate::clock::now().duration_since(started),
            Duration::from_millis(100)
        );
        s.close();
    }

    #[tokio::test]
    async fn closing_fails_every_waiter() {
        let s = scheduler(0.5, 1.0);
        s.admit(Class::Read, "a").await.unwrap();
        let waiter = {
            let s = s.clone();
            tokio::spawn(async move { s.admit(Class::Read, "a").await })
        };
        tokio::task::yield_now().await;
        s.close();
        assert_eq!(waiter.await.unwrap(), Err(SchedulerClosed));
        assert_eq!(s.admit(Class::Read, "a").await, Err(SchedulerClosed));
    }

    #[tokio::test]
    async fn throttled_answers_lower_only_their_class() {
        let s = scheduler(40.0, 10.0);
        s.on_throttled(Class::Write);
        assert!((s.current_rate(Class::Write) - 20.0).abs() < 0.5);
        assert!((s.current_rate(Class::Read) - 40.0).abs() < 1e-9);
        s.close();
    }

    #[tokio::test(start_paused = true)]
    async fn classes_do_not_share_tokens() {
        let s = scheduler(1.0, 1.0);
        s.admit(Class::Write, "a").await.unwrap();
        // The write bucket is empty now (its next token in 1 s), the read bucket is not.
        let started = crate::clock::now();
        s.admit(Class::Read, "a").await.unwrap();
        assert_eq!(crate::clock::now(), started);
        s.close();
    }
}
