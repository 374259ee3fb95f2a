//! Writes sent whose answer never came back. A request that timed out, lost its connection, or
//! whose call was cancelled (a controller's deadline passed, a replica died) may still be
//! carried out by the cloud afterwards: seen on the test cloud's Neutron, which under load
//! committed security-group rules 40–75 s after they were sent, when the client had given up
//! at 60 s. If a later sync read the load balancer before that write landed and recorded the
//! converge, the late write's change (a rule for a port the Service no longer has) would be
//! trusted away until the next full read.
//!
//! So each write is watched; an unanswered one marks its Service for [`LATE_WRITE_WINDOWS`]
//! request timeouts after it was sent. While marked, a sync reads in full, repairs what it
//! finds, and answers "ask again" instead of recording the converge; the first sync after the
//! window records it from a read nothing can still change.
//!
//! A write in flight when the gateway itself dies is not known to the next gateway: that case
//! is left to the periodic full read ([`super::converged::VERIFY_PERIOD`]).

use std::{
    collections::HashMap,
    future::Future,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use crate::client::ApiError;

/// How many request timeouts after it was sent an unanswered write may still land. A server
/// that outlives its client's timeout usually finishes within one more (its own WSGI or proxy
/// timeout).
pub const LATE_WRITE_WINDOWS: u32 = 2;

/// Services (by load balancer name) with a write that may still land, and until when.
#[derive(Debug)]
pub struct UnansweredWrites {
    window: Duration,
    until: Arc<Mutex<HashMap<String, Instant>>>,
}

impl UnansweredWrites {
    /// A write sent and not answered may land until `window` after it was sent.
    pub fn new(window: Duration) -> Self {
        Self {
            window,
            until: Arc::default(),
        }
    }

    /// Makes the write `write` of `service`'s, marking the Service if it gets no answer: a
    /// transport error or timeout, or the future dropped before it finished. An answer, even an
    /// error status, means the cloud decided.
    pub async fn watch<T>(
        &self,
        service: &str,
        write: impl Future<Output = Result<T, ApiError>>,
    ) -> Result<T, ApiError> {
        let mut sent = Sent {
            service,
            at: Instant::now(),
            window: self.window,
            until: &self.until,
            answered: false,
        };
        let result = write.await;
        sent.answered = match &result {
            Ok(_) => true,
            Err(e) => e.status.is_some(),
        };
        result
    }

    /// How long `service` may still see one of its unanswered writes land, if it may.
    pub fn pending(&self, service: &str) -> Option<Duration> {
        self.pending_at(service, Instant::now())
    }

    fn pending_at(&self, service: &str, now: Instant) -> Option<Duration> {
        let mut until = lock(&self.until);
        match until.get(service) {
            Some(&t) if t > now => Some(t - now),
            Some(_) => {
                until.remove(service);
                None
            }
            None => None,
        }
    }
}

fn lock(m: &Mutex<HashMap<String, Instant>>) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One write in flight; marks its Service when dropped unanswered.
struct Sent<'a> {
    service: &'a str,
    at: Instant,
    window: Duration,
    until: &'a Mutex<HashMap<String, Instant>>,
    answered: bool,
}

impl Drop for Sent<'_> {
    fn drop(&mut self) {
        if self.answered {
            return;
        }
        let end = self.at + self.window;
        let mut until = lock(self.until);
        let entry = until.entry(self.service.to_owned()).or_insert(end);
        *entry = (*entry).max(end);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::{ErrorKind, Service};
    use http::{Method, StatusCode};

    fn error(status: Option<StatusCode>) -> ApiError {
        let mut e = ApiError::local(
            Service::Network,
            Method::POST,
            "/v2.0/security-group-rules",
            ErrorKind::Transport,
            "timed out",
        );
        e.status = status;
        e
    }

    #[tokio::test]
    async fn only_a_write_without_an_answer_marks_its_service() {
        let w = UnansweredWrites::new(Duration::from_secs(120));
        let cases: [(&str, Result<(), ApiError>, bool); 4] = [
            ("ok", Ok(()), false),
            ("refused", Err(error(Some(StatusCode::CONFLICT))), false),
            (
                "crashed",
                Err(error(Some(StatusCode::INTERNAL_SERVER_ERROR))),
                false,
            ),
            ("timed-out", Err(error(None)), true),
        ];
        for (service, result, marked) in cases {
            let _ = w.watch(service, async move { result }).await;
            assert_eq!(w.pending(service).is_some(), marked, "{service}");
        }
    }

    #[tokio::test]
    async fn a_write_dropped_before_its_answer_marks_its_service_for_the_window() {
        let w = UnansweredWrites::new(Duration::from_secs(120));
        let never = w.watch("svc", std::future::pending::<Result<(), ApiError>>());
        // The call is cancelled while the write is in flight.
        assert!(
            tokio::time::timeout(Duration::from_millis(10), never)
                .await
                .is_err()
        );
        let left = w.pending("svc").expect("marked");
        assert!(left > Duration::from_secs(119) && left <= Duration::from_secs(120));
        assert_eq!(w.pending("other"), None);
    }

    #[test]
    fn the_mark_ends_with_the_window_and_a_later_write_extends_it() {
        let w = UnansweredWrites::new(Duration::from_secs(120));
        let t0 = Instant::now();
        let mark = |at: Instant| {
            drop(Sent {
                service: "svc",
                at,
                window: w.window,
                until: &w.until,
                answered: false,
            });
        };
        mark(t0);
        mark(t0 - Duration::from_secs(60));
        assert_eq!(
            w.pending_at("svc", t0 + Duration::from_secs(119)),
            Some(Duration::from_secs(1))
        );
        mark(t0 + Duration::from_secs(30));
        assert_eq!(
            w.pending_at("svc", t0 + Duration::from_secs(121)),
            Some(Duration::from_secs(29))
        );
        assert_eq!(w.pending_at("svc", t0 + Duration::from_secs(150)), None);
        assert_eq!(w.pending_at("svc", t0), None, "an ended mark is forgotten");
    }
}
