//! Rename, copy and delete jobs on an fsrename tree, safe under concurrency.
//!
//! - [`Renamer`]: renames a file or directory ([`Renamer::rename`]), copies one
//!   ([`Renamer::copy`], `cp -r`) or removes one ([`Renamer::remove`], `rm [-r]`): takes the
//!   locks of its [`Strategy`] (the book's tree, global or document locking), checks under
//!   them, writes every affected document with writes conditional on what it read, and
//!   releases on every exit path. Returns a [`RenameReport`]; progress is observable through
//!   [`RenameEvent`]s. Where the server runs painless, a large rename's documents are
//!   rewritten by one task on the server, inside the same locks, check and journal
//!   ([`Rewrite`]).
//! - [`Journal`]: one entry per job ([`JobKind`]: rename, copy or delete) between its first and
//!   last write; [`Recovery`] finishes the jobs that died (taking over their expired locks)
//!   and sweeps the expired locks nobody will finish anything under.
//! - [`FsTree`]: the tree index as a set of paths (find, count, insert, scan).
//! - [`fsck()`]: checks that a tree is well-formed and reports leftover locks.
//! - [`index_dir`]: indexes a local directory tree (with `content`, the text of small files,
//!   which [`FsTree::find_matching`] searches with a name pattern); [`mkdir`], [`touch`], [`list`] (and [`list_page`], a page at a time), [`stat`]:
//!   the small operations of the command line, under the same locks; [`list_consistent`] and
//!   [`fsck_consistent`] read a subtree under a shared lock, so nothing in it changes while
//!   they read.
//! - [`clinton`]: the book's `/clinton` scenario, run four ways, for `fsrename demo`.
//!
//! ```no_run
//! use std::sync::Arc;
//! use fs_model::FsPath;
//! use fs_rename::{Renamer, Strategy};
//! use fs_store::SqliteStore;
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! let store = Arc::new(SqliteStore::open("fsrename.db")?);
//! let renamer = Renamer::builder(store, "fs").strategy(Strategy::Tree).build();
//! let report = renamer.rename(&FsPath::parse("/clinton")?, &FsPath::parse("/gormley")?).await?;
//! println!("moved {} documents in {} round trips", report.rewritten, report.round_trips);
//! renamer.copy(&FsPath::parse("/gormley")?, &FsPath::parse("/backup")?).await?; // cp -r
//! renamer.remove(&FsPath::parse("/backup")?, true).await?; // rm -r
//! # Ok(())
//! # }
//! ```
#![deny(missing_docs)]
// A panic in library code takes a job or the service down with it: errors go up instead.
#![deny(clippy::unwrap_used, clippy::expect_used)]

mod claims;
pub mod clinton;
mod consistent;
mod error;
mod fresh;
mod fsck;
mod indexer;
mod job;
mod journal;
mod kind;
mod lease_bound;
mod ops;
mod recover;
mod report;
mod resend;
mod rewrite_mode;
mod strategy;
mod tree;

pub use consistent::{fsck_consistent, list_consistent};
pub use error::{RenameError, Result};
pub use fs_model::short_duration;
pub use fsck::{fsck, FsckReport, Holding, UnfinishedJob, Verdict};
pub use indexer::{
    index_dir, watch_dir, IndexOptions, IndexProgress, IndexProgressSink, IndexReport, Move,
    Skipped, WatchBatch, WatchEvent, WatchOptions, WatchReport, WatchSink, DEFAULT_CONTENT_MAX,
};
pub use job::{RenameOutcome, Renamer, RenamerBuilder, DEFAULT_IN_FLIGHT};
pub use journal::{
    FenceOutcome, Journal, JournalEntry, JournalFence, JournalLock, JournalState, PROTOCOL,
    PROTOCOL_ID,
};
pub use kind::JobKind;
pub use ops::{list, list_page, mkdir, stat, touch, Listed, LockSettings, Made};
pub use recover::{FinishOrphans, Recovered, Recovery, RecoveryReport, Running};
pub use report::{PhaseTimes, ProgressSink, RenameEvent, RenameHooks, RenameReport};
pub use rewrite_mode::Rewrite;
pub use strategy::Strategy;
pub use tree::{Entry, FsTree, BULK_BATCH};
