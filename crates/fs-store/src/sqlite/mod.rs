//! [`SqliteStore`]: the embedded, durable implementation of [`DocStore`] on SQLite.
//!
//! One SQLite transaction per call makes each primitive atomic, also across processes sharing a
//! database file. A bulk request runs in one transaction for speed, but its items stay
//! independent (a failed item writes nothing and does not stop the others), so no multi-document
//! guarantee leaks through the trait that Elasticsearch would not give.
//!
//! Its clock, by which leases are judged, is the machine's boot clock from a base recorded in
//! the database (`clock`): processes on one machine agree on it whatever their wall clocks say.

mod clock;
mod ops;
mod schema;
mod scripted;
mod search;
mod sql;
mod text;
mod usage;
mod writer;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use fs_model::FindQuery;
use rusqlite::Connection;
use serde_json::Value;

use crate::capabilities::{Capabilities, ChainedBulk, Find, IndexAdmin, RefreshedBulk};
use crate::error::{Result, StoreError};
use crate::index_name::validate_index_name;
use crate::store::DocStore;
use crate::types::{
    BulkItemResult, BulkOp, Chain, Chained, Page, Scope, SearchRequest, StoredDoc, Version,
    WithFirst,
};
pub use usage::{CallUse, ConnectionUse};
use writer::Writer;

/// How a [`SqliteStore`] is opened.
#[derive(Debug, Clone)]
pub struct SqliteOptions {
    near_real_time: bool,
    busy_timeout: Duration,
    synchronous_full: bool,
    inline: bool,
}

impl Default for SqliteOptions {
    fn default() -> SqliteOptions {
        SqliteOptions {
            near_real_time: false,
            busy_timeout: Duration::from_secs(5),
            synchronous_full: false,
            inline: false,
        }
    }
}

impl SqliteOptions {
    /// Returns the defaults: realtime search, 5 s busy timeout, `synchronous = NORMAL`.
    pub fn new() -> SqliteOptions {
        SqliteOptions::default()
    }

    /// Makes searches see only what was written before the last refresh, as in Elasticsearch,
    /// so that code which forgets to refresh fails its tests. Realtime get is unaffected.
    /// The mode belongs to the database: it is fixed when the file is created, and opening it
    /// with the other mode is an error. Default: false.
    pub fn near_real_time(mut self, yes: bool) -> SqliteOptions {
        self.near_real_time = yes;
        self
    }

    /// Sets how long a call waits for another process's write to finish before failing with a
    /// transient error. Default: 5 s.
    pub fn busy_timeout(mut self, timeout: Duration) -> SqliteOptions {
        self.busy_timeout = timeout;
        self
    }

    /// Makes every commit survive a power cut (`synchronous = FULL`, an fsync per commit).
    /// Default: false (`NORMAL`: a process crash loses nothing, a power cut may lose the last
    /// commits, the file is never corrupted).
    pub fn synchronous_full(mut self, yes: bool) -> SqliteOptions {
        self.synchronous_full = yes;
        self
    }
}

impl SqliteOptions {
    /// Runs every call on the calling task instead of tokio's blocking pool. Only for an
    /// in-memory database driven by a single-threaded runtime, where it makes a run
    /// reproducible (the deterministic simulation tests use it): a call then blocks its
    /// thread for as long as SQLite takes. Default: false.
    pub fn inline(mut self, yes: bool) -> SqliteOptions {
        self.inline = yes;
        self
    }
}

/// The embedded document store: a SQLite database file, or an in-memory database.
///
/// Cheap to clone; clones share one connection.
#[derive(Clone, Debug)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// A std mutex, not tokio's: it is only taken inside `spawn_blocking`, never across an await.
    conn: Mutex<Connection>,
    near_real_time: bool,
    inline: bool,
    location: String,
    /// The lock scripts stored with `put_script`, run atomically by `bulk_update`.
    scripts: crate::scripted::StoredLockScripts,
    /// What the calls held the connection for. Written only while the connection is held, so
    /// calls never wait for each other on it; a snapshot takes it just for a clone.
    used: Mutex<ConnectionUse>,
}

impl SqliteStore {
    /// Opens (creating if needed) the database file at `path` with default options.
    ///
    /// # Errors
    /// [`StoreError::Backend`] if the file cannot be opened or is not a database.
    pub fn open(path: impl AsRef<Path>) -> Result<SqliteStore> {
        SqliteStore::open_with(path, SqliteOptions::default())
    }

    /// Opens (creating if needed) the database file at `path`.
    ///
    /// # Errors
    /// [`StoreError::Backend`] if the file cannot be opened or is not a database;
    /// [`StoreError::Rejected`] if it was created with another near-real-time mode.
    pub fn open_with(path: impl AsRef<Path>, options: SqliteOptions) -> Result<SqliteStore> {
        let location = format!("sqlite database `{}`", path.as_ref().display());
        let conn = Connection::open(path.as_ref())
            .map_err(|e| sql::sql_error(&format!("opening {location}"), e))?;
        SqliteStore::from_connection(conn, location, options)
    }

