//! [`WriteGates`]: a name the bulk writes of one job go through to a tree index while it
//! stands, and that one request shuts, after which nothing sent through it lands.
//!
//! A copy writes documents that are new: a `_create` cannot be made conditional on anything
//! but the id being free, so a job paused past its lease, that wakes after a recovery finished
//! its copy (and someone deleted a copy since), would put that copy back. Claims fence it (see
//! `fs_model::FsDoc::claim`) at the price of two writes a document. A gate fences it with one:
//! the job writes through its gate; a recovery shuts the gate, waits for the writes sent
//! through it that the server is still carrying out, and only then finishes the copy. A write
//! sent after the shut is refused as a whole; one sent before is done by then.
//!
//! On Elasticsearch (7.10 and later, and OpenSearch) a gate is an alias of the tree index,
//! written with `require_alias=true` (so that a write to a gate that is gone is refused
//! rather than creating an index of that name), each request carrying the gate's name as its
//! `X-Opaque-Id`, which the server keeps with the request's tasks, so that the tasks API tells
//! which are still running. Opening and shutting a gate are changes of the cluster state, some
//! tens of milliseconds each: worth it for a copy of more than a page.

use async_trait::async_trait;

use crate::error::Result;
use crate::types::{BulkItemResult, BulkOp};

/// Write gates, where the store has them.
#[async_trait]
pub trait WriteGates: Send + Sync {
    /// Opens the gate `gate` onto `index`; `false` where this server cannot fence writes that
    /// way (then the caller fences them otherwise).
    ///
    /// # Errors
    /// Store failures.
    async fn open_gate(&self, index: &str, gate: &str) -> Result<bool>;

    /// Writes `ops` through `gate`, in one bulk request, as [`DocStore::bulk`] writes them
    /// to the index behind it: refused, every item, once the gate is shut.
    ///
    /// # Errors
    /// As [`DocStore::bulk`].
    ///
    /// [`DocStore::bulk`]: crate::DocStore::bulk
    async fn bulk_through_gate(&self, gate: &str, ops: Vec<BulkOp>) -> Result<Vec<BulkItemResult>>;

    /// Shuts every gate onto `index` whose name starts with `prefix`, then waits until no
    /// write sent through one of them is still being carried out. Shutting a gate that is not
    /// there is no failure.
    ///
    /// # Errors
    /// Store failures, or writes still running after the wait's limit.
    async fn shut_gates(&self, index: &str, prefix: &str) -> Result<()>;
}
