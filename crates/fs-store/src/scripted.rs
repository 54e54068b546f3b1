//! [`ScriptedUpdates`]: server-side scripted updates, for stores whose server runs scripts.
//!
//! Elasticsearch runs painless scripts inside an update, atomically on one document: the
//! book's shared-lock increment happens on the server in one round trip, with no read first.
//! The embedded store runs the lock scripts' Rust twins the same way, inside one transaction
//! ([`plan_update`] is the logic it shares with the test servers). osmem-server runs no
//! scripts; its [`Capabilities::scripts`](crate::Capabilities::scripts) is `None` for it and callers
//! use compare-and-set instead.

use async_trait::async_trait;
use serde_json::Value;

use crate::error::{Result, StoreError};
use crate::types::{Chain, Chained, Version};

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

    /// Returns the source stored under `id` (`GET _scripts/{id}`), or `None` if there is none
    /// or the store cannot say. A process that finds its scripts there need not store them.
    ///
    /// # Errors
    /// Transient and backend failures.
    async fn stored_script(&self, id: &str) -> Result<Option<String>> {
        let _ = id;
        Ok(None)
    }

    /// Sends the updates in one bulk request; returns one result per item, in order.
    ///
    /// # Errors
    /// Failures of the request as a whole.
    async fn bulk_update(
        &self,
        index: &str,
        items: Vec<ScriptedUpdate>,
    ) -> Result<Vec<UpdateItemResult>>;

    /// Whether [`ScriptedUpdates::bulk_update_after`] makes its write and its updates in one
    /// request and one transaction. Elasticsearch cannot (a bulk request neither orders its
    /// items across indices nor stops at a failed one); the embedded store can.
    fn chains(&self) -> bool {
        false
    }

    /// Makes `chain.first` and, only if it landed, the updates `chain.then` (refreshed with
    /// `chain.refresh`), in one request and one transaction: a job's journal entry closed and
    /// its locks released at once, so that neither can land without the other having landed
    /// first. Ask [`ScriptedUpdates::chains`] first: a store that cannot chain answers
    /// [`StoreError::Rejected`] and changes nothing.
    ///
    /// # Errors
    /// Failures of the request as a whole (then neither landed).
    async fn bulk_update_after(
        &self,
        chain: Chain<'_, ScriptedUpdate>,
    ) -> Result<Chained<UpdateItemResult>> {
        Err(StoreError::Rejected {
            context: format!(
                "a write to `{}` chained with scripted updates of `{}`",
                chain.first_index, chain.index
            ),
            status: None,
            message: "this store cannot make them in one transaction".to_owned(),
        })
    }
}

/// The lock scripts a store without painless has been given (`PUT _scripts/{id}`), by id:
/// what the embedded store, `fs_testkit`'s scripting store and the test proxy keep. Only the
/// lock scripts can be stored, recognised by their painless source.
#[derive(Debug, Default)]
pub struct StoredLockScripts(
    std::sync::Mutex<
        std::collections::HashMap<String, &'static fs_model::lock_scripts::LockScript>,
    >,
);

impl StoredLockScripts {
    /// Stores `source` under `id` if it is one of the lock scripts; returns whether it is.
    pub fn store(&self, id: &str, source: &str) -> bool {
        let Some(script) = fs_model::lock_scripts::lock_script_by_source(source) else {
            return false;
        };
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.to_owned(), script);
        true
    }

    /// Returns the script stored under `id`, if any.
    pub fn get(&self, id: &str) -> Option<&'static fs_model::lock_scripts::LockScript> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .copied()
    }
}

/// The write a scripted update makes of the document it found: what Elasticsearch does
/// inside one update, and what every store that runs the lock scripts without painless does
/// too (the embedded store inside one transaction, the test proxy and `fs_testkit`'s
/// scripting store between a read and a conditional write). One implementation, so that they
/// cannot differ.
#[derive(Debug, Clone, PartialEq)]
pub enum PlannedWrite {
    /// Nothing: the script said `noop`. The document stays at this version.
    Noop(Version),
    /// The document was missing: insert the upsert document (the script does not run).
    Create(Value),
    /// Write the script's result over the document read at `version`.
    Index {
        /// The new source.
        source: Value,
        /// The version read.
        version: Version,
    },
    /// Delete the document read at this version.
    Delete(Version),
}

impl PlannedWrite {
    /// What the update did once this write is made.
    pub fn result(&self) -> UpdateResult {
        match self {
            PlannedWrite::Noop(_) => UpdateResult::Noop,
            PlannedWrite::Create(_) => UpdateResult::Created,
            PlannedWrite::Index { .. } => UpdateResult::Updated,
            PlannedWrite::Delete(_) => UpdateResult::Deleted,
        }
    }
}

/// Runs `script` for `update` on `current` (the document `index/update.id` as read, if any)
/// and returns the write to make.
///
/// # Errors
/// [`StoreError::NotFound`] for a missing document and no upsert; [`StoreError::Refused`]
/// where the script refuses (painless's `Debug.explain`); [`StoreError::Rejected`] (400, a
/// `script_exception`) where it fails on the document; [`StoreError::Backend`] for a source
/// that is not an object.
pub fn plan_update(
    index: &str,
    script: &fs_model::lock_scripts::LockScript,
    update: &ScriptedUpdate,
    current: Option<crate::types::StoredDoc>,
) -> Result<PlannedWrite> {
    use fs_model::lock_scripts::{ScriptError, ScriptOp};
    let Some(doc) = current else {
        return match &update.upsert {
            Some(upsert) => Ok(PlannedWrite::Create(upsert.clone())),
            None => Err(StoreError::NotFound {
                index: index.to_owned(),
                id: update.id.clone(),
            }),
        };
    };
    let Value::Object(mut source) = doc.source else {
        return Err(StoreError::Backend {
            context: format!("updating `{index}/{}` by script", update.id),
            message: "the document's source is not an object".into(),
        });
    };
    match script.run(&mut source, &update.params) {
        Ok(ScriptOp::Noop) => Ok(PlannedWrite::Noop(doc.version)),
        Ok(ScriptOp::Index) => Ok(PlannedWrite::Index {
            source: Value::Object(source),
            version: doc.version,
        }),
        Ok(ScriptOp::Delete) => Ok(PlannedWrite::Delete(doc.version)),
        Err(ScriptError::Refused(reason)) => Err(StoreError::Refused {
            index: index.to_owned(),
            id: update.id.clone(),
            reason,
        }),
        Err(ScriptError::Failed(what)) => Err(StoreError::Rejected {
            context: format!(
                "updating `{index}/{}` with script `{}`",
                update.id, script.id
            ),
            status: Some(400),
            message: format!("script_exception: {what}"),
        }),
    }
}

/// The answer to an update naming a script the store does not know, as Elasticsearch gives
/// it.
pub fn unknown_script(index: &str, update: &ScriptedUpdate) -> StoreError {
    StoreError::Rejected {
        context: format!("updating `{index}/{}`", update.id),
        status: Some(404),
        message: format!("unable to find script [{}]", update.script),
    }
}
