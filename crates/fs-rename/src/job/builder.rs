//! [`RenamerBuilder`]: the options of a [`Renamer`]'s jobs, each with its default.

use std::sync::Arc;
use std::time::Duration;

use fs_locks::{LockProtocol, Orphans, ProtocolMemo, SharedIntentions};
use fs_store::SharedStore;

use super::Renamer;
use crate::ops::LockSettings;
use crate::report::{ProgressSink, RenameHooks};
use crate::rewrite_mode::Rewrite;
use crate::strategy::Strategy;

/// How many bulk requests of a rename's rewrite are under way at once, by default: the
/// measured knee on every backend of `docs/benchmarks.md` (section 2).
pub const DEFAULT_IN_FLIGHT: usize = 4;

/// Builds a [`Renamer`].
#[derive(Clone)]
pub struct RenamerBuilder {
    pub(super) store: SharedStore,
    pub(super) index: String,
    pub(super) strategy: Strategy,
    pub(super) versioned: bool,
    pub(super) page_size: usize,
    pub(super) in_flight: usize,
    pub(super) lease: Duration,
    pub(super) wait: Duration,
    pub(super) holder: Option<String>,
    pub(super) progress: Option<ProgressSink>,
    pub(super) hooks: Option<Arc<dyn RenameHooks>>,
    pub(super) protocol: LockProtocol,
    /// The protocol decided by the first job's client, shared by the later jobs' (and by the
    /// clones of the renamer): the scripts are stored once, not once per job.
    pub(super) protocol_memo: ProtocolMemo,
    pub(super) cancel: Option<tokio::sync::watch::Receiver<bool>>,
    pub(super) rewrite: Rewrite,
    /// The source's subtree as the caller read it (see [`RenamerBuilder::known_subtree`]).
    /// Taken by the first attempt that uses it.
    pub(super) known: Option<Arc<std::sync::Mutex<Vec<crate::tree::Entry>>>>,
    pub(super) orphans: Option<Arc<dyn Orphans>>,
    /// See [`RenamerBuilder::refresh_apart`].
    pub(super) refresh_apart: bool,
    /// See [`RenamerBuilder::share_intentions`].
    pub(super) shared: Option<SharedIntentions>,
    /// See [`RenamerBuilder::first_journal_id`]. Taken by the first attempt.
    pub(super) first_journal_id: Option<Arc<std::sync::Mutex<Option<String>>>>,
}

impl RenamerBuilder {
    /// Stops the job when `cancel` turns true: while it waits for locks, or before its next
    /// page; it then releases its locks and fails with [`RenameError::Cancelled`](crate::RenameError::Cancelled) (or a lock
    /// error saying so). Default: never cancelled.
    pub fn cancel(mut self, cancel: tokio::sync::watch::Receiver<bool>) -> RenamerBuilder {
        self.cancel = Some(cancel);
        self
    }

    /// Sets where a rename's documents are rewritten (see [`Rewrite`]). Default:
    /// [`Rewrite::Auto`].
    pub fn rewrite(mut self, rewrite: Rewrite) -> RenamerBuilder {
        self.rewrite = rewrite;
        self
    }

    /// Sets how lock documents are written. Default: [`LockProtocol::Auto`].
    pub fn lock_protocol(mut self, protocol: LockProtocol) -> RenamerBuilder {
        self.protocol = protocol;
        self.protocol_memo = ProtocolMemo::new();
        self
    }

    /// Shares `memo`, the lock protocol decided by the first client that needs it, with
    /// every renamer built with the same memo (set after [`RenamerBuilder::lock_protocol`],
    /// which starts a memo of its own). A process that builds a renamer per job (the service)
    /// decides once: deciding reads a stored script on the server, a request each job would
    /// otherwise make (on a cluster, one its master answers).
    pub fn protocol_memo(mut self, memo: ProtocolMemo) -> RenamerBuilder {
        self.protocol_memo = memo;
        self
    }

    /// Sets the locking scheme. Default: [`Strategy::Tree`].
    pub fn strategy(mut self, strategy: Strategy) -> RenamerBuilder {
        self.strategy = strategy;
        self
    }

    /// Makes every rewrite (and every delete) conditional on the version read (`if_seq_no`/`if_primary_term`).
    /// Turn it off only to show the lost update it prevents. Default: true.
    pub fn versioned(mut self, yes: bool) -> RenamerBuilder {
        self.versioned = yes;
        self
    }

    /// Sets how many documents are read and written (rewritten, copied, deleted) per round
    /// trip. Default: 1 000.
    pub fn page_size(mut self, size: usize) -> RenamerBuilder {
        self.page_size = size.max(1);
        self
    }

    /// Sets how many bulk requests of a rename's rewrite, or pages of a copy through a write
    /// gate (`copy_gated.rs`), may be under way at once; the next page is read meanwhile. One
    /// writes a page at a time (and still reads the next one while it does). Default: [`DEFAULT_IN_FLIGHT`], chosen by measurement (`docs/benchmarks.md`).
    pub fn in_flight(mut self, bulks: usize) -> RenamerBuilder {
        self.in_flight = bulks.max(1);
        self
    }

    /// Sets the lease of the job's locks. Default: 30 s.
    pub fn lease(mut self, lease: Duration) -> RenamerBuilder {
        self.lease = lease;
        self
    }

