//! Measurement 5: fair waiting. How long a rename of `/p` waits while [`STREAMS`] streams of
//! small renames run under it, before fair waiting and with it.
//!
//! Each stream has a client of its own and renames `/p/dI/fN` to `/p/dI/gN` over and over, so
//! that someone almost always holds an IX on `/p`. Another client then asks to rename `/p` to
//! `/q` (an X on `/p`), trial after trial, each trial starting under full load.
//!
//! - **After** (fair waiting): refused for 50 ms, the rename registers as a waiter on `/p`,
//!   where the streams' younger requests are then refused; it is granted once the small
//!   renames in progress are given back.
//! - **Before** (no queue): the same rename by a client that already holds a lock elsewhere.
//!   Such a client neither waits behind waiters nor registers (a holder never waits for a
//!   waiter), which is how every request behaved before fair waiting: it is granted only at an
//!   instant when no stream holds `/p`. Its wait is capped; a timeout is starvation.
//!
//! Nothing here is asserted: the figures go to the report.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use fs_locks::{LockClient, LockError};
use fs_model::FsPath;
use fs_store::SharedStore;
use tokio::sync::watch;
use tokio::task::JoinSet;

/// How many streams of small renames run under `/p`.
pub const STREAMS: usize = 8;

/// How long a small rename holds its locks: a tiny hold, so that `/p` is free of IX locks only
/// when every stream happens to be between two renames.
pub const STREAM_HOLD: Duration = Duration::from_millis(1);

/// How long the rename of `/p` holds its locks once granted.
pub const PARENT_HOLD: Duration = Duration::from_millis(5);

/// How long a small rename may wait before it counts as timed out (the stream then starts the
/// next one). Patient: while `/p` is being renamed, or queued for, the streams wait their turn.
const STREAM_WAIT: Duration = Duration::from_secs(10);

/// How long the rename of `/p` may wait with fair waiting: far more than it should ever need,
/// so that a starved trial shows as a timeout rather than a hang.
pub const FAIR_CAP: Duration = Duration::from_secs(30);

/// How long the rename of `/p` may wait without the queue before it counts as starved.
pub const NO_QUEUE_CAP: Duration = Duration::from_secs(10);

/// How many small renames are granted before each trial: two rounds of every stream, so that
/// each trial starts under full load (the streams back off, by up to 500 ms, while the
/// previous trial's rename holds `/p` or waits for it).
pub const WARM_UP_RENAMES: u64 = 2 * STREAMS as u64;

/// How long the streams may take to make [`WARM_UP_RENAMES`] renames before the measurement
/// gives up: far longer than a busy machine needs; past it something is broken.
const STALL: Duration = Duration::from_secs(120);

/// How the rename of `/p` waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waiting {
    /// Before fair waiting: its client holds a lock elsewhere, so it ignores the queue.
    NoQueue,
    /// Fair waiting: it registers as a waiter and younger conflicting requests are refused.
    Fair,
}

impl Waiting {
    /// Returns how long the rename of `/p` may wait.
    pub fn cap(self) -> Duration {
        match self {
            Waiting::NoQueue => NO_QUEUE_CAP,
            Waiting::Fair => FAIR_CAP,
        }
    }

    /// Returns the row label of the report.
    pub fn label(self) -> &'static str {
        match self {
            Waiting::NoQueue => "before (no queue)",
            Waiting::Fair => "after (fair waiting)",
        }
    }
}

/// One rename of `/p`: how long it waited, from its first attempt to its grant or timeout.
#[derive(Debug, Clone, Copy)]
pub struct Trial {
    pub waited: Duration,
    pub timed_out: bool,
}

/// The trials of one way of waiting, and what the streams did meanwhile.
#[derive(Debug, Clone)]
pub struct FairnessRow {
    pub waiting: Waiting,
    pub trials: Vec<Trial>,
    /// Small renames granted while the trials ran (warm-ups included).
    pub stream_renames: u64,
    /// Small renames that gave up after [`STREAM_WAIT`].
    pub stream_timeouts: u64,
}

