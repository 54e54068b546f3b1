//! The error type of every store call.

use crate::version::Version;

/// Why a store call failed.
///
/// Retry logic asks [`StoreError::is_retryable`] instead of matching messages; lock and rename
/// logic asks [`StoreError::is_conflict`] to tell "someone else got there first" from a fault,
/// and [`StoreError::is_refusal`] to tell a script's "no" from a race.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The document exists (create), or its version is not the one the write was conditional on
    /// (index or delete with `if_seq_no`/`if_primary_term`). Elasticsearch answers 409.
    #[error("version conflict on `{index}/{id}`: {}", describe_current(*.exists, .current))]
    Conflict {
        /// The index.
        index: String,
        /// The document id.
        id: String,
        /// Whether the document exists.
        exists: bool,
        /// The document's current version, when the store said (Elasticsearch does not for a
        /// create that found the document).
        current: Option<Version>,
    },
    /// A stored script refused the update on purpose (painless `Debug.explain`, the book's
    /// `assert false`): Elasticsearch answers 400 with `painless_explain_error`. Unlike a
    /// [`StoreError::Conflict`], which is a race with another writer and may pass when sent
    /// again, this is the document's state saying no.
    #[error("update of `{index}/{id}` refused by its script: {reason}")]
    Refused {
        /// The index.
        index: String,
        /// The document id.
        id: String,
        /// What the script said.
        reason: String,
    },
    /// The document does not exist (unconditional delete). Elasticsearch answers 404.
    #[error("document `{index}/{id}` not found")]
    NotFound {
        /// The index.
        index: String,
        /// The document id.
        id: String,
    },
    /// The index does not exist.
    #[error("index `{index}` does not exist")]
    IndexNotFound {
        /// The index.
        index: String,
    },
    /// A fault that may pass: a busy database, HTTP 429/502/503/504, a reset connection.
    #[error("transient store error during {context}: {message}")]
    Transient {
        /// What was being done.
        context: String,
        /// What the store said.
        message: String,
    },
    /// The request was refused as malformed or not allowed; sending it again will not help.
    #[error("store rejected {context}: {message}")]
    Rejected {
        /// What was being done.
        context: String,
        /// The HTTP status, where there is one.
        status: Option<u16>,
        /// What the store said.
        message: String,
    },
    /// The store failed in a way that is neither transient nor the caller's fault (I/O error,
    /// corrupt database, an answer that cannot be understood).
    #[error("store failure during {context}: {message}")]
    Backend {
        /// What was being done.
        context: String,
        /// What went wrong.
        message: String,
    },
}

fn describe_current(exists: bool, current: &Option<Version>) -> String {
    match (exists, current) {
        (_, Some(v)) => format!(
            "current seq_no {} primary_term {}",
            v.seq_no, v.primary_term
        ),
        (true, None) => "the document exists".to_owned(),
        (false, None) => "the document does not exist".to_owned(),
    }
}

impl StoreError {
    /// Returns true if the same call may succeed when retried after a pause.
    pub fn is_retryable(&self) -> bool {
        matches!(self, StoreError::Transient { .. })
    }

    /// Returns true for a version conflict (including create on an existing id).
    pub fn is_conflict(&self) -> bool {
        matches!(self, StoreError::Conflict { .. })
    }

    /// Returns true for a script's deliberate refusal ([`StoreError::Refused`]).
    pub fn is_refusal(&self) -> bool {
        matches!(self, StoreError::Refused { .. })
    }

    /// Returns true if the document does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, StoreError::NotFound { .. })
    }

    /// Returns the current version carried by a conflict, if the document exists.
    pub fn current_version(&self) -> Option<Version> {
        match self {
            StoreError::Conflict { current, .. } => *current,
            _ => None,
        }
    }

    /// Returns true for a conflict that found no document (a conditional write of a missing
    /// document).
    pub fn is_conflict_on_missing(&self) -> bool {
        matches!(self, StoreError::Conflict { exists: false, .. })
    }

    pub(crate) fn conflict(index: &str, id: &str, current: Option<Version>) -> StoreError {
        StoreError::Conflict {
            index: index.to_owned(),
            id: id.to_owned(),
            exists: current.is_some(),
            current,
        }
    }

    pub(crate) fn rejected(context: impl Into<String>, message: impl Into<String>) -> StoreError {
        StoreError::Rejected {
            context: context.into(),
            status: None,
            message: message.into(),
        }
    }
}

/// A `Result` whose error is a [`StoreError`].
pub type Result<T, E = StoreError> = std::result::Result<T, E>;
