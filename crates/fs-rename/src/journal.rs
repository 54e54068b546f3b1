//! The rename journal: one document per rename that has started rewriting and not finished.
//!
//! A job writes its entry once it holds its locks and its checks passed, before its first
//! rewrite; it deletes the entry after its last rewrite, before releasing its locks. So an
//! entry exists exactly while the tree may be half-renamed, and its locks (listed in it) stay
//! in the lock index until the entry is gone: a job that dies leaves both, and recovery
//! takes the locks over and rolls the rename forward. Entries live in `<index>-journal`.

use fs_locks::{LockItem, LockMode};
use fs_model::{journal_index_body, journal_index_name, FsPath};
use fs_store::{Scope, SearchRequest, SharedStore, StoreError, Version};
use serde::{Deserialize, Serialize};

use crate::error::{RenameError, Result};
use crate::strategy::Strategy;

/// A journal entry: what a rename job set out to do and which locks protect it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JournalEntry {
    /// The job id (the document id).
    pub job_id: String,
    /// The source.
    pub from: String,
    /// The destination.
    pub to: String,
    /// The locking scheme the job used.
    pub strategy: Strategy,
    /// Always `running`: finished jobs delete their entry.
    pub state: String,
    /// The process id of the lock owner working on it: the job, then each recoverer that
    /// claims it.
    pub owner: String,
    /// The owners before `owner` (the job, earlier recoverers): their expired locks and
    /// shares are part of this rename, so the sweep of expired locks leaves them alone.
    #[serde(default)]
    pub previous_owners: Vec<String>,
    /// The owner's readable label.
    pub holder: String,
    /// When the job started rewriting, epoch milliseconds.
    pub started_at: i64,
    /// The lease of the job's locks, in milliseconds.
    pub lease_ms: u64,
    /// How many recoverers have claimed it.
    #[serde(default)]
    pub recoveries: u32,
    /// The lock documents that protect the rename, which recovery takes over.
    pub locks: Vec<JournalLock>,
}

/// One lock a journal entry lists.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JournalLock {
    /// The lock document id.
    pub id: String,
    /// The locked path, where the lock has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Shared or exclusive.
    pub mode: LockMode,
}

impl JournalLock {
    /// Returns the lock as an item to take over.
    pub fn item(&self) -> LockItem {
        LockItem {
            id: self.id.clone(),
            path: self.path.as_deref().and_then(|p| FsPath::parse(p).ok()),
            mode: self.mode,
        }
    }
}

impl From<&LockItem> for JournalLock {
    fn from(item: &LockItem) -> JournalLock {
        JournalLock {
            id: item.id.clone(),
            path: item.path.as_ref().map(|p| p.as_str().to_owned()),
            mode: item.mode,
        }
    }
}

impl JournalEntry {
    /// Returns the source and destination as paths.
    ///
    /// # Errors
    /// [`RenameError::BadDocument`] if either is not a valid path.
    pub fn paths(&self, index: &str) -> Result<(FsPath, FsPath)> {
        let parse = |p: &str| {
            FsPath::parse(p).map_err(|e| RenameError::BadDocument {
                index: index.to_owned(),
                id: self.job_id.clone(),
                message: format!("journal path `{p}`: {e}"),
            })
        };
        Ok((parse(&self.from)?, parse(&self.to)?))
    }
}

/// The journal index of a tree.
#[derive(Debug, Clone)]
pub struct Journal {
    store: SharedStore,
    index: String,
}

impl Journal {
    /// Returns the journal of the tree index `tree_index` on `store`.
    pub fn new(store: SharedStore, tree_index: &str) -> Journal {
        Journal {
            store,
            index: journal_index_name(tree_index),
        }
    }

    /// Returns the journal index's name.
    pub fn index(&self) -> &str {
        &self.index
    }

    /// Creates the journal index if it is missing.
    ///
    /// # Errors
    /// [`RenameError::Store`].
    pub async fn ensure_index(&self) -> Result<()> {
        self.store
            .create_index(&self.index, &journal_index_body())
            .await
            .map(|_| ())
            .map_err(RenameError::store(format!(
                "creating index `{}`",
                self.index
            )))
    }

    /// Writes a new entry; creates the index first if an older tree has none.
    ///
    /// # Errors
    /// [`RenameError::Store`].
    pub async fn open(&self, entry: &JournalEntry) -> Result<Version> {
        let source = to_source(entry, &self.index)?;
        let context = format!("writing journal entry of `{} → {}`", entry.from, entry.to);
        match self
            .store
            .create(&self.index, &entry.job_id, source.clone())
            .await
        {
            Err(StoreError::IndexNotFound { .. }) => {
                self.ensure_index().await?;
                self.store
                    .create(&self.index, &entry.job_id, source)
                    .await
                    .map_err(RenameError::store(context))
            }
            other => other.map_err(RenameError::store(context)),
        }
    }

    /// Rewrites `entry` if it is still at `version` (a recoverer claiming it).
    ///
    /// # Errors
    /// [`RenameError::Store`] with a conflict if someone else changed or removed it.
    pub async fn claim(&self, entry: &JournalEntry, version: Version) -> Result<Version> {
        let source = to_source(entry, &self.index)?;
        self.store
            .index(&self.index, &entry.job_id, source, Some(version))
            .await
            .map_err(RenameError::store(format!(
                "claiming journal entry `{}`",
                entry.job_id
            )))
    }

    /// Deletes the entry `job_id`; an entry already gone is not an error.
    ///
    /// # Errors
    /// [`RenameError::Store`].
    pub async fn close(&self, job_id: &str) -> Result<()> {
        match self.store.delete(&self.index, job_id, None).await {
            Ok(_) | Err(StoreError::NotFound { .. }) | Err(StoreError::IndexNotFound { .. }) => {
                Ok(())
            }
            Err(e) => Err(RenameError::store(format!(
                "closing journal entry `{job_id}`"
            ))(e)),
        }
    }

    /// Returns every entry with its version, oldest first; none if the index does not exist.
    ///
    /// # Errors
    /// [`RenameError::Store`]; [`RenameError::BadDocument`] for an unreadable entry.
    pub async fn list(&self) -> Result<Vec<(JournalEntry, Version)>> {
        match self.store.refresh(&self.index).await {
            Err(StoreError::IndexNotFound { .. }) => return Ok(Vec::new()),
            other => other.map_err(RenameError::store(format!("refreshing `{}`", self.index)))?,
        }
        let mut entries = Vec::new();
        let mut request = SearchRequest::first(Scope::All, 1_000);
        loop {
            let page = self
                .store
                .search(&self.index, request.clone())
                .await
                .map_err(RenameError::store(format!("listing `{}`", self.index)))?;
            for doc in page.docs {
                let entry: JournalEntry =
                    serde_json::from_value(doc.source).map_err(|e| RenameError::BadDocument {
                        index: self.index.clone(),
                        id: doc.id.clone(),
                        message: e.to_string(),
                    })?;
                entries.push((entry, doc.version));
            }
            match page.next {
                Some(cursor) => request.after = Some(cursor),
                None => break,
            }
        }
        entries.sort_by_key(|(e, _)| e.started_at);
        Ok(entries)
    }
}

fn to_source(entry: &JournalEntry, index: &str) -> Result<serde_json::Value> {
    serde_json::to_value(entry).map_err(|e| RenameError::BadDocument {
        index: index.to_owned(),
        id: entry.job_id.clone(),
        message: e.to_string(),
    })
}
