//! [`StoreLayer`]: a store that wraps another, with its forwarding written once.
//!
//! A wrapper (counting round trips, adding latency, injecting faults, running scripts, a
//! test's interception) implements [`StoreLayer`]: it names the store it wraps
//! ([`StoreLayer::inner`]) and overrides only what it changes. A blanket
//! `impl<L: StoreLayer> DocStore for L` (and one for each capability trait) does the rest:
//!
//! - every call, primitive or capability, goes through [`StoreLayer::around`] (by default,
//!   nothing) and then the layer's `on_` method for it (`on_bulk` for `bulk`; by default, the
//!   wrapped store's method), so a per-call hook (a counter, a wait, a fault gate) is written
//!   once and a per-method interception (a bulk whose items fail) is one method;
//! - the layer offers every capability of the wrapped store, as itself (so that its calls go
//!   through `around` too), unless [`StoreLayer::on_capabilities`] hides one or adds one of
//!   its own. A capability cannot be lost by forgetting a method: there is none to forget.
//!
//! The `on_` prefix keeps the layer's methods apart from the store's: a caller that has both
//! traits in scope calls `get`, never `on_get`, without naming a trait.
//!
//! A layer that intercepts [`StoreLayer::on_bulk`] decides in the same place what becomes of
//! the other ways items are written: it intercepts `on_bulk_refreshed` and `on_bulk_after`
//! too, or hides `refreshed_bulk` (callers then send a bulk and a refresh, through its
//! `on_bulk`) and `chained_bulk` (callers then do without).
//!
//! A trait with a blanket implementation rather than a generic `Layered<L>` struct keeps each
//! wrapper its own type with its own methods (`CountingStore::round_trips`), and rather than
//! a macro keeps the forwarding checked by the compiler in one place.

use async_trait::async_trait;
use fs_model::FindQuery;
use futures::future::BoxFuture;
use serde_json::Value;

use crate::capabilities::{
    Capabilities, ChainedBulk, Find, HeldCursors, IndexAdmin, RefreshedBulk,
};
use crate::error::{Result, StoreError};
use crate::scripted::{ScriptedUpdate, ScriptedUpdates, UpdateItemResult};
use crate::server_rename::{PrefixMove, ServerRename, SubtreeDelete, TaskId, TaskState};
use crate::store::DocStore;
use crate::types::{
    BulkItemResult, BulkOp, Chain, Chained, Cursor, Page, Scope, SearchRequest, StoredDoc, Version,
};
use crate::write_gate::WriteGates;

/// Which call a layer sees in [`StoreLayer::around`]: one per method of the store and of its
/// capabilities, and one per kind of [`DocStore::write`] (`Create`, `Index`, `Delete`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(missing_docs)] // Each variant is the method (or the kind of write) of the same name.
pub enum Call {
    CreateIndex,
    DeleteIndex,
    Get,
    Mget,
    Create,
    Index,
    Delete,
    Bulk,
    Search,
    Count,
    Refresh,
    BulkAfter,
    BulkRefreshed,
    CloseCursor,
    Find,
    IndicesExist,
    ExtendMapping,
    PutScript,
    StoredScript,
    BulkUpdate,
    BulkUpdateAfter,
    RenameOnServer,
    DeleteOnServer,
    RunningRenames,
    CancelTask,
    OpenGate,
    BulkThroughGate,
    ShutGates,
}

impl Call {
    /// Returns the call that makes `op` alone ([`DocStore::write`]): the write's own kind, so
    /// that a layer tells a create, an index and a delete apart as the callers name them.
    pub fn writing(op: &BulkOp) -> Call {
        match op {
            BulkOp::Create { .. } => Call::Create,
            BulkOp::Index { .. } => Call::Index,
            BulkOp::Delete { .. } => Call::Delete,
        }
    }

    /// Returns true for a call that may change what the store holds (a lost answer then
    /// hides a write that landed).
    pub fn writes(self) -> bool {
        use Call::*;
        match self {
            CreateIndex | DeleteIndex | Create | Index | Delete | Bulk | BulkAfter
            | BulkRefreshed | ExtendMapping | PutScript | BulkUpdate | BulkUpdateAfter
            | RenameOnServer | DeleteOnServer | CancelTask | OpenGate | BulkThroughGate
            | ShutGates => true,
            Get | Mget | Search | Count | Refresh | CloseCursor | Find | IndicesExist
            | StoredScript | RunningRenames => false,
        }
    }

