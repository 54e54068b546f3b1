//! [`Capabilities`]: what a store can do beyond the primitives every store has, each one the
//! object that does it.
//!
//! A capability is not a flag beside a method with a refusing default, which a wrapper could
//! forward or forget independently: it is `Some(&dyn Capability)`, so a store that says it can
//! chain a write with a bulk request is the one that does it, and a wrapper that hides a
//! capability hides the flag and the calls at once. Callers do not read this struct; they call
//! [`DocStore`](crate::DocStore)'s methods (`chains_bulk`, `bulk_after`, `find`, ...), which
//! answer from it.

use async_trait::async_trait;
use fs_model::FindQuery;
use serde_json::Value;

use crate::error::Result;
use crate::scripted::ScriptedUpdates;
use crate::server_rename::ServerRename;
use crate::types::{BulkItemResult, BulkOp, Chain, Chained, Cursor, StoredDoc};
use crate::write_gate::WriteGates;

/// What a store can do beyond the primitives, each capability the object that does it; `None`
/// where the store cannot. [`Capabilities::NONE`] is a store with primitives only.
#[derive(Clone, Copy, Default)]
pub struct Capabilities<'a> {
    /// A write chained with a bulk request in one request and one transaction (the embedded
    /// store; Elasticsearch neither orders a bulk request's items across indices nor stops at
    /// a failed one).
    pub chained_bulk: Option<&'a dyn ChainedBulk>,
    /// A bulk request whose items are searchable when it answers, in one request
    /// (Elasticsearch's `refresh=true`). Without it, a refreshed bulk is a bulk then a refresh.
    pub refreshed_bulk: Option<&'a dyn RefreshedBulk>,
    /// Scripted updates run by the server (or atomically by the store).
    pub scripts: Option<&'a dyn ScriptedUpdates>,
    /// Cursors that hold state on the server (a point in time, a scroll) until closed. Without
    /// it, a cursor is a plain position and closing it does nothing.
    pub held_cursors: Option<&'a dyn HeldCursors>,
    /// Search by name pattern and words of the content.
    pub find: Option<&'a dyn Find>,
    /// Index mappings to extend, and a one-request check that indices exist. Without it, there
    /// is no mapping to extend, and whether indices exist is not known (callers create them).
    pub index_admin: Option<&'a dyn IndexAdmin>,
    /// Renames the server carries out itself, as tasks (`_update_by_query` on a server that
    /// runs painless). Without it, a rename's documents are rewritten by the client.
    pub server_rename: Option<&'a dyn ServerRename>,
    /// Gates that fence a job's writes with one request (see [`WriteGates`]). Without it, a
    /// copy fences each document with a claim.
    pub write_gates: Option<&'a dyn WriteGates>,
}

impl Capabilities<'_> {
    /// A store with the primitives only.
    pub const NONE: Capabilities<'static> = Capabilities {
        chained_bulk: None,
        refreshed_bulk: None,
        scripts: None,
        held_cursors: None,
        find: None,
        index_admin: None,
        server_rename: None,
        write_gates: None,
    };

    /// The names of the capabilities present, for logs and test messages.
    pub fn names(&self) -> Vec<&'static str> {
        [
            ("chained_bulk", self.chained_bulk.is_some()),
            ("refreshed_bulk", self.refreshed_bulk.is_some()),
            ("scripts", self.scripts.is_some()),
            ("held_cursors", self.held_cursors.is_some()),
            ("find", self.find.is_some()),
            ("index_admin", self.index_admin.is_some()),
            ("server_rename", self.server_rename.is_some()),
            ("write_gates", self.write_gates.is_some()),
        ]
        .into_iter()
        .filter_map(|(name, present)| present.then_some(name))
        .collect()
    }
}

impl std::fmt::Debug for Capabilities<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
}

/// A write chained with a bulk request, in one transaction.
#[async_trait]
pub trait ChainedBulk: Send + Sync {
    /// Makes `chain.first` and, only if it landed, the bulk operations `chain.then` (refreshed
    /// in the same call with `chain.refresh`), in one request and one transaction.
    ///
    /// # Errors
    /// Failures of the request as a whole (then nothing landed, unless only the refresh
    /// failed).
    async fn bulk_after(&self, chain: Chain<'_, BulkOp>) -> Result<Chained<BulkItemResult>>;
}

/// A bulk request refreshed in the same request.
#[async_trait]
pub trait RefreshedBulk: Send + Sync {
    /// Runs `ops` on `index` and makes them searchable before answering, in one request.
    ///
    /// # Errors
    /// As a bulk request and a refresh.
    async fn bulk_refreshed(&self, index: &str, ops: Vec<BulkOp>) -> Result<Vec<BulkItemResult>>;
}

/// Cursors that hold state on the server until they are closed.
#[async_trait]
pub trait HeldCursors: Send + Sync {
    /// Closes what the server keeps open to page on from `cursor`.
    ///
    /// # Errors
    /// A cursor this store did not make; transient and backend failures.
    async fn close_cursor(&self, index: &str, cursor: Cursor) -> Result<()>;
}

/// Search by name pattern and words of the content.
#[async_trait]
pub trait Find: Send + Sync {
    /// Returns up to `size` documents of the tree index `index` that `query` asks for, without
    /// their `content`.
    ///
    /// # Errors
    /// As a search.
    async fn find(&self, index: &str, query: &FindQuery, size: usize) -> Result<Vec<StoredDoc>>;
}

/// Index mappings and existence checks, where the server has them.
#[async_trait]
pub trait IndexAdmin: Send + Sync {
    /// Returns true if every one of `indices` exists, in one request.
    ///
    /// # Errors
    /// Transient and backend failures.
    async fn indices_exist(&self, indices: &[&str]) -> Result<bool>;

    /// Adds the fields of `mappings` to the mapping of the existing `index`.
    ///
    /// # Errors
    /// A field mapped otherwise already; transient and backend failures.
    async fn extend_mapping(&self, index: &str, mappings: &Value) -> Result<()>;
}
