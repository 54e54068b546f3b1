//! The data model of fsrename, free of any runtime or network concern.
//!
//! - [`FsPath`]: a validated absolute path with the arithmetic a rename needs (parent, name,
//!   depth, ancestors in both orders, component-wise containment, [`FsPath::rebase`]).
//! - [`FsDoc`]: the tree-index document for one file or directory, with a stable id that is not
//!   its path.
//! - [`FindQuery`] and [`NameGlob`]: a search of the tree by name pattern and by the words of
//!   the content, with one meaning on every store.
//! - [`tree_index_body`] and [`lock_index_body`]: how the two indices are created (the tree
//!   index with its segments sorted by path, which keeps reads in path order cheap);
//!   [`IndexLayout`]: with how many shards and replicas ([`tree_index_body_with`]).
//! - [`tree_lock_id`]: where the lock for a path lives in the lock index.
//! - [`entropy`]: where ids and jitter come from; seedable per thread for replays.
//! - [`LockMode`]: the four lock modes (IS, IX, S, X) and Gray's compatibility table, defined
//!   once for the typed locks, the scripts' Rust twins and their painless.
//! - [`lock_scripts`]: the lock protocol's stored painless scripts, each beside the same logic
//!   in Rust, for stores and test servers that run no painless.
//! - [`rename_script`]: the stored painless script of a rename the server carries out
//!   (`_update_by_query`), beside the same logic in Rust.
//! - [`short_duration`] and [`plural`]: durations and counts as messages say them, in every
//!   layer's words alike; [`millis`]: durations as JSON says them (whole `*_ms`).
//!
//! ```
//! use fs_model::{FsDoc, FsPath};
//!
//! let readme = FsPath::parse("/clinton/projects/elasticsearch/README.txt")?;
//! let moved = readme.rebase(&FsPath::parse("/clinton")?, &FsPath::parse("/gormley")?)?;
//! assert_eq!(moved.as_str(), "/gormley/projects/elasticsearch/README.txt");
//! assert_eq!(readme.ancestors().len(), 4); // `/`, `/clinton`, `/clinton/projects`, ...
//! let doc = FsDoc::file(moved, 1024, 0);
//! assert_eq!(doc.depth, 4);
//! # Ok::<(), fs_model::PathError>(())
//! ```
#![deny(missing_docs)]
// Library code returns its errors; tests may unwrap (clippy.toml allows it in tests).
#![deny(clippy::unwrap_used, clippy::expect_used)]

mod doc;
mod duration;
pub mod entropy;
mod error;
mod find;
mod glob;
mod layout;
mod lock_id;
mod lock_mode;
pub mod lock_scripts;
mod mapping;
pub mod millis;
mod path;
pub mod rename_script;

pub use doc::{DocKind, FsDoc, Identity};
pub use duration::{plural, short_duration};
pub use error::{PathError, Result};
pub use find::FindQuery;
pub use glob::NameGlob;
pub use layout::{IndexLayout, LayoutError, MAX_REPLICAS, MAX_SHARDS};
pub use lock_id::{
    is_hashed_lock_id, tree_lock_id, GLOBAL_LOCK_ID, HASHED_ID_PREFIX, MAX_ID_BYTES,
};
pub use lock_mode::LockMode;
pub use mapping::{
    jobs_index_body, jobs_index_body_with, jobs_index_name, journal_index_body,
    journal_index_body_with, journal_index_name, lock_index_body, lock_index_body_with,
    lock_index_mappings, lock_index_name, tree_index_body, tree_index_body_with,
    tree_index_mappings, DEFAULT_TREE_INDEX,
};
pub use path::{
    FsPath, BELOW_ROOT_PATTERN, INPUT_PATH_PATTERN, MAX_COMPONENT_BYTES, MAX_PATH_BYTES,
    PATH_PATTERN,
};
