//! How a controller's watch waits after it fails (the API server down, restarting, answering
//! errors): 0.5 s doubling to 1 s, with up to as much again of jitter, back to 0.5 s after two
//! quiet minutes, or at once when the server answers `410 Gone` (it is up: the watcher must list
//! again now, not after the wait its failures while the server was down grew to). So a controller
//! resumes at most about 3 s after the server is back: the reconnection's wait (at most 2 s), then
//! at most 1 s after the `410 Gone` that a restarted server's new watch cache answers to a watch
//! from before the restart. (With a 2 s cap, the two waits came to 5 s and more: the chaos suite's
//! `watches` scenario measured up to 6.7 s.)
//!
//! Why not kube-runtime's `default_backoff` (client-go's: up to 30 s): a controller would then
//! stay blind for up to half a minute after an API server restart, for nothing: a handful of
//! controllers retrying every few seconds costs a server with API Priority and Fairness
//! nothing. Without any backoff, a failing watch retries at once, in a hot loop, for as long as
//! the server is down.
//!
//! A kube-runtime `Controller` backs off its trigger streams again, with client-go's 30 s
//! default, on every error they carry: a watch given to one, already [`retrying`], needs
//! [`AlreadyBackedOff`] as its `trigger_backoff`, or the Controller sleeps on top of it.

use std::{
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use futures::{Stream, StreamExt};
use kube::runtime::{
    WatchStreamExt,
    utils::{Backoff, ResetTimerBackoff},
    watcher::{self, ExponentialBackoff},
};

/// The first wait after a failure.
pub const MIN: Duration = Duration::from_millis(500);
/// The longest wait before jitter (which adds up to as much again).
pub const MAX: Duration = Duration::from_secs(1);
/// A watch that has not failed for this long starts again from [`MIN`].
pub const RESET_AFTER: Duration = Duration::from_secs(120);

/// The backoff for `WatchStreamExt::backoff` on every watch of a controller.
pub fn backoff() -> ResetTimerBackoff<ExponentialBackoff> {
    let exponential = backon::ExponentialBuilder::default()
        .with_min_delay(MIN)
        .with_max_delay(MAX)
        .with_factor(2.0)
        .with_jitter()
        .without_max_times();
    ResetTimerBackoff::new(ExponentialBackoff::from(exponential), RESET_AFTER)
}

/// `watch` retried after [`backoff`], which starts over from [`MIN`] when the server answers
/// `410 Gone` (a watch from a compacted version, a list continuation that expired).
pub fn retrying<K, S>(watch: S) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send
where
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send,
{
    let shared = Shared(Arc::new(Mutex::new(backoff())));
    let mut on_gone = shared.clone();
    watch
        .inspect(move |item| {
            if let Err(err) = item
                && is_gone(err)
            {
                on_gone.reset();
            }
        })
        .backoff(shared)
}

/// Whether the server answered `410 Gone`: it is up, and the watcher lists again.
pub fn is_gone(err: &watcher::Error) -> bool {
    match err {
        watcher::Error::WatchError(status) => status.code == 410,
        watcher::Error::InitialListFailed(kube::Error::Api(status)) => status.code == 410,
        _ => false,
    }
}

/// [`backoff`], shared by the stream that waits on it and the check that resets it.
#[derive(Clone)]
struct Shared(Arc<Mutex<ResetTimerBackoff<ExponentialBackoff>>>);

impl Iterator for Shared {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).next()
    }
}

impl Backoff for Shared {
    fn reset(&mut self) {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).reset();
    }
}

/// The `trigger_backoff` of a kube-runtime `Controller` whose watch is [`retrying`] already:
/// no second wait.
#[derive(Debug, Clone, Copy, Default)]
pub struct AlreadyBackedOff;

impl Iterator for AlreadyBackedOff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        Some(Duration::ZERO)
    }
}

impl Backoff for AlreadyBackedOff {
    fn reset(&mut self) {}
}

#[cfg(test)]
mod tests {
    use futures::{StreamExt, stream};
    use kube::core::Status;
    use tokio::time::Instant;

    use super::*;

    #[test]
    fn waits_grow_to_the_cap_and_never_beyond_twice_it() {
        let waits: Vec<Duration> = backoff().take(20).collect();
        assert_eq!(waits.len(), 20, "it never gives up");
        assert!(waits[0] >= MIN && waits[0] <= MIN * 2, "{waits:?}");
        assert!(waits.iter().all(|w| *w <= MAX * 2), "{waits:?}");
        assert!(waits[10..].iter().all(|w| *w >= MAX), "{waits:?}");
    }

    fn gone() -> watcher::Error {
        let status = Status::failure("too old resource version: 1 (2)", "Expired").with_code(410);
        watcher::Error::WatchError(status.boxed())
    }

    fn refused() -> watcher::Error {
        let status = Status::failure("connection refused", "ServiceUnavailable").with_code(503);
        watcher::Error::WatchStartFailed(kube::Error::Api(status.boxed()))
    }

    /// The wait after each of `errors` but the last, on the paused clock.
    async fn waits_after(errors: Vec<watcher::Error>) -> Vec<Duration> {
        let source = stream::iter(errors.into_iter().map(Err::<watcher::Event<()>, _>));
        let mut retried = std::pin::pin!(retrying(source));
        let mut yielded = Vec::new();
        while retried.next().await.is_some() {
            yielded.push(Instant::now());
        }
        yielded.windows(2).map(|w| w[1] - w[0]).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn after_a_410_the_wait_starts_over_not_at_what_the_failures_grew_it_to() {
        // The server down (six failed watches), then back, answering 410 to the old version
        // (a restarted server's new watch cache), then the relist fails once more.
        let mut errors: Vec<_> = (0..6).map(|_| refused()).collect();
        errors.extend([gone(), refused()]);
        let waits = waits_after(errors).await;
        assert_eq!(waits.len(), 7, "{waits:?}");
        assert!(waits[5] >= MAX, "the failures grew the wait: {waits:?}");
        assert!(
            waits[6] <= MIN * 2,
            "the wait after a 410 is the first one again: {waits:?}"
        );
    }

    #[test]
    fn gone_is_a_410_to_a_watch_or_to_a_list() {
        assert!(is_gone(&gone()));
        assert!(!is_gone(&refused()));
        let status = Status::failure("The provided continue parameter is too old", "Expired").with_code(410);
        assert!(is_gone(&watcher::Error::InitialListFailed(kube::Error::Api(
            status.boxed()
        ))));
    }

    #[test]
    fn already_backed_off_never_waits() {
        assert!(AlreadyBackedOff.take(5).all(|w| w.is_zero()));
    }
}