    /// Returns true for the calls that set up a store handle's scripts, made once per handle
    /// and cached there rather than per job.
    pub fn sets_up_scripts(self) -> bool {
        matches!(self, Call::PutScript | Call::StoredScript)
    }
}

/// A store that wraps another. Implementing it makes the type a [`DocStore`] that forwards
/// every call, through [`StoreLayer::around`] and the `on_` method for it, and offers every
/// capability of the wrapped store unless [`StoreLayer::on_capabilities`] hides one or adds
/// one.
#[async_trait]
pub trait StoreLayer: Send + Sync + std::fmt::Debug {
    /// Returns the wrapped store.
    fn inner(&self) -> &dyn DocStore;

    /// Returns a short description of where the store lives; the wrapped store's by default.
    fn on_describe(&self) -> String {
        self.inner().describe()
    }

    /// Returns the capabilities this layer offers, given `offered`: the wrapped store's, each
    /// one through this layer. By default `offered` itself; a layer hides one by setting it to
    /// `None`, or adds its own.
    fn on_capabilities<'a>(&'a self, offered: Capabilities<'a>) -> Capabilities<'a> {
        offered
    }

    /// Runs `next`, the call `call` (this layer's method of the same name), and returns its
    /// answer: by default that is all. The place for what every call does: count it, wait,
    /// fail it.
    fn around<'a, T: Send + 'a>(
        &'a self,
        call: Call,
        next: BoxFuture<'a, Result<T>>,
    ) -> BoxFuture<'a, Result<T>> {
        let _ = call;
        next
    }

    /// See [`DocStore::create_index`]; forwarded by default.
    async fn on_create_index(&self, index: &str, body: &Value) -> Result<bool> {
        self.inner().create_index(index, body).await
    }

    /// See [`DocStore::delete_index`]; forwarded by default.
    async fn on_delete_index(&self, index: &str) -> Result<bool> {
        self.inner().delete_index(index).await
    }

    /// See [`DocStore::get`]; forwarded by default.
    async fn on_get(&self, index: &str, id: &str) -> Result<Option<StoredDoc>> {
        self.inner().get(index, id).await
    }

    /// See [`DocStore::mget`]; forwarded by default.
    async fn on_mget(&self, index: &str, ids: &[String]) -> Result<Vec<Option<StoredDoc>>> {
        self.inner().mget(index, ids).await
    }

    /// See [`DocStore::write`]; forwarded by default.
    async fn on_write(&self, index: &str, op: BulkOp) -> Result<Version> {
        self.inner().write(index, op).await
    }

    /// See [`DocStore::bulk`]; forwarded by default.
    async fn on_bulk(&self, index: &str, ops: Vec<BulkOp>) -> Result<Vec<BulkItemResult>> {
        self.inner().bulk(index, ops).await
    }

    /// See [`DocStore::search`]; forwarded by default.
    async fn on_search(&self, index: &str, request: SearchRequest) -> Result<Page> {
        self.inner().search(index, request).await
    }

    /// See [`DocStore::count`]; forwarded by default.
    async fn on_count(&self, index: &str, scope: &Scope) -> Result<u64> {
        self.inner().count(index, scope).await
    }

    /// See [`DocStore::refresh`]; forwarded by default.
    async fn on_refresh(&self, index: &str) -> Result<()> {
        self.inner().refresh(index).await
    }

    /// See [`ChainedBulk::bulk_after`]; forwarded by default.
    async fn on_bulk_after(&self, chain: Chain<'_, BulkOp>) -> Result<Chained<BulkItemResult>> {
        self.inner().bulk_after(chain).await
    }

    /// See [`RefreshedBulk::bulk_refreshed`]; forwarded by default.
    async fn on_bulk_refreshed(
        &self,
        index: &str,
        ops: Vec<BulkOp>,
    ) -> Result<Vec<BulkItemResult>> {
        self.inner().bulk_refreshed(index, ops).await
    }

    /// See [`HeldCursors::close_cursor`]; forwarded by default.
    async fn on_close_cursor(&self, index: &str, cursor: Cursor) -> Result<()> {
        self.inner().close_cursor(index, cursor).await
    }

    /// See [`Find::find`]; forwarded by default.
    async fn on_find(&self, index: &str, query: &FindQuery, size: usize) -> Result<Vec<StoredDoc>> {
        self.inner().find(index, query, size).await
    }

    /// See [`IndexAdmin::indices_exist`]; forwarded by default.
    async fn on_indices_exist(&self, indices: &[&str]) -> Result<bool> {
        self.inner().indices_exist(indices).await
    }

    /// See [`IndexAdmin::extend_mapping`]; forwarded by default.
    async fn on_extend_mapping(&self, index: &str, mappings: &Value) -> Result<()> {
        self.inner().extend_mapping(index, mappings).await
    }

    /// See [`ScriptedUpdates::put_script`]; forwarded by default.
    async fn on_put_script(&self, id: &str, source: &str) -> Result<bool> {
        match self.inner().scripted() {
            Some(scripted) => scripted.put_script(id, source).await,
            None => Ok(false),
        }
    }

    /// See [`ScriptedUpdates::stored_script`]; forwarded by default.
    async fn on_stored_script(&self, id: &str) -> Result<Option<String>> {
        match self.inner().scripted() {
            Some(scripted) => scripted.stored_script(id).await,
            None => Ok(None),
        }
    }

    /// See [`ScriptedUpdates::bulk_update`]; forwarded by default.
    async fn on_bulk_update(
        &self,
        index: &str,
        items: Vec<ScriptedUpdate>,
    ) -> Result<Vec<UpdateItemResult>> {
        match self.inner().scripted() {
            Some(scripted) => scripted.bulk_update(index, items).await,
            None => Err(no_scripts(index)),
        }
    }

    /// See [`ScriptedUpdates::chains`]; forwarded by default.
    fn on_chains(&self) -> bool {
        self.inner().scripted().is_some_and(ScriptedUpdates::chains)
    }

    /// See [`ScriptedUpdates::bulk_update_after`]; forwarded by default.
    async fn on_bulk_update_after(
        &self,
        chain: Chain<'_, ScriptedUpdate>,
    ) -> Result<Chained<UpdateItemResult>> {
        match self.inner().scripted() {
            Some(scripted) => scripted.bulk_update_after(chain).await,
            None => Err(no_scripts(chain.index)),
        }
    }

    /// See [`ServerRename::rename_on_server`]; forwarded by default.
    async fn on_rename_on_server(&self, index: &str, job: &PrefixMove) -> Result<TaskState> {
        match self.inner().capabilities().server_rename {
            Some(server) => server.rename_on_server(index, job).await,
            None => Err(no_server_rename()),
        }
    }

    /// See [`ServerRename::delete_files_on_server`]; forwarded by default.
    async fn on_delete_files_on_server(
        &self,
        index: &str,
        job: &SubtreeDelete,
    ) -> Result<TaskState> {
        match self.inner().capabilities().server_rename {
            Some(server) => server.delete_files_on_server(index, job).await,
            None => Err(no_server_rename()),
        }
    }

    /// See [`ServerRename::cancel_task`]; forwarded by default.
    async fn on_cancel_task(&self, task: &TaskId) -> Result<()> {
        match self.inner().capabilities().server_rename {
            Some(server) => server.cancel_task(task).await,
            None => Err(no_server_rename()),
        }
    }

    /// See [`ServerRename::running_renames`]; forwarded by default.
    async fn on_running_renames(&self, job: &str) -> Result<Vec<(TaskId, TaskState)>> {
        match self.inner().capabilities().server_rename {
            Some(server) => server.running_renames(job).await,
            None => Ok(Vec::new()),
        }
    }

    /// See [`WriteGates::open_gate`]; forwarded by default.
    async fn on_open_gate(&self, index: &str, gate: &str) -> Result<bool> {
        match self.inner().capabilities().write_gates {
            Some(gates) => gates.open_gate(index, gate).await,
            None => Ok(false),
        }
    }

    /// See [`WriteGates::bulk_through_gate`]; forwarded by default.
    async fn on_bulk_through_gate(
        &self,
        gate: &str,
        ops: Vec<BulkOp>,
    ) -> Result<Vec<BulkItemResult>> {
        match self.inner().capabilities().write_gates {
            Some(gates) => gates.bulk_through_gate(gate, ops).await,
            None => Err(no_write_gates()),
        }
    }

    /// See [`WriteGates::shut_gates`]; forwarded by default.
    async fn on_shut_gates(&self, index: &str, prefix: &str) -> Result<()> {
        match self.inner().capabilities().write_gates {
            Some(gates) => gates.shut_gates(index, prefix).await,
            None => Ok(()),
        }
    }
}

