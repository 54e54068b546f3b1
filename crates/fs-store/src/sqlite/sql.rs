//! What every SQLite operation shares: the tables searches read, errors, versions, rows read
//! as documents, and the transaction a read runs in.

use rusqlite::{Connection, ErrorCode, OptionalExtension, Transaction};
use serde_json::Value;

use crate::error::{Result, StoreError};
use crate::types::{StoredDoc, Version};

/// The table searches read in realtime mode: the live documents.
pub(super) const LIVE: &str = "docs";
/// The table searches read in near-real-time mode: the copy a refresh brings up to date.
pub(super) const SEARCHABLE: &str = "searchable";

/// Returns the table searches read in this mode.
pub(super) fn searched(nrt: bool) -> &'static str {
    if nrt {
        SEARCHABLE
    } else {
        LIVE
    }
}

/// SQLite has one primary term: documents never change hands between shard copies.
pub(super) const PRIMARY_TERM: i64 = 1;

/// Maps a SQLite error: a busy or locked database is transient (another process holds the write
/// lock past the busy timeout), anything else is a backend failure.
pub(crate) fn sql_error(context: &str, e: rusqlite::Error) -> StoreError {
    let transient = matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy) | Some(ErrorCode::DatabaseLocked)
    );
    if transient {
        StoreError::Transient {
            context: context.to_owned(),
            message: e.to_string(),
        }
    } else {
        StoreError::Backend {
            context: context.to_owned(),
            message: e.to_string(),
        }
    }
}

pub(super) fn version(seq_no: i64) -> Version {
    Version {
        seq_no,
        primary_term: PRIMARY_TERM,
    }
}

pub(super) fn parse_source(index: &str, id: &str, text: &str) -> Result<Value> {
    serde_json::from_str(text).map_err(|e| StoreError::Backend {
        context: format!("reading `{index}/{id}`"),
        message: format!("stored source is not JSON: {e}"),
    })
}

/// Reads a row whose first columns are `id, seq_no, source` as a stored document.
pub(super) fn stored_doc(index: &str, row: &rusqlite::Row<'_>, context: &str) -> Result<StoredDoc> {
    let err = |e| sql_error(context, e);
    let id: String = row.get(0).map_err(err)?;
    let seq_no: i64 = row.get(1).map_err(err)?;
    let text: String = row.get(2).map_err(err)?;
    let source = parse_source(index, &id, &text)?;
    Ok(StoredDoc {
        id,
        version: version(seq_no),
        source,
    })
}

/// Returns the index's last sequence number, or `IndexNotFound`.
pub(super) fn index_seq(conn: &Connection, index: &str) -> Result<i64> {
    conn.prepare_cached("SELECT seq FROM indices WHERE name = ?1")
        .and_then(|mut stmt| stmt.query_row([index], |row| row.get(0)).optional())
        .map_err(|e| sql_error(&format!("looking up index `{index}`"), e))?
        .ok_or_else(|| StoreError::IndexNotFound {
            index: index.to_owned(),
        })
}

/// Opens a read transaction on `index` (every row is read from one snapshot), failing with
/// `IndexNotFound` if the index does not exist.
pub(super) fn reading<'c>(
    conn: &'c mut Connection,
    index: &str,
    context: &str,
) -> Result<Transaction<'c>> {
    let tx = conn.transaction().map_err(|e| sql_error(context, e))?;
    index_seq(&tx, index)?;
    Ok(tx)
}
