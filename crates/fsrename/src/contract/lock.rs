//! [`LockView`]: a lock document as `fsrename locks --json` prints it and `GET /locks` answers
//! it: its mode, each grant with its mode and lease, and the waiters in queue order.

use std::borrow::Cow;

use fs_locks::{LockInfo, LockMode};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::openapi::RefOr;
use utoipa::{PartialSchema, ToSchema};

/// A lock document as the service shows it (and `fsrename locks --json`): its mode, each
/// grant with its mode and lease, and the waiters in queue order with their age.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, JsonSchema, PartialEq)]
pub struct LockView {
    /// The document id (a path, a hashed path, `global`, or a tree document's id).
    pub id: String,
    /// The locked path, if the document records one.
    pub path: Option<String>,
    /// The strongest mode held.
    #[schema(value_type = ModeName)]
    pub mode: LockMode,
    /// `exclusive` or `shared` (the book's words).
    #[schemars(with = "LockType")]
    pub lock_type: String,
    /// The holders, in words.
    pub holders: String,
    /// Each holder with its mode and lease.
    pub grants: Vec<GrantView>,
    /// The waiters, in queue order.
    pub waiters: Vec<WaiterView>,
    /// The journal entries this lock protects.
    pub journal: Vec<String>,
    /// When the document's lease ends, epoch milliseconds.
    pub expires_at: Option<i64>,
    /// Whether that is past.
    pub expired: bool,
}

/// One holder of a lock.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, JsonSchema, PartialEq)]
pub struct GrantView {
    /// The holding process (empty for the book's shares, which record none).
    pub process_id: String,
    /// Its mode.
    #[schema(value_type = ModeName)]
    pub mode: LockMode,
    /// Who holds it, in words.
    pub holder: String,
    /// When its lease ends, epoch milliseconds.
    pub expires_at: Option<i64>,
    /// Whether that is past.
    pub expired: bool,
}

/// One waiter for a lock, in queue order.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, JsonSchema, PartialEq)]
pub struct WaiterView {
    /// The waiting process.
    pub process_id: String,
    /// The mode it waits for.
    #[schema(value_type = ModeName)]
    pub mode: LockMode,
    /// Who waits, in words.
    pub holder: String,
    /// How long it has waited.
    pub waiting_ms: i64,
    /// When its registration ends unless renewed, epoch milliseconds.
    pub expires_at: i64,
    /// Whether that is past (the waiter is gone).
    pub expired: bool,
}

/// The schema of a lock mode: its letters, built from [`LockMode::ALL`].
pub struct ModeName;

impl PartialSchema for ModeName {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .enum_values(Some(LockMode::ALL.iter().map(|m| m.as_str())))
            .description(Some("IS, IX (the book's shared lock), S or X (exclusive)"))
            .into()
    }
}

impl ToSchema for ModeName {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("LockMode")
    }
}

impl LockView {
    /// Describes `lock` as of `now` (epoch ms): what has expired, how long each waiter waited.
    pub fn new(lock: &LockInfo, now: i64) -> LockView {
        let grants = lock
            .grants()
            .into_iter()
            .map(|(process_id, mode, holder, expires_at)| GrantView {
                process_id,
                mode,
                holder,
                expires_at,
                expired: expires_at.is_some_and(|t| t < now),
            })
            .collect();
        let waiters = lock
            .observed
            .queue()
            .into_iter()
            .map(|(pid, w)| WaiterView {
                process_id: pid.clone(),
                mode: w.mode,
                holder: w.holder.clone(),
                waiting_ms: (now - w.since).max(0),
                expires_at: w.expires_at,
                expired: w.expires_at < now,
            })
            .collect();
        let mode = lock.observed.mode();
        LockView {
            id: lock.id.clone(),
            path: lock.path.clone(),
            mode,
            lock_type: if mode == LockMode::Exclusive {
                "exclusive"
            } else {
                "shared"
            }
            .to_owned(),
            holders: lock.observed.describe_holders(),
            grants,
            waiters,
            journal: lock
                .observed
                .jobs()
                .into_iter()
                .map(str::to_owned)
                .collect(),
            expires_at: lock.expires_at,
            expired: lock.expires_at.is_some_and(|at| at < now),
        }
    }
}

/// The book's word for a lock, as [`LockView::lock_type`] says it (for its JSON Schema).
#[derive(JsonSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)] // Only a description: the view writes the word itself.
enum LockType {
    Exclusive,
    Shared,
}