fn no_write_gates() -> StoreError {
    StoreError::rejected("a write gate", "the store has none")
}

fn no_server_rename() -> StoreError {
    StoreError::rejected(
        "a rename carried out by the server",
        "the store cannot run one",
    )
}

fn no_scripts(index: &str) -> StoreError {
    StoreError::rejected(
        format!("scripted update of `{index}`"),
        "the store runs no scripts",
    )
}

#[async_trait]
impl<L: StoreLayer> DocStore for L {
    fn describe(&self) -> String {
        self.on_describe()
    }

    async fn create_index(&self, index: &str, body: &Value) -> Result<bool> {
        let next = self.on_create_index(index, body);
        self.around(Call::CreateIndex, next).await
    }

    async fn delete_index(&self, index: &str) -> Result<bool> {
        let next = self.on_delete_index(index);
        self.around(Call::DeleteIndex, next).await
    }

    async fn get(&self, index: &str, id: &str) -> Result<Option<StoredDoc>> {
        self.around(Call::Get, self.on_get(index, id)).await
    }

    async fn mget(&self, index: &str, ids: &[String]) -> Result<Vec<Option<StoredDoc>>> {
        self.around(Call::Mget, self.on_mget(index, ids)).await
    }

    async fn write(&self, index: &str, op: BulkOp) -> Result<Version> {
        let call = Call::writing(&op);
        self.around(call, self.on_write(index, op)).await
    }

