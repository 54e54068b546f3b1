//! The error type of rename jobs and tree operations.

use crate::kind::JobKind;
use fs_locks::LockError;
use fs_model::{FsPath, PathError};
use fs_store::StoreError;

/// Why a rename (or another tree operation) failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenameError {
    /// The source does not exist (checked once the locks are held).
    #[error("source `{path}` not found")]
    SourceNotFound {
        /// The missing source.
        path: FsPath,
    },
    /// The destination exists already.
    #[error("destination `{path}` already exists")]
    DestinationExists {
        /// The existing destination.
        path: FsPath,
    },
    /// `mkdir` or `touch` found something at its path that it does not take: `what` says
    /// what (" as a file", " as a directory: touch makes or updates files", …).
    #[error("`{path}` already exists{what}")]
    AlreadyExists {
        /// The path.
        path: FsPath,
        /// What is there, and what the verb would have accepted.
        what: &'static str,
    },
    /// The destination's parent directory does not exist.
    #[error("destination's parent `{path}` does not exist")]
    DestinationParentMissing {
        /// The missing parent.
        path: FsPath,
    },
    /// The destination's parent is a file.
    #[error("destination's parent `{path}` is not a directory")]
    DestinationParentNotDir {
        /// The parent that is a file.
        path: FsPath,
    },
    /// The destination lies inside the source (or is the source).
    #[error("cannot move `{from}` into itself (`{to}`)")]
    MoveIntoItself {
        /// The source.
        from: FsPath,
        /// The destination.
        to: FsPath,
    },
    /// The root cannot be renamed.
    #[error("the root `/` cannot be moved")]
    RootCannotMove,
    /// The destination of a copy lies inside its source (or is the source): the copy would
    /// copy itself.
    #[error("cannot copy `{from}` into itself (`{to}`)")]
    CopyIntoItself {
        /// The source.
        from: FsPath,
        /// The destination.
        to: FsPath,
    },
    /// The root cannot be deleted.
    #[error("the root `/` cannot be removed")]
    RootCannotDelete,
    /// A directory with entries was to be removed without `recursive`.
    #[error("`{path}` is a directory with {}; use -r to remove it and everything under it", fs_model::plural(*.entries, "entry", "entries"))]
    DirectoryNotEmpty {
        /// The directory.
        path: FsPath,
        /// How many entries it holds directly.
        entries: u64,
    },
    /// A consistent read (under a shared lock) of the root was asked for. Writers take no
    /// lock on the root (only below it), so no lock there would keep them out.
    #[error("`/` cannot be read consistently: writers take no lock on the root, so no shared lock there would keep them out; read a directory under it, or read without a lock")]
    RootNotLockable,
    /// A path operation failed (a rebased path would be too long, say).
    #[error(transparent)]
    Path(#[from] PathError),
    /// The locks were not granted, or were lost.
    #[error(transparent)]
    Lock(#[from] LockError),
    /// A document changed between the job's read and its conditional write: someone else
    /// wrote it (for a copy: a document holds the copy's id but not what the copy would
    /// write). The job stopped there; what it wrote before stays written.
    #[error("`{path}` changed while the job was writing it (version conflict); stopped after {} {rewritten} of the {found} documents", kind.writing())]
    Conflict {
        /// What the job was doing.
        kind: JobKind,
        /// The document that changed.
        path: String,
        /// Documents written before the job stopped.
        rewritten: u64,
        /// Documents found so far.
        found: u64,
    },
    /// Fewer documents were written (rewritten, copied or deleted) than found.
    #[error("wrote {rewritten} documents but found {found}")]
    CountMismatch {
        /// Documents rewritten.
        rewritten: u64,
        /// Documents found.
        found: u64,
    },
    /// A stored document is not a valid tree document.
    #[error("document `{id}` in `{index}` is not a valid tree document: {message}")]
    BadDocument {
        /// The index.
        index: String,
        /// The document id.
        id: String,
        /// What is wrong with it.
        message: String,
    },
    /// A local file or directory could not be used.
    #[error("`{path}`: {message}")]
    Local {
        /// The local path.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// The tree is kept by a newer fsrename protocol than this version knows (its journal
    /// holds the marker a newer version wrote, `fs_rename::PROTOCOL_ID`): this version would
    /// break what the newer one relies on, so it does nothing.
    #[error("the tree is kept by fsrename protocol {protocol} (the marker `fsrename-protocol` in `{index}`), newer than this version's: run fsrename {needs} or later")]
    NewerProtocol {
        /// The journal index.
        index: String,
        /// The protocol of the marker.
        protocol: u64,
        /// The version the marker says it needs.
        needs: String,
    },
    /// The server's task that rewrote a rename's documents (or deleted a delete's files)
    /// stopped short: a document changed under the locks (a foreign write), the script
    /// refused a document the check did not see, or the task was cancelled. What it wrote
    /// stays written; the journal entry lets a recovery finish the job.
    #[error(
        "the server's task on `{from}` stopped after {rewritten} of {found} documents: {failure}"
    )]
    ServerRewrite {
        /// The source of the rename, or the path of the delete.
        from: String,
        /// Why the task stopped.
        failure: fs_store::TaskFailure,
        /// Documents the task rewrote (or deleted).
        rewritten: u64,
        /// Documents it found.
        found: u64,
    },
    /// The job was cancelled (the service is shutting down). Before its first write its locks
    /// are released; after it, the error comes wrapped in [`RenameError::Unfinished`].
    #[error("cancelled after {} {rewritten} of {found} documents", kind.writing())]
    Cancelled {
        /// What the job was doing.
        kind: JobKind,
        /// Documents rewritten before the job stopped.
        rewritten: u64,
        /// Documents found so far.
        found: u64,
    },
    /// The job (a rename, copy or delete) stopped half-way, after its first write. Its locks
    /// were left in place (not released) so nobody sees or changes the half-done tree; once
    /// this process has ended (on its machine), or their lease has run out (anywhere),
    /// recovery takes them over and finishes the job: `fsrename recover`, a running
    /// `fsrename serve`, or the next job whose locks they refuse.
    #[error("{cause}; the job is unfinished: it stays locked, and journal entry `{job}` lets recovery finish it (`fsrename recover`, or the next job in its way): on this machine once this process has ended, elsewhere once the locks' lease runs out, within {}", fs_model::short_duration(std::time::Duration::from_millis(*.lease_ms)))]
    Unfinished {
        /// The journal entry (the job id).
        job: String,
        /// The lease of the job's locks: they run out at most this long after now (they are
        /// no longer renewed), and recovery can take them over then.
        lease_ms: u64,
        /// Documents rewritten before the job stopped.
        rewritten: u64,
        /// Documents found so far.
        found: u64,
        /// Why it stopped.
        cause: Box<RenameError>,
    },
    /// The job may not journal its rename: its locks had expired and a recovery cleared them
    /// after fencing its journal entry (or took the entry over). Nothing was rewritten; the
    /// rename can simply be run again.
    #[error("journal entry `{job}` is fenced off by {by}: this job's locks expired before it journaled, so it stops before its first write (run it again)")]
    Fenced {
        /// The journal entry the job would have written.
        job: String,
        /// Who fenced it, and when.
        by: String,
    },
    /// The job's journal entry landed, but a recoverer took it over (the job's locks expired
    /// meanwhile: a pause, a partition) before the job heard that it had: the recoverer
    /// finishes the job, or has, and the job must neither start over nor report failure. It
    /// comes wrapped in [`RenameError::Unfinished`], an unknown outcome for its caller.
    #[error("journal entry `{job}` was taken over by {by}, which finishes the job")]
    TakenOver {
        /// The job's journal entry.
        job: String,
        /// Who took it over.
        by: String,
    },
    /// The job's caller could not record what it must before the job journals (the service
    /// stores the journal id with the job, so that another instance can tell whether the job
    /// wrote, [`crate::RenameHooks::journaling`]): the job stops before its journal entry and
    /// its first write, so nothing was written and the job can be run again.
    #[error("stopped before journal entry `{job}` and its first write: {reason}")]
    NotJournaled {
        /// The journal entry the job would have written.
        job: String,
        /// Why its caller stopped it.
        reason: String,
    },
    /// The one write of `mkdir` or `touch` was still unanswered when its locks' lease ran out:
    /// it was given up then (no resend goes out after), but a request already sent may have
    /// been carried out. Whether it happened is unknown; `stat` tells.
    #[error("the write of `{path}` was not answered while its locks were held ({} waited): whether it happened is unknown (`stat` tells)", fs_model::short_duration(std::time::Duration::from_millis(*.waited_ms)))]
    WriteUnanswered {
        /// The path written.
        path: FsPath,
        /// How long the write was waited for.
        waited_ms: u64,
    },
    /// The create of a fresh document was sent until the resends ran out, never answered
    /// as done, and the document was not found when read back. A send may still be on its
    /// way (held by a paused node, say) and land later: whether it happened is unknown.
    #[error("adding `{name}` was not answered ({cause}), and it was not there when read back: whether it happened is unknown (`stat` tells)")]
    CreateUnanswered {
        /// The document's path.
        name: String,
        /// The last failure of its create.
        cause: StoreError,
    },
    /// The store failed.
    #[error("store failure while {context}: {cause}")]
    Store {
        /// What was being done.
        context: String,
        /// The store's error. Not a `source`: the message already says it, and a chain
        /// printer would say it twice.
        cause: StoreError,
    },
}

impl RenameError {
    /// Returns true if retrying the whole operation later may succeed (a lock timeout, a
    /// transient store failure).
    pub fn is_retryable(&self) -> bool {
        match self {
            RenameError::Lock(e) => e.is_retryable(),
            RenameError::Store { cause, .. } => cause.is_retryable(),
            _ => false,
        }
    }

    pub(crate) fn store(context: impl Into<String>) -> impl FnOnce(StoreError) -> RenameError {
        let context = context.into();
        move |cause| RenameError::Store { context, cause }
    }
}

/// A `Result` whose error is a [`RenameError`].
pub type Result<T, E = RenameError> = std::result::Result<T, E>;
