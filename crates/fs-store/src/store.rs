//! [`DocStore`]: the per-document primitives of Elasticsearch, which every store has, and
//! what it can do beyond them ([`Capabilities`]); the calls that need a capability are
//! answered from it, for every store handle alike.

use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use crate::capabilities::Capabilities;
use crate::error::{Result, StoreError};
use crate::scripted::ScriptedUpdates;
use crate::server_rename::ServerRename;
use crate::types::{
    BulkItemResult, BulkOp, Chain, Chained, Cursor, Page, Scope, SearchRequest, StoredDoc, Version,
};
use crate::write_gate::WriteGates;

/// A document store with Elasticsearch's guarantees: each document is read and written
/// atomically, and nothing spans documents (a bulk request is many independent writes).
///
/// Every method is one round trip to the store, so callers can count their round trips and
/// batch with [`DocStore::mget`] and [`DocStore::bulk`]. Reads by id ([`DocStore::get`],
/// [`DocStore::mget`]) are realtime; [`DocStore::search`] and [`DocStore::count`] may see only
/// what was written before the last [`DocStore::refresh`] of the index, as in Elasticsearch.
///
/// Document sources are JSON objects. Searches select on the `path` and `parent` fields, which
/// the tree index and the lock index both carry.
#[async_trait]
pub trait DocStore: Send + Sync + Debug {
    /// Returns a short description of where the store lives, for logs and messages.
    fn describe(&self) -> String;

    /// Creates `index` if it does not exist; returns true if it was created. `body` is
    /// Elasticsearch's create-index body (`settings` and `mappings`), e.g.
    /// [`fs_model::tree_index_body`].
    ///
    /// # Errors
    /// [`StoreError::Rejected`](crate::StoreError::Rejected) for an invalid index name.
    async fn create_index(&self, index: &str, body: &Value) -> Result<bool>;

    /// Deletes `index` and all its documents; returns true if it existed.
    ///
    /// # Errors
    /// Transient and backend failures.
    async fn delete_index(&self, index: &str) -> Result<bool>;

    /// Returns the document with `id`, or `None`; realtime.
    ///
    /// # Errors
    /// [`StoreError::IndexNotFound`](crate::StoreError::IndexNotFound), transient and backend
    /// failures.
    async fn get(&self, index: &str, id: &str) -> Result<Option<StoredDoc>>;

    /// Returns the documents with `ids`, one entry per id in the same order; realtime.
    ///
    /// # Errors
    /// As [`DocStore::get`].
    async fn mget(&self, index: &str, ids: &[String]) -> Result<Vec<Option<StoredDoc>>>;

    /// Makes one write (a create, an index or a delete, as in a bulk request) in a request of
    /// its own and returns the version written (for a delete, the version of the deletion).
    /// Callers name the write: [`DocStore::create`], [`DocStore::index`] and
    /// [`DocStore::delete`] build it.
    ///
    /// One method for the three, so that a store or a wrapper writes a document in one place,
    /// as it writes a bulk request's items; the three are built from it and no store
    /// overrides them, so they cannot differ from it.
    ///
    /// # Errors
    /// [`StoreError::Conflict`](crate::StoreError::Conflict) carrying the current version for
    /// a create of an existing id and a write whose `if_version` does not match (or whose
    /// document does not exist); [`StoreError::NotFound`](crate::StoreError::NotFound) for an
    /// unconditional delete of a missing document.
    async fn write(&self, index: &str, op: BulkOp) -> Result<Version>;

    /// Creates a document; fails if `id` exists. Built from [`DocStore::write`].
    ///
    /// # Errors
    /// [`StoreError::Conflict`](crate::StoreError::Conflict) carrying the existing version.
    async fn create(&self, index: &str, id: &str, source: Value) -> Result<Version> {
        let id = id.to_owned();
        self.write(index, BulkOp::Create { id, source }).await
    }

    /// Creates or replaces a document; with `if_version`, only if it is at that version.
    /// Built from [`DocStore::write`].
    ///
    /// # Errors
    /// [`StoreError::Conflict`](crate::StoreError::Conflict) if `if_version` does not match
    /// (or the document does not exist).
    async fn index(
        &self,
        index: &str,
        id: &str,
        source: Value,
        if_version: Option<Version>,
    ) -> Result<Version> {
        let id = id.to_owned();
        let op = BulkOp::Index {
            id,
            source,
            if_version,
        };
        self.write(index, op).await
    }

