//! Document stores with Elasticsearch's per-document semantics.
//!
//! - [`DocStore`]: the async trait, exactly the primitives Elasticsearch offers: realtime
//!   [`get`](DocStore::get) and [`mget`](DocStore::mget) with `seq_no`/`primary_term`,
//!   [`create`](DocStore::create), conditional [`index`](DocStore::index) and
//!   [`delete`](DocStore::delete) (each one [`write`](DocStore::write)),
//!   [`bulk`](DocStore::bulk) with a result per item, paged
//!   [`search`](DocStore::search) by path, [`count`](DocStore::count) and
//!   [`refresh`](DocStore::refresh). One call is one round trip. A caller that stops paging
//!   early closes the search with `close_cursor`.
//! - [`Capabilities`]: what a store can do beyond those, each capability the object that does
//!   it ([`ChainedBulk`], [`RefreshedBulk`], [`ScriptedUpdates`], [`HeldCursors`], [`Find`],
//!   [`IndexAdmin`], [`ServerRename`], [`WriteGates`]); callers ask a store handle
//!   (`chains_bulk`, `bulk_after`, `find`, `scripted`, `write_gates`, ...), which answers from
//!   them. A write gate fences a job's writes with one request (Elasticsearch: an alias).
//! - [`StoreLayer`]: a store that wraps another, with its forwarding written once: it offers
//!   every capability of the wrapped store unless it hides one on purpose.
//! - [`StoreError`]: conflict, not found, transient, rejected; [`StoreError::is_retryable`]
//!   answers "may a retry help?"; [`RetryPolicy`] says how long to wait before the next try
//!   (jittered exponential backoff with a limit on attempts and a deadline, seedable): the one
//!   retry policy of the workspace.
//! - [`SqliteStore`]: the embedded implementation, a database file shared safely by several
//!   processes, or in memory; optionally near-real-time, like Elasticsearch's search.
//!   [`ConnectionUse`] says what its calls held its one connection for, by kind.
//! - [`ElasticStore`]: the same trait on Elasticsearch 7.x/8.x or OpenSearch over HTTP, through
//!   the official client; [`ElasticConfig`] says where and how.
//! - [`Scan`]: reads a paged search page by page and closes what the store keeps open for it
//!   (a point in time or a scroll) on every way out, [`READ_PAGE`] a page for a read of a whole
//!   subtree; [`Scan::pipeline`] works on several pages at once while it reads the next;
//!   [`Scan::read_ahead`] ([`ReadAhead`]) reads the next page while its caller works on the
//!   last, in order.
//! - [`CountingStore`]: a layer that counts the round trips made through it.
//! - [`GroupCommit`]: a layer that sends the small bulk requests and the writes made at the
//!   same time to one index as one request (a process running many jobs: their lock takes
//!   and releases, their journal entries and closes).
//!
//! ```
//! use fs_store::{DocStore, SqliteStore, StoreError};
//! use serde_json::json;
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let store = SqliteStore::in_memory()?;
//! store.create_index("fs-lock", &json!({})).await?;
//! store.create("fs-lock", "/clinton", json!({"lock_type": "exclusive"})).await?;
//! // A second create of the same lock document is refused: the lock is taken.
//! let refused = store.create("fs-lock", "/clinton", json!({"lock_type": "exclusive"})).await;
//! assert!(matches!(refused, Err(StoreError::Conflict { .. })));
//! # Ok::<(), StoreError>(())
//! # }).unwrap();
//! ```
#![deny(missing_docs)]
// A panic in library code takes a job or the service down with it: errors go up instead.
#![deny(clippy::unwrap_used, clippy::expect_used)]

mod capabilities;
#[cfg(feature = "conformance")]
pub mod conformance;
mod counting;
mod elastic;
mod error;
mod group_commit;
mod index_name;
mod layer;
mod pipeline;
mod read_ahead;
mod retry;
mod scan;
mod scripted;
mod server_rename;
mod sqlite;
mod store;
mod types;
mod version;
mod write_gate;

pub use capabilities::{Capabilities, ChainedBulk, Find, HeldCursors, IndexAdmin, RefreshedBulk};
pub use counting::CountingStore;
pub use elastic::{redact as redact_url, Auth, ElasticConfig, ElasticStore, Paging};
pub use error::{Result, StoreError};
pub use group_commit::{GroupCommit, GROUP_ITEMS, SMALL_BULK};
pub use index_name::validate_index_name;
pub use layer::{Call, StoreLayer};
pub use read_ahead::ReadAhead;
pub use retry::{Backoff, Jitter, RetryPolicy};
pub use scan::{Scan, READ_PAGE};
pub use scripted::{
    plan_update, unknown_script, PlannedWrite, ScriptedUpdate, ScriptedUpdates, StoredLockScripts,
    UpdateItemResult, UpdateOutcome, UpdateResult,
};
pub use server_rename::{PrefixMove, ServerRename, SubtreeDelete, TaskFailure, TaskId, TaskState};
pub use sqlite::{CallUse, ConnectionUse, SqliteOptions, SqliteStore};
pub use store::{DocStore, SharedStore};
pub use types::{
    BulkItemResult, BulkOp, Chain, Chained, Cursor, Page, Scope, SearchRequest, StoredDoc, Version,
    WithFirst,
};
pub use write_gate::WriteGates;
