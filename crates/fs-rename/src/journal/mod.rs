//! The journal: one document per job (a rename, a copy or a delete) that has started writing
//! and not finished.
//!
//! A job writes its entry once it holds its locks and its checks passed, before its first
//! write; it deletes the entry after its last write, before releasing its locks. So an
//! entry exists exactly while the tree may be half-renamed (half-copied, half-deleted), and its locks (listed in it) stay
//! in the lock index until the entry is gone: a job that dies leaves both, and recovery
//! takes the locks over and rolls the job forward. Entries live in `<index>-journal`; each
//! records its [`JobKind`], so that recovery knows how to finish it.
//!
//! **Fences.** A job picks its entry's id before it locks anything, and every lock it takes
//! records that id (`job`). A recovery that finds such a lock expired and no entry for it may
//! clear the lock, but first it *fences* the id: it creates a tombstone there
//! ([`Journal::fence`]). The job writes its entry with `_create` at the same id, so of the two
//! writes exactly one succeeds: either the entry exists and the recovery leaves the locks
//! alone (the rename is recovered instead), or the tombstone exists and the job, which may
//! only have been paused, learns that its locks are gone before it rewrites anything
//! ([`RenameError::Fenced`]). Without this a paused job could journal after its locks were
//! cleared and taken by someone else, and recovery would later roll it forward into a tree
//! that had changed under it. Tombstones are removed by recovery after a retention period.

use std::sync::Arc;

use fs_model::{journal_index_body_with, journal_index_name, IndexLayout};
use fs_store::{Scan, Scope, SharedStore, StoreError, Version};
use serde_json::Value;

use crate::error::{RenameError, Result};
use crate::resend;

mod entry;
mod protocol;

use entry::{parse_doc, to_source, JournalDoc, CLOSED_BY, FENCED, WITHDRAWN_BY};
pub use entry::{FenceOutcome, JournalEntry, JournalFence, JournalLock, JournalState};
pub use protocol::{PROTOCOL, PROTOCOL_ID};

/// The journal index of a tree.
#[derive(Debug, Clone)]
pub struct Journal {
    store: SharedStore,
    index: String,
}

impl Journal {
    /// Returns the journal of the tree index `tree_index` on `store`.
    pub fn new(store: SharedStore, tree_index: &str) -> Journal {
        Journal {
            store,
            index: journal_index_name(tree_index),
        }
    }

    /// Returns the journal index's name.
    pub fn index(&self) -> &str {
        &self.index
    }

    /// Creates the journal index if it is missing, with the server's default replicas.
    ///
    /// # Errors
    /// [`RenameError::Store`].
    pub async fn ensure_index(&self) -> Result<()> {
        self.ensure_index_with(&IndexLayout::default()).await
    }

    /// Creates the journal index if it is missing: on one shard whatever `layout` says (it is
    /// small, and searched only by recovery), with `layout`'s replicas.
    ///
    /// # Errors
    /// [`RenameError::Store`].
    pub async fn ensure_index_with(&self, layout: &IndexLayout) -> Result<()> {
        self.store
            .create_index(&self.index, &journal_index_body_with(layout))
            .await
            .map(|_| ())
            .map_err(RenameError::store(format!(
                "creating index `{}`",
                self.index
            )))
    }

