//! The full-text index of the documents' `content` (SQLite's FTS5), and `find`.
//!
//! Beside the table searches read (`docs`, or `searchable` in near-real-time mode) lie an FTS5
//! table of the content and a table of keys that gives each `(idx, id)` a stable FTS row id
//! (a document table's own row ids may change in a `VACUUM`). Triggers keep them in step with
//! every write, so no write path needs to know about them; a write that leaves the content as
//! it was (a rename) costs two `json_extract`s and nothing else.

use rusqlite::types::Value as SqlValue;
use rusqlite::Connection;
use serde_json::Value;

use super::search::scope_filter;
use super::sql::{reading, searched, sql_error, stored_doc};
use crate::error::Result;
use crate::types::{Scope, StoredDoc};
use fs_model::FindQuery;

/// The DDL of the full-text index of `table`.
pub(super) fn schema(table: &str) -> String {
    let (keys, text) = (format!("{table}_text_keys"), format!("{table}_text"));
    let content = "json_extract(new.source, '$.content')";
    // Diacritics kept: Elasticsearch's standard analyser keeps them too, so a word finds the
    // same documents on both stores.
    format!(
        "CREATE TABLE IF NOT EXISTS {keys} (
            k INTEGER PRIMARY KEY, idx TEXT NOT NULL, id TEXT NOT NULL, UNIQUE (idx, id)
        );
        CREATE VIRTUAL TABLE IF NOT EXISTS {text}
            USING fts5(content, tokenize = 'unicode61 remove_diacritics 0');
        CREATE TRIGGER IF NOT EXISTS {table}_text_insert AFTER INSERT ON {table}
        WHEN {content} IS NOT NULL BEGIN
            INSERT OR IGNORE INTO {keys} (idx, id) VALUES (new.idx, new.id);
            INSERT INTO {text} (rowid, content)
                SELECT k, {content} FROM {keys} WHERE idx = new.idx AND id = new.id;
        END;
        CREATE TRIGGER IF NOT EXISTS {table}_text_delete AFTER DELETE ON {table} BEGIN
            DELETE FROM {text} WHERE rowid IN
                (SELECT k FROM {keys} WHERE idx = old.idx AND id = old.id);
            DELETE FROM {keys} WHERE idx = old.idx AND id = old.id;
        END;
        CREATE TRIGGER IF NOT EXISTS {table}_text_update AFTER UPDATE OF source ON {table}
        WHEN json_extract(old.source, '$.content') IS NOT {content} BEGIN
            DELETE FROM {text} WHERE rowid IN
                (SELECT k FROM {keys} WHERE idx = old.idx AND id = old.id);
            DELETE FROM {keys} WHERE idx = old.idx AND id = old.id;
            INSERT INTO {keys} (idx, id) SELECT new.idx, new.id WHERE {content} IS NOT NULL;
            INSERT INTO {text} (rowid, content)
                SELECT k, {content} FROM {keys} WHERE idx = new.idx AND id = new.id;
        END;"
    )
}

/// The FTS5 query that wants every one of `words`: each a quoted string (a word is letters
/// and digits only, but quoting keeps FTS5's operators out whatever it holds).
fn match_all(words: &[String]) -> String {
    words
        .iter()
        .map(|w| format!("\"{}\"", w.replace('"', "\"\"")))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The name of the document at `path`: its last component.
fn name_of(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or("")
}

pub(super) fn find(
    conn: &mut Connection,
    nrt: bool,
    index: &str,
    query: &FindQuery,
    size: usize,
) -> Result<Vec<StoredDoc>> {
    let context = format!("searching `{index}` by name and content");
    let err = |e| sql_error(&context, e);
    let table = searched(nrt);
    let tx = reading(conn, index, &context)?;
    let mut binds = vec![SqlValue::Text(index.to_owned())];
    let subtree = scope_filter(&Scope::Subtree(query.under.clone()), &mut binds);
    let sql = if query.words.is_empty() && query.stores_text {
        // The keys table holds a row for exactly the documents that store text.
        format!(
            "SELECT d.id, d.seq_no, d.source, d.path FROM {table}_text_keys k
             JOIN {table} d ON d.idx = k.idx AND d.id = k.id
             WHERE d.idx = ?1{subtree}
             ORDER BY d.path, d.id"
        )
    } else if query.words.is_empty() {
        format!(
            "SELECT d.id, d.seq_no, d.source, d.path FROM {table} d WHERE d.idx = ?1{subtree}
             ORDER BY d.path, d.id"
        )
    } else {
        binds.push(SqlValue::Text(match_all(&query.words)));
        let m = binds.len();
        format!(
            "SELECT d.id, d.seq_no, d.source, d.path FROM {table}_text f
             JOIN {table}_text_keys k ON k.k = f.rowid
             JOIN {table} d ON d.idx = k.idx AND d.id = k.id
             WHERE {table}_text MATCH ?{m} AND d.idx = ?1{subtree}
             ORDER BY f.rank, d.path, d.id"
        )
    };
    let mut stmt = tx.prepare_cached(&sql).map_err(err)?;
    let mut rows = stmt.query(rusqlite::params_from_iter(binds)).map_err(err)?;
    let mut found = Vec::new();
    // The name is matched here, on the path column, before the source is parsed: the
    // pattern means the same on every store (see `NameGlob`), and rows stream, so the scan
    // stops at `size` hits.
    while found.len() < size {
        let Some(row) = rows.next().map_err(err)? else {
            break;
        };
        let path: Option<String> = row.get(3).map_err(err)?;
        let Some(path) = path else { continue };
        if let Some(glob) = &query.name {
            if !glob.matches(name_of(&path)) {
                continue;
            }
        }
        let mut doc = stored_doc(index, row, &context)?;
        if let Value::Object(source) = &mut doc.source {
            source.remove("content");
        }
        found.push(doc);
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_quoted_for_fts5() {
        assert_eq!(
            match_all(&["quick".into(), "fox".into()]),
            "\"quick\" \"fox\""
        );
        assert_eq!(match_all(&["a\"b".into()]), "\"a\"\"b\"");
        assert_eq!(name_of("/a/b.txt"), "b.txt");
        assert_eq!(name_of("/"), "");
    }
}