    /// Deletes a document; with `if_version`, only if it is at that version. Returns the
    /// version of the deletion. Built from [`DocStore::write`].
    ///
    /// # Errors
    /// [`StoreError::NotFound`](crate::StoreError::NotFound) for an unconditional delete of a
    /// missing document; [`StoreError::Conflict`](crate::StoreError::Conflict) if
    /// `if_version` does not match.
    async fn delete(&self, index: &str, id: &str, if_version: Option<Version>) -> Result<Version> {
        let id = id.to_owned();
        self.write(index, BulkOp::Delete { id, if_version }).await
    }

    /// Runs many writes in one round trip; returns one result per operation, in order.
    ///
    /// A failed item does not undo or stop the others. The call itself fails only when the
    /// request as a whole could not be carried out.
    ///
    /// # Errors
    /// [`StoreError::IndexNotFound`](crate::StoreError::IndexNotFound), transient and backend
    /// failures of the whole request.
    async fn bulk(&self, index: &str, ops: Vec<BulkOp>) -> Result<Vec<BulkItemResult>>;

    /// Returns one page of the documents in `request.scope`, in the order [`Page`] describes.
    ///
    /// # Errors
    /// [`StoreError::Rejected`](crate::StoreError::Rejected) for a cursor this store did not
    /// make; transient and backend failures.
    async fn search(&self, index: &str, request: SearchRequest) -> Result<Page>;

    /// Returns how many documents `scope` holds (what a search would see).
    ///
    /// # Errors
    /// As [`DocStore::search`].
    async fn count(&self, index: &str, scope: &Scope) -> Result<u64>;

    /// Makes every write so far visible to search and count.
    ///
    /// # Errors
    /// [`StoreError::IndexNotFound`](crate::StoreError::IndexNotFound), transient and backend
    /// failures.
    async fn refresh(&self, index: &str) -> Result<()>;

    /// Returns what this store can do beyond the primitives above: each capability the
    /// object that does it. Every store says, with no default: a store that wraps another
    /// implements [`StoreLayer`](crate::StoreLayer) instead, which offers the wrapped store's.
    fn capabilities(&self) -> Capabilities<'_>;

    /// Returns how many bulk items this handle has sent again on its own since it was made,
    /// because a busy server rejected them alone (HTTP 429 on the item: not carried out). A
    /// process that runs one job reports it with the job's own retries. 0 by default.
    fn items_resent(&self) -> u64 {
        0
    }

    /// Returns the server's clock now, in epoch milliseconds, or `None` where the store has
    /// no clock of its own or the server will not say. The embedded store's is the machine's
    /// boot clock, which no step of the wall clock moves. Leases are judged by it, so that clients on machines whose clocks
    /// differ agree on when a lease ends (`fs_locks::LeaseClock::sync`).
    ///
    /// # Errors
    /// Transient and backend failures.
    async fn server_time_ms(&self) -> Result<Option<i64>> {
        Ok(None)
    }
}

/// A store shared between tasks.
pub type SharedStore = Arc<dyn DocStore>;

/// The calls that need a capability, answered from [`DocStore::capabilities`]: inherent
/// methods of every store handle (`&dyn DocStore`, [`SharedStore`]), as `dyn Any`'s are in
/// std, so that no store or wrapper can answer them differently from what it says it can do.
impl<'s> dyn DocStore + 's {
    /// Whether `bulk_after` makes its write and the bulk request in one
    /// request and one transaction. Elasticsearch cannot (a bulk request neither orders its
    /// items across indices nor stops at a failed one); the embedded store can.
    pub fn chains_bulk(&self) -> bool {
        self.capabilities().chained_bulk.is_some()
    }

    /// Makes `chain.first` and, only if it landed, the bulk operations `chain.then` (refreshed
    /// in the same call with `chain.refresh`, as by `bulk_refreshed`), in one request and one
    /// transaction: a job's journal entry and its first writes, so that neither lands without
    /// the other. Ask `chains_bulk` first: a store that cannot chain answers
    /// [`StoreError::Rejected`] and changes nothing.
    ///
    /// # Errors
    /// Failures of the request as a whole (then nothing landed, unless only the refresh
    /// failed).
    pub async fn bulk_after(&self, chain: Chain<'_, BulkOp>) -> Result<Chained<BulkItemResult>> {
        match self.capabilities().chained_bulk {
            Some(chained) => chained.bulk_after(chain).await,
            None => Err(StoreError::rejected(
                format!(
                    "a write to `{}` chained with a bulk request to `{}`",
                    chain.first_index, chain.index
                ),
                "this store cannot make them in one transaction",
            )),
        }
    }

