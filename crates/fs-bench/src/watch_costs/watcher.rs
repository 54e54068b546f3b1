//! A watcher run in process for the benchmark: [`Watch`] starts `watch_dir` on a directory,
//! waits for its first run, and tells when it has caught up with a workload, and at what
//! count of the store's requests.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use fs_model::FsPath;
use fs_rename::{watch_dir, FsTree, WatchEvent, WatchOptions, WatchReport, WatchSink};
use fs_store::CountingStore;
use tokio::sync::oneshot;

/// How long after a workload's last command returned the watcher's caught-up is trusted:
/// notify's thread may not have handed the kernel's last events over before, and an event
/// handed over takes the caught-up back (`Gathering`). A debounce's worth.
const SETTLE: Duration = Duration::from_millis(250);

/// How long a watch told to stop may take before its task is aborted.
const STOP_WITHIN: Duration = Duration::from_secs(30);

/// What the sink saw of the watch.
#[derive(Debug, Default)]
struct Seen {
    /// Batches applied so far.
    batches: u64,
    /// Rescans among them.
    rescans: u64,
    /// Changes the batches could not apply.
    failures: Vec<String>,
    /// Entries the first run found (files and directories).
    first_entries: u64,
    /// The caught-up standing now, if any (taken back by the next `Gathering`): when it was
    /// said, and the store's requests by then.
    caught_up: Option<(Instant, u64)>,
}

/// The moment a watch caught up.
#[derive(Debug, Clone, Copy)]
pub struct CaughtUp {
    /// When the watcher said so.
    pub at: Instant,
    /// The store's requests counted by then.
    pub requests: u64,
}

/// Where a watch stands: batches applied, rescans and failures so far.
#[derive(Debug, Clone, Copy, Default)]
pub struct Tally {
    pub batches: u64,
    pub rescans: u64,
    pub failures: usize,
}

/// A running watch: stop it to get its report.
pub struct Watch {
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<fs_rename::Result<WatchReport>>,
    seen: Arc<Mutex<Seen>>,
    /// How long the first run took.
    pub first_run: Duration,
    /// Entries the first run found (files and directories).
    pub first_entries: u64,
}

impl Watch {
    /// Starts watching `root` into `tree` at `at`, `tree`'s store being `counting` (whose count
    /// the caught-ups carry), and waits for the first run, `timeout` at most.
    ///
    /// # Errors
    /// If the watch cannot start, its first run fails, or it takes longer than `timeout`.
    pub async fn start(
        tree: FsTree,
        root: PathBuf,
        at: FsPath,
        counting: CountingStore,
        timeout: Duration,
    ) -> anyhow::Result<Watch> {
        let (stop, stopped) = oneshot::channel::<()>();
        let (ready_tx, ready) = oneshot::channel::<()>();
        let ready_tx = Mutex::new(Some(ready_tx));
        let seen = Arc::new(Mutex::new(Seen::default()));
        let by_sink = Arc::clone(&seen);
        let sink: WatchSink = Arc::new(move |event| match event {
            WatchEvent::Ready(report) => {
                lock(&by_sink).first_entries = report.files + report.dirs;
                if let Some(tx) = lock(&ready_tx).take() {
                    let _ = tx.send(());
                }
            }
            WatchEvent::Gathering => lock(&by_sink).caught_up = None,
            WatchEvent::Applying { .. } => {}
            WatchEvent::Batch(batch) => {
                let mut seen = lock(&by_sink);
                seen.batches += 1;
                seen.rescans += u64::from(batch.rescan);
                seen.failures.extend(batch.failures.iter().cloned());
            }
            WatchEvent::CaughtUp => {
                lock(&by_sink).caught_up = Some((Instant::now(), counting.round_trips()));
            }
        });
        let started = Instant::now();
        let task = tokio::spawn(async move {
            let options = WatchOptions::default();
            let stop = async {
                let _ = stopped.await;
            };
            watch_dir(&tree, &root, &at, &options, stop, Some(sink)).await
        });
        match tokio::time::timeout(timeout, ready).await {
            Ok(Ok(())) => {}
            // The sender was dropped: the watch ended before its first run did.
            Ok(Err(_)) => {
                let ended = task.await.context("the watch task")?;
                ended.context("the watch's first run")?;
                anyhow::bail!("the watch ended before its first run did");
            }
            Err(_) => {
                task.abort();
                anyhow::bail!("the watch's first run took more than {timeout:?}");
            }
        }
        let first_entries = lock(&seen).first_entries;
        Ok(Watch {
            stop,
            task,
            seen,
            first_run: started.elapsed(),
            first_entries,
        })
    }

    /// Batches, rescans and failures so far.
    pub fn tally(&self) -> Tally {
        let seen = lock(&self.seen);
        Tally {
            batches: seen.batches,
            rescans: seen.rescans,
            failures: seen.failures.len(),
        }
    }

    /// The failures of the batches from the `from`-th on.
    pub fn failures_since(&self, from: usize) -> Vec<String> {
        lock(&self.seen)
            .failures
            .iter()
            .skip(from)
            .cloned()
            .collect()
    }

    /// Waits until the watch has caught up with a workload whose commands returned at
    /// `returned`, before which it had applied `batches_before` batches: a batch applied
    /// since, and a caught-up standing [`SETTLE`] after `returned` (said before `returned`
    /// if the watch was that quick). `None` if that is not so by `deadline`.
    pub async fn caught_up_after(
        &self,
        returned: Instant,
        batches_before: u64,
        deadline: Instant,
    ) -> Option<CaughtUp> {
        tokio::time::sleep_until((returned + SETTLE).into()).await;
        loop {
            {
                let seen = lock(&self.seen);
                if let (true, Some((at, requests))) =
                    (seen.batches > batches_before, seen.caught_up)
                {
                    return Some(CaughtUp { at, requests });
                }
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Stops the watch and returns its report; aborts it if it takes longer than
    /// [`STOP_WITHIN`].
    ///
    /// # Errors
    /// If the watch failed, or did not stop in time.
    pub async fn stop(self) -> anyhow::Result<WatchReport> {
        let _ = self.stop.send(());
        let mut task = self.task;
        match tokio::time::timeout(STOP_WITHIN, &mut task).await {
            Ok(ended) => Ok(ended.context("the watch task")??),
            Err(_) => {
                task.abort();
                anyhow::bail!("the watch did not stop within {STOP_WITHIN:?}")
            }
        }
    }
}

/// Locks `mutex`, poisoned or not: the sink's state stays readable after a panic elsewhere.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}
