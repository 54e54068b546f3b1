//! [`Watched`]: the store beneath every simulated job, reader and recoverer (each behind a
//! fault injector of its own). After every write that reaches it, the step, it checks the
//! invariants; on request it keeps a trace of every call and answer, which is what a replay
//! of the same seed must reproduce exactly.
//!
//! [`World`] holds the model ([`Expected`]) and moves it on as jobs commit. A rename commits
//! when its job (or the recovery that finishes it) says so through
//! [`RenameHooks::committed`], after its last write. The hooks say nothing of which copy or
//! delete is done (they call [`RenameHooks::rewritten`] alone, and one recovery finishes
//! several jobs with one set of hooks), so a copy or a delete commits at the write that
//! closes its journal entry, which the job (or its recoverer) sends right after the hook:
//! the same moment, seen from the store. Closing a rename's entry checks that its hook came
//! first. A job that stopped before its first write withdraws its entry instead
//! ([`fs_rename::Journal::withdraw`]): the model stays as it was.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use fs_locks::LeaseClock;
use fs_model::{journal_index_name, FsDoc, FsPath};
use fs_rename::{JobKind, JournalEntry, JournalFence, RenameHooks};
use fs_store::{
    BulkItemResult, BulkOp, Capabilities, Cursor, DocStore, Page, Result, Scope, ScriptedUpdate,
    SearchRequest, SqliteStore, StoreLayer, StoredDoc, UpdateItemResult, Version,
};
use serde_json::Value;

use crate::invariants::{self, Expected};
use crate::INDEX;

/// How long after its registration expired an older waiter may still be named as the reason
/// for a refusal: an attempt decides at its start time and reports its refusal after undoing
/// what it took (a release may retry for up to a lease) and registering as a waiter itself.
pub const WAITER_SLACK_MS: i64 = 1_500;

/// What the world counted, beyond the jobs' own outcomes.
#[derive(Debug, Default, Clone)]
pub struct Counters {
    /// Jobs committed into the model, by kind (renames by their hook, the others at close).
    pub renames_committed: u64,
    pub copies_committed: u64,
    pub deletes_committed: u64,
    /// Distinct waiter registrations (lock path, process) seen in the lock index, and those
    /// of them seen still there after their expiry (a waiter that died or gave up without
    /// removing it): what the refusal check has to tell apart.
    pub waiters_registered: u64,
    pub waiters_expired_in_place: u64,
    /// Refusals by an older waiter that the jobs reported, and those of them whose waiter's
    /// registration had expired when the refusal was reported (but within the slack).
    pub waiter_refusals: u64,
    pub late_waiter_refusals: u64,
    /// Consistent listings compared with the model.
    pub listings_checked: u64,
}

/// The simulated world: the store, what is expected of it, and what was seen.
pub struct World {
    pub raw: Arc<SqliteStore>,
    expected: Mutex<Expected>,
    /// Every state of the model so far, the current one last: a consistent listing must equal
    /// one of those it overlapped.
    history: Mutex<Vec<Arc<Expected>>>,
    /// Renames committed by their hook whose journal entry has not been seen closing.
    hooked: Mutex<Vec<(FsPath, FsPath)>>,
    /// The journal ids closed so far: none may ever be opened again.
    closed: Mutex<BTreeSet<String>>,
    /// The latest expiry seen for each waiter registration, by (lock path, process id).
    waiters: Mutex<BTreeMap<(String, String), i64>>,
    /// The registrations seen still stored after their expiry.
    expired_waiters: Mutex<BTreeSet<(String, String)>>,
    counters: Mutex<Counters>,
    /// Writes so far (each followed by a check).
    steps: AtomicU64,
    /// The first violation, with the step that made it. Recorded rather than raised: the
    /// writer may be a lock client's background renewal, whose panic nobody would see.
    violation: Mutex<Option<String>>,
    trace: Option<Mutex<Vec<String>>>,
    /// Prints every call as it happens (`FSRENAME_SIM_TRACE=1`, for a seed under study).
    live: bool,
    started: tokio::time::Instant,
}

