//! Call counters of the simulated cloud API, and the times of admitted calls so tests can check
//! the rate in every window.

use std::{
    collections::{BTreeMap, VecDeque},
    sync::Mutex,
    time::Instant,
};

use serde::Serialize;

/// How many admission times are kept (the most recent ones).
pub const MAX_RECORDED_CALLS: usize = 200_000;

/// Counters of one operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct OperationStats {
    /// Calls received.
    pub calls: u64,
    /// Calls the rate limit admitted.
    pub accepted: u64,
    /// Calls answered `Throttled`.
    pub throttled: u64,
    /// Admitted calls failed on purpose by the `error_rate` knob.
    pub injected_errors: u64,
}

/// A snapshot of the counters since start or the last reset.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Stats {
    /// Calls received.
    pub calls_total: u64,
    /// Calls the rate limit admitted (whatever their outcome after that).
    pub accepted_total: u64,
    /// Calls answered `Throttled`.
    pub throttled_total: u64,
    /// Injected failures.
    pub injected_errors_total: u64,
    /// Per operation.
    pub operations: BTreeMap<String, OperationStats>,
    /// When each admitted call was admitted, oldest first (the last [`MAX_RECORDED_CALLS`]).
    #[serde(skip)]
    pub accepted_at: Vec<Instant>,
}

#[derive(Default)]
struct Inner {
    totals: OperationStats,
    operations: BTreeMap<&'static str, OperationStats>,
    accepted_at: VecDeque<Instant>,
}

/// The live counters.
#[derive(Default)]
pub(crate) struct Recorder {
    inner: Mutex<Inner>,
}

impl Recorder {
    fn with(&self, op: &'static str, f: impl Fn(&mut OperationStats), then: impl FnOnce(&mut Inner)) {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut g.totals);
        f(g.operations.entry(op).or_default());
        then(&mut g);
    }

    /// An admitted call, admitted at `at` (callers pass non-decreasing times).
    pub fn accepted(&self, op: &'static str, at: Instant) {
        self.with(
            op,
            |s| {
                s.calls += 1;
                s.accepted += 1;
            },
            |g| {
                if g.accepted_at.len() == MAX_RECORDED_CALLS {
                    g.accepted_at.pop_front();
                }
                g.accepted_at.push_back(at);
            },
        );
    }

    /// A throttled call.
    pub fn throttled(&self, op: &'static str) {
        self.with(
            op,
            |s| {
                s.calls += 1;
                s.throttled += 1;
            },
            |_| {},
        );
    }

    /// An injected failure of an admitted call.
    pub fn injected(&self, op: &'static str) {
        self.with(op, |s| s.injected_errors += 1, |_| {});
    }

    pub fn snapshot(&self) -> Stats {
        let g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        Stats {
            calls_total: g.totals.calls,
            accepted_total: g.totals.accepted,
            throttled_total: g.totals.throttled,
            injected_errors_total: g.totals.injected_errors,
            operations: g.operations.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            accepted_at: g.accepted_at.iter().copied().collect(),
        }
    }

    pub fn reset(&self) {
        *self.inner.lock().unwrap_or_else(|p| p.into_inner()) = Inner::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_per_operation_and_in_total() {
        let r = Recorder::default();
        let t = Instant::now();
        r.accepted("list_routes", t);
        r.accepted("list_routes", t);
        r.injected("list_routes");
        r.throttled("create_route");
        let s = r.snapshot();
        assert_eq!(
            (
                s.calls_total,
                s.accepted_total,
                s.throttled_total,
                s.injected_errors_total
            ),
            (3, 2, 1, 1)
        );
        assert_eq!(
            s.operations["list_routes"],
            OperationStats {
                calls: 2,
                accepted: 2,
                throttled: 0,
                injected_errors: 1
            }
        );
        assert_eq!(s.accepted_at, vec![t, t]);
        r.reset();
        assert_eq!(r.snapshot(), Stats::default());
    }
}