    /// Opens a fresh in-memory database with default options.
    ///
    /// # Errors
    /// [`StoreError::Backend`] if SQLite cannot allocate it.
    pub fn in_memory() -> Result<SqliteStore> {
        SqliteStore::in_memory_with(SqliteOptions::default())
    }

    /// Opens a fresh in-memory database.
    ///
    /// # Errors
    /// [`StoreError::Backend`] if SQLite cannot allocate it.
    pub fn in_memory_with(options: SqliteOptions) -> Result<SqliteStore> {
        let location = "in-memory sqlite database".to_owned();
        let conn = Connection::open_in_memory()
            .map_err(|e| sql::sql_error(&format!("opening {location}"), e))?;
        SqliteStore::from_connection(conn, location, options)
    }

    fn from_connection(
        mut conn: Connection,
        location: String,
        options: SqliteOptions,
    ) -> Result<SqliteStore> {
        let near_real_time = schema::prepare(
            &mut conn,
            &location,
            options.near_real_time,
            options.busy_timeout,
            options.synchronous_full,
        )?;
        Ok(SqliteStore {
            inner: Arc::new(Inner {
                conn: Mutex::new(conn),
                near_real_time,
                inline: options.inline,
                location,
                scripts: crate::scripted::StoredLockScripts::default(),
                used: Mutex::new(ConnectionUse::default()),
            }),
        })
    }

    /// Returns true if searches only see refreshed writes.
    pub fn is_near_real_time(&self) -> bool {
        self.inner.near_real_time
    }

    /// Returns every document of `index` as it is now, sorted by id, whatever the
    /// near-real-time view shows and without refreshing it: for checkers (simulations, tests)
    /// that watch the store at every step and must not refresh it on behalf of the code they
    /// check, which would hide a forgotten refresh.
    ///
    /// # Errors
    /// [`StoreError::IndexNotFound`] if `index` does not exist; [`StoreError::Backend`] if a
    /// stored source is not JSON.
    pub async fn snapshot(&self, index: &str) -> Result<Vec<StoredDoc>> {
        let index = index.to_owned();
        self.run("snapshot", move |conn, _| ops::snapshot(conn, &index))
            .await
    }

    /// What the calls made so far held the connection for, by kind: a snapshot, to compare
    /// with a later one ([`ConnectionUse::since`]). The benchmarks read it to tell where a
    /// job's time on the one connection goes (`docs/benchmarks.md`).
    pub fn connection_use(&self) -> ConnectionUse {
        self.inner
            .used
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Runs `f`, a call of `kind`, on the connection on the blocking pool.
    async fn run<T, F>(&self, kind: &'static str, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection, bool) -> Result<T> + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        if inner.inline {
            return inner.call(kind, f);
        }
        tokio::task::spawn_blocking(move || inner.call(kind, f))
            .await
            .map_err(|e| StoreError::Backend {
                context: format!("calling {}", self.inner.location),
                message: format!("the blocking task failed: {e}"),
            })?
    }
}

impl Inner {
    /// Runs `f`, a call of `kind`, on the connection, on this thread; counts the time it held
    /// the connection.
    fn call<T>(
        &self,
        kind: &'static str,
        f: impl FnOnce(&mut Connection, bool) -> Result<T>,
    ) -> Result<T> {
        // A panic while holding the lock leaves no transaction open (rusqlite rolls back on
        // drop), so a poisoned connection is still sound to use.
        let mut conn = self
            .conn
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let taken = Instant::now();
        let result = f(&mut conn, self.near_real_time);
        self.used
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .add(kind, taken.elapsed());
        result
    }
}

#[async_trait]
impl DocStore for SqliteStore {
    fn describe(&self) -> String {
        self.inner.location.clone()
    }

    async fn create_index(&self, index: &str, body: &Value) -> Result<bool> {
        validate_index_name(index)?;
        let (index, body) = (index.to_owned(), body.clone());
        self.run("create_index", move |conn, _| {
            ops::create_index(conn, &index, &body)
        })
        .await
    }

    async fn delete_index(&self, index: &str) -> Result<bool> {
        let index = index.to_owned();
        self.run("delete_index", move |conn, _| {
            ops::delete_index(conn, &index)
        })
        .await
    }

    async fn get(&self, index: &str, id: &str) -> Result<Option<StoredDoc>> {
        let mut docs = self.mget(index, &[id.to_owned()]).await?;
        Ok(docs.pop().flatten())
    }

    async fn mget(&self, index: &str, ids: &[String]) -> Result<Vec<Option<StoredDoc>>> {
        let (index, ids) = (index.to_owned(), ids.to_vec());
        self.run("mget", move |conn, _| ops::mget(conn, &index, &ids))
            .await
    }

    async fn write(&self, index: &str, op: BulkOp) -> Result<Version> {
        let index = index.to_owned();
        self.run("write", move |conn, nrt| {
            Writer::write(conn, &index, nrt, |w| w.apply(&op))
        })
        .await
    }

    async fn bulk(&self, index: &str, ops: Vec<BulkOp>) -> Result<Vec<BulkItemResult>> {
        let index = index.to_owned();
        self.run("bulk", move |conn, nrt| {
            Writer::write(conn, &index, nrt, |w| w.bulk(&ops))
        })
        .await
    }

