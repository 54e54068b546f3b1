//! Lease time: wall-clock milliseconds that follow tokio's clock, so tests can pause it.

use std::cell::Cell;
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

/// Epoch milliseconds for lease expiries: the wall clock read once per process, then advanced
/// by tokio's monotonic clock. In production that is the wall clock without its jumps; under
/// `tokio::time::pause()` leases expire exactly when the test advances time. Every clock of a
/// process shares one anchor, so clients created at different moments of a paused-time test
/// (whose virtual time runs ahead of the wall clock) still agree on what time it is.
#[derive(Debug, Clone, Copy, Default)]
pub struct LeaseClock;

thread_local! {
    /// This thread's own anchor, set by [`LeaseClock::anchor_thread`].
    static THREAD_ANCHOR: Cell<Option<(i64, std::time::Instant)>> = const { Cell::new(None) };
}

/// The anchor: this thread's own if it set one, else the process-wide one (epoch
/// milliseconds and the instant they were read at).
fn anchor() -> (i64, std::time::Instant) {
    if let Some(own) = THREAD_ANCHOR.with(Cell::get) {
        return own;
    }
    static ANCHOR: OnceLock<(i64, std::time::Instant)> = OnceLock::new();
    *ANCHOR.get_or_init(|| {
        let ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        (ms, std::time::Instant::now())
    })
}

impl LeaseClock {
    /// Returns the clock (all clocks of a process agree).
    pub fn new() -> LeaseClock {
        anchor();
        LeaseClock
    }

    /// Makes every clock on this thread read `epoch_ms` at tokio's present instant, until the
    /// returned guard is dropped. For seeded replays on a paused single-threaded runtime: the
    /// process-wide anchor is read from the wall clock, so the milliseconds a lease boundary
    /// falls on would differ from run to run; anchored here they do not.
    ///
    /// Call it inside the runtime (it reads tokio's clock).
    #[must_use = "the thread is anchored only while the guard lives"]
    pub fn anchor_thread(epoch_ms: i64) -> AnchoredThread {
        let own = (epoch_ms, tokio::time::Instant::now().into_std());
        AnchoredThread {
            previous: THREAD_ANCHOR.with(|a| a.replace(Some(own))),
        }
    }

    /// Returns the current time in epoch milliseconds.
    pub fn now_ms(&self) -> i64 {
        let (anchor_ms, anchor) = anchor();
        // tokio's clock: the real one, or a paused test's, which starts at the real one.
        let now = tokio::time::Instant::now().into_std();
        let elapsed = now.saturating_duration_since(anchor);
        anchor_ms.saturating_add(i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX))
    }
}

/// Keeps a thread's clocks anchored ([`LeaseClock::anchor_thread`]); dropping it restores
/// what the thread had before.
#[derive(Debug)]
pub struct AnchoredThread {
    previous: Option<(i64, std::time::Instant)>,
}

impl Drop for AnchoredThread {
    fn drop(&mut self) {
        THREAD_ANCHOR.with(|a| a.set(self.previous));
    }
}

/// Returns when a lease taken at `now` (epoch milliseconds) for `lease` ends.
pub(crate) fn lease_end(now: i64, lease: std::time::Duration) -> i64 {
    now.saturating_add(i64::try_from(lease.as_millis()).unwrap_or(i64::MAX))
}