    /// Sets how long the job waits for its locks. Default: 30 s.
    pub fn wait(mut self, wait: Duration) -> RenamerBuilder {
        self.wait = wait;
        self
    }

    /// Lets the job finish what a job that died left in its way (see [`Orphans`]; the
    /// service and the command line give [`FinishOrphans`](crate::FinishOrphans)). Default:
    /// none, and a dead job's locks are waited for until recovery clears them.
    pub fn orphans(mut self, orphans: Arc<dyn Orphans>) -> RenamerBuilder {
        self.orphans = Some(orphans);
        self
    }

    /// Takes the lease, the wait, the lock protocol and what to do about a dead job's locks
    /// from `locks`.
    pub fn locks(self, locks: &LockSettings) -> RenamerBuilder {
        let mut builder = self
            .lease(locks.lease)
            .wait(locks.wait)
            .lock_protocol(locks.protocol);
        builder.orphans = locks.orphans.clone();
        builder
    }

    /// Sets the label written into lock documents. Default: `mv FROM TO` (`cp FROM TO`,
    /// `rm PATH`).
    pub fn holder(mut self, holder: impl Into<String>) -> RenamerBuilder {
        self.holder = Some(holder.into());
        self
    }

    /// Calls `sink` with every [`RenameEvent`](crate::RenameEvent). Default: none.
    pub fn progress(mut self, sink: ProgressSink) -> RenamerBuilder {
        self.progress = Some(sink);
        self
    }

    /// Steps into the job at its [`RenameHooks`]. Default: none.
    pub fn hooks(mut self, hooks: Arc<dyn RenameHooks>) -> RenamerBuilder {
        self.hooks = Some(hooks);
        self
    }

    /// Gives a rename the documents of its source's subtree as the caller read them, with
    /// their versions: under its locks the job counts the subtree instead of reading it, and
    /// if the count agrees, writes these conditionally on the versions given. A document
    /// changed since makes its write fail (the job stops, and recovery finishes it from a
    /// fresh read); one added since makes the count differ, and the job reads the subtree as
    /// usual. For the indexer, which has read the subtree already to find the move.
    pub(crate) fn known_subtree(mut self, entries: Vec<crate::tree::Entry>) -> RenamerBuilder {
        self.known = Some(Arc::new(std::sync::Mutex::new(entries)));
        self
    }

    /// Makes a job's writes searchable with a refresh of its own, sent beside the close of
    /// its journal entry, rather than in its last bulk request (`refresh=true` on
    /// Elasticsearch). The same guarantee (searchable before released) and the same round
    /// trips, one request more. For a process that runs many jobs at once (the service):
    /// Elasticsearch refreshes for a bulk's `refresh=true` on the thread that wrote it, so
    /// with many jobs the writes of every job (their lock updates too) wait behind the
    /// refreshes of the others, where a `_refresh` runs on a pool of its own. Only where the
    /// store makes refreshed bulks in one request; elsewhere it changes nothing. Default:
    /// off (a single `fsrename mv` saves the request). Measured in `docs/benchmarks.md`,
    /// section 6.
    pub fn refresh_apart(mut self, yes: bool) -> RenamerBuilder {
        self.refresh_apart = yes;
        self
    }

    /// Makes the jobs' tree locks borrow the intention locks on their ancestors from
    /// `shared`, the process's, instead of each taking its own (see
    /// [`SharedIntentions`]): a shared ancestor's lock document is written once per process,
    /// not twice per job. For a process that runs many jobs under the same directories (the
    /// service). Every recovery that may clear this tree's expired locks must be of a version
    /// that knows these holds (`docs/locking.md`). Default: off.
    pub fn share_intentions(mut self, shared: SharedIntentions) -> RenamerBuilder {
        self.shared = Some(shared);
        self
    }

    /// Makes `id` the journal id of the first attempt of the job (a job fenced off before it
    /// journals starts over with an id of its own), instead of one chosen when it starts: for
    /// a caller that stores the id with its record of the job before the job runs (the
    /// service), so that its [`RenameHooks::journaling`](crate::RenameHooks::journaling)
    /// finds it stored and need not write it. `id` must be new (a random UUID): a journal id
    /// names one attempt, and fences and entries are looked up by it. Default: chosen when
    /// the job starts.
    pub fn first_journal_id(mut self, id: impl Into<String>) -> RenamerBuilder {
        self.first_journal_id = Some(Arc::new(std::sync::Mutex::new(Some(id.into()))));
        self
    }

    /// Returns the renamer.
    pub fn build(self) -> Renamer {
        Renamer { config: self }
    }
}

impl Renamer {
    /// Starts building a renamer for the tree index `index` on `store`.
    pub fn builder(store: SharedStore, index: impl Into<String>) -> RenamerBuilder {
        RenamerBuilder {
            store,
            index: index.into(),
            strategy: Strategy::Tree,
            versioned: true,
            page_size: 1_000,
            in_flight: DEFAULT_IN_FLIGHT,
            lease: Duration::from_secs(30),
            wait: Duration::from_secs(30),
            holder: None,
            progress: None,
            hooks: None,
            protocol: LockProtocol::Auto,
            protocol_memo: ProtocolMemo::new(),
            cancel: None,
            rewrite: Rewrite::default(),
            known: None,
            orphans: None,
            refresh_apart: false,
            shared: None,
            first_journal_id: None,
        }
    }
}
