//! What a job that cannot give everything back leaves behind: the error of a journaled job
//! that stopped before its entry was closed (recovery finishes it), and the locks a complete
//! job could not release, named in its report (they expire with their lease).

use fs_locks::{LockClient, LockError, LockItem, Observed};

use super::Renamer;
use crate::error::RenameError;
use crate::report::RenameReport;
use crate::tree::FsTree;

/// How many lock documents one read asks for when a failed release checks what it left.
const LEFT_CHECK_CHUNK: usize = 1_000;

impl Renamer {
    /// Records in `report` the locks of `held` that a complete rename could not release: those
    /// whose documents still name this job's owner, or all of them if the lock index cannot
    /// be read (the store that failed the release may fail this read too).
    pub(super) async fn left_to_expire(
        &self,
        tree: &FsTree,
        locks: &LockClient,
        held: &[LockItem],
        job_id: &str,
        error: &LockError,
        report: &mut RenameReport,
    ) {
        let owner = locks.owner().process_id.as_str();
        let lock_index = tree.lock_index();
        let mut left = Vec::new();
        for chunk in held.chunks(LEFT_CHECK_CHUNK) {
            let ids: Vec<String> = chunk.iter().map(|item| item.id.clone()).collect();
            match tree.store().mget(&lock_index, &ids).await {
                Ok(docs) => left.extend(
                    chunk
                        .iter()
                        .zip(docs)
                        .filter(|(_, doc)| doc.as_ref().is_some_and(|d| names(&d.source, owner)))
                        .map(|(item, _)| item.label()),
                ),
                Err(e) => {
                    tracing::debug!(error = %e, "cannot tell which locks the failed release left; reporting them all");
                    left.extend(chunk.iter().map(LockItem::label));
                }
            }
        }
        let lease = self.config.lease;
        let kind = report.kind;
        let warning = if left.is_empty() {
            format!(
                "the {kind} is complete; releasing its locks failed ({error}), but none of them is left in the store"
            )
        } else {
            let listed: Vec<String> = left.iter().map(|l| format!("`{l}`")).collect();
            format!(
                "the {kind} is complete, but releasing its locks failed ({error}): {} left locked until the lease ({lease:?}) runs out; then `fsrename recover` (or a running `fsrename serve`) deletes them (journal id {job_id})",
                listed.join(", ")
            )
        };
        tracing::warn!(job = %job_id, %kind, locks = ?left, ?lease, error = %error,
            "job complete, but its locks were not released: they expire with their lease and `fsrename recover` clears them");
        report.locks_left = left;
        report.warnings.push(warning);
    }
}

/// The error of a journaled job that stopped before its entry was closed.
pub(super) fn unfinished(
    job_id: &str,
    lease: std::time::Duration,
    cause: RenameError,
    report: &RenameReport,
) -> RenameError {
    RenameError::Unfinished {
        job: job_id.to_owned(),
        lease_ms: u64::try_from(lease.as_millis()).unwrap_or(u64::MAX),
        rewritten: report.rewritten,
        found: report.found,
        cause: Box::new(cause),
    }
}

/// Returns true if the lock document `source` still names `process_id` as its owner or as one
/// of its holders.
fn names(source: &serde_json::Value, process_id: &str) -> bool {
    match Observed::from_source(source) {
        Observed::Exclusive {
            process_id: owner, ..
        } => owner.as_deref() == Some(process_id),
        Observed::Group { holders, .. } => holders.contains_key(process_id),
    }
}