    /// Writes a new entry with `_create`; creates the index first if an older tree has none.
    /// If the id is taken, reads what is there: this job's own entry (an earlier attempt whose
    /// answer was lost) counts as written; a fence, or the entry taken over by a recoverer,
    /// means this job may not go on.
    ///
    /// # Errors
    /// [`RenameError::Fenced`] if a recovery fenced the id (or claimed the entry);
    /// [`RenameError::Store`].
    pub async fn open(&self, entry: &JournalEntry) -> Result<Version> {
        let source = to_source(entry, &self.index)?;
        let context = || format!("writing journal entry of `{} → {}`", entry.from, entry.to);
        for _ in 0..3 {
            match self
                .store
                .create(&self.index, &entry.job_id, source.clone())
                .await
            {
                Ok(version) => return Ok(version),
                Err(StoreError::IndexNotFound { .. }) => self.ensure_index().await?,
                Err(e) if e.is_conflict() => match self.read(&entry.job_id).await? {
                    Some((JournalDoc::Entry(found), version))
                        if found.owner == entry.owner && found.job_id == entry.job_id =>
                    {
                        return Ok(version)
                    }
                    // The entry at this job's id is this job's: it landed, and a recoverer
                    // claimed it since (the job's locks expired before it heard). The
                    // recoverer finishes the job: starting over would do it twice, or fail on
                    // what recovery did (the Jepsen-style test found a rename reported "source
                    // not found" that recovery had carried out).
                    Some((JournalDoc::Entry(found), _)) => {
                        return Err(RenameError::TakenOver {
                            job: entry.job_id.clone(),
                            by: format!("recoverer {} (it claimed the entry)", found.owner),
                        })
                    }
                    // Closed: by a recoverer that claimed it and finished the job.
                    Some((JournalDoc::Fence(fence), _)) if fence.is_closed() => {
                        return Err(RenameError::TakenOver {
                            job: entry.job_id.clone(),
                            by: format!("a recoverer, which has ended it ({})", fence.fenced_by),
                        })
                    }
                    Some((JournalDoc::Fence(fence), _)) => {
                        return Err(RenameError::Fenced {
                            job: entry.job_id.clone(),
                            by: format!("{} at {} ms", fence.fenced_by, fence.fenced_at),
                        })
                    }
                    // Removed between the two calls: try again.
                    None => {}
                },
                Err(e) => return Err(RenameError::store(context())(e)),
            }
        }
        Err(RenameError::Store {
            context: context(),
            cause: StoreError::Transient {
                context: format!("journal id `{}`", entry.job_id),
                message: "the document kept changing".to_owned(),
            },
        })
    }

    /// Returns the creation of `entry` as one write, to send with the job's first writes in
    /// one transaction where the store chains them ([`fs_store::ChainedBulk::bulk_after`]): the
    /// same `_create` as [`Journal::open`], which a fence at the id makes fail.
    ///
    /// # Errors
    /// [`RenameError::BadDocument`] if the entry cannot be written as JSON.
    pub fn open_write(&self, entry: &JournalEntry) -> Result<fs_store::BulkOp> {
        Ok(fs_store::BulkOp::Create {
            id: entry.job_id.clone(),
            source: to_source(entry, &self.index)?,
        })
    }

    /// Fences the journal id `job_id` unless the job has journaled: creates a tombstone there
    /// (see the module documentation), so that a job whose expired locks are about to be
    /// cleared can never journal afterwards. `by` names the fencer; `now` is epoch ms.
    ///
    /// # Errors
    /// [`RenameError::Store`]; [`RenameError::BadDocument`] for an unreadable document there.
    pub async fn fence(&self, job_id: &str, by: &str, now: i64) -> Result<FenceOutcome> {
        let tombstone = JournalFence {
            job_id: job_id.to_owned(),
            state: FENCED.to_owned(),
            fenced_at: now,
            fenced_by: by.to_owned(),
        };
        let source = serde_json::to_value(&tombstone).map_err(|e| RenameError::BadDocument {
            index: self.index.clone(),
            id: job_id.to_owned(),
            message: e.to_string(),
        })?;
        let context = || format!("fencing journal id `{job_id}`");
        for _ in 0..3 {
            match self.store.create(&self.index, job_id, source.clone()).await {
                Ok(_) => return Ok(FenceOutcome::Fenced { new: true }),
                Err(StoreError::IndexNotFound { .. }) => self.ensure_index().await?,
                Err(e) if e.is_conflict() => match self.read(job_id).await? {
                    Some((JournalDoc::Fence(_), _)) => {
                        return Ok(FenceOutcome::Fenced { new: false })
                    }
                    Some((JournalDoc::Entry(entry), _)) => {
                        return Ok(FenceOutcome::Open(Box::new(entry)))
                    }
                    // Closed between the two calls (the job finished): fence the id anyway.
                    None => {}
                },
                Err(e) => return Err(RenameError::store(context())(e)),
            }
        }
        Err(RenameError::Store {
            context: context(),
            cause: StoreError::Transient {
                context: format!("journal id `{job_id}`"),
                message: "the document kept changing".to_owned(),
            },
        })
    }

