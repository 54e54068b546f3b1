//! The source text's lock sequence, one request per lock document, for comparison with the
//! batched acquisition: shared locks root first (read, then a conditional increment or a
//! create), then `_create` of the exclusive lock; release deepest first. Without scripts
//! each shared lock costs a read and a write; with the book's painless script it would cost
//! one request.

use fs_model::{tree_lock_id, FsPath};
use fs_store::DocStore;
use serde_json::json;

/// Round trips of one lock and one unlock.
pub struct Trips {
    pub lock: u32,
    pub unlock: u32,
}

pub async fn lock_unlock(
    store: &dyn DocStore,
    index: &str,
    path: &FsPath,
) -> anyhow::Result<Trips> {
    let ancestors: Vec<FsPath> = path.ancestors().into_iter().skip(1).collect();
    let mut lock = 0;
    for a in &ancestors {
        lock += change_count(store, index, a, 1).await?;
    }
    lock += 1;
    store
        .create(
            index,
            &tree_lock_id(path),
            json!({"lock_type": "exclusive", "process_id": "bench"}),
        )
        .await?;
    let mut unlock = 1;
    store.delete(index, &tree_lock_id(path), None).await?;
    for a in ancestors.iter().rev() {
        unlock += change_count(store, index, a, -1).await?;
    }
    Ok(Trips { lock, unlock })
}

/// Adds `by` to a shared lock's count (creating or deleting the document); returns round trips.
async fn change_count(
    store: &dyn DocStore,
    index: &str,
    path: &FsPath,
    by: i64,
) -> anyhow::Result<u32> {
    let id = tree_lock_id(path);
    let mut trips = 0;
    loop {
        trips += 2;
        let current = store.get(index, &id).await?;
        let written = match current {
            None => store
                .create(index, &id, json!({"lock_type": "shared", "lock_count": by}))
                .await
                .map(|_| ()),
            Some(doc) => {
                let count = doc.source["lock_count"].as_i64().unwrap_or(0) + by;
                if count <= 0 {
                    store
                        .delete(index, &id, Some(doc.version))
                        .await
                        .map(|_| ())
                } else {
                    let source = json!({"lock_type": "shared", "lock_count": count});
                    store
                        .index(index, &id, source, Some(doc.version))
                        .await
                        .map(|_| ())
                }
            }
        };
        match written {
            Ok(()) => return Ok(trips),
            // Someone changed it between our read and write: read again.
            Err(e) if e.is_conflict() => continue,
            Err(e) => return Err(e.into()),
        }
    }
}
