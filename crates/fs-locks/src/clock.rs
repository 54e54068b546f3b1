//! Lease time: wall-clock milliseconds that follow tokio's clock, so tests can pause it, set
//! to the server's clock once a process has read it ([`LeaseClock::sync`]).
//!
//! Why the server's: leases are written by one process and judged by another. Were each to
//! judge by its own machine's clock, a holder whose clock runs behind the recoverer's by more
//! than `max_clock_skew` would write leases that others find already run out, and a recoverer
//! would take over locks their holder still believes it holds (the Jepsen-style test's clock
//! faults show it: `docs/reliability.md`). Read once per process from the store's server,
//! the offset makes every process of every machine count in the server's milliseconds, within
//! half the round trip of that read; what is left of skew is the drift of a machine's
//! monotonic clock while the process runs.

use std::cell::Cell;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fs_store::DocStore;
use tokio::sync::OnceCell;

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

    /// Returns the current time in epoch milliseconds: the server's, once the process has
    /// [synced](LeaseClock::sync) with it, else this machine's.
    pub fn now_ms(&self) -> i64 {
        if THREAD_ANCHOR.with(Cell::get).is_some() {
            // A seeded replay keeps the time it was anchored to.
            return local_ms();
        }
        local_ms().saturating_add(SERVER_OFFSET_MS.load(Ordering::Relaxed))
    }

    /// Sets this process's lease clock to the clock of `store` (once per process: later calls
    /// return what the first one found): an Elasticsearch node's, or the embedded store's
    /// boot clock. A server that will not say leaves the machine's wall clock in force; so
    /// does one that cannot be reached (then the next call tries again), with a warning. A
    /// thread [anchored](LeaseClock::anchor_thread) keeps its own time.
    pub async fn sync(store: &dyn DocStore) -> ClockSync {
        static SYNCED: OnceCell<ClockSync> = OnceCell::const_new();
        if THREAD_ANCHOR.with(Cell::get).is_some() {
            return ClockSync::Local;
        }
        if let Some(done) = SYNCED.get() {
            return *done;
        }
        let found = SYNCED
            .get_or_try_init(|| async {
                match read_offset(store).await {
                    Ok(found) => {
                        // Before the cell is set: whoever finds it set finds the offset too.
                        if let ClockSync::Server { offset_ms, .. } = found {
                            SERVER_OFFSET_MS.store(offset_ms, Ordering::Relaxed);
                        }
                        Ok(found)
                    }
                    Err(e) => {
                        tracing::warn!(
                            store = %store.describe(),
                            "cannot read the server's clock ({e}); leases follow this machine's clock for now"
                        );
                        Err(())
                    }
                }
            })
            .await;
        found.copied().unwrap_or(ClockSync::Local)
    }
}

/// How far the server's clock was found ahead of this machine's, in milliseconds (0 until
/// [`LeaseClock::sync`] has read it, and on stores without a server).
static SERVER_OFFSET_MS: AtomicI64 = AtomicI64::new(0);

/// What [`LeaseClock::sync`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockSync {
    /// Leases follow the server's clock, `offset_ms` ahead of this machine's (behind if
    /// negative), known within `within_ms` (half the best round trip).
    Server {
        /// The server's clock minus this machine's.
        offset_ms: i64,
        /// How far the offset may be off.
        within_ms: i64,
    },
    /// Leases follow this machine's clock: the store has no server, or it will not say.
    Local,
}

/// Machine time in epoch milliseconds: the wall clock read once, advanced by tokio's clock.
fn local_ms() -> i64 {
    let (anchor_ms, anchor) = anchor();
    // tokio's clock: the real one, or a paused test's, which starts at the real one.
    let now = tokio::time::Instant::now().into_std();
    let elapsed = now.saturating_duration_since(anchor);
    anchor_ms.saturating_add(i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX))
}

/// A round trip short enough that reading the clock again is not worth a request: the offset
/// is then known within 100 ms, a fifth of the least `max_clock_skew` a lease of 5 s gives
/// (a tenth of the lease), and far less than the default's. (At 20 ms, a loaded machine read
/// it twice for most commands: a one-file `mv` went over its eight requests, issue 16.)
const GOOD_ENOUGH: Duration = Duration::from_millis(200);

/// Reads the server's clock up to three times, keeping the reading of the shortest round
/// trip (NTP's rule: the offset is known within half of it).
async fn read_offset(store: &dyn DocStore) -> fs_store::Result<ClockSync> {
    let mut best: Option<(i64, i64)> = None;
    for _ in 0..3 {
        let sent = local_ms();
        let Some(server) = store.server_time_ms().await? else {
            return Ok(ClockSync::Local);
        };
        let received = local_ms();
        let half_trip = (received - sent).max(0) / 2;
        let offset = server - (sent + half_trip);
        if best.is_none_or(|(_, within)| half_trip < within) {
            best = Some((offset, half_trip));
        }
        if Duration::from_millis(u64::try_from(half_trip * 2).unwrap_or(u64::MAX)) <= GOOD_ENOUGH {
            break;
        }
    }
    let Some((offset_ms, within_ms)) = best else {
        return Ok(ClockSync::Local);
    };
    if offset_ms.abs() > 1_000 {
        tracing::warn!(
            store = %store.describe(),
            offset_ms,
            "this machine's clock is {:.1} s {} the store's: leases follow the store's clock",
            offset_ms.unsigned_abs() as f64 / 1000.0,
            if offset_ms > 0 { "behind" } else { "ahead of" }
        );
    } else {
        tracing::debug!(store = %store.describe(), offset_ms, within_ms, "lease clock set to the server's");
    }
    Ok(ClockSync::Server {
        offset_ms,
        within_ms,
    })
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