impl World {
    pub fn new(raw: Arc<SqliteStore>, expected: Expected, trace: bool) -> Arc<World> {
        Arc::new(World {
            raw,
            history: Mutex::new(vec![Arc::new(expected.clone())]),
            expected: Mutex::new(expected),
            hooked: Mutex::new(Vec::new()),
            closed: Mutex::new(BTreeSet::new()),
            waiters: Mutex::new(BTreeMap::new()),
            expired_waiters: Mutex::new(BTreeSet::new()),
            counters: Mutex::new(Counters::default()),
            steps: AtomicU64::new(0),
            violation: Mutex::new(None),
            trace: (trace || live_trace()).then(|| Mutex::new(Vec::new())),
            live: live_trace(),
            started: tokio::time::Instant::now(),
        })
    }

    pub fn expected(&self) -> Expected {
        self.expected.lock().unwrap().clone()
    }

    pub fn counters(&self) -> Counters {
        self.counters.lock().unwrap().clone()
    }

    pub fn steps(&self) -> u64 {
        self.steps.load(Ordering::SeqCst)
    }

    pub fn violation(&self) -> Option<String> {
        self.violation.lock().unwrap().clone()
    }

    fn violate(&self, what: impl FnOnce() -> String) {
        let mut violation = self.violation.lock().unwrap();
        if violation.is_none() {
            let what = what();
            self.record(|| format!("VIOLATION: {what}"));
            *violation = Some(what);
        }
    }

    pub fn trace(&self) -> Vec<String> {
        self.trace
            .as_ref()
            .map(|t| t.lock().unwrap().clone())
            .unwrap_or_default()
    }

    pub fn record(&self, line: impl FnOnce() -> String) {
        if let Some(trace) = &self.trace {
            let ms = self.started.elapsed().as_millis();
            let line = format!("{ms:>6} ms {}", line());
            if self.live {
                eprintln!("{line}");
            }
            trace.lock().unwrap().push(line);
        }
    }

    /// A write reached the store: checks the invariants (until the first violation).
    async fn step(&self, call: impl FnOnce() -> String) {
        let n = self.steps.fetch_add(1, Ordering::SeqCst) + 1;
        if self.violation.lock().unwrap().is_some() {
            return;
        }
        let expected = self.expected();
        match invariants::check(&self.raw, &expected).await {
            Ok(seen) => {
                let now = now_ms();
                let mut waiters = self.waiters.lock().unwrap();
                let mut counters = self.counters.lock().unwrap();
                for (path, pid, expires_at) in seen.waiters {
                    let key = (path, pid);
                    if expires_at < now && self.expired_waiters.lock().unwrap().insert(key.clone())
                    {
                        counters.waiters_expired_in_place += 1;
                    }
                    let latest = waiters.entry(key).or_insert_with(|| {
                        counters.waiters_registered += 1;
                        expires_at
                    });
                    *latest = (*latest).max(expires_at);
                }
            }
            Err(broken) => self.violate(|| format!("after step {n} ({}): {broken}", call())),
        }
    }

    /// Moves the model on by `change`, and keeps the new state in the history.
    fn change(&self, change: impl FnOnce(&mut Expected)) {
        let mut expected = self.expected.lock().unwrap();
        change(&mut expected);
        self.history
            .lock()
            .unwrap()
            .push(Arc::new(expected.clone()));
    }

    /// Applies a committed rename to the model (its hook).
    fn commit_rename(&self, from: &FsPath, to: &FsPath) {
        self.record(|| format!("committed mv {from} {to}"));
        self.change(|expected| expected.rename(from, to));
        self.hooked.lock().unwrap().push((from.clone(), to.clone()));
        self.counters.lock().unwrap().renames_committed += 1;
    }

    /// The open journal entries, if `index` is the journal: what a write there may close.
    async fn journal_before(&self, index: &str) -> Option<BTreeMap<String, JournalEntry>> {
        if index != journal_index_name(INDEX) {
            return None;
        }
        match invariants::open_entries(&self.raw).await {
            Ok(entries) => Some(entries),
            Err(e) => {
                self.violate(|| e);
                None
            }
        }
    }

