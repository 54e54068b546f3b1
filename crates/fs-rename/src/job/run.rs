//! One job, from taking the locks to releasing them, whatever its kind: the restarts after a
//! fence, the locks of each strategy, the checks, the journal around the writes, the count.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use fs_locks::{LockClient, LockEvent, LockGuard};
use fs_store::{CountingStore, SharedStore, StoredDoc};
use tokio::time::Instant;

use super::at_once::AtOnce;
use super::before_write::Hold;
use super::server_rewrite;
use super::task::Checked;
use super::{journaled, RenameOutcome, Renamer, Task};
use crate::error::{RenameError, Result};
use crate::journal::{Journal, JournalEntry, JournalLock};
use crate::report::{RenameEvent, RenameReport};
use crate::strategy::Strategy;
use crate::tree::{Entry, FsTree};

/// Whether what a job wrote still needs a refresh to be searchable (its last bulk request
/// may have made it so already).
#[must_use]
pub(super) enum Refresh {
    Needed,
    Done,
}

/// How many times a job fenced off before journaling starts over (see [`Journal::fence`]).
const FENCED_RESTARTS: u32 = 3;

impl Renamer {
    /// Runs `task` to its end, starting over when a recovery fenced it off before it
    /// journaled; returns the report whatever the outcome.
    pub(super) async fn run(&self, task: Task) -> RenameOutcome {
        let c = &self.config;
        let mut report = RenameReport::new(task.kind(), task.from(), task.to(), c.strategy);
        if let Err(e) = task.check_paths().and_then(|()| self.can_rewrite(&task)) {
            return RenameOutcome {
                report,
                result: Err(e),
            };
        }
        let mut restarts = 0;
        loop {
            let result = self.run_once(&task, &mut report).await;
            match result {
                // Nothing was written and the locks are released: starting over is safe.
                Err(RenameError::Fenced { job, by }) if restarts < FENCED_RESTARTS => {
                    restarts += 1;
                    report.restarts = restarts;
                    tracing::info!(%job, %by, task = %task.describe(), "fenced off before journaling (the locks expired meanwhile); starting over");
                }
                result => return RenameOutcome { report, result },
            }
        }
    }

    /// One run of the job, from taking the locks to releasing them.
    async fn run_once(&self, task: &Task, report: &mut RenameReport) -> Result<()> {
        let c = &self.config;
        let counted = CountingStore::new(Arc::clone(&c.store));
        let store: SharedStore = Arc::new(counted.clone());
        let tree = FsTree::new(Arc::clone(&store), c.index.clone());
        // The journal id is chosen before any lock is taken, and every lock records it: a
        // recovery that clears these locks after they expire fences this id first.
        let job_id = self
            .first_journal_id()
            .unwrap_or_else(fs_model::entropy::uuid);
        let locks = self.lock_client(store, &tree, task, &job_id);

        let started = Instant::now();
        let guards = self.lock(&locks, &tree, task).await;
        report.phases.locking += started.elapsed();
        let result = match guards {
            Ok(guards) => {
                report.lock_attempts = guards.iter().map(|g| g.grant().attempts).max().unwrap_or(0);
                let mut guards = guards;
                let result = self
                    .locked_work(&tree, &locks, &mut guards, task, &job_id, report)
                    .await;
                let started = Instant::now();
                let result = self
                    .end(&tree, &locks, guards, result, &job_id, report)
                    .await;
                report.phases.releasing += started.elapsed();
                result
            }
            Err(e) => Err(e),
        };
        report.round_trips += counted.round_trips();
        result
    }