    /// Deletes the fence `job_id` if it is still at `version`.
    ///
    /// # Errors
    /// [`RenameError::Store`] (a conflict if it changed).
    pub async fn remove_fence(&self, job_id: &str, version: Version) -> Result<()> {
        match self.store.delete(&self.index, job_id, Some(version)).await {
            Ok(_) | Err(StoreError::NotFound { .. }) => Ok(()),
            Err(e) => Err(RenameError::store(format!("removing fence `{job_id}`"))(e)),
        }
    }

    /// Returns what the journal says of `job_id`: open (journaled, not finished), closed
    /// (finished, by the job or by the recovery that rolled it forward), fenced (a recovery
    /// cleared its expired locks before it journaled: it never wrote anything and cannot
    /// any more), or nothing (it has not journaled, or its tombstone is past the retention).
    ///
    /// # Errors
    /// Store failures; an unreadable document.
    pub async fn state_of(&self, job_id: &str) -> Result<JournalState> {
        Ok(match self.read(job_id).await? {
            Some((JournalDoc::Entry(entry), _)) => JournalState::Open(Box::new(entry)),
            Some((JournalDoc::Fence(fence), _)) if fence.is_closed() => JournalState::Closed,
            Some((JournalDoc::Fence(_), _)) => JournalState::Fenced,
            None => JournalState::Absent,
        })
    }

    /// Returns true if `job_id` has an open entry (it journaled and has not closed); false
    /// for a tombstone (closed or fenced) or nothing.
    ///
    /// # Errors
    /// Store failures; an unreadable document.
    pub async fn is_open(&self, job_id: &str) -> Result<bool> {
        Ok(matches!(
            self.read(job_id).await?,
            Some((JournalDoc::Entry(_), _))
        ))
    }

    /// Reads the document at `id` (realtime), if any.
    async fn read(&self, id: &str) -> Result<Option<(JournalDoc, Version)>> {
        match self.store.get(&self.index, id).await {
            Ok(Some(doc)) => Ok(Some((parse_doc(&self.index, id, doc.source)?, doc.version))),
            Ok(None) | Err(StoreError::IndexNotFound { .. }) => Ok(None),
            Err(e) => Err(RenameError::store(format!("reading journal `{id}`"))(e)),
        }
    }

    /// Rewrites `entry` if it is still at `version` (a recoverer claiming it).
    ///
    /// A write whose answer was lost (a dropped connection, a timeout) may have landed or
    /// not, and the store does not send a conditional write again. So the entry is read back:
    /// the claim's own owner there means it landed (every claim has a fresh owner id, so no
    /// other recoverer writes the same one); the entry still at `version` means it did not,
    /// and it is sent again; anything else is a conflict. A conflict is read back too, since
    /// a send that looked lost may land before the next one.
    ///
    /// # Errors
    /// [`RenameError::Store`] with a conflict if someone else changed or removed it.
    pub async fn claim(&self, entry: &JournalEntry, version: Version) -> Result<Version> {
        let source = to_source(entry, &self.index)?;
        let context = || format!("claiming journal entry `{}`", entry.job_id);
        let mut backoff = resend::JOURNAL.start();
        loop {
            let failure = match self
                .store
                .index(&self.index, &entry.job_id, source.clone(), Some(version))
                .await
            {
                Ok(version) => return Ok(version),
                Err(e) if e.is_conflict() || e.is_retryable() => e,
                Err(e) => return Err(RenameError::store(context())(e)),
            };
            match self.read(&entry.job_id).await? {
                Some((JournalDoc::Entry(found), now)) if found.owner == entry.owner => {
                    return Ok(now)
                }
                // Still at `version`: the send was lost; sent again, as many times as allowed.
                Some((JournalDoc::Entry(_), now)) if now == version => {
                    if !(failure.is_retryable() && backoff.wait().await) {
                        return Err(RenameError::store(context())(failure));
                    }
                }
                found => {
                    let cause = StoreError::Conflict {
                        index: self.index.clone(),
                        id: entry.job_id.clone(),
                        exists: found.is_some(),
                        current: found.map(|(_, v)| v),
                    };
                    return Err(RenameError::store(context())(cause));
                }
            }
        }
    }