    async fn bulk(&self, index: &str, ops: Vec<BulkOp>) -> Result<Vec<BulkItemResult>> {
        self.around(Call::Bulk, self.on_bulk(index, ops)).await
    }

    async fn search(&self, index: &str, request: SearchRequest) -> Result<Page> {
        let next = self.on_search(index, request);
        self.around(Call::Search, next).await
    }

    async fn count(&self, index: &str, scope: &Scope) -> Result<u64> {
        self.around(Call::Count, self.on_count(index, scope)).await
    }

    async fn refresh(&self, index: &str) -> Result<()> {
        self.around(Call::Refresh, self.on_refresh(index)).await
    }

    fn capabilities(&self) -> Capabilities<'_> {
        let inner = self.inner().capabilities();
        let offered = Capabilities {
            chained_bulk: inner.chained_bulk.map(|_| self as &dyn ChainedBulk),
            refreshed_bulk: inner.refreshed_bulk.map(|_| self as &dyn RefreshedBulk),
            scripts: inner.scripts.map(|_| self as &dyn ScriptedUpdates),
            held_cursors: inner.held_cursors.map(|_| self as &dyn HeldCursors),
            find: inner.find.map(|_| self as &dyn Find),
            index_admin: inner.index_admin.map(|_| self as &dyn IndexAdmin),
            server_rename: inner.server_rename.map(|_| self as &dyn ServerRename),
            write_gates: inner.write_gates.map(|_| self as &dyn WriteGates),
        };
        self.on_capabilities(offered)
    }

    fn items_resent(&self) -> u64 {
        self.inner().items_resent()
    }

    async fn server_time_ms(&self) -> Result<Option<i64>> {
        self.inner().server_time_ms().await
    }
}

#[async_trait]
impl<L: StoreLayer> ChainedBulk for L {
    async fn bulk_after(&self, chain: Chain<'_, BulkOp>) -> Result<Chained<BulkItemResult>> {
        let next = self.on_bulk_after(chain);
        self.around(Call::BulkAfter, next).await
    }
}

