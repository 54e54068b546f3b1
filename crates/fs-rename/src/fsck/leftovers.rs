//! What `fsck` says of the lock index and the journal: which lock documents are held by jobs
//! at work, by a process proven gone, or by nobody any more (lease over); and, for each job
//! journaled and not finished, whether it is running or left for recovery, and the command
//! that finishes it.
//!
//! A holder is *live* while its lease runs and its process is not proven gone; *gone* when its
//! lease still runs but its process, on this machine, runs no more (`fs_locks::OsProcess`:
//! recovery ends such a lease at once); *expired* when its lease ran out. Where a job's
//! holders differ (its own locks, a recoverer's), the most alive one says what the job is.

use fs_locks::{LockInfo, Observed, OsProcess};
use fs_model::FsPath;
use schemars::JsonSchema;
use serde::Serialize;

use crate::journal::JournalEntry;
use crate::kind::JobKind;

/// Where a holder, a lock document or a job stands, from the most alive down.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Holding {
    /// Its lease runs out later, and its process is not proven gone: at work (or, on another
    /// machine, dead with its lease still running).
    Live,
    /// Its lease still runs, but its process ran on this machine and runs no more (killed,
    /// or stopped by Ctrl-C after its first write): `fsrename recover` finishes its work now.
    HolderGone,
    /// Its lease ran out: its holder died or stopped renewing; `fsrename recover` finishes its
    /// work now.
    LeaseExpired,
}

impl Holding {
    /// The state of one holder's lease, `expires_at` (none: a lock without a lease, as the
    /// book's clients write, counts as live), at `now`.
    fn of(expires_at: Option<i64>, process: Option<&OsProcess>, now: i64) -> Holding {
        match expires_at {
            Some(at) if at < now => Holding::LeaseExpired,
            _ if process.is_some_and(OsProcess::is_gone) => Holding::HolderGone,
            _ => Holding::Live,
        }
    }
}

/// One holder of a lock document: its process id, the journal entry it protects, and where
/// its lease stands.
struct Hold {
    process_id: String,
    job: Option<String>,
    holding: Holding,
}

/// The holders of `lock`, each with where it stands at `now`; the book's shares (no owner, no
/// lease) as one live holder with no process id.
fn holds(lock: &LockInfo, now: i64) -> Vec<Hold> {
    match &lock.observed {
        Observed::Exclusive {
            process_id,
            expires_at,
            job,
            os_process,
            ..
        } => vec![Hold {
            process_id: process_id.clone().unwrap_or_default(),
            job: job.clone(),
            holding: Holding::of(*expires_at, os_process.as_ref(), now),
        }],
        Observed::Group { holders, .. } => {
            let mut holds: Vec<Hold> = holders
                .iter()
                .map(|(pid, h)| Hold {
                    process_id: pid.clone(),
                    job: h.job.clone(),
                    holding: Holding::of(Some(h.expires_at), h.os_process.as_ref(), now),
                })
                .collect();
            if lock.observed.foreign_shares() > 0 {
                holds.push(Hold {
                    process_id: String::new(),
                    job: None,
                    holding: Holding::Live,
                });
            }
            holds
        }
    }
}

/// Where a lock document stands: as its most alive holder. A document with no holder at all
/// (only waiters, or a count of zero) blocks nobody and counts as live, as `fsrename locks`
/// shows it.
pub(super) fn lock_holding(lock: &LockInfo, now: i64) -> Holding {
    holds(lock, now)
        .iter()
        .map(|h| h.holding)
        .min()
        .unwrap_or(Holding::Live)
}

/// Lock documents by where they stand.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct LockCounts {
    pub live: usize,
    pub gone: usize,
    pub expired: usize,
}

impl LockCounts {
    pub(super) fn of(locks: &[LockInfo], now: i64) -> LockCounts {
        let mut counts = LockCounts::default();
        for lock in locks {
            match lock_holding(lock, now) {
                Holding::Live => counts.live += 1,
                Holding::HolderGone => counts.gone += 1,
                Holding::LeaseExpired => counts.expired += 1,
            }
        }
        counts
    }
}