    /// A write to the journal landed: every entry it closed commits its job, and no entry it
    /// opened may have been closed before (a job is journaled once: an entry that came back
    /// would be rolled forward again, into a tree that has moved on since).
    async fn journal_after(
        &self,
        before: BTreeMap<String, JournalEntry>,
        call: &(dyn Fn() -> String + Sync),
    ) {
        let after = match invariants::open_entries(&self.raw).await {
            Ok(entries) => entries,
            Err(e) => return self.violate(|| e),
        };
        for (job, entry) in &after {
            if !before.contains_key(job) && self.closed.lock().unwrap().contains(job) {
                self.violate(|| {
                    format!(
                        "{}: journal entry {job} ({}, owner {}) was opened again after it was \
                         closed",
                        call(),
                        entry.kind.describe(&entry.from, &entry.to),
                        entry.owner
                    )
                });
            }
        }
        for (job, entry) in before {
            if !after.contains_key(&job) {
                self.closed.lock().unwrap().insert(job.clone());
                if self.withdrawn(&job).await {
                    // The job stopped before its first write: it changed nothing, and the
                    // model stays as it is.
                    self.record(|| {
                        format!(
                            "withdrawn {} (journal {job})",
                            entry.kind.describe(&entry.from, &entry.to)
                        )
                    });
                } else {
                    self.closed(&job, &entry);
                }
            }
        }
    }

    /// True if the tombstone at `job` is its own withdrawal ([`fs_rename::Journal::withdraw`]),
    /// not a close.
    async fn withdrawn(&self, job: &str) -> bool {
        let index = journal_index_name(INDEX);
        match self.raw.get(&index, job).await {
            Ok(Some(doc)) => serde_json::from_value::<JournalFence>(doc.source)
                .is_ok_and(|fence| fence.is_withdrawn()),
            Ok(None) => false,
            Err(e) => {
                self.violate(|| format!("reading the tombstone of journal entry {job}: {e}"));
                false
            }
        }
    }

    /// A journal entry was closed: its job is done, so the model moves on.
    fn closed(&self, job: &str, entry: &JournalEntry) {
        let described = entry.kind.describe(&entry.from, &entry.to);
        let (Ok(from), Ok(to)) = (invariants::path(&entry.from), invariants::path(&entry.to))
        else {
            return self.violate(|| format!("journal entry {job} ({described}) has bad paths"));
        };
        match entry.kind {
            JobKind::Rename => {
                let mut hooked = self.hooked.lock().unwrap();
                let before = hooked.len();
                hooked.retain(|(f, t)| (f, t) != (&from, &to));
                if hooked.len() == before {
                    drop(hooked);
                    self.violate(|| {
                        format!(
                            "journal entry {job} ({described}) was closed before its rename was \
                             committed (RenameHooks::committed)"
                        )
                    });
                }
            }
            JobKind::Copy => {
                let mut copied = Ok(0);
                self.change(|expected| copied = expected.copy(job, &from, &to));
                match copied {
                    Ok(n) => {
                        self.record(|| {
                            format!("committed {described} (journal {job}): {n} copies")
                        });
                        self.counters.lock().unwrap().copies_committed += 1;
                    }
                    Err(e) => self.violate(|| {
                        format!("journal entry {job} ({described}) closed, but the model: {e}")
                    }),
                }
            }
            JobKind::Delete => {
                let mut deleted = 0;
                self.change(|expected| deleted = expected.delete(&from));
                self.record(|| format!("committed {described} (journal {job}): {deleted} deleted"));
                if deleted == 0 {
                    self.violate(|| {
                        format!(
                            "journal entry {job} ({described}) closed, but the model has \
                             nothing there"
                        )
                    });
                }
                self.counters.lock().unwrap().deletes_committed += 1;
            }
        }
    }

    /// A job reported a refusal: if an older waiter refused it (`blocker` as the lock client
    /// words it), that waiter's registration must have been live when the attempt decided,
    /// by the slack at most before `now`: a dead waiter blocks nobody past its lease.
    pub fn refused(&self, blocker: &str, now: i64) {
        let Some(rest) = blocker.strip_prefix("older request waiting for a ") else {
            return;
        };
        let parsed = rest.split_once('`').and_then(|(_, rest)| {
            let (path, rest) = rest.split_once('`')?;
            let (_, rest) = rest.split_once("(process ")?;
            let (pid, _) = rest.split_once(')')?;
            Some((path.to_owned(), pid.to_owned()))
        });
        let Some((path, pid)) = parsed else {
            return self.violate(|| format!("a waiter refusal that does not parse: {blocker}"));
        };
        let latest = self
            .waiters
            .lock()
            .unwrap()
            .get(&(path.clone(), pid.clone()))
            .copied();
        let mut counters = self.counters.lock().unwrap();
        counters.waiter_refusals += 1;
        match latest {
            None => {
                drop(counters);
                self.violate(|| {
                    format!(
                        "refused by waiter {pid} on `{path}`, never registered there: {blocker}"
                    )
                })
            }
            Some(t) if t < now - WAITER_SLACK_MS => {
                drop(counters);
                self.violate(|| {
                    format!(
                        "refused at {now} ms by waiter {pid} on `{path}`, whose registration \
                         expired at {t} ms: {blocker}"
                    )
                })
            }
            Some(t) if t < now => counters.late_waiter_refusals += 1,
            Some(_) => {}
        }
    }

