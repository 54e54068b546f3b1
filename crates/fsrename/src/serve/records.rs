//! [`Records`]: the jobs index (`<index>-jobs`), which every `fsrename serve` on a store
//! shares.
//!
//! It holds one document per job (a [`Job`] and `"type": "job"`), written when the job is
//! accepted, when it starts, just before its first write (with its journal id) and when it
//! ends; and one per instance (`instance:<name>`, `"type": "instance"`), its heartbeat. Any
//! instance answers `GET /renames/{id}` from it, and an instance whose heartbeat stopped has
//! its unfinished jobs taken over by another (`adopt.rs`).
//!
//! Every write of a job document is conditional on the version its writer last saw: an
//! instance that took a job over changed it, so the instance it took it from (alive after
//! all, but cut off long enough to be taken for dead) learns that the job is no longer its
//! own instead of overwriting what the new owner wrote.

use std::collections::HashMap;
use std::sync::Arc;

use fs_model::{jobs_index_body_with, jobs_index_name, IndexLayout};
use fs_store::{Scan, Scope, SharedStore, StoreError, Version};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::contract::Job;

/// The `type` of a job document.
const JOB: &str = "job";
/// The `type` of an instance's heartbeat.
const INSTANCE: &str = "instance";

/// An instance's heartbeat, as stored.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Heartbeat {
    /// The instance's name.
    pub instance: String,
    /// Where it listens.
    pub listen: String,
    /// When it last said it was alive, epoch milliseconds; 0 once it stopped cleanly.
    pub heartbeat_at: i64,
}

/// Why a job document could not be written.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// Another instance took the job over: it is no longer the writer's.
    #[error("job `{id}` was taken over by instance `{by}`")]
    Taken { id: String, by: String },
    /// The store failed.
    #[error("{context}: {cause}")]
    Store {
        context: String,
        #[source]
        cause: StoreError,
    },
    /// A document of the jobs index is not what this version writes.
    #[error("unreadable document `{id}` in `{index}`: {message}")]
    Bad {
        index: String,
        id: String,
        message: String,
    },
}

/// Everything in the jobs index: the jobs with their versions, and the instances' heartbeats
/// by name.
pub struct Listing {
    pub jobs: Vec<(Job, Version)>,
    pub heartbeats: HashMap<String, i64>,
}

/// The jobs index of a tree index. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Records {
    store: SharedStore,
    index: String,
}

impl Records {
    pub fn new(store: SharedStore, tree_index: &str) -> Records {
        Records {
            store,
            index: jobs_index_name(tree_index),
        }
    }

    /// Creates the index if it does not exist: on one shard whatever `layout` says (it is
    /// small), with `layout`'s replicas.
    ///
    /// # Errors
    /// The store failed.
    pub async fn ensure_index(&self, layout: &IndexLayout) -> Result<(), RecordError> {
        self.store
            .create_index(&self.index, &jobs_index_body_with(layout))
            .await
            .map(|_| ())
            .map_err(self.failed(format!("creating the jobs index `{}`", self.index)))
    }

    fn failed(&self, context: String) -> impl FnOnce(StoreError) -> RecordError {
        move |cause| RecordError::Store { context, cause }
    }

    fn source(&self, job: &Job) -> Result<Value, RecordError> {
        let mut source = serde_json::to_value(job).map_err(|e| RecordError::Bad {
            index: self.index.clone(),
            id: job.id.clone(),
            message: e.to_string(),
        })?;
        source["type"] = Value::from(JOB);
        Ok(source)
    }

    fn parse(&self, id: &str, source: Value) -> Result<Job, RecordError> {
        serde_json::from_value(source).map_err(|e| RecordError::Bad {
            index: self.index.clone(),
            id: id.to_owned(),
            message: e.to_string(),
        })
    }

    /// Stores a job just accepted.
    ///
    /// # Errors
    /// The store failed (the job must then not be accepted: no other instance could see it).
    pub async fn create(&self, job: &Job) -> Result<Version, RecordError> {
        let source = self.source(job)?;
        self.store
            .create(&self.index, &job.id, source)
            .await
            .map_err(self.failed(format!("storing job `{}`", job.id)))
    }

    /// Writes `job` over the version `version`, which its writer wrote or read last.
    ///
    /// # Errors
    /// [`RecordError::Taken`] if another instance wrote it since; the store failed.
    pub async fn write(&self, job: &Job, version: Version) -> Result<Version, RecordError> {
        let source = self.source(job)?;
        match self
            .store
            .index(&self.index, &job.id, source, Some(version))
            .await
        {
            Ok(version) => Ok(version),
            Err(e) if e.is_conflict() => {
                // Our own earlier write whose answer was lost, or another instance's.
                match self.get(&job.id).await? {
                    Some((stored, version)) if stored.instance == job.instance => {
                        self.write_again(job, version).await
                    }
                    Some((stored, _)) => Err(RecordError::Taken {
                        id: job.id.clone(),
                        by: stored.instance,
                    }),
                    None => Err(RecordError::Taken {
                        id: job.id.clone(),
                        by: "nobody: its document is gone".to_owned(),
                    }),
                }
            }
            Err(e) => Err(self.failed(format!("storing job `{}`", job.id))(e)),
        }
    }

