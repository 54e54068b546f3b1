//! Foreign shares that never go away: the book's retried `lock_count++`.
//!
//! A client of the book takes its share with a scripted `ctx._source.lock_count++` and gives
//! it back with `--lock_count` (deleting the document at 0). It records nothing else: no
//! owner, no lease. Elasticsearch may apply a retried scripted update twice (the first
//! attempt landed, its answer was lost, the client sent it again), and then the count is one
//! too high for good: the book client's release takes one off, and a share nobody holds stays
//! behind. fsrename counts foreign shares as intention-exclusive (IX), so that phantom keeps
//! every exclusive lock (and every rename) off the path, forever.
//!
//! fsrename never removes a foreign share it has just seen: it cannot tell a phantom from a
//! share a live book client holds. Instead recovery watches them ([`LockClient::settle_foreign`]):
//! it stamps the document with the foreign count it saw and when ([`FOREIGN_SEEN`](crate::FOREIGN_SEEN)), restamps
//! whenever that count has changed (a book client came or went: they are alive), and clears
//! the foreign shares once the count has stood still for the foreign lease (an hour by
//! default, far beyond any lock the book takes: its locks last one rename). fsrename's own
//! shares, which carry leases, are untouched.

use std::time::Duration;

use crate::client::LockClient;
use crate::error::Result;
use crate::lock_doc::{
    foreign_seen, lock_label, shared_with_foreign_cleared, with_foreign_seen, Observed,
};

/// What [`LockClient::settle_foreign`] found and did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForeignShares {
    /// No document, or no foreign share in it.
    None,
    /// Foreign shares, not yet stale: noted, kept.
    Watching {
        /// How many.
        count: i64,
        /// Since when the count is unchanged, epoch ms.
        since: i64,
    },
    /// Foreign shares unchanged for longer than the foreign lease: removed (this many).
    Cleared(i64),
}

impl LockClient {
    /// Watches the foreign shares of lock document `id` (see the module documentation): notes
    /// their count the first time and whenever it changed, and clears them once it has stood
    /// still for `stale_after`. Every write is conditional on the version read.
    ///
    /// # Errors
    /// [`LockError::Store`](crate::LockError::Store) if the store failed or the document
    /// changed meanwhile (call again later).
    pub async fn settle_foreign(&self, id: &str, stale_after: Duration) -> Result<ForeignShares> {
        let mut calls = self.calls();
        let Some(doc) = calls.get(id).await? else {
            return Ok(ForeignShares::None);
        };
        let observed = Observed::from_source(&doc.source);
        let foreign = observed.foreign_shares();
        if foreign == 0 {
            return Ok(ForeignShares::None);
        }
        let now = self.now_ms();
        let label = lock_label(id, &doc.source);
        let stale_ms = i64::try_from(stale_after.as_millis()).unwrap_or(i64::MAX);
        let context = |what: &str| format!("{what} the foreign shares of `{label}`");
        let version = Some(doc.version);
        match foreign_seen(&doc.source) {
            Some((count, since)) if count == foreign && now.saturating_sub(since) < stale_ms => {
                Ok(ForeignShares::Watching { count, since })
            }
            Some((count, since)) if count == foreign => {
                tracing::warn!(lock = %label, foreign, since, "clearing foreign shares unchanged for the foreign lease (a book client's retried increment counted twice, or a client that died holding its share)");
                let source = shared_with_foreign_cleared(&doc.source);
                calls
                    .index_or_delete(id, source, version, context("clearing"))
                    .await?;
                Ok(ForeignShares::Cleared(count))
            }
            // Not noted yet, or a book client came or went since: (re)start the watch.
            _ => {
                let source = with_foreign_seen(&doc.source, foreign, now);
                calls.index(id, source, version, context("noting")).await?;
                Ok(ForeignShares::Watching {
                    count: foreign,
                    since: now,
                })
            }
        }
    }
}
