//! The store calls of the lock protocols: [`Calls`], one owner's handle on the lock index for
//! one operation, that counts its round trips (what a [`Grant`](crate::Grant) reports) and
//! gives every failure its context. Both protocols, the adoption and the operations on expired and foreign locks
//! reach the store only through it; the listing of the whole index scans it directly.

use std::collections::HashMap;
use std::time::Duration;

use fs_store::{BulkItemResult, BulkOp, DocStore, StoreError, StoredDoc, Version};
use serde_json::Value;

use crate::error::{LockError, Result};
use crate::lock_doc::Owner;
use crate::outcome::FirstWrite;

/// The largest number of items in one `mget` or `bulk` request.
const CHUNK: usize = 5_000;

/// One owner's store calls for one operation: who makes them, when, with what lease, and
/// what they cost.
pub(crate) struct Calls<'a> {
    store: &'a dyn DocStore,
    index: &'a str,
    /// Who makes them.
    pub(crate) owner: &'a Owner,
    /// How long a lock the owner takes lives without renewal.
    pub(crate) lease: Duration,
    pub(crate) round_trips: u32,
    /// Scripted updates sent again because they lost a race with another update.
    pub(crate) races: u32,
    /// When these calls started, by the lease clock: what tells a live waiter from an expired
    /// one when a lock is given back.
    pub(crate) now: i64,
}

