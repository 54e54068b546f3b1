//! Locks stored as documents, on any [`fs_store::DocStore`]: the three schemes of
//! *Elasticsearch: The Definitive Guide* ("Solving Concurrency Issues"), wire-compatible with
//! the book's requests, plus what the book leaves open.
//!
//! - [`LockClient`]: one owner (a `process_id`), built with [`LockClient::builder`]. It takes
//!   [tree locks](LockClient::lock_tree) (shared on every ancestor, exclusive on the target),
//!   [rename locks](LockClient::lock_rename) (source and destination in one acquisition), the
//!   [global lock](LockClient::lock_global) and [document locks](LockClient::lock_documents).
//! - [`LockGuard`]: held locks; [`LockGuard::release`] gives them back deepest first;
//!   [`LockGuard::release_after`] only once a write they protect landed (a journal entry
//!   closed), in the same transaction where the store can ([`LockClient::chains_release`]).
//! - [`TreeLockRequest`]: which documents a tree lock takes, in which order.
//! - Leases: every lock records an expiry that a background task renews; expired locks are
//!   only touched by the explicit [`LockClient::reap_expired`] (or its two halves,
//!   [`LockClient::read_expired`] and [`LockClient::reap_expired_holders`], between which
//!   recovery fences the expired holders' journal entries), [`LockClient::take_over`] and
//!   [`LockClient::adopt`] (recovery's takeover of a dead job's whole lock set). A holder
//!   checks [`LockClient::lease_left`] before it writes; a job that stops half-way
//!   [abandons](LockGuard::abandon) its locks to expire rather than releasing them.
//!
//! Two [`LockProtocol`]s write the same documents: compare-and-set (`if_seq_no`/
//! `if_primary_term`), which needs no server-side script and runs on every store, and the
//! book's painless scripts, stored on the server, where it runs them. With compare-and-set an
//! acquisition costs one `mget` and one `bulk` when nothing is in the way (one `bulk` when it
//! takes no shared lock); scripted, one `bulk`. A release costs one `bulk` either way.
//! `docs/locking.md` describes the protocol.
//!
//! ```no_run
//! use std::sync::Arc;
//! use fs_locks::LockClient;
//! use fs_model::FsPath;
//! use fs_store::SqliteStore;
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! let store = Arc::new(SqliteStore::open("fsrename.db")?);
//! let locks = LockClient::builder(store, "fs-lock").holder("mv /clinton /gormley").build();
//! locks.ensure_index().await?;
//! let guard = locks.lock_rename(&FsPath::parse("/clinton")?, &FsPath::parse("/gormley")?).await?;
//! // ... rewrite the documents under /clinton ...
//! guard.release().await?;
//! # Ok(())
//! # }
//! ```
#![deny(missing_docs)]

mod acquire;
mod adopt;
mod backoff;
mod builder;
mod client;
mod clock;
mod engine;
mod error;
mod events;
mod foreign;
mod guard;
mod lease;
mod listing;
mod lock_doc;
mod plan;
mod protocol;
mod script_params;
mod scripted;

pub use backoff::Backoff;
pub use builder::LockClientBuilder;
pub use client::LockClient;
pub use clock::{AnchoredThread, LeaseClock};
pub use error::{Blocker, LockError, Result};
pub use events::{EventSink, LockEvent};
pub use foreign::{ForeignShares, FOREIGN_SEEN};
pub use guard::{FirstWrite, Grant, LockGuard, ReleaseReport, ReleasedAfter};
pub use lease::{ExpiredHolder, ExpiredLock, Reaped};
pub use listing::LockInfo;
pub use lock_doc::{Conflict, HolderEntry, LockMode, Observed, Owner, WaiterEntry};
pub use plan::{LockItem, TreeLockRequest};
pub use protocol::{LockProtocol, ProtocolMemo};
