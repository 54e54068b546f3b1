//! The error type of lock operations.

use std::time::Duration;

use fs_model::FsPath;
use fs_store::StoreError;

use crate::lock_doc::Conflict;
use crate::os_process::OsProcess;
use fs_model::LockMode;

/// A lock that stood in the way: where it is and who holds it (or waits there before us).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocker {
    /// The locked path, or the lock document id for global and document locks.
    pub path: String,
    /// The lock document's id (`-` for a refusal that is not a lock's).
    pub id: String,
    /// What refuses: `exclusive` (X), `shared` (IX, the book's shared lock), `S`, `IS`; or
    /// `contended`, `store`, `released` for refusals that are not a lock's.
    pub lock_type: String,
    /// Who holds it, as readable as the lock document allows.
    pub holders: String,
    /// True when an older request waiting there refused us (fair waiting), not a holder.
    pub waiter: bool,
    /// How long ago the refusing holders' leases ended, in milliseconds, when they all have:
    /// a holder that died. Only recovery clears its locks (`fsrename recover`, or a job given
    /// [`Orphans`](crate::Orphans) to do it).
    pub expired_ms_ago: Option<i64>,
    /// The refusing holders' operating-system processes, when each recorded its own: on
    /// their machine, proof that they are gone ends their leases at once
    /// ([`LockClient::end_gone_leases`](crate::LockClient::end_gone_leases)).
    pub processes: Option<Vec<OsProcess>>,
}

impl Blocker {
    /// A refusal that is not a lock holder's (a store failure, contention).
    pub(crate) fn other(
        path: impl Into<String>,
        lock_type: impl Into<String>,
        holders: impl Into<String>,
    ) -> Blocker {
        Blocker {
            path: path.into(),
            id: "-".to_owned(),
            lock_type: lock_type.into(),
            holders: holders.into(),
            waiter: false,
            expired_ms_ago: None,
            processes: None,
        }
    }

    pub(crate) fn from_conflict(
        (path, id): (String, &str),
        conflict: &Conflict,
        now: i64,
    ) -> Blocker {
        Blocker {
            path,
            id: id.to_owned(),
            lock_type: mode_word(conflict.mode).to_owned(),
            holders: conflict.holders.clone(),
            waiter: conflict.waiter,
            expired_ms_ago: conflict.expired_at.map(|t| (now - t).max(0)),
            processes: conflict.processes.clone(),
        }
    }
}

/// How messages name a mode: the book's words for its two modes, Gray's letters for the
/// readers' modes.
pub(crate) fn mode_word(mode: LockMode) -> &'static str {
    match mode {
        LockMode::Exclusive => "exclusive",
        LockMode::IntentExclusive => "shared",
        LockMode::Shared => "S (subtree read)",
        LockMode::IntentShared => "IS (intention-read)",
    }
}

/// Says a duration in milliseconds the way people do: `40 ms`, `12 s`, `9 min`, `3 h`.
fn human_ms(ms: i64) -> String {
    match ms {
        ms if ms < 1_000 => format!("{ms} ms"),
        ms if ms < 120_000 => format!("{} s", ms / 1_000),
        ms if ms < 7_200_000 => format!("{} min", ms / 60_000),
        ms => format!("{} h", ms / 3_600_000),
    }
}

impl std::fmt::Display for Blocker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.waiter {
            return write!(
                f,
                "older request waiting for a {} lock on `{}`: {} (older requests go first)",
                self.lock_type, self.path, self.holders
            );
        }
        write!(
            f,
            "{} lock on `{}` held by {}",
            self.lock_type, self.path, self.holders
        )?;
        if let Some(ago) = self.expired_ms_ago {
            write!(
                f,
                ", expired {} ago: `fsrename recover` finishes what it left and clears it",
                human_ms(ago)
            )?;
        }
        Ok(())
    }
}

/// What a client knows of its own renewals when it finds its lease over: a process starved of
/// the CPU (a busy machine, a pause) renews late and loses a lease nobody took from it, which
/// is not the same as a rival's takeover or a failing store, and the message says which.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LateRenewal {
    /// How often a renewal was due (a third of the lease, by default).
    pub every: Duration,
    /// How long since the renewal last ran (or, if it never did, since it was started).
    pub since_attempt: Duration,
    /// How long since a renewal last succeeded (or since it was started).
    pub since_success: Duration,
}