    /// Closes the entry `job_id`, which this job (or recoverer) wrote at `version`: replaces it
    /// with a tombstone (a fence, as [`Journal::fence`] leaves), so that a late resend of the
    /// job's own `open` (its answer was lost, and the resend was delayed past the job's lease
    /// while a recoverer finished and closed the job) meets the tombstone instead of reopening
    /// a finished job, which a later recovery would roll forward into whatever then lies at its
    /// paths. The simulation's seed 2614 found it. Tombstones go with the fences, after the
    /// retention (`recover`).
    ///
    /// The write is conditional on `version`: a job paused past its lease whose entry a
    /// recoverer has claimed since must not close the recoverer's entry (were the recoverer
    /// to die then, its half-done work would have no entry to be finished from). A tombstone
    /// already there is a close that landed (a resend, or a recoverer that finished the job).
    ///
    /// # Errors
    /// [`RenameError::Fenced`] if another owner has claimed the entry since;
    /// [`RenameError::Store`].
    pub async fn close(&self, job_id: &str, version: Version) -> Result<()> {
        self.tombstone(job_id, version, CLOSED_BY).await
    }

    /// Withdraws the entry `job_id`, which this job wrote at `version`, when the job stopped
    /// before its first write: a tombstone as [`Journal::close`] leaves (the same condition,
    /// the same late-resend guard), but one that says the job changed nothing, so that whoever
    /// reads the journal (a service adopting the job, a history checker) does not take it for
    /// done.
    ///
    /// # Errors
    /// As [`Journal::close`].
    ///
    /// Unlike a close, a withdrawal that finds another tombstone in its place did not happen:
    /// a recoverer claimed the entry (the job's lease ran out: a pause, a partition) and
    /// closed it once it had finished the job, so the job did take effect, by recovery's
    /// hand. That is [`RenameError::TakenOver`], as a claim still open is: the Jepsen-style test
    /// found an `rm -r` paused past its lease reported failed ("lost the lock") while recovery
    /// had carried it out, because the closed entry was taken for its own withdrawal.
    pub async fn withdraw(&self, job_id: &str, version: Version) -> Result<()> {
        let source = self.tombstone_source(job_id, WITHDRAWN_BY)?;
        match self
            .store
            .index(&self.index, job_id, source, Some(version))
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.is_conflict() => match self.read(job_id).await? {
                // Its own withdrawal, sent again after an answer that was lost.
                Some((JournalDoc::Fence(fence), _)) if fence.is_withdrawn() => Ok(()),
                Some((JournalDoc::Fence(fence), _)) => Err(RenameError::TakenOver {
                    job: job_id.to_owned(),
                    by: format!(
                        "a recoverer, which took the job over and ended it ({})",
                        fence.fenced_by
                    ),
                }),
                Some((JournalDoc::Entry(found), _)) => Err(RenameError::TakenOver {
                    job: job_id.to_owned(),
                    by: format!("{} (it claimed the entry)", found.holder),
                }),
                // Gone: closed by a recoverer and its tombstone removed since. Either way
                // recovery had it, and what it did is not known here.
                None => Err(RenameError::TakenOver {
                    job: job_id.to_owned(),
                    by: "a recoverer (the entry is gone)".to_owned(),
                }),
            },
            Err(e) => Err(RenameError::store(format!(
                "withdrawing journal entry `{job_id}`"
            ))(e)),
        }
    }

    /// Replaces the entry `job_id` at `version` by a tombstone fenced `by`.
    async fn tombstone(&self, job_id: &str, version: Version, by: &str) -> Result<()> {
        let source = self.tombstone_source(job_id, by)?;
        match self
            .store
            .index(&self.index, job_id, source, Some(version))
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.is_conflict() => match self.read(job_id).await? {
                Some((JournalDoc::Fence(_), _)) | None => Ok(()),
                Some((JournalDoc::Entry(found), _)) => Err(RenameError::Fenced {
                    job: job_id.to_owned(),
                    by: format!("{} (it claimed the entry)", found.holder),
                }),
            },
            Err(e) => Err(RenameError::store(format!(
                "closing journal entry `{job_id}`"
            ))(e)),
        }
    }

    /// Returns the close of entry `job_id` at `version` as one write, to send with the
    /// release of the job's locks ([`fs_locks::LockGuard::release_after`]): the same write
    /// as [`Journal::close`], whose failure (the entry claimed by a recoverer) leaves the locks
    /// to expire for recovery.
    ///
    /// # Errors
    /// [`RenameError::BadDocument`] if the tombstone cannot be written as JSON.
    pub fn close_write(&self, job_id: &str, version: Version) -> Result<fs_locks::FirstWrite> {
        Ok(fs_locks::FirstWrite {
            index: self.index.clone(),
            op: fs_store::BulkOp::Index {
                id: job_id.to_owned(),
                source: self.tombstone_source(job_id, CLOSED_BY)?,
                if_version: Some(version),
            },
            with: None,
        })
    }

    /// The entry of a job whose writes (`with`) and release all go in the one transaction
    /// that writes it (`job/at_once.rs`): created closed, since the tree is never half-renamed
    /// by it, and with `_create`, so that a fence at `job_id` fails it, and the transaction,
    /// as it fails an open entry's `_create`.
    ///
    /// # Errors
    /// [`RenameError::BadDocument`] if the tombstone cannot be written as JSON.
    pub fn closed_write(
        &self,
        job_id: &str,
        with: fs_store::WithFirst,
    ) -> Result<fs_locks::FirstWrite> {
        Ok(fs_locks::FirstWrite {
            index: self.index.clone(),
            op: fs_store::BulkOp::Create {
                id: job_id.to_owned(),
                source: self.tombstone_source(job_id, CLOSED_BY)?,
            },
            with: Some(with),
        })
    }

    /// The tombstone that replaces an entry closed or withdrawn (`by`).
    fn tombstone_source(&self, job_id: &str, by: &str) -> Result<Value> {
        let tombstone = JournalFence {
            job_id: job_id.to_owned(),
            state: FENCED.to_owned(),
            fenced_at: fs_locks::LeaseClock::new().now_ms(),
            fenced_by: by.to_owned(),
        };
        serde_json::to_value(&tombstone).map_err(|e| RenameError::BadDocument {
            index: self.index.clone(),
            id: job_id.to_owned(),
            message: e.to_string(),
        })
    }

    /// Returns true if the entry `job_id` is still the one written at `version`: nobody has
    /// claimed or closed it since. A recoverer checks this once it holds the job's locks,
    /// before it writes anything: a recoverer paused after its claim may find that another
    /// one claimed the entry, finished the job and closed it meanwhile.
    ///
    /// # Errors
    /// [`RenameError::Store`]; [`RenameError::BadDocument`] for an unreadable document.
    pub async fn is_still(&self, job_id: &str, version: Version) -> Result<bool> {
        Ok(matches!(
            self.read(job_id).await?,
            Some((JournalDoc::Entry(_), found)) if found == version
        ))
    }

    /// Returns every entry with its version, oldest first; none if the index does not exist.
    /// Fences are not entries and are left out.
    ///
    /// # Errors
    /// [`RenameError::Store`]; [`RenameError::BadDocument`] for an unreadable entry.
    pub async fn list(&self) -> Result<Vec<(JournalEntry, Version)>> {
        Ok(self.list_all().await?.0)
    }

    /// Returns every fence with its version, oldest first.
    ///
    /// # Errors
    /// As [`Journal::list`].
    pub async fn fences(&self) -> Result<Vec<(JournalFence, Version)>> {
        Ok(self.list_all().await?.1)
    }

    async fn list_all(&self) -> Result<JournalListing> {
        match self.store.refresh(&self.index).await {
            Err(StoreError::IndexNotFound { .. }) => return Ok((Vec::new(), Vec::new())),
            other => other.map_err(RenameError::store(format!("refreshing `{}`", self.index)))?,
        }
        let (mut entries, mut fences) = (Vec::new(), Vec::new());
        let mut scan = Scan::new(Arc::clone(&self.store), &self.index, Scope::All, 1_000);
        let scanned: Result<()> = async {
            let context = || format!("listing `{}`", self.index);
            while let Some(docs) = scan
                .next_page()
                .await
                .map_err(RenameError::store(context()))?
            {
                for doc in docs {
                    // The protocol marker: no job's; a newer protocol than this version's stops
                    // the listing, and with it every recovery and fsck.
                    if doc.id == PROTOCOL_ID {
                        protocol::check(&self.index, &doc.source)?;
                        continue;
                    }
                    match parse_doc(&self.index, &doc.id, doc.source)? {
                        JournalDoc::Entry(entry) => entries.push((entry, doc.version)),
                        JournalDoc::Fence(fence) => fences.push((fence, doc.version)),
                    }
                }
            }
            Ok(())
        }
        .await;
        scan.close().await;
        scanned?;
        entries.sort_by_key(|(e, _)| e.started_at);
        fences.sort_by_key(|(f, _): &(JournalFence, Version)| f.fenced_at);
        Ok((entries, fences))
    }
}