    async fn write_again(&self, job: &Job, version: Version) -> Result<Version, RecordError> {
        let source = self.source(job)?;
        self.store
            .index(&self.index, &job.id, source, Some(version))
            .await
            .map_err(|e| match e {
                e if e.is_conflict() => RecordError::Taken {
                    id: job.id.clone(),
                    by: "another instance (it changed twice)".to_owned(),
                },
                e => self.failed(format!("storing job `{}`", job.id))(e),
            })
    }

    /// Reads job `id` (realtime), if it exists and is a job.
    ///
    /// # Errors
    /// The store failed; the document is unreadable.
    pub async fn get(&self, id: &str) -> Result<Option<(Job, Version)>, RecordError> {
        match self.store.get(&self.index, id).await {
            Ok(Some(doc)) if doc.source.get("type").and_then(Value::as_str) == Some(JOB) => {
                Ok(Some((self.parse(id, doc.source)?, doc.version)))
            }
            Ok(_) | Err(StoreError::IndexNotFound { .. }) => Ok(None),
            Err(e) => Err(self.failed(format!("reading job `{id}`"))(e)),
        }
    }

    /// Deletes job `id` if it is still at `version`: false if it changed or is gone.
    ///
    /// # Errors
    /// The store failed.
    pub async fn forget(&self, id: &str, version: Version) -> Result<bool, RecordError> {
        match self.store.delete(&self.index, id, Some(version)).await {
            Ok(_) => Ok(true),
            Err(StoreError::NotFound { .. }) => Ok(false),
            Err(e) if e.is_conflict() => Ok(false),
            Err(e) => Err(self.failed(format!("deleting job `{id}`"))(e)),
        }
    }

    /// Writes the heartbeat of an instance.
    ///
    /// # Errors
    /// The store failed.
    pub async fn beat(&self, heartbeat: &Heartbeat) -> Result<(), RecordError> {
        let mut source = serde_json::to_value(heartbeat).map_err(|e| RecordError::Bad {
            index: self.index.clone(),
            id: heartbeat.instance.clone(),
            message: e.to_string(),
        })?;
        source["type"] = Value::from(INSTANCE);
        let id = format!("{INSTANCE}:{}", heartbeat.instance);
        self.store
            .index(&self.index, &id, source, None)
            .await
            .map(|_| ())
            .map_err(self.failed(format!("writing the heartbeat of `{}`", heartbeat.instance)))
    }

    /// Reads the whole index: every job and every heartbeat. Unreadable documents are
    /// skipped with a warning (one bad document must not stop the takeover of the others).
    ///
    /// # Errors
    /// The store failed.
    pub async fn list(&self) -> Result<Listing, RecordError> {
        let mut listing = Listing {
            jobs: Vec::new(),
            heartbeats: HashMap::new(),
        };
        match self.store.refresh(&self.index).await {
            Err(StoreError::IndexNotFound { .. }) => return Ok(listing),
            other => other.map_err(self.failed(format!("refreshing `{}`", self.index)))?,
        }
        let mut scan = Scan::new(Arc::clone(&self.store), &self.index, Scope::All, 1_000);
        let scanned: Result<(), RecordError> = async {
            while let Some(docs) = scan
                .next_page()
                .await
                .map_err(self.failed(format!("listing `{}`", self.index)))?
            {
                for doc in docs {
                    match doc.source.get("type").and_then(Value::as_str) {
                        Some(JOB) => match self.parse(&doc.id, doc.source) {
                            Ok(job) => listing.jobs.push((job, doc.version)),
                            Err(e) => tracing::warn!(error = %e, "skipping a job document"),
                        },
                        Some(INSTANCE) => {
                            match serde_json::from_value::<Heartbeat>(doc.source) {
                                Ok(beat) => {
                                    listing.heartbeats.insert(beat.instance, beat.heartbeat_at);
                                }
                                Err(e) => {
                                    tracing::warn!(id = %doc.id, error = %e, "skipping a heartbeat document")
                                }
                            }
                        }
                        _ => tracing::warn!(id = %doc.id, index = %self.index, "skipping a document of no known type"),
                    }
                }
            }
            Ok(())
        }
        .await;
        scan.close().await;
        scanned?;
        Ok(listing)
    }
}