impl LateRenewal {
    /// Says why the lease ran out: the renewal did not run in time (starved), or ran and
    /// failed, or neither (the lease was too short for the work between two renewals).
    fn why(&self) -> String {
        let every = fs_model::short_duration(self.every);
        if self.since_attempt > self.every * 2 {
            format!(
                "; this process renews it every {every}, but its renewal had not run for {}: the process was starved (a busy machine, or a pause), no other job took the lock",
                fs_model::short_duration(self.since_attempt)
            )
        } else if self.since_success > self.every * 2 {
            format!(
                "; its renewals (every {every}) kept failing for {} (see the warnings logged)",
                fs_model::short_duration(self.since_success)
            )
        } else {
            String::new()
        }
    }
}

/// Why a lock operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LockError {
    /// The locks were not granted before the deadline.
    #[error(
        "{wanted} not granted within {} ({}): blocked by the {blocker}",
        fs_model::short_duration(*waited),
        fs_model::plural(*attempts, "attempt", "attempts")
    )]
    Timeout {
        /// What was being locked.
        wanted: String,
        /// The lock that refused the last attempt.
        blocker: Box<Blocker>,
        /// How long the caller waited.
        waited: Duration,
        /// How many attempts were made.
        attempts: u32,
    },
    /// A rename's destination lies inside its source.
    #[error("cannot move `{from}` into itself (`{to}`)")]
    MoveIntoItself {
        /// The source.
        from: FsPath,
        /// The destination, inside the source.
        to: FsPath,
    },
    /// The root was asked for a tree lock. It is never renamed, and no acquisition takes an
    /// intention lock on it (every job would contend on one document), so a lock on it would
    /// exclude nothing: lock the directories under it instead.
    #[error("the root `/` cannot be locked: writers take no lock on it, so a lock there would exclude nothing; give a path under it")]
    RootLock,
    /// The owner holds a weaker lock on a path and asked for a stronger one there (or a
    /// request needs S and IX on one path, Gray's SIX).
    #[error("`{path}` is already locked by this owner in a weaker mode; upgrading a lock is not supported")]
    Upgrade {
        /// The lock's path or id.
        path: String,
    },
    /// An explicit takeover found a lock that has not expired.
    #[error("the lock on `{path}` has not expired: {holders} holds it until {expires_at} ms")]
    NotExpired {
        /// The lock's path or id.
        path: String,
        /// Who holds it.
        holders: String,
        /// When it expires, epoch milliseconds (0 when it records no expiry).
        expires_at: i64,
    },
    /// This owner's lock was taken over or removed by someone else (its lease had expired),
    /// or its lease ran out before the work under it ended (a pause: a stalled request, a
    /// stopped process), so that someone may have.
    #[error("lost the lock on `{path}`: its lease ran out, and it was or may have been taken over or removed{}", renewal.as_ref().map(LateRenewal::why).unwrap_or_default())]
    LeaseLost {
        /// The lock's path or id.
        path: String,
        /// Why the lease ran out, where this client can tell: its own renewal ran late, or
        /// kept failing. `None` where the loss was found otherwise (a renewal or a release
        /// found the lock taken).
        renewal: Option<LateRenewal>,
    },
    /// The acquisition was cancelled (the service is shutting down) before it was granted.
    #[error("{wanted} cancelled before it was granted")]
    Cancelled {
        /// What was being locked.
        wanted: String,
    },
    /// The store failed.
    #[error("lock store failure while {context}: {cause}")]
    Store {
        /// What was being done.
        context: String,
        /// The store's error. Not a `source`: the message already says it, and a chain
        /// printer would say it twice.
        cause: StoreError,
    },
}

impl LockError {
    /// Returns true if retrying the same operation later may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            LockError::Timeout { .. } => true,
            LockError::Store { cause, .. } => cause.is_retryable(),
            _ => false,
        }
    }

    pub(crate) fn store(context: impl Into<String>) -> impl FnOnce(StoreError) -> LockError {
        let context = context.into();
        move |cause| LockError::Store { context, cause }
    }
}

/// A `Result` whose error is a [`LockError`].
pub type Result<T, E = LockError> = std::result::Result<T, E>;
