//! The SQLite schema and how a connection is opened and set up.
//!
//! `docs` holds the live documents, read by `get` and `mget` (realtime). In near-real-time mode
//! searches read `searchable` instead, a copy brought up to date by `refresh`: every write
//! records its id in `pending`, and a refresh copies exactly those documents over. In realtime
//! mode searches read `docs` and neither extra table is written. The table searches read has
//! a full-text index of the documents' `content` beside it (`text.rs`).

use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, TransactionBehavior};

use super::sql::{sql_error, LIVE, SEARCHABLE};
use crate::error::{Result, StoreError};

/// How many prepared statements a connection keeps.
const STATEMENT_CACHE: usize = 256;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS indices (
    name TEXT PRIMARY KEY,
    body TEXT NOT NULL,
    seq INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS pending (
    idx TEXT NOT NULL, id TEXT NOT NULL,
    PRIMARY KEY (idx, id)
) WITHOUT ROWID;
";

/// Returns the DDL of a document table; `docs` and `searchable` share it, so a refresh can copy
/// rows from one to the other column for column.
fn doc_table(name: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {name} (
            idx TEXT NOT NULL, id TEXT NOT NULL, seq_no INTEGER NOT NULL,
            path TEXT, parent TEXT, source TEXT NOT NULL,
            PRIMARY KEY (idx, id)
        );
        CREATE INDEX IF NOT EXISTS {name}_by_path ON {name} (idx, path, id);
        CREATE INDEX IF NOT EXISTS {name}_by_parent ON {name} (idx, parent, path, id);"
    )
}

/// Sets up a fresh connection: WAL (readers never block the one writer, and several processes
/// can share the file), a busy timeout (a second process waits for the write lock instead of
/// failing at once), then the schema. Returns the database's near-real-time flag.
pub(super) fn prepare(
    conn: &mut Connection,
    location: &str,
    near_real_time: bool,
    busy_timeout: Duration,
    synchronous_full: bool,
) -> Result<bool> {
    let context = format!("opening {location}");
    let err = |e| sql_error(&context, e);
    conn.busy_timeout(busy_timeout).map_err(err)?;
    // The statements differ by scope, page size and id-list length: rusqlite's default cache
    // of 16 would prepare most of them again at every call.
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    // In-memory databases answer `memory` here; that is fine.
    conn.query_row("PRAGMA journal_mode = WAL", [], |_| Ok(()))
        .map_err(err)?;
    // NORMAL in WAL mode: a process crash loses nothing committed; a power cut may lose the
    // last commits but never corrupts the file. FULL also survives that, at an fsync a commit.
    let sync = if synchronous_full { "FULL" } else { "NORMAL" };
    // The full-text index's triggers make every write statement keep a statement journal
    // (a write that may fail half-way must be undone alone): in memory, not in a temporary
    // file written at each statement.
    conn.execute_batch("PRAGMA temp_store = MEMORY;")
        .map_err(err)?;
    conn.execute_batch(&format!("PRAGMA synchronous = {sync};"))
        .map_err(err)?;
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(err)?;
    tx.execute_batch(SCHEMA).map_err(err)?;
    for table in [LIVE, SEARCHABLE] {
        tx.execute_batch(&doc_table(table)).map_err(err)?;
    }
    tx.execute(
        "INSERT OR IGNORE INTO meta (key, value) VALUES ('near_real_time', ?1)",
        [if near_real_time { "true" } else { "false" }],
    )
    .map_err(err)?;
    let stored: Option<String> = tx
        .query_row(
            "SELECT value FROM meta WHERE key = 'near_real_time'",
            [],
            |row| row.get(0),
        )
        .optional()
        .map_err(err)?;
    let stored = stored.as_deref() == Some("true");
    // The words of the content are indexed where searches read: the live table in realtime
    // mode, the searchable copy in near-real-time mode.
    let searched = if stored { SEARCHABLE } else { LIVE };
    tx.execute_batch(&super::text::schema(searched))
        .map_err(err)?;
    tx.commit().map_err(err)?;
    if stored != near_real_time {
        return Err(StoreError::rejected(
            context,
            format!(
                "the database was created with near_real_time = {stored}; open it with the same \
                 setting (the mode belongs to the database, so every process sees one behaviour)"
            ),
        ));
    }
    Ok(stored)
}
