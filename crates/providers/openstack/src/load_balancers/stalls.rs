//! Telling the operator about a load balancer Octavia leaves `PENDING_*`. A sync never waits for
//! Octavia: it answers "in progress, ask again", which the service controller requeues without
//! an event. A load balancer that stays pending (a stuck octavia-worker, a flow that died: OCCM's
//! #1052 and #2165) would then be asked about forever without a word. After [`STALL_AFTER`] with
//! no write of this Service's going through, the sync answers a failure naming the load balancer
//! instead, which the service controller turns into a Warning event (and a retry with backoff).
//!
//! The clock restarts at every write that goes through, so a Service that needs many writes
//! (one per sync, each waited for) is not mistaken for a stuck one.

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

/// How long a Service's load balancer may make no progress before its sync says so.
pub const STALL_AFTER: Duration = Duration::from_secs(600);

/// When each Service (by load balancer name) last made progress.
#[derive(Debug)]
pub struct Stalls {
    after: Duration,
    since: Mutex<HashMap<String, Instant>>,
}

impl Stalls {
    /// No Service stalled yet; one is after `after` without progress.
    pub fn new(after: Duration) -> Self {
        Self {
            after,
            since: Mutex::new(HashMap::new()),
        }
    }

    fn since(&self) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
        self.since
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A write of `service`'s went through.
    pub fn progressed(&self, service: &str) {
        self.progressed_at(service, Instant::now());
    }

    fn progressed_at(&self, service: &str, now: Instant) {
        self.since().insert(service.to_owned(), now);
    }

    /// `service` converged (or is gone): nothing to watch.
    pub fn settled(&self, service: &str) {
        self.since().remove(service);
    }

    /// A sync of `service` answers "in progress" without a write: how long it has made no
    /// progress, once that is longer than the limit. Watching starts at the first such sync
    /// when no write was seen (a gateway restarted beside a stuck load balancer).
    pub fn stalled(&self, service: &str) -> Option<Duration> {
        self.stalled_at(service, Instant::now())
    }

    fn stalled_at(&self, service: &str, now: Instant) -> Option<Duration> {
        let at = *self.since().entry(service.to_owned()).or_insert(now);
        let stalled = now.saturating_duration_since(at);
        (stalled > self.after).then_some(stalled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_service_stalls_only_without_progress_for_longer_than_the_limit() {
        let stalls = Stalls::new(Duration::from_secs(600));
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        assert_eq!(stalls.stalled_at("a", at(0)), None, "watching starts");
        assert_eq!(stalls.stalled_at("a", at(600)), None, "not longer than the limit");
        assert_eq!(stalls.stalled_at("a", at(601)), Some(Duration::from_secs(601)));
        stalls.progressed_at("a", at(700));
        assert_eq!(stalls.stalled_at("a", at(1000)), None, "a write is progress");
        assert_eq!(stalls.stalled_at("a", at(1301)), Some(Duration::from_secs(601)));
        assert_eq!(
            stalls.stalled_at("b", at(1301)),
            None,
            "each Service has its own clock"
        );
        stalls.settled("a");
        assert_eq!(
            stalls.stalled_at("a", at(2000)),
            None,
            "converged: watched afresh"
        );
        assert_eq!(stalls.stalled_at("a", at(2601)), Some(Duration::from_secs(601)));
    }
}
