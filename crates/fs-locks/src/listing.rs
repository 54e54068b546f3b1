//! Reading the lock index as a whole: listing locks, and the book's release by query.

use std::sync::Arc;

use fs_store::{BulkOp, Scan, Scope};

use crate::client::LockClient;
use crate::error::{LockError, Result};
use crate::lock_doc::Observed;
use fs_model::LockMode;

/// One lock document as found in the lock index.
#[derive(Debug, Clone, PartialEq)]
pub struct LockInfo {
    /// The document id (a path, a hashed path, `global`, or a tree document's id).
    pub id: String,
    /// The locked path, if the document records one.
    pub path: Option<String>,
    /// What the document says.
    pub observed: Observed,
    /// When it expires, epoch milliseconds, if recorded.
    pub expires_at: Option<i64>,
}

impl LockInfo {
    /// Returns the grants on this document: `(process id, mode, label, expires_at)`, one per
    /// holder; the book's shares without a holder entry appear once with an empty process id
    /// and their count as the label.
    pub fn grants(&self) -> Vec<(String, LockMode, String, Option<i64>)> {
        match &self.observed {
            Observed::Exclusive {
                process_id,
                holder,
                expires_at,
                ..
            } => vec![(
                process_id.clone().unwrap_or_default(),
                LockMode::Exclusive,
                holder.clone().unwrap_or_default(),
                *expires_at,
            )],
            Observed::Group { holders, .. } => {
                let mut grants: Vec<(String, LockMode, String, Option<i64>)> = holders
                    .iter()
                    .map(|(pid, h)| (pid.clone(), h.mode, h.holder.clone(), Some(h.expires_at)))
                    .collect();
                let foreign = self.observed.foreign_shares();
                if foreign > 0 {
                    grants.push((
                        String::new(),
                        LockMode::IntentExclusive,
                        format!("{foreign} share(s) without a process_id (the book's)"),
                        None,
                    ));
                }
                grants
            }
        }
    }
}

const PAGE: usize = 1_000;

impl LockClient {
    /// Lists every lock document, refreshing the lock index first so that locks taken just now
    /// are listed too.
    ///
    /// # Errors
    /// [`LockError::Store`] if the store failed.
    pub async fn list_locks(&self) -> Result<Vec<LockInfo>> {
        // Its callers judge the leases it lists by the lease clock.
        self.sync_clock().await;
        let store = self.store();
        let index = self.lock_index();
        let context = format!("listing locks in `{index}`");
        store
            .refresh(index)
            .await
            .map_err(LockError::store(context.clone()))?;
        let docs = Scan::new(Arc::clone(self.shared_store()), index, Scope::All, PAGE)
            .read_all()
            .await
            .map_err(LockError::store(context))?;
        Ok(docs
            .into_iter()
            .map(|doc| LockInfo {
                path: doc
                    .source
                    .get("path")
                    .and_then(|p| p.as_str())
                    .map(str::to_owned),
                expires_at: doc.source.get("expires_at").and_then(|e| e.as_i64()),
                observed: Observed::from_source(&doc.source),
                id: doc.id,
            })
            .collect())
    }

    /// Deletes every exclusive lock document (tree, global or document lock) that carries this
    /// client's process id, found by searching the lock index: the book's
    /// `DELETE /fs/lock/_query {"term": {"process_id": ...}}`. The index is refreshed first, as
    /// the book says, or a lock document written since the last refresh would be missed.
    /// Shared locks are left alone (a share is not this owner's to delete). Returns how many
    /// documents were deleted.
    ///
    /// # Errors
    /// [`LockError::Store`] if the store failed.
    pub async fn release_all_by_query(&self) -> Result<usize> {
        let pid = self.owner().process_id.clone();
        let index = self.lock_index().to_owned();
        let context = format!("releasing the locks of process {pid} in `{index}`");
        let mut ops = Vec::new();
        let mut ids = Vec::new();
        let store = self.store();
        store
            .refresh(&index)
            .await
            .map_err(LockError::store(context.clone()))?;
        let mut scan = Scan::new(Arc::clone(self.shared_store()), &index, Scope::All, PAGE);
        let scanned = async {
            while let Some(docs) = scan.next_page().await? {
                for doc in docs {
                    let mine = matches!(Observed::from_source(&doc.source),
                        Observed::Exclusive { process_id: Some(ref p), .. } if *p == pid);
                    if mine {
                        ids.push(doc.id.clone());
                        ops.push(BulkOp::Delete {
                            id: doc.id,
                            if_version: Some(doc.version),
                        });
                    }
                }
            }
            Ok::<_, fs_store::StoreError>(())
        }
        .await;
        scan.close().await;
        scanned.map_err(LockError::store(context.clone()))?;
        if ops.is_empty() {
            return Ok(0);
        }
        let results = store
            .bulk(&index, ops)
            .await
            .map_err(LockError::store(context))?;
        let deleted = results.iter().filter(|r| r.is_ok()).count();
        self.forget(&ids).await;
        Ok(deleted)
    }
}