    /// The model's state count so far: a consistent read records it before and after.
    pub fn version(&self) -> usize {
        self.history.lock().unwrap().len() - 1
    }

    /// A consistent listing of `path` returned `listing` between model states `first` and
    /// `last`: it must be exactly what one of them holds there.
    pub fn listed(
        &self,
        path: &FsPath,
        listing: &BTreeMap<String, FsDoc>,
        (first, last): (usize, usize),
    ) {
        let history = self.history.lock().unwrap();
        let matches = history[first..=last]
            .iter()
            .any(|state| state.listing(path).as_ref() == Some(listing));
        drop(history);
        self.counters.lock().unwrap().listings_checked += 1;
        self.record(|| format!("listed {path}: {} entries", listing.len()));
        if !matches {
            self.violate(|| {
                let ids: Vec<(&String, &str)> = listing
                    .iter()
                    .map(|(id, d)| (id, d.path.as_str()))
                    .collect();
                format!(
                    "a consistent listing of `{path}` is no committed state of it (model states \
                     {first}..={last}): {ids:?}"
                )
            });
        }
    }
}

fn live_trace() -> bool {
    std::env::var("FSRENAME_SIM_TRACE").is_ok_and(|v| v == "1")
}

/// Applies a rename to the model when it commits (its job's or its recoverer's hook).
pub struct Commit(pub Arc<World>);

#[async_trait]
impl RenameHooks for Commit {
    async fn committed(&self, from: &FsPath, to: &FsPath) {
        self.0.commit_rename(from, to);
    }
}

/// Now, by the seed's lease clock: when a refusal was reported.
pub fn now_ms() -> i64 {
    LeaseClock::new().now_ms()
}

/// The watched store; see the module documentation. With `atomic`, it offers the raw store's
/// atomic scripted updates (the lock scripts' twins run inside one transaction), each bulk of
/// them one step; without, it offers none, and clients use compare-and-set.
pub struct Watched(pub Arc<World>, pub bool);

impl std::fmt::Debug for Watched {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Watched({} steps)", self.0.steps())
    }
}

impl Watched {
    async fn read<T: std::fmt::Debug>(
        &self,
        call: impl FnOnce() -> String,
        result: Result<T>,
    ) -> Result<T> {
        self.0.record(|| format!("{} -> {result:?}", call()));
        result
    }

    /// A write reached the store (`journal`: the entries open before it, if it went to the
    /// journal): records it, commits the jobs whose entries it closed, checks.
    async fn write<T: std::fmt::Debug>(
        &self,
        journal: Option<BTreeMap<String, JournalEntry>>,
        call: impl Fn() -> String + Sync,
        result: Result<T>,
    ) -> Result<T> {
        self.0.record(|| format!("{} -> {result:?}", call()));
        if let Some(before) = journal {
            self.0.journal_after(before, &call).await;
        }
        self.0.step(call).await;
        result
    }
}

