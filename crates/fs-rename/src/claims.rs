//! The sweep of claims. A copy job claims each copy's id with `_create` before it writes the
//! copy over the claim (see `job/copy.rs` and [`FsDoc::claim`]), and writes over all its
//! claims before its entry is closed; a recovery finishing the job writes over those it
//! finds. So a claim whose job has no open journal entry was sent late: by a copy job paused
//! past its lease, whose creates landed after a recovery had finished the copy and someone
//! had deleted it since (the case claims exist for). Claims have no path, so nobody sees
//! them; `recover` removes them with this.

use std::sync::Arc;

use fs_model::FsDoc;
use fs_store::{Scan, Scope, SharedStore, StoreError};

use crate::error::{RenameError, Result};
use crate::journal::Journal;

/// Deletes the claims of the tree index `index` whose job has no open journal entry; returns
/// how many it deleted (in a dry run, would delete).
///
/// A claim is read before its job's entry, and a copy job journals before it claims, so a
/// job that has no open entry once its claim was read will never write over that claim: the
/// delete, conditional on the version read, cannot take a claim from a job at work.
///
/// # Errors
/// Store failures while scanning or reading the journal. A claim that changed or went
/// since it was read is left to the next run.
pub(crate) async fn sweep_claims(
    store: &SharedStore,
    index: &str,
    journal: &Journal,
    page_size: usize,
    dry_run: bool,
) -> Result<usize> {
    // Claims land without a refresh (their job refreshes once, after its writes, and a late
    // one has nobody to refresh after it), and searches see only refreshed documents.
    match store.refresh(index).await {
        Ok(()) | Err(StoreError::IndexNotFound { .. }) => {}
        Err(e) => return Err(RenameError::store(format!("refreshing `{index}`"))(e)),
    }
    let mut scan = Scan::new(Arc::clone(store), index, Scope::Pathless, page_size);
    let mut claims = Vec::new();
    let scanned = loop {
        match scan.next_page().await {
            Ok(Some(docs)) => claims.extend(docs.into_iter().filter_map(|d| {
                let job = FsDoc::claim_job(&d.source)?.to_owned();
                Some((d.id, d.version, job))
            })),
            Ok(None) => break Ok(()),
            Err(StoreError::IndexNotFound { .. }) => break Ok(()),
            Err(e) => break Err(RenameError::store(format!("scanning `{index}` for claims"))(e)),
        }
    };
    scan.close().await;
    scanned?;
    let mut swept = 0;
    for (id, version, job) in claims {
        if journal.is_open(&job).await? {
            continue;
        }
        if dry_run {
            swept += 1;
            continue;
        }
        match store.delete(index, &id, Some(version)).await {
            Ok(_) => swept += 1,
            Err(e) if e.is_conflict() || matches!(e, StoreError::NotFound { .. }) => {
                tracing::debug!(claim = %id, error = %e, "claim not swept: it changed");
            }
            Err(e) => {
                return Err(RenameError::store(format!(
                    "removing the claim `{id}` of job {job}"
                ))(e))
            }
        }
    }
    Ok(swept)
}
