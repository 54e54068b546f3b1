//! What a `bulk` of conditional lock writes left: shared by the attempt and the adoption.

use fs_store::{BulkItemResult, StoreError};
use serde_json::Value;

use crate::error::LockError;
use crate::outcome::Taken;
use crate::plan::LockItem;

/// How many read-and-write rounds an attempt or a waiter registration makes on contended
/// documents before it stops (an attempt then counts as refused, and backs off holding
/// nothing).
pub(super) const MAX_ROUNDS: usize = 8;

/// The answers to one `bulk` of conditional writes, sorted.
pub(super) struct Written<'i> {
    /// The items written: now held.
    pub(super) taken: Vec<Taken>,
    /// The items to read again and decide afresh: someone wrote the document since we read
    /// it, or the item's fate is unknown. With the answer, for messages.
    pub(super) again: Vec<(&'i LockItem, StoreError)>,
    /// The first item that failed for good, as an error saying `doing` the lock on it.
    pub(super) failed: Option<LockError>,
}

/// Sorts the `results` of writing `writing` (each item with the source written), in order.
pub(super) fn sort_written<'i>(
    writing: Vec<(&'i LockItem, Value)>,
    results: Vec<BulkItemResult>,
    doing: &str,
) -> Written<'i> {
    let mut written = Written {
        taken: Vec::new(),
        again: Vec::new(),
        failed: None,
    };
    for ((item, source), result) in writing.into_iter().zip(results) {
        match result {
            Ok(version) => written.taken.push(Taken {
                item: item.clone(),
                version,
                source,
            }),
            Err(e) if e.is_conflict() || e.is_retryable() => written.again.push((item, e)),
            Err(e) => {
                let context = format!("{doing} the lock on `{}`", item.label());
                written.failed.get_or_insert(LockError::store(context)(e));
            }
        }
    }
    written
}