impl<'a> Calls<'a> {
    /// Starts counting the calls of `owner` (whose locks live `lease`) to `index` of
    /// `store`, made at `now` by the lease clock.
    pub(crate) fn new(
        (store, index): (&'a dyn DocStore, &'a str),
        owner: &'a Owner,
        lease: Duration,
        now: i64,
    ) -> Calls<'a> {
        Calls {
            store,
            index,
            owner,
            lease,
            round_trips: 0,
            races: 0,
            now,
        }
    }

    /// Reads the lock documents `ids` (those that exist), one `mget` per [`CHUNK`] of them.
    pub(crate) async fn mget(&mut self, ids: &[String]) -> Result<HashMap<String, StoredDoc>> {
        let mut found = HashMap::with_capacity(ids.len());
        for chunk in ids.chunks(CHUNK) {
            self.round_trips += 1;
            let docs = self
                .store
                .mget(self.index, chunk)
                .await
                .map_err(LockError::store(format!(
                    "reading lock documents in `{}`",
                    self.index
                )))?;
            found.extend(docs.into_iter().flatten().map(|d| (d.id.clone(), d)));
        }
        Ok(found)
    }

    /// Reads the lock document `id`.
    pub(crate) async fn get(&mut self, id: &str) -> Result<Option<StoredDoc>> {
        self.round_trips += 1;
        self.store
            .get(self.index, id)
            .await
            .map_err(LockError::store(format!(
                "reading lock `{id}` in `{}`",
                self.index
            )))
    }

    /// Returns true if the store makes a write and scripted updates in one request and one
    /// transaction ([`Calls::bulk_update_after`]).
    pub(crate) fn chains(&self) -> bool {
        chains(self.store)
    }

    /// The store's scripted updates; an error saying `context` where it runs none.
    fn scripted(&self, context: &str) -> Result<&'a dyn fs_store::ScriptedUpdates> {
        self.store.scripted().ok_or_else(|| LockError::Store {
            context: context.to_owned(),
            cause: StoreError::Rejected {
                context: self.store.describe(),
                status: None,
                message: "no scripts".into(),
            },
        })
    }

    /// Sends scripted updates in one request.
    pub(crate) async fn bulk_update(
        &mut self,
        items: Vec<fs_store::ScriptedUpdate>,
    ) -> Result<Vec<fs_store::UpdateItemResult>> {
        let context = format!("updating lock documents in `{}` by script", self.index);
        let scripted = self.scripted(&context)?;
        self.round_trips += 1;
        scripted
            .bulk_update(self.index, items)
            .await
            .map_err(LockError::store(context))
    }

    /// Makes `first`, then (only if it landed) the scripted updates, in one request and one
    /// transaction (the store [chains](fs_store::ScriptedUpdates::chains)).
    pub(crate) async fn bulk_update_after(
        &mut self,
        first: FirstWrite,
        items: Vec<fs_store::ScriptedUpdate>,
    ) -> Result<fs_store::Chained<fs_store::UpdateItemResult>> {
        let context = format!(
            "writing `{}/{}` and updating lock documents in `{}` by script",
            first.index,
            first.op.id(),
            self.index
        );
        let scripted = self.scripted(&context)?;
        self.round_trips += 1;
        scripted
            .bulk_update_after(fs_store::Chain {
                first_index: &first.index,
                first: first.op,
                with_first: first.with,
                index: self.index,
                then: items,
                refresh: false,
            })
            .await
            .map_err(LockError::store(context))
    }

    /// Makes `first` alone: `Ok(Err(why))` if it did not land.
    pub(crate) async fn write_first(
        &mut self,
        first: FirstWrite,
    ) -> Result<std::result::Result<Version, StoreError>> {
        let context = format!("writing `{}/{}`", first.index, first.op.id());
        if let Some(with) = &first.with {
            // Alone, the write could land without the writes that must go with it.
            return Ok(Err(StoreError::Rejected {
                context,
                status: None,
                message: format!(
                    "{} writes to `{}` go with it, and this store cannot make them in one transaction with the release",
                    with.ops.len(),
                    with.index
                ),
            }));
        }
        self.round_trips += 1;
        let mut answers = self
            .store
            .bulk(&first.index, vec![first.op])
            .await
            .map_err(LockError::store(context.clone()))?;
        match answers.pop() {
            Some(answer) => Ok(answer),
            None => Err(LockError::Store {
                context,
                cause: StoreError::Backend {
                    context: self.store.describe(),
                    message: "a bulk request of one item got no answer".into(),
                },
            }),
        }
    }

    /// Writes `ops` to the lock index, one `bulk` per [`CHUNK`] of them.
    pub(crate) async fn bulk(&mut self, ops: Vec<BulkOp>) -> Result<Vec<BulkItemResult>> {
        let mut results = Vec::with_capacity(ops.len());
        let mut ops = ops.into_iter().peekable();
        while ops.peek().is_some() {
            let chunk: Vec<BulkOp> = ops.by_ref().take(CHUNK).collect();
            self.round_trips += 1;
            let answers = self
                .store
                .bulk(self.index, chunk)
                .await
                .map_err(LockError::store(format!(
                    "writing lock documents in `{}`",
                    self.index
                )))?;
            results.extend(answers);
        }
        Ok(results)
    }

    /// Writes `source` as the lock document `id`, conditional on `if_version`; `context`
    /// says what for.
    pub(crate) async fn index(
        &mut self,
        id: &str,
        source: Value,
        if_version: Option<Version>,
        context: String,
    ) -> Result<Version> {
        self.round_trips += 1;
        self.store
            .index(self.index, id, source, if_version)
            .await
            .map_err(LockError::store(context))
    }

    /// Deletes the lock document `id`, conditional on `if_version`; `context` says what for.
    pub(crate) async fn delete(
        &mut self,
        id: &str,
        if_version: Option<Version>,
        context: String,
    ) -> Result<Version> {
        self.round_trips += 1;
        self.store
            .delete(self.index, id, if_version)
            .await
            .map_err(LockError::store(context))
    }

    /// Writes `source` as the lock document `id` or, where there is none (nothing left in
    /// it), deletes the document; conditional on `if_version` either way.
    pub(crate) async fn index_or_delete(
        &mut self,
        id: &str,
        source: Option<Value>,
        if_version: Option<Version>,
        context: String,
    ) -> Result<Version> {
        match source {
            Some(source) => self.index(id, source, if_version, context).await,
            None => self.delete(id, if_version, context).await,
        }
    }
}

/// Returns true if `store` makes a write and scripted updates in one request and one
/// transaction (it [chains](fs_store::ScriptedUpdates::chains)).
pub(crate) fn chains(store: &dyn DocStore) -> bool {
    store.scripted().is_some_and(|s| s.chains())
}
