//! Adaptive slowdown: when the cloud answers "throttled", the gateway cuts its own rate and
//! then recovers it gradually (multiplicative decrease, linear increase).

use std::time::{Duration, Instant};

/// How hard to back off and how fast to recover.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdaptiveConfig {
    /// The rate is multiplied by this on a throttled answer (0 < x < 1).
    pub decrease: f64,
    /// The rate never drops below this share of the configured rate.
    pub min_factor: f64,
    /// Share of the configured rate regained per second without throttling.
    pub recovery_per_second: f64,
    /// Throttled answers closer together than this count as one event: calls already in flight
    /// when the cloud started throttling must not cut the rate again and again.
    pub holdoff: Duration,
}

impl Default for AdaptiveConfig {
    fn default() -> Self {
        Self {
            decrease: 0.5,
            min_factor: 0.05,
            recovery_per_second: 0.05,
            holdoff: Duration::from_secs(1),
        }
    }
}

/// The current share (0..=1) of the configured rate the gateway allows itself.
#[derive(Debug, Clone)]
pub struct AdaptiveFactor {
    config: AdaptiveConfig,
    /// Factor right after the last decrease.
    floor: f64,
    /// When the last decrease happened (`None`: never throttled, factor 1).
    decreased_at: Option<Instant>,
}

impl AdaptiveFactor {
    /// Starts at the full rate.
    pub fn new(config: AdaptiveConfig) -> Self {
        Self {
            config,
            floor: 1.0,
            decreased_at: None,
        }
    }

    /// The factor at `now`.
    pub fn factor(&self, now: Instant) -> f64 {
        match self.decreased_at {
            None => 1.0,
            Some(at) => {
                let regained =
                    now.saturating_duration_since(at).as_secs_f64() * self.config.recovery_per_second;
                (self.floor + regained).min(1.0)
            }
        }
    }

    /// Records a throttled answer; returns whether the factor was lowered.
    pub fn on_throttled(&mut self, now: Instant) -> bool {
        if let Some(at) = self.decreased_at
            && now.saturating_duration_since(at) < self.config.holdoff
        {
            return false;
        }
        self.floor = (self.factor(now) * self.config.decrease).max(self.config.min_factor);
        self.decreased_at = Some(now);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    #[test]
    fn full_rate_until_throttled() {
        let t0 = Instant::now();
        let a = AdaptiveFactor::new(AdaptiveConfig::default());
        assert_eq!(a.factor(t0), 1.0);
        assert_eq!(a.factor(t0 + secs(100.0)), 1.0);
    }

    #[test]
    fn halves_then_recovers_linearly() {
        let t0 = Instant::now();
        let mut a = AdaptiveFactor::new(AdaptiveConfig::default());
        assert!(a.on_throttled(t0));
        let cases = [(0.0, 0.5), (1.0, 0.55), (5.0, 0.75), (10.0, 1.0), (60.0, 1.0)];
        for (after, want) in cases {
            assert!((a.factor(t0 + secs(after)) - want).abs() < 1e-9, "after {after}s");
        }
    }

    #[test]
    fn a_burst_of_throttled_answers_is_one_event() {
        let t0 = Instant::now();
        let mut a = AdaptiveFactor::new(AdaptiveConfig::default());
        assert!(a.on_throttled(t0));
        assert!(!a.on_throttled(t0 + secs(0.2)));
        assert!(!a.on_throttled(t0 + secs(0.9)));
        assert!((a.factor(t0 + secs(0.9)) - 0.545).abs() < 1e-9);
        assert!(a.on_throttled(t0 + secs(1.0)));
        assert!((a.factor(t0 + secs(1.0)) - 0.275).abs() < 1e-9);
    }

    #[test]
    fn never_below_the_minimum() {
        let t0 = Instant::now();
        let mut a = AdaptiveFactor::new(AdaptiveConfig {
            min_factor: 0.2,
            ..AdaptiveConfig::default()
        });
        for i in 0..20 {
            a.on_throttled(t0 + secs(f64::from(i)));
        }
        let f = a.factor(t0 + secs(19.0));
        assert!((f - 0.2).abs() < 1e-9, "{f}");
    }
}