/// Entries and fences, each with its version.
type JournalListing = (Vec<(JournalEntry, Version)>, Vec<(JournalFence, Version)>);

#[cfg(test)]
mod tests {
    use fs_locks::LockMode;

    use super::*;
    use crate::kind::JobKind;

    /// An entry as journals wrote it before copies and deletes: no `kind`, the book's lock
    /// words.
    fn old_entry() -> Value {
        serde_json::json!({
            "job_id": "j1", "from": "/a", "to": "/b", "strategy": "tree", "state": "running",
            "owner": "p1", "holder": "mv /a /b", "started_at": 1, "lease_ms": 30000,
            "locks": [{"id": "l1", "path": "/a", "mode": "exclusive"}]
        })
    }

    #[test]
    fn an_entry_without_a_kind_is_a_rename() {
        let JournalDoc::Entry(entry) = parse_doc("fs-journal", "j1", old_entry()).expect("parse")
        else {
            panic!("read as a fence");
        };
        assert_eq!(entry.kind, JobKind::Rename);
        assert_eq!(entry.locks[0].mode, LockMode::Exclusive);
    }

    #[test]
    fn the_kind_is_written_and_read_back() {
        let mut source = old_entry();
        source["kind"] = serde_json::json!("delete");
        let JournalDoc::Entry(entry) = parse_doc("fs-journal", "j1", source).expect("parse") else {
            panic!("read as a fence");
        };
        assert_eq!(entry.kind, JobKind::Delete);
        let written = to_source(&entry, "fs-journal").expect("serialize");
        assert_eq!(written["kind"], "delete");
    }