    /// The journal id given for the first attempt, if any and not taken yet.
    fn first_journal_id(&self) -> Option<String> {
        let first = self.config.first_journal_id.as_ref()?;
        first.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    fn lock_client(
        &self,
        store: SharedStore,
        tree: &FsTree,
        task: &Task,
        job_id: &str,
    ) -> LockClient {
        let c = &self.config;
        let holder = c.holder.clone().unwrap_or_else(|| task.describe());
        let mut builder = LockClient::builder(store, tree.lock_index())
            .holder(holder)
            .job(job_id)
            .lease(c.lease)
            .wait(c.wait)
            .protocol(c.protocol)
            .protocol_memo(c.protocol_memo.clone());
        if let Some(cancel) = c.cancel.clone() {
            builder = builder.cancel(cancel);
        }
        if let Some(orphans) = c.orphans.clone() {
            builder = builder.orphans(orphans);
        }
        if let Some(shared) = &c.shared {
            builder = shared.lend_to(builder);
        }
        if let Some(sink) = c.progress.clone() {
            builder = builder.on_event(Arc::new(move |event| {
                sink(match event {
                    LockEvent::Refused {
                        blocker, attempts, ..
                    } => RenameEvent::Waiting {
                        blocker: blocker.to_string(),
                        attempts,
                    },
                    LockEvent::Granted { grant, .. } => RenameEvent::Locked {
                        round_trips: grant.round_trips,
                        waited: grant.waited,
                    },
                })
            }));
        }
        builder.build()
    }

    /// Takes the strategy's locks; returns the guards to release, in acquisition order.
    async fn lock(&self, locks: &LockClient, tree: &FsTree, task: &Task) -> Result<Vec<LockGuard>> {
        match self.config.strategy {
            Strategy::Tree => Ok(vec![task.lock_tree(locks).await?]),
            Strategy::Global => Ok(vec![locks.lock_global().await?]),
            Strategy::Document => self.lock_documents(locks, tree, task).await,
            Strategy::None => {
                self.emit(RenameEvent::Locked {
                    round_trips: 0,
                    waited: Duration::ZERO,
                });
                Ok(Vec::new())
            }
        }
    }

    /// The work under the locks: checks, journal entry, writes, close. Returns the entry still
    /// to close where its close goes with the release ([`PendingClose`]).
    async fn locked_work(
        &self,
        tree: &FsTree,
        locks: &LockClient,
        guards: &mut Vec<LockGuard>,
        task: &Task,
        job_id: &str,
        report: &mut RenameReport,
    ) -> Result<Option<PendingClose>> {
        if let Some(hooks) = &self.config.hooks {
            hooks.locked().await;
        }
        let started = Instant::now();
        // Under locks there is no refresh to make: every writer makes its writes searchable
        // before it releases its locks (see `docs/locking.md`), and the locks exclude every
        // writer since. Without locks, what others wrote lately must be made visible first.
        let locked = self.config.strategy != Strategy::None;
        if !locked {
            tree.refresh().await?;
        }
        // A subtree the caller read already (see `RenamerBuilder::known_subtree`): the check
        // reads no more of it than the first document, which tells the source exists.
        let known = match task {
            Task::Rename { .. } if locked => self.config.known.as_ref(),
            _ => None,
        };
        let page_size = if known.is_some() {
            1
        } else {
            self.config.page_size
        };
        let checked = task.check(tree, page_size).await?;
        report.phases.checking += started.elapsed();
        // How many documents lie under the source: what the check read, if it read them all;
        // else counted, beside the journal entry in a locked job (only progress needs it).
        let total = OnceLock::new();
        if checked.whole {
            let _ = total.set(checked.subtree.len() as u64);
        }
        if !locked {
            return self
                .unlocked_work(tree, locks, task, job_id, total.get().copied(), report)
                .await
                .map(|()| None);
        }
        if let Some(&n) = total.get() {
            self.emit(RenameEvent::Checked { total: n });
        }
        let read = self
            .read_for_writes(tree, task, checked, known, &total)
            .await?;
        // A job paused past its lease (by its own clock, less the allowed skew) stops here,
        // before journaling: a recovery may already be clearing its locks. A pause after this
        // check is caught by the fence (see `crate::journal`).
        locks.ensure_held(task.from().as_str()).await?;
        self.journaled_work(
            tree,
            (locks, guards),
            (task, job_id),
            (&total, read),
            report,
        )
        .await
    }

    /// A job without locks, after its check: the subtree may change after the check, so the
    /// writes read it again; no journal, and the refresh made before it returns. `total` is
    /// the count the check found, if it read everything.
    async fn unlocked_work(
        &self,
        tree: &FsTree,
        locks: &LockClient,
        task: &Task,
        job_id: &str,
        total: Option<u64>,
        report: &mut RenameReport,
    ) -> Result<()> {
        let counted = match total {
            Some(n) => n,
            None => tree.count_under(task.from()).await?,
        };
        self.emit(RenameEvent::Checked { total: counted });
        let refresh = self
            .finish(
                Hold::open(tree, locks),
                task,
                job_id,
                (&OnceLock::from(counted), Read::default()),
                report,
            )
            .await?;
        refresh.make(tree).await
    }

    /// What the check read under the locks, handed to the writes: read under the locks, the
    /// subtree stays as it is until they are released, so a rename writes what the check read
    /// (all of it, or its first page) without reading it again; or the subtree the caller
    /// read (`known`), if it still counts as many documents. Sets `total` where that tells it.
    async fn read_for_writes(
        &self,
        tree: &FsTree,
        task: &Task,
        checked: Checked,
        known: Option<&Arc<std::sync::Mutex<Vec<Entry>>>>,
        total: &OnceLock<u64>,
    ) -> Result<Read> {
        let known = match known {
            Some(known) if !checked.whole => {
                // Taken, not copied: an attempt after this one reads the subtree afresh.
                let known = std::mem::take(
                    &mut *known
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner),
                );
                let counted = tree.count_under(task.from()).await?;
                (counted == known.len() as u64).then_some(known)
            }
            _ => None,
        };
        let read = match (task, known) {
            (Task::Rename { .. }, Some(known)) => {
                let _ = total.set(known.len() as u64);
                self.emit(RenameEvent::Checked {
                    total: known.len() as u64,
                });
                Read {
                    known: Some(known),
                    first: Vec::new(),
                }
            }
            (Task::Rename { .. }, None) if checked.whole => Read {
                known: Some(
                    checked
                        .subtree
                        .into_iter()
                        .map(|d| Entry::from_stored(tree.index(), d))
                        .collect::<Result<Vec<_>>>()?,
                ),
                first: Vec::new(),
            },
            (Task::Rename { .. }, None) => Read {
                known: None,
                first: checked.subtree,
            },
            (Task::Copy { .. } | Task::Delete { .. }, _) => Read::default(),
        };
        Ok(read)
    }