#[async_trait]
impl<L: StoreLayer> RefreshedBulk for L {
    async fn bulk_refreshed(&self, index: &str, ops: Vec<BulkOp>) -> Result<Vec<BulkItemResult>> {
        let next = self.on_bulk_refreshed(index, ops);
        self.around(Call::BulkRefreshed, next).await
    }
}

#[async_trait]
impl<L: StoreLayer> HeldCursors for L {
    async fn close_cursor(&self, index: &str, cursor: Cursor) -> Result<()> {
        let next = self.on_close_cursor(index, cursor);
        self.around(Call::CloseCursor, next).await
    }
}

#[async_trait]
impl<L: StoreLayer> Find for L {
    async fn find(&self, index: &str, query: &FindQuery, size: usize) -> Result<Vec<StoredDoc>> {
        let next = self.on_find(index, query, size);
        self.around(Call::Find, next).await
    }
}

#[async_trait]
impl<L: StoreLayer> IndexAdmin for L {
    async fn indices_exist(&self, indices: &[&str]) -> Result<bool> {
        let next = self.on_indices_exist(indices);
        self.around(Call::IndicesExist, next).await
    }

    async fn extend_mapping(&self, index: &str, mappings: &Value) -> Result<()> {
        let next = self.on_extend_mapping(index, mappings);
        self.around(Call::ExtendMapping, next).await
    }
}

#[async_trait]
impl<L: StoreLayer> ScriptedUpdates for L {
    async fn put_script(&self, id: &str, source: &str) -> Result<bool> {
        let next = self.on_put_script(id, source);
        self.around(Call::PutScript, next).await
    }

    async fn stored_script(&self, id: &str) -> Result<Option<String>> {
        let next = self.on_stored_script(id);
        self.around(Call::StoredScript, next).await
    }

    async fn bulk_update(
        &self,
        index: &str,
        items: Vec<ScriptedUpdate>,
    ) -> Result<Vec<UpdateItemResult>> {
        let next = self.on_bulk_update(index, items);
        self.around(Call::BulkUpdate, next).await
    }

    fn chains(&self) -> bool {
        self.on_chains()
    }

    async fn bulk_update_after(
        &self,
        chain: Chain<'_, ScriptedUpdate>,
    ) -> Result<Chained<UpdateItemResult>> {
        let next = self.on_bulk_update_after(chain);
        self.around(Call::BulkUpdateAfter, next).await
    }
}

#[async_trait]
impl<L: StoreLayer> WriteGates for L {
    async fn open_gate(&self, index: &str, gate: &str) -> Result<bool> {
        let next = self.on_open_gate(index, gate);
        self.around(Call::OpenGate, next).await
    }

    async fn bulk_through_gate(&self, gate: &str, ops: Vec<BulkOp>) -> Result<Vec<BulkItemResult>> {
        let next = self.on_bulk_through_gate(gate, ops);
        self.around(Call::BulkThroughGate, next).await
    }

    async fn shut_gates(&self, index: &str, prefix: &str) -> Result<()> {
        let next = self.on_shut_gates(index, prefix);
        self.around(Call::ShutGates, next).await
    }
}

#[async_trait]
impl<L: StoreLayer> ServerRename for L {
    async fn rename_on_server(&self, index: &str, job: &PrefixMove) -> Result<TaskState> {
        let next = self.on_rename_on_server(index, job);
        self.around(Call::RenameOnServer, next).await
    }

    async fn delete_files_on_server(&self, index: &str, job: &SubtreeDelete) -> Result<TaskState> {
        let next = self.on_delete_files_on_server(index, job);
        self.around(Call::DeleteOnServer, next).await
    }

    async fn cancel_task(&self, task: &TaskId) -> Result<()> {
        self.around(Call::CancelTask, self.on_cancel_task(task))
            .await
    }

    async fn running_renames(&self, job: &str) -> Result<Vec<(TaskId, TaskState)>> {
        let next = self.on_running_renames(job);
        self.around(Call::RunningRenames, next).await
    }
}