    fn entry(owner: &str) -> JournalEntry {
        let JournalDoc::Entry(mut entry) =
            parse_doc("fs-journal", "j1", old_entry()).expect("parse")
        else {
            panic!("read as a fence");
        };
        entry.owner = owner.to_owned();
        entry
    }

    /// A claim whose answer is lost landed or did not: read back, it stands in the first case,
    /// is sent again in the second, and loses to another recoverer's claim in neither.
    #[tokio::test]
    async fn a_claim_whose_answer_is_lost_is_read_back() {
        let plain: SharedStore = Arc::new(fs_store::SqliteStore::in_memory().expect("store"));
        let journal = Journal::new(Arc::clone(&plain), "fs");
        let opened = journal.open(&entry("p1")).await.expect("open");
        // A journal on `plain` through a store that fails every call as `plan` says.
        let through = |plan: fs_testkit::FaultPlan| {
            Journal::new(fs_testkit::faulty(Arc::clone(&plain), plan, 1), "fs")
        };
        let lossy = fs_testkit::FaultPlan {
            lost_reply: 1.0,
            ..Default::default()
        };
        let failing = fs_testkit::FaultPlan {
            transient: 1.0,
            ..Default::default()
        };
        let cause_of = |err: &RenameError| match err {
            RenameError::Store { cause, .. } => Some(cause.clone()),
            _ => None,
        };

        // Every write lands and loses its answer.
        let claimed = through(lossy)
            .claim(&entry("r1"), opened)
            .await
            .expect("a claim that landed stands");
        assert!(journal.is_still("j1", claimed).await.expect("read"));

        // Every call fails before it is carried out: a transient failure, the entry as it was.
        let err = through(failing)
            .claim(&entry("r2"), claimed)
            .await
            .expect_err("no claim lands");
        assert!(cause_of(&err).is_some_and(|c| c.is_retryable()), "{err}");
        assert!(journal.is_still("j1", claimed).await.expect("read"));

        // Another recoverer's claim made since: a conflict, whatever the answer said.
        let err = through(lossy)
            .claim(&entry("r3"), opened)
            .await
            .expect_err("r1 claimed it first");
        assert!(cause_of(&err).is_some_and(|c| c.is_conflict()), "{err}");
    }
}