    /// [`DocStore::bulk`], with every item made visible to search and count before the answer
    /// (a [`DocStore::refresh`] of `index`): on Elasticsearch one request (`refresh=true`),
    /// otherwise the two calls. For a job's last write before it releases its locks.
    ///
    /// # Errors
    /// As [`DocStore::bulk`] and [`DocStore::refresh`]; a failed refresh fails the call, though
    /// the items were written.
    pub async fn bulk_refreshed(
        &self,
        index: &str,
        ops: Vec<BulkOp>,
    ) -> Result<Vec<BulkItemResult>> {
        if let Some(refreshed) = self.capabilities().refreshed_bulk {
            return refreshed.bulk_refreshed(index, ops).await;
        }
        let results = self.bulk(index, ops).await?;
        self.refresh(index).await?;
        Ok(results)
    }

    /// Returns the store's renames carried out by the server, where it can run them (see
    /// [`ServerRename`]); `None` where the client rewrites every document.
    pub fn server_rename(&self) -> Option<&dyn ServerRename> {
        self.capabilities().server_rename
    }

    /// Returns the store's write gates, where it has them (see [`WriteGates`]).
    pub fn write_gates(&self) -> Option<&dyn WriteGates> {
        self.capabilities().write_gates
    }

    /// Returns the store's scripted updates if its server runs scripts.
    pub fn scripted(&self) -> Option<&dyn ScriptedUpdates> {
        self.capabilities().scripts
    }

    /// Closes what the store keeps open to page on from `cursor` (on Elasticsearch, a point
    /// in time or a scroll), for a caller that stops before the last page. Does nothing on a
    /// store whose cursors are plain positions.
    ///
    /// A paged search holds its context from its first page until its last page (one without
    /// [`Page::next`](crate::Page::next)) or a failed page, which close it; a caller that
    /// stops earlier, on an error of its own or a cancellation, calls this, or the context
    /// stays on the server until its keep-alive runs out. Closing twice is harmless.
    /// [`Scan`](crate::Scan) does all this for its caller.
    ///
    /// # Errors
    /// [`StoreError::Rejected`] for a cursor this store did not make; transient and backend
    /// failures (what was not closed then expires).
    pub async fn close_cursor(&self, index: &str, cursor: Cursor) -> Result<()> {
        match self.capabilities().held_cursors {
            Some(cursors) => cursors.close_cursor(index, cursor).await,
            None => Ok(()),
        }
    }

    /// Returns up to `size` documents of the tree index `index` that `query` asks for (see
    /// [`FindQuery`](fs_model::FindQuery)): the most relevant first when it asks for words,
    /// then by path; by path otherwise. Their sources come without `content`, which can be
    /// large. Like [`DocStore::search`], it sees what the last refresh made searchable.
    ///
    /// # Errors
    /// [`StoreError::Rejected`] from a store that cannot search by name or content; as
    /// [`DocStore::search`].
    pub async fn find(
        &self,
        index: &str,
        query: &fs_model::FindQuery,
        size: usize,
    ) -> Result<Vec<StoredDoc>> {
        match self.capabilities().find {
            Some(find) => find.find(index, query, size).await,
            None => Err(StoreError::rejected(
                format!("searching `{index}` by name and content"),
                "this store cannot",
            )),
        }
    }

    /// Returns true if every one of `indices` exists: one request on Elasticsearch (`HEAD`),
    /// so that a process can tell it has nothing to create without a request per index.
    /// False ("not known") where the store cannot tell in one request, and callers create what
    /// they need ([`DocStore::create_index`] leaves an existing index alone).
    ///
    /// # Errors
    /// Transient and backend failures.
    pub async fn indices_exist(&self, indices: &[&str]) -> Result<bool> {
        match self.capabilities().index_admin {
            Some(admin) => admin.indices_exist(indices).await,
            None => Ok(false),
        }
    }

    /// Adds the fields of `mappings` (the `mappings` of a create-index body) to the mapping
    /// of the existing `index`: fields a newer version writes into an index an older one
    /// created (a strict mapping refuses documents with fields it does not know). Fields
    /// already mapped the same way are left alone. A store without mappings has nothing to do.
    ///
    /// # Errors
    /// A field mapped otherwise already; transient and backend failures.
    pub async fn extend_mapping(&self, index: &str, mappings: &Value) -> Result<()> {
        match self.capabilities().index_admin {
            Some(admin) => admin.extend_mapping(index, mappings).await,
            None => Ok(()),
        }
    }
}