impl FairnessRow {
    /// Returns the `pct` percentile of the waits by nearest rank (a timed-out trial counts
    /// as what it waited, and sorts above every grant).
    pub fn percentile(&self, pct: usize) -> Option<Trial> {
        let mut sorted = self.trials.clone();
        sorted.sort_by_key(|t| (t.timed_out, t.waited));
        let rank = (sorted.len() * pct).div_ceil(100).max(1);
        sorted.get(rank - 1).copied()
    }

    /// Returns the longest wait.
    pub fn max(&self) -> Option<Trial> {
        self.percentile(100)
    }

    /// Returns how many trials timed out.
    pub fn timeouts(&self) -> usize {
        self.trials.iter().filter(|t| t.timed_out).count()
    }
}

/// Runs `trials` renames of `/p` under the streams, without the queue and then with it, each
/// in a lock index of its own (deleted afterwards).
pub async fn fairness(store: &SharedStore, trials: usize) -> anyhow::Result<Vec<FairnessRow>> {
    let mut rows = Vec::new();
    for waiting in [Waiting::NoQueue, Waiting::Fair] {
        let index = fs_testkit::unique_name("bench-fair");
        let row = measure(store, &index, waiting, trials).await;
        // Deleted on every exit path: a failed run leaves no lock documents behind. A delete
        // that fails (a busy server answering after the client's timeout, as a loaded 2-core
        // Elasticsearch did) does not throw the measurement away: it names what is left.
        if let Err(e) = store.delete_index(&index).await {
            eprintln!(
                "fairness: could not delete the lock index `{index}` ({e}); delete it by hand"
            );
        }
        let row = row?;
        let ms = |t: Option<Trial>| t.map_or(f64::NAN, |t| t.waited.as_secs_f64() * 1e3);
        eprintln!(
            "fairness {}: {} trials, wait p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms, {} timed out; streams: {} renames, {} timed out",
            waiting.label(),
            row.trials.len(),
            ms(row.percentile(50)),
            ms(row.percentile(99)),
            ms(row.max()),
            row.timeouts(),
            row.stream_renames,
            row.stream_timeouts,
        );
        rows.push(row);
    }
    Ok(rows)
}

/// One way of waiting: starts the streams, runs the trials, stops the streams.
async fn measure(
    store: &SharedStore,
    index: &str,
    waiting: Waiting,
    trials: usize,
) -> anyhow::Result<FairnessRow> {
    LockClient::builder(Arc::clone(store), index)
        .build()
        .ensure_index()
        .await?;
    let streams = Streams::start(store, index);
    let measured = rename_the_parent(store, index, waiting, trials, &streams).await;
    // Stopped first: if a stream failed, its error says more than the stall it caused.
    let (stream_renames, stream_timeouts) = streams.stop().await?;
    Ok(FairnessRow {
        waiting,
        trials: measured?,
        stream_renames,
        stream_timeouts,
    })
}

/// Renames `/p` to `/q` `trials` times under the streams, each trial under full load.
async fn rename_the_parent(
    store: &SharedStore,
    index: &str,
    waiting: Waiting,
    trials: usize,
    streams: &Streams,
) -> anyhow::Result<Vec<Trial>> {
    let parent = LockClient::builder(Arc::clone(store), index)
        .holder("mv /p /q")
        .wait(waiting.cap())
        .build();
    // Decided before the first trial, so that no trial's wait includes it.
    parent.protocol().await?;
    // A client that holds a lock ignores the queue: holding one elsewhere for the whole run
    // puts the rename of `/p` back where every request was before fair waiting.
    let elsewhere = match waiting {
        Waiting::NoQueue => Some(parent.lock_tree(&FsPath::parse("/elsewhere")?).await?),
        Waiting::Fair => None,
    };
    let measured = async {
        let (p, q) = (FsPath::parse("/p")?, FsPath::parse("/q")?);
        let mut out = Vec::with_capacity(trials);
        for _ in 0..trials {
            streams.under_load().await?;
            match parent.lock_rename(&p, &q).await {
                Ok(guard) => {
                    out.push(Trial {
                        waited: guard.grant().waited,
                        timed_out: false,
                    });
                    tokio::time::sleep(PARENT_HOLD).await;
                    guard.release().await?;
                }
                Err(LockError::Timeout { waited, .. }) => out.push(Trial {
                    waited,
                    timed_out: true,
                }),
                Err(e) => return Err(anyhow::Error::new(e).context("renaming /p")),
            }
        }
        anyhow::Ok(out)
    }
    .await;
    if let Some(guard) = elsewhere {
        guard.release().await?;
    }
    measured
}