    /// The journaled part of a locked job: the entry, the writes, then the close and the
    /// refresh (or the close left to go with the release, returned).
    async fn journaled_work(
        &self,
        tree: &FsTree,
        (locks, guards): (&LockClient, &mut Vec<LockGuard>),
        (task, job_id): (&Task, &str),
        (total, read): (&OnceLock<u64>, Read),
        report: &mut RenameReport,
    ) -> Result<Option<PendingClose>> {
        if let Some(hooks) = &self.config.hooks {
            hooks
                .journaling(job_id)
                .await
                .map_err(|reason| RenameError::NotJournaled {
                    job: job_id.to_owned(),
                    reason,
                })?;
        }
        // A small rename whose writes, entry and release can go in one transaction
        // (`at_once.rs`); if they did not land, it goes on below with what it read.
        let mut read = read;
        if let (Task::Rename { from, to }, Some(entries)) = (task, &read.known) {
            if self.renames_at_once(tree, locks, entries, guards).await {
                let entries = read.known.take().unwrap_or_default();
                let sent = self
                    .rename_at_once(
                        tree,
                        (locks, guards),
                        (task, job_id),
                        (from, to),
                        entries,
                        report,
                    )
                    .await?;
                match sent {
                    AtOnce::Done => return Ok(None),
                    AtOnce::NotLanded(entries) => read.known = Some(entries),
                }
            }
        }
        let entry = self.journal_entry(locks, task, job_id).await;
        let journal = Journal::new(Arc::clone(tree.store()), tree.index());
        let job_id = entry.job_id.clone();
        let lease_ms = u64::try_from(self.config.lease.as_millis()).unwrap_or(u64::MAX);
        // Documents found so far are what the pages read; where the whole count is known
        // (the check, or the count beside the entry), a stop says "N of the total", as the
        // progress did.
        let of_total = |found: u64| total.get().map_or(found, |&t| t.max(found));
        let unfinished = |cause: RenameError, report: &RenameReport| RenameError::Unfinished {
            job: job_id.clone(),
            lease_ms,
            rewritten: report.rewritten,
            found: of_total(report.found),
            cause: Box::new(counted_against(cause, of_total)),
        };
        for guard in guards.iter_mut() {
            guard.keep_on_drop();
        }
        let found = report.found;
        let written = self
            .journal_and_write(tree, locks, task, (&entry, &journal), (total, read), report)
            .await?;
        let (opened, finished) = (written.opened, written.finished);
        // Until the entry is known to have landed or not, the job may be journaled: an
        // unknown outcome counts as journaled, so the locks are left for recovery to resolve.
        // A fence means it was not and never will be: nothing was written (the gate stayed
        // shut), so the locks (what is left of them) are released. Either way the pages
        // read meanwhile were not written: they are not counted as found.
        let version = match opened {
            Ok(version) => version,
            Err(e) => {
                report.found = found;
                return Err(match e {
                    fenced @ RenameError::Fenced { .. } => fenced,
                    e => unfinished(e, report),
                });
            }
        };
        let refresh = match finished {
            Ok(refresh) => refresh,
            // Stopped (a Ctrl-C, a failure) after the entry landed but before any write was
            // sent: the tree is as the job found it, so there is nothing for recovery to
            // finish. The entry is withdrawn (a tombstone that says the job changed nothing,
            // not that it is done) and the locks given back now, rather than left
            // for their lease (`fsrename mv` run again at once would wait it out).
            Err(e) if !written.sent_any => {
                return match journaled(|| journal.withdraw(&job_id, version)).await {
                    Ok(()) => {
                        self.emit(RenameEvent::Closed {
                            job: job_id.clone(),
                        });
                        report.found = found;
                        Err(counted_against(e, of_total))
                    }
                    Err(close) => {
                        tracing::warn!(job = %job_id, error = %close, "withdrawing the entry of a job that wrote nothing failed; it is left for recovery");
                        Err(unfinished(e, report))
                    }
                };
            }
            Err(e) => return Err(unfinished(e, report)),
        };
        // Where the store closes the entry and releases the locks in one transaction, and the
        // writes are searchable already, the close goes with the release (`release.rs`): one
        // round trip fewer, and neither lands without the other.
        if matches!(refresh, Refresh::Done) && guards.len() == 1 && locks.chains_release().await {
            return Ok(Some(PendingClose {
                job_id: job_id.clone(),
                version,
            }));
        }
        // The refresh that makes the writes searchable and the close of the journal go out at
        // once: both must land before the release, and neither depends on the other (every
        // write was acknowledged; the refresh changes only what search sees).
        let (refreshed, closed) = tokio::join!(
            refresh.make(tree),
            journaled(|| journal.close(&job_id, version)),
        );
        if let Err(e) = closed {
            return Err(unfinished(e, report));
        }
        self.emit(RenameEvent::Closed {
            job: job_id.clone(),
        });
        if let Err(e) = refreshed {
            self.keep_locks(locks, guards, &job_id, &e, report).await;
        }
        Ok(None)
    }

