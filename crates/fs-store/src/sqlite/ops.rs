//! The blocking operations on indices and reads by id behind the store calls, one SQLite
//! transaction per call. Writes go through `writer`, searches through `search`.

use rusqlite::{params, Connection, TransactionBehavior};
use serde_json::Value;

use super::sql::{index_seq, parse_source, reading, sql_error, stored_doc, version};
use crate::error::Result;
use crate::types::StoredDoc;

/// The largest number of ids bound in one `IN (...)` list.
const MGET_CHUNK: usize = 500;

pub(super) fn create_index(conn: &mut Connection, index: &str, body: &Value) -> Result<bool> {
    let context = format!("creating index `{index}`");
    let n = conn
        .execute(
            "INSERT OR IGNORE INTO indices (name, body, seq) VALUES (?1, ?2, -1)",
            params![index, body.to_string()],
        )
        .map_err(|e| sql_error(&context, e))?;
    Ok(n == 1)
}

pub(super) fn delete_index(conn: &mut Connection, index: &str) -> Result<bool> {
    let context = format!("deleting index `{index}`");
    let err = |e| sql_error(&context, e);
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(err)?;
    let n = tx
        .execute("DELETE FROM indices WHERE name = ?1", [index])
        .map_err(err)?;
    for table in ["docs", "searchable", "pending"] {
        tx.execute(&format!("DELETE FROM {table} WHERE idx = ?1"), [index])
            .map_err(err)?;
    }
    tx.commit().map_err(err)?;
    Ok(n == 1)
}

pub(super) fn mget(
    conn: &mut Connection,
    index: &str,
    ids: &[String],
) -> Result<Vec<Option<StoredDoc>>> {
    let context = format!("getting from `{index}`");
    let err = |e| sql_error(&context, e);
    // One read transaction: every id is read from the same snapshot.
    let tx = reading(conn, index, &context)?;
    let mut found = std::collections::HashMap::with_capacity(ids.len());
    for chunk in ids.chunks(MGET_CHUNK) {
        let marks = vec!["?"; chunk.len()].join(",");
        let sql = format!("SELECT id, seq_no, source FROM docs WHERE idx = ? AND id IN ({marks})");
        let mut stmt = tx.prepare_cached(&sql).map_err(err)?;
        let binds = std::iter::once(index).chain(chunk.iter().map(String::as_str));
        let mut rows = stmt.query(rusqlite::params_from_iter(binds)).map_err(err)?;
        while let Some(row) = rows.next().map_err(err)? {
            let id: String = row.get(0).map_err(err)?;
            let seq_no: i64 = row.get(1).map_err(err)?;
            let text: String = row.get(2).map_err(err)?;
            found.insert(id, (seq_no, text));
        }
    }
    drop(tx);
    ids.iter()
        .map(|id| match found.get(id) {
            Some((seq_no, text)) => Ok(Some(StoredDoc {
                id: id.clone(),
                version: version(*seq_no),
                source: parse_source(index, id, text)?,
            })),
            None => Ok(None),
        })
        .collect()
}

/// Returns every live document of `index`, sorted by id (the realtime table, whatever the
/// near-real-time view shows).
pub(super) fn snapshot(conn: &mut Connection, index: &str) -> Result<Vec<StoredDoc>> {
    let context = format!("reading all of `{index}`");
    let err = |e| sql_error(&context, e);
    let tx = reading(conn, index, &context)?;
    let mut docs = Vec::new();
    {
        let mut stmt = tx
            .prepare_cached("SELECT id, seq_no, source FROM docs WHERE idx = ?1 ORDER BY id")
            .map_err(err)?;
        let mut rows = stmt.query([index]).map_err(err)?;
        while let Some(row) = rows.next().map_err(err)? {
            docs.push(stored_doc(index, row, &context)?);
        }
    }
    Ok(docs)
}

pub(super) fn refresh(conn: &mut Connection, nrt: bool, index: &str) -> Result<()> {
    let context = format!("refreshing `{index}`");
    let err = |e| sql_error(&context, e);
    if !nrt {
        // Realtime mode: searches read the live table, so there is nothing to publish.
        return index_seq(conn, index).map(|_| ());
    }
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(err)?;
    index_seq(&tx, index)?;
    tx.execute(
        "DELETE FROM searchable WHERE idx = ?1 AND id IN (SELECT id FROM pending WHERE idx = ?1)",
        [index],
    )
    .map_err(err)?;
    tx.execute(
        "INSERT INTO searchable (idx, id, seq_no, path, parent, source)
         SELECT d.idx, d.id, d.seq_no, d.path, d.parent, d.source
         FROM pending p JOIN docs d ON d.idx = p.idx AND d.id = p.id WHERE p.idx = ?1",
        [index],
    )
    .map_err(err)?;
    tx.execute("DELETE FROM pending WHERE idx = ?1", [index])
        .map_err(err)?;
    tx.commit().map_err(err)
}
