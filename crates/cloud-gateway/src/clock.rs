//! The gateway's clock: tokio's. Outside tests it is the system's monotonic clock; a test on a
//! runtime with paused time (`#[tokio::test(start_paused = true)]`) moves it only when every
//! task waits, so the token buckets, the adaptive slowdown and the cache expire exactly on
//! schedule however busy the machine is, and a test can assert exact counts.

use std::time::Instant;

/// Now, on tokio's clock (as a `std` instant, for the token buckets).
pub fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}