    /// After a complete job whose refresh failed: what it wrote may not be searchable yet, so
    /// its locks are kept until their lease runs out, and the report says why.
    async fn keep_locks(
        &self,
        locks: &LockClient,
        guards: &mut Vec<LockGuard>,
        job_id: &str,
        e: &RenameError,
        report: &mut RenameReport,
    ) {
        // The job is complete, but what it wrote may not be searchable yet: releasing
        // now would let the next holder check against a stale view. The locks are kept
        // until their lease runs out (the server's own refresh comes well before that).
        let held = locks.held_items().await;
        for guard in guards.drain(..).rev() {
            guard.abandon().await;
        }
        report.locks_left = held.iter().map(fs_locks::LockItem::label).collect();
        report.warnings.push(format!(
            "the {} is complete, but refreshing the index failed ({e}): its locks stay until their lease ({:?}) runs out, so that nobody checks against a view without its writes; then `fsrename recover` (or a running `fsrename serve`) deletes them (journal id {job_id})",
            report.kind, self.config.lease
        ));
    }

    /// Writes everything the task writes and checks the count: the part of a job that a
    /// recovery repeats. `job_id` is the journal id (a copy's new ids derive from it).
    /// `total` is how many documents lie under the source (once known: it may be counted
    /// while the first pages are read), and `read` what the check read of them under the
    /// locks (a rename then does not read it again; when that is all of them, its one write
    /// also makes itself searchable). Returns whether the writes still need a refresh: the
    /// caller sends it (with the journal's close, in a journaled job) before the release.
    pub(super) async fn finish(
        &self,
        hold: Hold<'_>,
        task: &Task,
        job_id: &str,
        (total, read): (&OnceLock<u64>, Read),
        report: &mut RenameReport,
    ) -> Result<Refresh> {
        let started = Instant::now();
        let mut refreshed = false;
        let written = match task {
            Task::Rename { from, to } => match read.known {
                _ if self.rewrites_on_server(hold.tree, total.get().copied()) => {
                    let on_server = self
                        .rewrite_on_server(hold, (from, to), job_id, total, report)
                        .await;
                    match on_server {
                        // The task refreshed the index when it ended.
                        Ok(true) => {
                            refreshed = true;
                            Ok(())
                        }
                        Ok(false) => {
                            self.rewrite(hold, (from, to), (total, read.first), report)
                                .await
                        }
                        Err(e) if server_rewrite::lost_the_task(&e) => {
                            self.finish_on_client(hold, (from, to), (job_id, e), total, report)
                                .await
                        }
                        Err(e) => Err(e),
                    }
                }
                Some(entries) => self
                    .rewrite_known(hold, (from, to), entries, report)
                    .await
                    .map(|done| refreshed = matches!(done, Refresh::Done)),
                None => {
                    self.rewrite(hold, (from, to), (total, read.first), report)
                        .await
                }
            },
            Task::Copy { from, to } => self.copy_all(hold, (from, to), job_id, total, report).await,
            Task::Delete {
                path,
                recursive: true,
            } => self.delete_subtree(hold, path, job_id, total, report).await,
            Task::Delete { path, .. } => self.delete_all(hold, path, total, report).await,
        };
        report.phases.rewriting = started.elapsed();
        written.map_err(|e| {
            counted_against(e, |found| total.get().map_or(found, |&t| t.max(found)))
        })?;
        self.written_all(task, report).await?;
        Ok(if refreshed {
            Refresh::Done
        } else {
            Refresh::Needed
        })
    }

