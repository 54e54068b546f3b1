//! [`ElasticStore`]: the document store on Elasticsearch or OpenSearch, over HTTP, through the
//! official `elasticsearch` client.
//!
//! Every trait call is one HTTP request, except that a paged search opens a point in time (or
//! a scroll) with its first page and closes it, waiting for the answer, after its last page,
//! after a failed page, or when its caller stops early ([`HeldCursors::close_cursor`](crate::HeldCursors::close_cursor)).
//!
//! Where each part lives:
//!
//! - `config`: [`ElasticConfig`], where the server is (one URL, or a cluster's nodes) and how
//!   to talk to it.
//! - `nodes`: the nodes of a cluster behind the client's connection pool: taken in turn, one
//!   that does not serve skipped for a while.
//! - `verified`: reads through a node shown to have a current cluster state.
//! - `client`: building a handle; which server answers (`server`) and its paging.
//! - `fingerprint`: finding the CA a SHA-256 fingerprint names among a server's certificates.
//! - `access`: a server that will not let the client in (TLS, 401, 403), said in words.
//! - `request`: sending one request, with retries of what may be sent again.
//! - `response`: reading answers: errors, documents, versions.
//! - `indices`: creating, deleting and refreshing indices.
//! - `documents`: get, mget, create, index, delete and bulk.
//! - `search`: scopes as queries, one-page and paged searches, counts.
//! - `cursor`: the point in time or scroll a paged search keeps open, and closing it.
//! - `scripts`: stored scripts and scripted bulk updates.
//! - `combine`: scripted bulk updates of one index from concurrent callers, sent together.
//! - `rename_task`: renames the server carries out (`_update_by_query`), and their tasks.
//! - `clock`: the server's clock, by which leases are judged.

mod access;
mod client;
mod clock;
mod combine;
mod config;
mod cursor;
mod documents;
mod find;
mod fingerprint;
mod gates;
mod indices;
mod nodes;
mod rename_task;
mod request;
mod response;
mod scripts;
mod search;
mod server;
mod verified;

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use elasticsearch::Elasticsearch;
use serde_json::Value;
use tokio::sync::OnceCell;

pub use config::{redact, Auth, ElasticConfig, Paging};
use cursor::{OpenContexts, PageCursor};
use server::ServerInfo;

use crate::capabilities::{Capabilities, HeldCursors, IndexAdmin, RefreshedBulk};
use crate::error::Result;
use crate::store::DocStore;
use crate::types::{
    BulkItemResult, BulkOp, Cursor, Page, Scope, SearchRequest, StoredDoc, Version,
};

/// The document store on an Elasticsearch or OpenSearch server. Cheap to clone.
#[derive(Clone)]
pub struct ElasticStore {
    inner: Arc<Inner>,
}

struct Inner {
    client: Elasticsearch,
    /// The nodes the client sends to (shared with its transport), to mark one down or up.
    nodes: nodes::NodePool,
    config: ElasticConfig,
    server: OnceCell<ServerInfo>,
    /// The points in time and scrolls this handle opened and has not closed.
    contexts: OpenContexts,
    /// Scripts stored by this handle, by id, with their source: stored once, not per job.
    scripts: Mutex<HashMap<String, String>>,
    /// Set once the server refused to store a script: it is not asked again.
    scripts_refused: AtomicBool,
    /// Scripted updates of concurrent callers waiting to go out together, by index.
    lanes: Arc<combine::Lanes>,
    /// Bulk items sent again after a 429 (a busy node rejected them alone).
    items_resent: std::sync::atomic::AtomicU64,
}

impl Drop for Inner {
    fn drop(&mut self) {
        let open = self.contexts.len();
        if open > 0 {
            tracing::debug!(
                open,
                url = %self.config.url,
                "search contexts left open; the server drops them when their keep-alive runs out"
            );
        }
    }
}

impl std::fmt::Debug for ElasticStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ElasticStore")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl DocStore for ElasticStore {
    fn describe(&self) -> String {
        self.inner.config.url.clone()
    }

    async fn create_index(&self, index: &str, body: &Value) -> Result<bool> {
        self.create_index_if_missing(index, body).await
    }

    async fn delete_index(&self, index: &str) -> Result<bool> {
        self.remove_index(index).await
    }

    async fn get(&self, index: &str, id: &str) -> Result<Option<StoredDoc>> {
        self.get_doc(index, id).await
    }

    async fn mget(&self, index: &str, ids: &[String]) -> Result<Vec<Option<StoredDoc>>> {
        self.mget_docs(index, ids).await
    }

    async fn write(&self, index: &str, op: BulkOp) -> Result<Version> {
        self.write_doc(index, &op).await
    }

    async fn bulk(&self, index: &str, ops: Vec<BulkOp>) -> Result<Vec<BulkItemResult>> {
        self.bulk_docs(index, ops).await
    }

    async fn search(&self, index: &str, request: SearchRequest) -> Result<Page> {
        self.search_page(index, request).await
    }

    async fn count(&self, index: &str, scope: &Scope) -> Result<u64> {
        self.count_scope(index, scope).await
    }

    async fn refresh(&self, index: &str) -> Result<()> {
        self.refresh_index(index).await
    }

    fn capabilities(&self) -> Capabilities<'_> {
        Capabilities {
            chained_bulk: None,
            refreshed_bulk: Some(self),
            scripts: Some(self),
            held_cursors: Some(self),
            find: Some(self),
            index_admin: Some(self),
            server_rename: Some(self),
            write_gates: Some(self),
        }
    }

    fn items_resent(&self) -> u64 {
        self.inner
            .items_resent
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    async fn server_time_ms(&self) -> Result<Option<i64>> {
        self.read_server_time().await
    }
}

#[async_trait]
impl RefreshedBulk for ElasticStore {
    async fn bulk_refreshed(&self, index: &str, ops: Vec<BulkOp>) -> Result<Vec<BulkItemResult>> {
        self.bulk_docs_refreshed(index, ops, true).await
    }
}

#[async_trait]
impl HeldCursors for ElasticStore {
    async fn close_cursor(&self, index: &str, cursor: Cursor) -> Result<()> {
        let cursor = PageCursor::from_cursor(&format!("closing a search of `{index}`"), &cursor)?;
        self.close_context(index, &cursor).await
    }
}

#[async_trait]
impl IndexAdmin for ElasticStore {
    async fn indices_exist(&self, indices: &[&str]) -> Result<bool> {
        self.all_exist(indices).await
    }

    async fn extend_mapping(&self, index: &str, mappings: &Value) -> Result<()> {
        self.put_mapping(index, mappings).await
    }
}
