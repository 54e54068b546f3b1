//! Lease time: wall-clock milliseconds that follow tokio's clock, so tests can pause it.

use std::time::{SystemTime, UNIX_EPOCH};

/// Epoch milliseconds for lease expiries, anchored to the wall clock once and then advanced by
/// tokio's monotonic clock. In production that is the wall clock without its jumps; under
/// `tokio::time::pause()` leases expire exactly when the test advances time.
#[derive(Debug, Clone, Copy)]
pub struct LeaseClock {
    anchor_ms: i64,
    anchor: tokio::time::Instant,
}

impl LeaseClock {
    /// Anchors a clock at the current wall-clock time.
    pub fn new() -> LeaseClock {
        let anchor_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        LeaseClock {
            anchor_ms,
            anchor: tokio::time::Instant::now(),
        }
    }

    /// Returns the current time in epoch milliseconds.
    pub fn now_ms(&self) -> i64 {
        let elapsed = i64::try_from(self.anchor.elapsed().as_millis()).unwrap_or(i64::MAX);
        self.anchor_ms.saturating_add(elapsed)
    }
}

/// Returns when a lease taken at `now` (epoch milliseconds) for `lease` ends.
pub(crate) fn lease_end(now: i64, lease: std::time::Duration) -> i64 {
    now.saturating_add(i64::try_from(lease.as_millis()).unwrap_or(i64::MAX))
}

impl Default for LeaseClock {
    fn default() -> LeaseClock {
        LeaseClock::new()
    }
}
