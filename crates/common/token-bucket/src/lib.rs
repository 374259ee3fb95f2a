//! A token bucket with the clock passed in, so it is deterministic to test and cheap to share.
//!
//! A stream admitted by a bucket of rate `r` and capacity `b` never has more than `r·t + b`
//! admissions in any window of length `t`; that is the property both the gateway (towards the
//! cloud) and the simulator (as the cloud) rely on.
//!
//! Why not `governor`: its quota is fixed when the limiter is built, while the gateway changes
//! a bucket's rate while it runs (halved when the cloud throttles, regained gradually, and split
//! between the live replicas) without losing the tokens it holds; the fair queue also needs the
//! time until the next token, to hand it to the next caller in turn rather than to whoever
//! polls first. Both are a few lines here: [`TokenBucket::set_limit`],
//! [`TokenBucket::time_to_token`].

use std::time::{Duration, Instant};

/// Rate and burst of a bucket.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limit {
    /// Sustained tokens per second; must be > 0.
    pub rate: f64,
    /// Bucket capacity (largest burst); at least 1.
    pub burst: f64,
}

impl Limit {
    /// Builds a limit, or explains why it is invalid.
    pub fn new(rate: f64, burst: f64) -> Result<Self, String> {
        if !(rate.is_finite() && rate > 0.0) {
            return Err(format!(
                "rate must be a positive number of calls per second, got {rate}"
            ));
        }
        if !(burst.is_finite() && burst >= 1.0) {
            return Err(format!("burst must be at least 1, got {burst}"));
        }
        Ok(Self { rate, burst })
    }
}

/// A token bucket. Starts full.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    limit: Limit,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket.
    pub fn new(limit: Limit, now: Instant) -> Self {
        Self {
            limit,
            tokens: limit.burst,
            last: now,
        }
    }

    /// The bucket's limit.
    pub fn limit(&self) -> Limit {
        self.limit
    }

    /// Changes rate and burst, keeping the tokens already earned (capped at the new burst).
    pub fn set_limit(&mut self, limit: Limit, now: Instant) {
        self.refill(now);
        self.limit = limit;
        self.tokens = self.tokens.min(limit.burst);
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.limit.rate).min(self.limit.burst);
        self.last = self.last.max(now);
    }

    /// Takes one token if there is one; otherwise says how long until there will be.
    pub fn try_acquire(&mut self, now: Instant) -> Result<(), Duration> {
        self.refill(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - self.tokens) / self.limit.rate))
        }
    }

    /// Time until a token is available (zero if one is available now). Takes nothing.
    pub fn time_to_token(&mut self, now: Instant) -> Duration {
        self.refill(now);
        if self.tokens >= 1.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64((1.0 - self.tokens) / self.limit.rate)
        }
    }
}

/// Largest number of events inside any window of length `window` (events sorted ascending).
/// Tests use it to check that a stream obeyed `rate·window + burst`.
pub fn max_in_window(sorted_events: &[Instant], window: Duration) -> usize {
    let mut start = 0;
    let mut best = 0;
    for (end, t) in sorted_events.iter().enumerate() {
        while t.duration_since(sorted_events[start]) > window {
            start += 1;
        }
        best = best.max(end - start + 1);
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn starts_full_then_admits_at_the_rate() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(Limit::new(10.0, 3.0).unwrap(), t0);
        assert!(b.try_acquire(t0).is_ok());
        assert!(b.try_acquire(t0).is_ok());
        assert!(b.try_acquire(t0).is_ok());
        let wait = b.try_acquire(t0).unwrap_err();
        assert!((wait.as_secs_f64() - 0.1).abs() < 1e-9, "{wait:?}");
        assert!(b.try_acquire(t0 + ms(99)).is_err());
        assert!(b.try_acquire(t0 + ms(100)).is_ok());
    }

    #[test]
    fn never_holds_more_than_burst() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(Limit::new(100.0, 2.0).unwrap(), t0);
        let later = t0 + Duration::from_secs(60);
        assert!(b.try_acquire(later).is_ok());
        assert!(b.try_acquire(later).is_ok());
        assert!(b.try_acquire(later).is_err());
    }

    #[test]
    fn lowering_the_limit_caps_saved_tokens() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(Limit::new(10.0, 10.0).unwrap(), t0);
        b.set_limit(Limit::new(1.0, 1.0).unwrap(), t0);
        assert!(b.try_acquire(t0).is_ok());
        assert!(b.try_acquire(t0).is_err());
        assert_eq!(b.time_to_token(t0), Duration::from_secs(1));
    }

    #[test]
    fn greedy_admission_obeys_rate_times_window_plus_burst() {
        let t0 = Instant::now();
        let limit = Limit::new(50.0, 5.0).unwrap();
        let mut b = TokenBucket::new(limit, t0);
        let mut admitted = Vec::new();
        // Try every millisecond for 3 s.
        for i in 0..3000 {
            let now = t0 + ms(i);
            if b.try_acquire(now).is_ok() {
                admitted.push(now);
            }
        }
        for window_ms in [1, 10, 100, 500, 1000, 3000] {
            let window = ms(window_ms);
            let bound = (limit.rate * window.as_secs_f64() + limit.burst).floor() as usize + 1;
            assert!(max_in_window(&admitted, window) <= bound, "window {window_ms} ms");
        }
        // and it used the allowance: about rate·t + burst
        assert!(admitted.len() >= 150, "{}", admitted.len());
    }

    #[test]
    fn invalid_limits_are_explained() {
        assert!(Limit::new(0.0, 1.0).unwrap_err().contains("rate"));
        assert!(Limit::new(f64::NAN, 1.0).is_err());
        assert!(Limit::new(1.0, 0.5).unwrap_err().contains("burst"));
    }

    #[test]
    fn max_in_window_counts_inclusive_windows() {
        let t0 = Instant::now();
        let events = [t0, t0 + ms(5), t0 + ms(10), t0 + ms(30)];
        assert_eq!(max_in_window(&events, ms(10)), 3);
        assert_eq!(max_in_window(&events, ms(4)), 1);
        assert_eq!(max_in_window(&[], ms(4)), 0);
    }
}
