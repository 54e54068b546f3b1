//! The lock documents: their shapes, how an existing one is read, and how ours are written.
//!
//! The book's fields keep their meaning so a client following the book and fsrename exclude
//! each other (`docs/locking.md` has the full table):
//!
//! - **exclusive-shaped** (X, and the global and document locks): `{"lock_type": "exclusive"}`,
//!   created with `_create`; fsrename adds `process_id`, `holder`, `path`, `acquired_at`,
//!   `expires_at`, and `job` when the owner works for a journaled job. The book's document
//!   lock is `{"process_id": ...}`.
//! - **group** (IS, IX, S; the book's shared lock): `{"lock_type": "shared", "lock_count": N}`;
//!   fsrename adds `path`, `expires_at` (the latest of its holders') and `holders`, one entry
//!   per holding process with its `mode`: `{"<process_id>": {"mode": "IX", "holder": ...,
//!   "acquired_at": ..., "expires_at": ..., "job": ...}}`. An entry without `mode` (written
//!   before the modes) is IX. While an S is held the document says `lock_type: exclusive`, so
//!   that the book's shared-lock script refuses rather than barges in.
//! - either shape may carry `waiters`: requests refused there that wait their turn, by
//!   process id: `{"mode", "since", "expires_at", "holder", "job"}`. A group document may hold
//!   only waiters (`lock_count` 0, no holders).
//!
//! `job` names the journal entry the lock protects (before or after it is written):
//! whoever wants to clear an expired lock first fences that entry (see `fs_rename::Journal`),
//! so a holder that was only paused cannot journal a job whose locks are gone. `lock_count`
//! is the number of fsrename holders plus any foreign shares (a book client's increment adds
//! to the count without an entry), so a retried increment by the same process is a no-op and
//! an expired holder's share can be removed without touching anyone else's.

use serde_json::Value;

mod build;
mod entries;
mod observed;

pub use build::{
    exclusive_source, shared_with, shared_with_foreign_cleared, shared_without, with_foreign_seen,
    without_dead_waiters,
};
pub use entries::{HolderEntry, Owner, WaiterEntry};
pub use observed::{Conflict, Observed};

/// The field of a group lock document where recovery notes the foreign shares it saw:
/// `{"count": N, "since": epoch_ms}` (see [`LockClient::settle_foreign`](crate::LockClient::settle_foreign)).
pub const FOREIGN_SEEN: &str = "foreign_seen";

/// Returns the foreign count and the time noted in `source` under [`FOREIGN_SEEN`], if any.
pub fn foreign_seen(source: &Value) -> Option<(i64, i64)> {
    let seen = source.get(FOREIGN_SEEN)?;
    Some((seen.get("count")?.as_i64()?, seen.get("since")?.as_i64()?))
}

/// Returns the locked path a lock document records, or its id where it records none: what
/// messages call the lock.
pub fn lock_label(id: &str, source: &Value) -> String {
    source
        .get("path")
        .and_then(Value::as_str)
        .unwrap_or(id)
        .to_owned()
}