/// A job journaled and not finished, as `fsck` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct UnfinishedJob {
    /// The journal entry (the job id).
    pub job_id: String,
    /// What the job does: `rename`, `copy` or `delete`.
    pub kind: JobKind,
    /// The source (a delete's path).
    pub from: String,
    /// The destination (a delete's path again).
    pub to: String,
    /// Its locks' holder's label (`mv /a /b`, `recover`...).
    pub holder: String,
    /// Whether it is at work (`live`), or was left by a process that is gone
    /// (`holder_gone`) or whose lease ran out (`lease_expired`): then `finish` finishes it.
    pub state: Holding,
    /// When the last of its holders' leases runs out, epoch milliseconds, if they record one.
    pub leased_until: Option<i64>,
    /// Problems of the tree that lie under it (what a job half-way leaves: documents whose
    /// parent is not moved, copied or deleted yet), not counted as a broken tree.
    pub problem_count: u64,
    /// The first ten of them.
    pub problems: Vec<String>,
    /// The command that finishes it.
    pub finish: String,
}

/// Problems of an unfinished job beyond this many are counted, not listed.
const LISTED_PER_JOB: usize = 10;

impl UnfinishedJob {
    /// The job of `entry`, standing as its holders' locks among `locks` say at `now`.
    pub(super) fn of(entry: &JournalEntry, locks: &[LockInfo], now: i64) -> UnfinishedJob {
        let ours = |hold: &Hold| {
            hold.job.as_deref() == Some(entry.job_id.as_str())
                || (!hold.process_id.is_empty() && hold.process_id == entry.owner)
        };
        let mut state = None;
        let mut leased_until: Option<i64> = None;
        for lock in locks {
            for hold in holds(lock, now).iter().filter(|h| ours(h)) {
                state = Some(state.map_or(hold.holding, |s: Holding| s.min(hold.holding)));
                if let Some(at) = lock.expires_at {
                    leased_until = Some(leased_until.map_or(at, |u| u.max(at)));
                }
            }
        }
        // No lock of its own left at all: nothing protects it and nobody works on it.
        let state = state.unwrap_or(Holding::LeaseExpired);
        UnfinishedJob {
            job_id: entry.job_id.clone(),
            kind: entry.kind,
            from: entry.from.clone(),
            to: entry.to.clone(),
            holder: entry.holder.clone(),
            state,
            leased_until,
            problem_count: 0,
            problems: Vec::new(),
            finish: finish_command(entry.kind, &entry.from, &entry.to, state),
        }
    }

    /// The paths under which the job leaves the tree half-done: a rename's two, a copy's
    /// destination, a delete's path.
    pub(super) fn covers(&self, path: &FsPath) -> bool {
        let under = |p: &str| FsPath::parse(p).is_ok_and(|p| path.is_inside(&p));
        match self.kind {
            JobKind::Rename => under(&self.from) || under(&self.to),
            JobKind::Copy => under(&self.to),
            JobKind::Delete => under(&self.from),
        }
    }

    /// True if the job touches `scope`: one of its paths is inside it, or it inside one.
    pub(super) fn touches(&self, scope: &FsPath) -> bool {
        let overlaps = |p: &str| FsPath::parse(p).is_ok_and(|p| p.overlaps(scope));
        overlaps(&self.from) || overlaps(&self.to)
    }

    /// Counts a problem under the job; the first ten are listed.
    pub(super) fn problem(&mut self, problem: String) {
        self.problem_count += 1;
        if self.problems.len() < LISTED_PER_JOB {
            self.problems.push(problem);
        }
    }

    /// Whether `fsrename recover` can finish it now (its holder is gone or its lease over).
    pub fn is_left(&self) -> bool {
        self.state != Holding::Live
    }

    /// What kind of job it is, in words: `rename of `/a` to `/b``, `copy of ...`, `delete of
    /// `/a``.
    pub fn describe(&self) -> String {
        match self.kind {
            JobKind::Rename => format!("rename of `{}` to `{}`", self.from, self.to),
            JobKind::Copy => format!("copy of `{}` to `{}`", self.from, self.to),
            JobKind::Delete => format!("delete of `{}`", self.from),
        }
    }
}

/// The command that finishes a job of `kind` left as `state`: recovery, or the same command
/// again (whose locks meet the dead job's, and which finishes it first, then finds itself
/// done).
fn finish_command(kind: JobKind, from: &str, to: &str, state: Holding) -> String {
    let again = match kind {
        JobKind::Rename => format!("fsrename mv {from} {to}"),
        JobKind::Copy => format!("fsrename cp -r {from} {to}"),
        JobKind::Delete => format!("fsrename rm -r {from}"),
    };
    match state {
        Holding::Live => format!(
            "none needed while it runs; if its process died on another machine, `fsrename recover --wait` finishes it once its lease runs out (or `{again}` again)"
        ),
        Holding::HolderGone | Holding::LeaseExpired => {
            format!("`fsrename recover` (or `{again}` again)")
        }
    }
}