/// The streams of small renames under `/p`: the renames granted so far, and how to stop them.
struct Streams {
    stop_tx: watch::Sender<bool>,
    renames_rx: watch::Receiver<u64>,
    tasks: JoinSet<anyhow::Result<u64>>,
}

impl Streams {
    /// Starts [`STREAMS`] streams, each with a client of its own (separate owners, so that
    /// they exclude each other and queue like separate jobs).
    fn start(store: &SharedStore, index: &str) -> Streams {
        let (stop_tx, stop_rx) = watch::channel(false);
        let (renames_tx, renames_rx) = watch::channel(0u64);
        let mut tasks = JoinSet::new();
        for i in 0..STREAMS {
            // Stopping cancels a waiting acquisition at once, holding nothing.
            let client = LockClient::builder(Arc::clone(store), index)
                .holder(format!("stream {i}: mv /p/d{i}/fN /p/d{i}/gN"))
                .wait(STREAM_WAIT)
                .cancel(stop_rx.clone())
                .build();
            let (stop_rx, renames_tx) = (stop_rx.clone(), renames_tx.clone());
            tasks.spawn(async move {
                let mut timeouts = 0;
                for n in 0u64.. {
                    if *stop_rx.borrow() {
                        break;
                    }
                    let from = FsPath::parse(&format!("/p/d{i}/f{n}"))?;
                    let to = FsPath::parse(&format!("/p/d{i}/g{n}"))?;
                    match client.lock_rename(&from, &to).await {
                        Ok(guard) => {
                            renames_tx.send_modify(|n| *n += 1);
                            tokio::time::sleep(STREAM_HOLD).await;
                            guard.release().await?;
                        }
                        Err(LockError::Timeout { .. }) => timeouts += 1,
                        Err(LockError::Cancelled { .. }) => break,
                        Err(e) => return Err(anyhow::Error::new(e).context(format!("stream {i}"))),
                    }
                }
                anyhow::Ok(timeouts)
            });
        }
        Streams {
            stop_tx,
            renames_rx,
            tasks,
        }
    }

    /// Waits until the streams have been granted [`WARM_UP_RENAMES`] more renames.
    ///
    /// # Errors
    /// If they take longer than [`STALL`].
    async fn under_load(&self) -> anyhow::Result<()> {
        let mut renames_rx = self.renames_rx.clone();
        let target = *renames_rx.borrow_and_update() + WARM_UP_RENAMES;
        tokio::time::timeout(STALL, renames_rx.wait_for(|n| *n >= target))
            .await
            .with_context(|| {
                format!("the streams made fewer than {WARM_UP_RENAMES} renames in {STALL:?}")
            })??;
        Ok(())
    }

    /// Stops the streams; returns their renames and their timeouts.
    async fn stop(mut self) -> anyhow::Result<(u64, u64)> {
        // The send fails only when every stream has ended already: nothing left to stop.
        let _ = self.stop_tx.send(true);
        let mut timeouts = 0;
        while let Some(done) = self.tasks.join_next().await {
            timeouts += done??;
        }
        let renames = *self.renames_rx.borrow();
        Ok((renames, timeouts))
    }
}