#[async_trait]
impl StoreLayer for Watched {
    fn inner(&self) -> &dyn DocStore {
        &*self.0.raw
    }
    fn on_describe(&self) -> String {
        format!("watched({})", self.0.raw.describe())
    }
    async fn on_create_index(&self, index: &str, body: &Value) -> Result<bool> {
        let journal = self.0.journal_before(index).await;
        let result = self.0.raw.create_index(index, body).await;
        self.write(journal, || format!("create_index {index}"), result)
            .await
    }
    async fn on_delete_index(&self, index: &str) -> Result<bool> {
        let journal = self.0.journal_before(index).await;
        let result = self.0.raw.delete_index(index).await;
        self.write(journal, || format!("delete_index {index}"), result)
            .await
    }
    async fn on_get(&self, index: &str, id: &str) -> Result<Option<StoredDoc>> {
        let result = self.0.raw.get(index, id).await;
        self.read(|| format!("get {index}/{id}"), result).await
    }
    async fn on_mget(&self, index: &str, ids: &[String]) -> Result<Vec<Option<StoredDoc>>> {
        let result = self.0.raw.mget(index, ids).await;
        self.read(|| format!("mget {index} {ids:?}"), result).await
    }
    async fn on_write(&self, index: &str, op: BulkOp) -> Result<Version> {
        let shown = match &op {
            BulkOp::Create { id, source } => format!("create {index}/{id} {source}"),
            BulkOp::Index {
                id,
                source,
                if_version,
            } => format!("index {index}/{id} if {if_version:?} {source}"),
            BulkOp::Delete { id, if_version } => format!("delete {index}/{id} if {if_version:?}"),
        };
        let journal = self.0.journal_before(index).await;
        let result = self.0.raw.write(index, op).await;
        self.write(journal, || shown.clone(), result).await
    }
    async fn on_bulk(&self, index: &str, ops: Vec<BulkOp>) -> Result<Vec<BulkItemResult>> {
        let shown = self.0.trace.is_some().then(|| format!("{ops:?}"));
        let n = ops.len();
        let journal = self.0.journal_before(index).await;
        let result = self.0.raw.bulk(index, ops).await;
        self.write(
            journal,
            || match &shown {
                Some(ops) => format!("bulk {index} {ops}"),
                None => format!("bulk {index} ({n} items)"),
            },
            result,
        )
        .await
    }
    async fn on_search(&self, index: &str, request: SearchRequest) -> Result<Page> {
        let shown = self.0.trace.is_some().then(|| format!("{request:?}"));
        let result = self.0.raw.search(index, request).await;
        self.read(|| format!("search {index} {shown:?}"), result)
            .await
    }
    async fn on_close_cursor(&self, index: &str, cursor: Cursor) -> Result<()> {
        let shown = self.0.trace.is_some().then(|| format!("{cursor:?}"));
        let result = self.inner().close_cursor(index, cursor).await;
        self.read(|| format!("close_cursor {index} {shown:?}"), result)
            .await
    }
    async fn on_count(&self, index: &str, scope: &Scope) -> Result<u64> {
        let result = self.0.raw.count(index, scope).await;
        self.read(|| format!("count {index} {scope:?}"), result)
            .await
    }
    async fn on_refresh(&self, index: &str) -> Result<()> {
        let result = self.0.raw.refresh(index).await;
        self.read(|| format!("refresh {index}"), result).await
    }
    /// Offers the raw store's scripts only when `atomic`, and not chained with a write (each
    /// call is one step the invariants are checked after); no chained or refreshed bulk
    /// (a refreshed bulk is a bulk and a refresh, two steps). Closing a cursor is recorded
    /// even though the raw store's hold nothing.
    fn on_capabilities<'a>(&'a self, offered: Capabilities<'a>) -> Capabilities<'a> {
        Capabilities {
            chained_bulk: None,
            refreshed_bulk: None,
            scripts: offered.scripts.filter(|_| self.1),
            held_cursors: Some(self),
            ..offered
        }
    }
    fn on_chains(&self) -> bool {
        false
    }
    async fn on_bulk_update(
        &self,
        index: &str,
        items: Vec<ScriptedUpdate>,
    ) -> Result<Vec<UpdateItemResult>> {
        let Some(scripted) = self.inner().scripted() else {
            return Err(fs_store::StoreError::Rejected {
                context: "watched store".to_owned(),
                status: None,
                message: "no scripted updates".to_owned(),
            });
        };
        let shown = self.0.trace.is_some().then(|| format!("{items:?}"));
        let n = items.len();
        let journal = self.0.journal_before(index).await;
        let result = scripted.bulk_update(index, items).await;
        self.write(
            journal,
            || match &shown {
                Some(items) => format!("bulk_update {index} {items}"),
                None => format!("bulk_update {index} ({n} items)"),
            },
            result,
        )
        .await
    }
}
