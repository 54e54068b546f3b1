//! Reading back the documents of writes that met a version conflict, to tell the job's own
//! write (landed earlier, its answer lost) from someone else's.
//!
//! Any conflict on a write of the job's own may be its own write: a resend after a lost
//! answer meets the first send, and on a cluster the coordinating node itself sends a
//! shard's items again to a promoted replica when the primary died before answering, so a
//! conflict comes back on the first send with nothing amiss on the connection. The read
//! decides, and on a cluster the read itself may be served by a copy of the shard that has not
//! applied the write yet. The conflict says what the primary had (its current version, or
//! that the document exists): a read that shows less is such a copy, and is read again, with
//! backoff, for a few seconds at most, before it is believed.

use fs_store::{StoreError, StoredDoc};

use crate::error::{RenameError, Result};
use crate::resend;
use crate::tree::FsTree;

/// Reads the documents `ids` in one `mget`, again for those whose read shows less than their
/// conflict (`conflicts[i]` for `ids[i]`) said the primary had; returns them in order.
pub(super) async fn read_back(
    tree: &FsTree,
    ids: &[String],
    conflicts: &[&StoreError],
) -> Result<Vec<Option<StoredDoc>>> {
    let mut docs: Vec<Option<StoredDoc>> = vec![None; ids.len()];
    let mut pending: Vec<usize> = (0..ids.len()).collect();
    let mut backoff = resend::STALE_READ.start();
    loop {
        let wanted: Vec<String> = pending.iter().map(|&i| ids[i].clone()).collect();
        let read = tree
            .store()
            .mget(tree.index(), &wanted)
            .await
            .map_err(RenameError::store(format!(
                "re-reading {} documents whose write may have landed",
                wanted.len()
            )))?;
        let mut stale = Vec::new();
        for (i, doc) in pending.into_iter().zip(read) {
            if shows_less(doc.as_ref(), conflicts[i]) {
                stale.push(i);
            }
            docs[i] = doc;
        }
        // Out of patience, the last read is believed.
        if stale.is_empty() || !backoff.wait().await {
            break;
        }
        tracing::debug!(
            documents = stale.len(),
            "a read-back showed less than its conflict: a lagging copy; reading again"
        );
        pending = stale;
    }
    Ok(docs)
}

/// Whether `read` shows less than `conflict` said the primary had: no document where one
/// exists, or an older version than the current one.
fn shows_less(read: Option<&StoredDoc>, conflict: &StoreError) -> bool {
    let StoreError::Conflict {
        exists, current, ..
    } = conflict
    else {
        return false;
    };
    match (read, current) {
        (None, _) => *exists,
        (Some(doc), Some(current)) => doc.version.seq_no < current.seq_no,
        (Some(_), None) => false,
    }
}

#[cfg(test)]
mod tests {
    use fs_store::Version;
    use serde_json::json;

    use super::*;

    fn doc(seq_no: i64) -> StoredDoc {
        StoredDoc {
            id: "a".to_owned(),
            version: Version {
                seq_no,
                primary_term: 1,
            },
            source: json!({}),
        }
    }

    fn conflict(exists: bool, current: Option<i64>) -> StoreError {
        StoreError::Conflict {
            index: "fs".to_owned(),
            id: "a".to_owned(),
            exists,
            current: current.map(|seq_no| Version {
                seq_no,
                primary_term: 2,
            }),
        }
    }

    #[test]
    fn a_read_older_than_its_conflict_is_a_lagging_copy() {
        assert!(shows_less(Some(&doc(4)), &conflict(true, Some(5))));
        assert!(!shows_less(Some(&doc(5)), &conflict(true, Some(5))));
        assert!(!shows_less(Some(&doc(6)), &conflict(true, Some(5))));
        assert!(shows_less(None, &conflict(true, None)));
        assert!(!shows_less(None, &conflict(false, None)));
        assert!(!shows_less(Some(&doc(1)), &conflict(true, None)));
    }
}
