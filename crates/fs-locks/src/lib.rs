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
//!   closed), in the same transaction where the store can ([`LockClient::chains_release`]);
//!   [`LockGuard::release_after_or_keep`] with writes that go with that one
//!   ([`FirstWrite::with`]: a small rename sent whole), keeping the locks if any does not land.
//! - [`TreeLockRequest`]: which documents a tree lock takes, in which order.
//! - [`SharedIntentions`]: the intention locks of a process that runs many jobs, held once
//!   per ancestor and lent to its jobs' clients ([`SharedIntentions::lend_to`]), which then
//!   take only their targets; kept a short while once idle ([`DEFAULT_LINGER`]); recovery
//!   finds the jobs that borrowed an expired hold by their process ids ([`borrowed_from`]).
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
//! takes no shared lock, and on a server one `bulk` of creates until the process has found a
//! lock document existing); scripted, one `bulk`. A release costs one `bulk` either way.
//! On a server, [`LockProtocol::Auto`] decides late: until a lock document is found to
//! exist, an attempt creates all its documents in one `bulk` (what both protocols write
//! there), so a quiet tree costs one `bulk` to lock and one to unlock, and no question about
//! scripts.
//! `docs/locking.md` describes the protocol.
//!
//! ## Layers
//!
//! The modules stand in five floors; each imports only from the floors below it.
//!
//! 1. **Values, no I/O.** [`LockMode`] and Gray's compatibility table (defined once in `fs_model`, with the painless built from it), `lock_doc`
//!    (the lock documents: [`Observed`], the entries, the shapes fsrename writes,
//!    [`FOREIGN_SEEN`]), `os_process` ([`OsProcess`]: the holder's process as the documents
//!    record it; its proof of death is the one local look, at `/proc`, on this floor),
//!    `orphans` ([`Orphans`]: what an acquisition may do about a dead holder's lock),
//!    `plan` ([`TreeLockRequest`], [`LockItem`]), `outcome` ([`Grant`],
//!    [`FirstWrite`], [`ReleaseReport`], and the protocols' results), `error`, `events`,
//!    `clock`, `backoff`, `script_params` (the stored scripts, their params, their Rust
//!    twins run locally), `lender` (where a client borrows its intention locks, and how holds
//!    and their borrowers are named), `background` (the releases dropped guards leave running, counted
//!    so that a process can wait for them before it ends).
//! 2. **Store calls.** `calls`: the only way the protocols and the operations reach the lock
//!    index (round trips counted, failures in context).
//! 3. **Protocols.** `protocol`: compare-and-set (`protocol/cas`) and scripted
//!    (`protocol/scripted.rs`) behind one trait (attempt, waiter registration, release,
//!    renewal), picked in one place from [`LockProtocol`]. Adoption's store side is
//!    compare-and-set whatever the protocol.
//! 4. **The client.** `client`: [`LockClient`] with its configuration and the locks it holds
//!    (private; the floors above use its methods), lease renewal in the background; `builder`.
//! 5. **Operations.** `acquire` (the `lock_*` entry points), `release`, `guard`
//!    ([`LockGuard`]), `lease` (expired locks: reap, take over), `gone` (the leases of
//!    holders proven gone, ended at once), `adopt`, `foreign` ([`ForeignShares`]), `listing`,
//!    `intentions` ([`SharedIntentions`]).
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
// A panic in library code takes a job or the service down with it: errors go up instead.
#![deny(clippy::unwrap_used, clippy::expect_used)]

// Floor 1: values.
mod background;
mod backoff;
mod clock;
mod error;
mod events;
mod lender;
mod lock_doc;
mod orphans;
mod os_process;
mod outcome;
mod plan;
mod script_params;
// Floor 2: store calls.
mod calls;
// Floor 3: protocols.
mod protocol;
// Floor 4: the client.
mod builder;
mod client;
// Floor 5: operations.
mod acquire;
mod adopt;
mod foreign;
mod gone;
mod guard;
mod intentions;
mod lease;
mod listing;
mod release;

pub use background::{guards_kept_for_recovery, settle_background_releases};
pub use backoff::Backoff;
pub use builder::LockClientBuilder;
pub use client::LockClient;
pub use clock::{AnchoredThread, ClockSync, LeaseClock};
pub use error::{Blocker, LateRenewal, LockError, Result};
pub use events::{EventSink, LockEvent};
pub use foreign::ForeignShares;
pub use fs_model::LockMode;
pub use guard::{LockGuard, ReleasedOrKept};
pub use intentions::{SharedIntentions, DEFAULT_LINGER};
pub use lease::{ExpiredHolder, ExpiredLock, Reaped};
pub use lender::{borrowed_from, is_hold};
pub use listing::LockInfo;
pub use lock_doc::{Conflict, HolderEntry, Observed, Owner, WaiterEntry, FOREIGN_SEEN};
pub use orphans::Orphans;
pub use os_process::OsProcess;
pub use outcome::{FirstWrite, Grant, ReleaseReport, ReleasedAfter};
pub use plan::{LockItem, TreeLockRequest};
pub use protocol::{LockProtocol, ProtocolMemo};
