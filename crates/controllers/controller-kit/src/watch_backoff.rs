//! How a controller's watch waits after it fails (the API server down, restarting, answering
//! errors): 0.5 s doubling to 2 s, with up to as much again of jitter, back to 0.5 s after two
//! quiet minutes. So a controller resumes at most about 4 s after the server is back.
//!
//! Why not kube-runtime's `default_backoff` (client-go's: up to 30 s): a controller would then
//! stay blind for up to half a minute after an API server restart, for nothing: a handful of
//! controllers retrying every few seconds costs a server with API Priority and Fairness
//! nothing. Without any backoff (a watch stream given straight to a `Controller`), a failing
//! watch retries at once, in a hot loop, for as long as the server is down.

use std::time::Duration;

use kube::runtime::{utils::ResetTimerBackoff, watcher::ExponentialBackoff};

/// The first wait after a failure.
pub const MIN: Duration = Duration::from_millis(500);
/// The longest wait before jitter (which adds up to as much again).
pub const MAX: Duration = Duration::from_secs(2);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_grow_to_the_cap_and_never_beyond_twice_it() {
        let waits: Vec<Duration> = backoff().take(20).collect();
        assert_eq!(waits.len(), 20, "it never gives up");
        assert!(waits[0] >= MIN && waits[0] <= MIN * 2, "{waits:?}");
        assert!(waits.iter().all(|w| *w <= MAX * 2), "{waits:?}");
        assert!(waits[10..].iter().all(|w| *w >= MAX), "{waits:?}");
    }
}