    async fn search(&self, index: &str, request: SearchRequest) -> Result<Page> {
        let index = index.to_owned();
        self.run("search", move |conn, nrt| {
            search::search(conn, nrt, &index, &request)
        })
        .await
    }

    async fn count(&self, index: &str, scope: &Scope) -> Result<u64> {
        let (index, scope) = (index.to_owned(), scope.clone());
        self.run("count", move |conn, nrt| {
            search::count(conn, nrt, &index, &scope)
        })
        .await
    }

    async fn refresh(&self, index: &str) -> Result<()> {
        let index = index.to_owned();
        self.run("refresh", move |conn, nrt| ops::refresh(conn, nrt, &index))
            .await
    }

    async fn server_time_ms(&self) -> Result<Option<i64>> {
        let location = self.inner.location.clone();
        self.run("clock", move |conn, _| clock::now_ms(conn, &location))
            .await
    }

    fn capabilities(&self) -> Capabilities<'_> {
        Capabilities {
            chained_bulk: Some(self),
            refreshed_bulk: Some(self),
            scripts: Some(self),
            find: Some(self),
            index_admin: Some(self),
            ..Capabilities::NONE
        }
    }
}

#[async_trait]
impl IndexAdmin for SqliteStore {
    /// One look at the table of indices: a verb that reads a tree can tell a mistyped index
    /// from an empty one, as on Elasticsearch.
    async fn indices_exist(&self, indices: &[&str]) -> Result<bool> {
        let indices: Vec<String> = indices.iter().map(|i| (*i).to_owned()).collect();
        self.run("indices_exist", move |conn, _| {
            for index in &indices {
                match sql::index_seq(conn, index) {
                    Ok(_) => {}
                    Err(StoreError::IndexNotFound { .. }) => return Ok(false),
                    Err(e) => return Err(e),
                }
            }
            Ok(true)
        })
        .await
    }

    /// Nothing to do: the embedded store keeps documents as they come, with no mapping.
    async fn extend_mapping(&self, _index: &str, _mappings: &Value) -> Result<()> {
        Ok(())
    }
}

#[async_trait]
impl RefreshedBulk for SqliteStore {
    /// One call: the writes, then (near-real-time) the refresh, without queueing for the
    /// connection a second time. (Realtime, there is nothing to refresh: the writes' own
    /// transaction found the index.)
    async fn bulk_refreshed(&self, index: &str, ops: Vec<BulkOp>) -> Result<Vec<BulkItemResult>> {
        let index = index.to_owned();
        self.run("bulk_refreshed", move |conn, nrt| {
            let results = Writer::write(conn, &index, nrt, |w| w.bulk(&ops))?;
            if nrt {
                ops::refresh(conn, nrt, &index)?;
            }
            Ok(results)
        })
        .await
    }
}

#[async_trait]
impl ChainedBulk for SqliteStore {
    /// One transaction: the first write, then (only if it landed) the bulk; a first write
    /// that fails rolls back and changes nothing. The refresh follows in the same call.
    async fn bulk_after(&self, chain: Chain<'_, BulkOp>) -> Result<Chained<BulkItemResult>> {
        let (first, with_first, ops) = (chain.first, chain.with_first, chain.then);
        let (first_index, index) = (chain.first_index.to_owned(), chain.index.to_owned());
        let refresh = chain.refresh;
        self.run("bulk_after", move |conn, nrt| {
            let first = (first_index.as_str(), &first, with_first.as_ref());
            let chained = Writer::chained(conn, nrt, first, &index, |w| w.bulk(&ops))?;
            if refresh {
                refresh_landed(conn, nrt, &index, &chained)?;
            }
            refresh_with_first(conn, nrt, with_first.as_ref(), &chained)?;
            Ok(chained)
        })
        .await
    }
}

/// Refreshes `index` after a chained request whose first write landed (the batch ran), in
/// the same call; realtime there is nothing to refresh, and after a first write that did not
/// land nothing changed.
fn refresh_landed<T>(
    conn: &mut Connection,
    nrt: bool,
    index: &str,
    chained: &Chained<T>,
) -> Result<()> {
    if nrt && matches!(chained, Chained::Ran(..)) {
        ops::refresh(conn, nrt, index)?;
    }
    Ok(())
}

/// Refreshes the index of the writes that went with a chained request's first write, where
/// they asked for it and landed.
fn refresh_with_first<T>(
    conn: &mut Connection,
    nrt: bool,
    with_first: Option<&WithFirst>,
    chained: &Chained<T>,
) -> Result<()> {
    match with_first {
        Some(with) if with.refresh => refresh_landed(conn, nrt, &with.index, chained),
        _ => Ok(()),
    }
}

#[async_trait]
impl Find for SqliteStore {
    async fn find(&self, index: &str, query: &FindQuery, size: usize) -> Result<Vec<StoredDoc>> {
        let (index, query) = (index.to_owned(), query.clone());
        self.run("find", move |conn, nrt| {
            text::find(conn, nrt, &index, &query, size)
        })
        .await
    }
}
