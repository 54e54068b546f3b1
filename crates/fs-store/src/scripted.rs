//! [`ScriptedUpdates`]: server-side scripted updates, for stores whose server runs scripts.
//!
//! Elasticsearch runs painless scripts inside an update, atomically on one document: the
//! book's shared-lock increment happens on the server in one round trip, with no read first.
//! The embedded store and osmem-server run no scripts; [`DocStore::scripted`](crate::DocStore::scripted)
//! returns `None` for them and callers use compare-and-set instead.

use async_trait::async_trait;
use serde_json::Value;

use crate::error::{Result, StoreError};
use crate::types::Version;

/// An update of one document by a stored script, with a document to insert if it is missing.
#[derive(Debug, Clone, PartialEq)]
pub struct ScriptedUpdate {
    /// The document id.
    pub id: String,
    /// The stored script's id.
    pub script: String,
    /// The script's `params`.
    pub params: Value,
    /// Inserted as is when the document does not exist (the script does not run then).
    pub upsert: Option<Value>,
}

/// What a scripted update did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateResult {
    /// The document did not exist; the upsert document was inserted.
    Created,
    /// The script changed the document.
    Updated,
    /// The script left the document alone (`ctx.op = 'noop'`).
    Noop,
    /// The script deleted the document (`ctx.op = 'delete'`).
    Deleted,
}

/// The outcome of one scripted update.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UpdateOutcome {
    /// What happened.
    pub result: UpdateResult,
    /// The document's version afterwards, when the server reports one.
    pub version: Option<Version>,
}

/// The result of one item of a scripted bulk request. A script that refuses (the book's
/// `assert false`, painless's `Debug.explain`) comes back as [`StoreError::Conflict`].
pub type UpdateItemResult = std::result::Result<UpdateOutcome, StoreError>;

/// Scripted updates, where the server runs them.
#[async_trait]
pub trait ScriptedUpdates: Send + Sync {
    /// Stores the painless `source` under `id` (`PUT _scripts/{id}`). Returns false if the
    /// server refuses to store scripts (it does not run them, or they are disabled).
    ///
    /// # Errors
    /// Transient and backend failures.
    async fn put_script(&self, id: &str, source: &str) -> Result<bool>;

    /// Sends the updates in one bulk request; returns one result per item, in order.
    ///
    /// # Errors
    /// Failures of the request as a whole.
    async fn bulk_update(
        &self,
        index: &str,
        items: Vec<ScriptedUpdate>,
    ) -> Result<Vec<UpdateItemResult>>;
}