/// The unfinished jobs of `entries` that touch `scope`, in the order of the journal.
pub(super) fn unfinished_jobs(
    entries: &[JournalEntry],
    locks: &[LockInfo],
    scope: &FsPath,
    now: i64,
) -> Vec<UnfinishedJob> {
    entries
        .iter()
        .map(|entry| UnfinishedJob::of(entry, locks, now))
        .filter(|job| job.touches(scope))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::strategy::Strategy;
    use serde_json::json;

    fn entry(job_id: &str, kind: JobKind, from: &str, to: &str, owner: &str) -> JournalEntry {
        JournalEntry {
            job_id: job_id.to_owned(),
            kind,
            from: from.to_owned(),
            to: to.to_owned(),
            strategy: Strategy::Tree,
            state: "running".to_owned(),
            owner: owner.to_owned(),
            previous_owners: Vec::new(),
            holder: format!("{} {from} {to}", kind.verb()),
            started_at: 0,
            lease_ms: 30_000,
            recoveries: 0,
            locks: Vec::new(),
        }
    }

    /// Jobs by id.
    fn by_id(jobs: Vec<UnfinishedJob>) -> BTreeMap<String, UnfinishedJob> {
        jobs.into_iter().map(|j| (j.job_id.clone(), j)).collect()
    }

    fn exclusive(path: &str, owner: &str, expires_at: i64) -> LockInfo {
        let source = json!({
            "path": path, "mode": "X", "process_id": owner, "holder": "job",
            "expires_at": expires_at,
        });
        LockInfo {
            id: path.to_owned(),
            path: Some(path.to_owned()),
            observed: Observed::from_source(&source),
            expires_at: Some(expires_at),
        }
    }

    #[test]
    fn a_job_stands_as_its_most_alive_lock() {
        let now = 1_000;
        let locks = [
            exclusive("/a", "p1", now + 10),
            exclusive("/b", "p1", now - 10),
            exclusive("/c", "p2", now - 10),
        ];
        let entries = [
            entry("j1", JobKind::Rename, "/a", "/b", "p1"),
            entry("j2", JobKind::Delete, "/c", "/c", "p2"),
            entry("j3", JobKind::Copy, "/x", "/y", "p3"),
        ];
        let jobs = by_id(unfinished_jobs(&entries, &locks, &FsPath::root(), now));
        assert_eq!(jobs["j1"].state, Holding::Live);
        assert_eq!(jobs["j1"].leased_until, Some(now + 10));
        assert!(jobs["j1"].finish.contains("none needed while it runs"));
        assert_eq!(jobs["j2"].state, Holding::LeaseExpired);
        assert_eq!(
            jobs["j2"].finish,
            "`fsrename recover` (or `fsrename rm -r /c` again)"
        );
        // No lock left at all: nothing protects it, recovery finishes it.
        assert_eq!(jobs["j3"].state, Holding::LeaseExpired);
        assert_eq!(
            LockCounts::of(&locks, now),
            LockCounts {
                live: 1,
                gone: 0,
                expired: 2
            }
        );
    }

    #[test]
    fn problems_belong_to_the_paths_a_job_leaves_half_done() {
        let p = |s: &str| FsPath::parse(s).expect("path");
        let rename = UnfinishedJob::of(&entry("j", JobKind::Rename, "/a", "/b", "o"), &[], 0);
        assert!(rename.covers(&p("/a/x")) && rename.covers(&p("/b/x/y")));
        assert!(!rename.covers(&p("/ab")));
        let copy = UnfinishedJob::of(&entry("j", JobKind::Copy, "/a", "/b", "o"), &[], 0);
        assert!(copy.covers(&p("/b/x")) && !copy.covers(&p("/a/x")));
        let delete = UnfinishedJob::of(&entry("j", JobKind::Delete, "/a", "/a", "o"), &[], 0);
        assert!(delete.covers(&p("/a/x")) && !delete.covers(&p("/b")));
        assert!(delete.touches(&p("/")) && delete.touches(&p("/a/x")) && !delete.touches(&p("/b")));
        assert_eq!(delete.describe(), "delete of `/a`");
    }
}