    /// What follows the last write: the count checked against what was found, and the hooks.
    pub(super) async fn written_all(&self, task: &Task, report: &RenameReport) -> Result<()> {
        if report.rewritten != report.found {
            return Err(RenameError::CountMismatch {
                rewritten: report.rewritten,
                found: report.found,
            });
        }
        if let Some(hooks) = &self.config.hooks {
            hooks.rewritten().await;
            if let Task::Rename { from, to } = task {
                hooks.committed(from, to).await;
            }
        }
        Ok(())
    }

    async fn journal_entry(&self, locks: &LockClient, task: &Task, job_id: &str) -> JournalEntry {
        let owner = locks.owner();
        JournalEntry {
            job_id: job_id.to_owned(),
            kind: task.kind(),
            from: task.from().as_str().to_owned(),
            to: task.to().as_str().to_owned(),
            strategy: self.config.strategy,
            state: "running".to_owned(),
            owner: owner.process_id.clone(),
            previous_owners: Vec::new(),
            holder: owner.holder.clone(),
            started_at: fs_locks::LeaseClock::new().now_ms(),
            lease_ms: u64::try_from(self.config.lease.as_millis()).unwrap_or(u64::MAX),
            recoveries: 0,
            locks: locks
                .held_items()
                .await
                .iter()
                .map(JournalLock::from)
                .collect(),
        }
    }
}

/// `e`, a stop (a cancellation, a conflict) saying how many documents the job had found so
/// far, saying instead `of_total` of them: the whole count where it is known, as the progress
/// said ("stopped after 12 249 of 20 043", not "of the 12 250 read so far").
fn counted_against(e: RenameError, of_total: impl Fn(u64) -> u64) -> RenameError {
    match e {
        RenameError::Cancelled {
            kind,
            rewritten,
            found,
        } => RenameError::Cancelled {
            kind,
            rewritten,
            found: of_total(found),
        },
        RenameError::Conflict {
            kind,
            path,
            rewritten,
            found,
        } => RenameError::Conflict {
            kind,
            path,
            rewritten,
            found: of_total(found),
        },
        e => e,
    }
}

/// A journal entry whose close goes with the release of the job's locks, in one transaction
/// (see [`fs_locks::LockGuard::release_after`]).
#[derive(Debug)]
pub(super) struct PendingClose {
    pub job_id: String,
    pub version: fs_store::Version,
}

/// What a job's check read, handed to its writes: the whole subtree of a rename's source,
/// parsed (`known`), or the first page of a larger one (`first`, as read). Empty for a copy,
/// a delete, a job without locks and a recovery: their writes read it all themselves.
#[derive(Debug, Default)]
pub(super) struct Read {
    pub known: Option<Vec<Entry>>,
    pub first: Vec<StoredDoc>,
}

impl Refresh {
    /// Refreshes the tree index if needed.
    pub(super) async fn make(self, tree: &FsTree) -> Result<()> {
        match self {
            Refresh::Needed => tree.refresh().await,
            Refresh::Done => Ok(()),
        }
    }
}
