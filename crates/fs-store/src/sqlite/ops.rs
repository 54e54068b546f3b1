//! The blocking operations behind each store call, one SQLite transaction per call.

use rusqlite::types::Value as SqlValue;
use rusqlite::{
    params, Connection, ErrorCode, OptionalExtension, Transaction, TransactionBehavior,
};
use serde_json::Value;

use super::schema::{LIVE, SEARCHABLE};
use crate::error::{Result, StoreError};
use crate::types::{
    BulkItemResult, BulkOp, Chained, Cursor, Page, Scope, SearchRequest, StoredDoc, Version,
};

/// SQLite has one primary term: documents never change hands between shard copies.
const PRIMARY_TERM: i64 = 1;

/// The largest number of ids bound in one `IN (...)` list.
const MGET_CHUNK: usize = 500;

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

fn version(seq_no: i64) -> Version {
    Version {
        seq_no,
        primary_term: PRIMARY_TERM,
    }
}

fn parse_source(index: &str, id: &str, text: &str) -> Result<Value> {
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
    let tx = conn.transaction().map_err(err)?;
    index_seq(&tx, index)?;
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
    let tx = conn.transaction().map_err(err)?;
    index_seq(&tx, index)?;
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

/// Writes within one transaction, handing out sequence numbers from a counter that is read once
/// and stored back by [`Writer::finish`].
pub(super) struct Writer<'c> {
    tx: Transaction<'c>,
    index: String,
    seq: i64,
    near_real_time: bool,
}

/// Creates or replaces a document.
const UPSERT: &str = "INSERT INTO docs (idx, id, seq_no, path, parent, source)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6)
    ON CONFLICT (idx, id) DO UPDATE SET seq_no = excluded.seq_no,
      path = excluded.path, parent = excluded.parent, source = excluded.source";

/// Creates a document unless its id exists (then changes nothing).
const INSERT_NEW: &str = "INSERT INTO docs (idx, id, seq_no, path, parent, source)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (idx, id) DO NOTHING";

impl<'c> Writer<'c> {
    pub(super) fn begin(conn: &'c mut Connection, index: &str, nrt: bool) -> Result<Writer<'c>> {
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| sql_error(&format!("writing to `{index}`"), e))?;
        let seq = index_seq(&tx, index)?;
        Ok(Writer {
            tx,
            index: index.to_owned(),
            seq,
            near_real_time: nrt,
        })
    }

    /// One transaction: `first` (one write to `first_index`), then, only if it landed, `rest`
    /// on `index`, committed. A first write that does not land (a conflict, a missing index)
    /// rolls back and comes back as [`Chained::FirstFailed`].
    pub(super) fn chained<T>(
        conn: &'c mut Connection,
        nrt: bool,
        (first_index, first): (&str, &BulkOp),
        index: &str,
        rest: impl FnOnce(&mut Writer<'c>) -> Result<Vec<T>>,
    ) -> Result<Chained<T>> {
        let mut writer = match Writer::begin(conn, first_index, nrt) {
            Ok(writer) => writer,
            Err(e @ StoreError::IndexNotFound { .. }) => return Ok(Chained::FirstFailed(e)),
            Err(e) => return Err(e),
        };
        let landed = match writer.bulk(std::slice::from_ref(first))?.pop() {
            Some(Ok(version)) => version,
            Some(Err(e)) => return Ok(Chained::FirstFailed(e)),
            None => {
                return Err(StoreError::Backend {
                    context: format!("writing `{first_index}/{}`", first.id()),
                    message: "the write got no answer".to_owned(),
                })
            }
        };
        writer.switch_index(index)?;
        let results = rest(&mut writer)?;
        writer.finish()?;
        Ok(Chained::Ran(landed, results))
    }

    fn err(&self, id: &str) -> impl Fn(rusqlite::Error) -> StoreError {
        let context = format!("writing `{}/{id}`", self.index);
        move |e| sql_error(&context, e)
    }

    fn current(&self, id: &str) -> Result<Option<Version>> {
        let seq: Option<i64> = self
            .tx
            .prepare_cached("SELECT seq_no FROM docs WHERE idx = ?1 AND id = ?2")
            .and_then(|mut stmt| {
                stmt.query_row([&self.index, id], |row| row.get(0))
                    .optional()
            })
            .map_err(self.err(id))?;
        Ok(seq.map(version))
    }

    /// Reads `id` as this transaction sees it (realtime, like `get`).
    pub(super) fn read(&self, id: &str) -> Result<Option<StoredDoc>> {
        let row: Option<(i64, String)> = self
            .tx
            .prepare_cached("SELECT seq_no, source FROM docs WHERE idx = ?1 AND id = ?2")
            .and_then(|mut stmt| {
                stmt.query_row([&self.index, id], |row| Ok((row.get(0)?, row.get(1)?)))
                    .optional()
            })
            .map_err(self.err(id))?;
        row.map(|(seq_no, text)| {
            Ok(StoredDoc {
                id: id.to_owned(),
                version: version(seq_no),
                source: parse_source(&self.index, id, &text)?,
            })
        })
        .transpose()
    }

    fn next_seq(&mut self) -> i64 {
        self.seq += 1;
        self.seq
    }

    fn mark_pending(&self, id: &str) -> Result<()> {
        if self.near_real_time {
            self.tx
                .prepare_cached("INSERT OR IGNORE INTO pending (idx, id) VALUES (?1, ?2)")
                .and_then(|mut stmt| stmt.execute([&self.index, id]))
                .map_err(self.err(id))?;
        }
        Ok(())
    }

    /// Returns the `path` and `parent` columns of a source, which must be a JSON object.
    fn columns<'v>(
        &self,
        id: &str,
        source: &'v Value,
    ) -> Result<(Option<&'v str>, Option<&'v str>)> {
        let Value::Object(fields) = source else {
            return Err(StoreError::rejected(
                format!("writing `{}/{id}`", self.index),
                "a document source must be a JSON object",
            ));
        };
        Ok((
            fields.get("path").and_then(Value::as_str),
            fields.get("parent").and_then(Value::as_str),
        ))
    }

    // Each write below is one statement on the path that succeeds; the current version is
    // read only to explain a refusal. (Reading it first on every write cost a tenth of a
    // large rename.)

    /// Creates or replaces `id`, whatever is there.
    fn put(&mut self, id: &str, source: &Value) -> Result<Version> {
        let (seq, _) = self.insert(id, source, UPSERT)?;
        self.mark_pending(id)?;
        Ok(version(seq))
    }

    pub(super) fn create(&mut self, id: &str, source: &Value) -> Result<Version> {
        let (seq, inserted) = self.insert(id, source, INSERT_NEW)?;
        if !inserted {
            let current = self.current(id)?;
            return Err(StoreError::conflict(&self.index, id, current));
        }
        self.mark_pending(id)?;
        Ok(version(seq))
    }

    /// Runs `sql` ([`UPSERT`] or [`INSERT_NEW`]) for `id`; returns the sequence number it
    /// wrote and whether it changed a row.
    fn insert(&mut self, id: &str, source: &Value, sql: &str) -> Result<(i64, bool)> {
        let (path, parent) = self.columns(id, source)?;
        let seq = self.next_seq();
        let changed = self
            .tx
            .prepare_cached(sql)
            .and_then(|mut stmt| {
                stmt.execute(params![
                    self.index,
                    id,
                    seq,
                    path,
                    parent,
                    source.to_string()
                ])
            })
            .map_err(self.err(id))?;
        Ok((seq, changed > 0))
    }

    pub(super) fn index(
        &mut self,
        id: &str,
        source: &Value,
        if_v: Option<Version>,
    ) -> Result<Version> {
        let Some(expected) = if_v else {
            return self.put(id, source);
        };
        if expected.primary_term != PRIMARY_TERM {
            let current = self.current(id)?;
            return Err(StoreError::conflict(&self.index, id, current));
        }
        let (path, parent) = self.columns(id, source)?;
        let seq = self.next_seq();
        let updated = self
            .tx
            .prepare_cached(
                "UPDATE docs SET seq_no = ?3, path = ?4, parent = ?5, source = ?6
                 WHERE idx = ?1 AND id = ?2 AND seq_no = ?7",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![
                    self.index,
                    id,
                    seq,
                    path,
                    parent,
                    source.to_string(),
                    expected.seq_no
                ])
            })
            .map_err(self.err(id))?;
        if updated == 0 {
            let current = self.current(id)?;
            return Err(StoreError::conflict(&self.index, id, current));
        }
        self.mark_pending(id)?;
        Ok(version(seq))
    }

    pub(super) fn delete(&mut self, id: &str, if_version: Option<Version>) -> Result<Version> {
        if if_version.is_some_and(|v| v.primary_term != PRIMARY_TERM) {
            let current = self.current(id)?;
            return Err(StoreError::conflict(&self.index, id, current));
        }
        let expected = if_version.map(|v| v.seq_no);
        let deleted = self
            .tx
            .prepare_cached(
                "DELETE FROM docs WHERE idx = ?1 AND id = ?2 AND (?3 IS NULL OR seq_no = ?3)",
            )
            .and_then(|mut stmt| stmt.execute(params![self.index, id, expected]))
            .map_err(self.err(id))?;
        if deleted == 0 {
            return match self.current(id)? {
                None if if_version.is_none() => Err(StoreError::NotFound {
                    index: self.index.clone(),
                    id: id.to_owned(),
                }),
                current => Err(StoreError::conflict(&self.index, id, current)),
            };
        }
        self.mark_pending(id)?;
        Ok(version(self.next_seq()))
    }

    pub(super) fn bulk(&mut self, ops: &[BulkOp]) -> Result<Vec<BulkItemResult>> {
        let mut results = Vec::with_capacity(ops.len());
        for op in ops {
            let result = match op {
                BulkOp::Create { id, source } => self.create(id, source),
                BulkOp::Index {
                    id,
                    source,
                    if_version,
                } => self.index(id, source, *if_version),
                BulkOp::Delete { id, if_version } => self.delete(id, *if_version),
            };
            match result {
                // A database failure fails the whole request, as a lost connection would.
                Err(e @ (StoreError::Backend { .. } | StoreError::Transient { .. })) => {
                    return Err(e)
                }
                other => results.push(other),
            }
        }
        Ok(results)
    }

    /// Goes on writing in the same transaction to `index`: the sequence counter of the index
    /// written so far is stored back, and `index`'s is read.
    pub(super) fn switch_index(&mut self, index: &str) -> Result<()> {
        self.store_seq()?;
        self.seq = index_seq(&self.tx, index)?;
        index.clone_into(&mut self.index);
        Ok(())
    }

    fn store_seq(&self) -> Result<()> {
        let context = format!("committing to `{}`", self.index);
        self.tx
            .prepare_cached("UPDATE indices SET seq = ?1 WHERE name = ?2")
            .and_then(|mut stmt| stmt.execute(params![self.seq, self.index]))
            .map(|_| ())
            .map_err(|e| sql_error(&context, e))
    }

    /// Stores the sequence counter back and commits.
    pub(super) fn finish(self) -> Result<()> {
        self.store_seq()?;
        let context = format!("committing to `{}`", self.index);
        self.tx.commit().map_err(|e| sql_error(&context, e))
    }
}

/// The `WHERE` clause (after `idx = ?`) and its bindings for a scope.
pub(super) fn scope_filter(scope: &Scope, binds: &mut Vec<SqlValue>) -> String {
    match scope {
        Scope::All => String::new(),
        Scope::Exact(p) => {
            binds.push(SqlValue::Text(p.as_str().to_owned()));
            format!(" AND path = ?{}", binds.len())
        }
        Scope::Subtree(p) if p.is_root() => " AND path >= '/' AND path < '0'".to_owned(),
        Scope::Subtree(p) => {
            // `[p/, p0)` is exactly the strings that start with `p/`: `0` follows `/` in ASCII.
            binds.push(SqlValue::Text(p.as_str().to_owned()));
            binds.push(SqlValue::Text(format!("{p}/")));
            binds.push(SqlValue::Text(format!("{p}0")));
            let n = binds.len();
            format!(
                " AND (path = ?{} OR (path >= ?{} AND path < ?{n}))",
                n - 2,
                n - 1
            )
        }
        Scope::SubtreeFrom { root, start } => {
            let subtree = scope_filter(&Scope::Subtree(root.clone()), binds);
            binds.push(SqlValue::Text(start.as_str().to_owned()));
            format!("{subtree} AND path >= ?{}", binds.len())
        }
        Scope::Children(p) => {
            binds.push(SqlValue::Text(p.as_str().to_owned()));
            format!(" AND parent = ?{}", binds.len())
        }
        Scope::ChildrenFrom { dir, start } => {
            let children = scope_filter(&Scope::Children(dir.clone()), binds);
            binds.push(SqlValue::Text(start.as_str().to_owned()));
            format!("{children} AND path >= ?{}", binds.len())
        }
        Scope::Pathless => " AND path IS NULL".to_owned(),
        Scope::AnyOf(scopes) | Scope::InTurn(scopes) => {
            let either: Vec<String> = scopes
                .iter()
                .map(|s| format!("(1{})", scope_filter(s, binds)))
                .collect();
            if either.is_empty() {
                " AND 0".to_owned()
            } else {
                format!(" AND ({})", either.join(" OR "))
            }
        }
    }
}

/// A `LIMIT` clause with its number written out. Bound as a parameter, the limit made SQLite
/// prepare the statement again at every call: the planner reads a bound limit's value, so
/// binding a new one expires the plan (a `perf` profile of concurrent renames showed it, about
/// 5 % of the CPU). Written out, each page size is a statement of its own in the cache.
fn limit(n: usize) -> String {
    format!(" LIMIT {}", i64::try_from(n).unwrap_or(i64::MAX))
}

fn bad_cursor(index: &str, cursor: &Cursor) -> StoreError {
    StoreError::rejected(
        format!("searching `{index}`"),
        format!("invalid cursor {}", cursor.0),
    )
}

pub(super) fn search(
    conn: &mut Connection,
    nrt: bool,
    index: &str,
    req: &SearchRequest,
) -> Result<Page> {
    let context = format!("searching `{index}`");
    let err = |e| sql_error(&context, e);
    let table = if nrt { SEARCHABLE } else { LIVE };
    let tx = conn.transaction().map_err(err)?;
    index_seq(&tx, index)?;
    if let Scope::InTurn(scopes) = &req.scope {
        return search_in_turn(&tx, table, index, scopes, req);
    }
    let mut binds = vec![SqlValue::Text(index.to_owned())];
    let mut sql = format!("SELECT id, seq_no, source, path FROM {table} WHERE idx = ?1");
    sql.push_str(&scope_filter(&req.scope, &mut binds));
    let by_path = req.scope.sorted_by_path();
    if let Some(cursor) = &req.after {
        let parts = cursor
            .0
            .as_array()
            .ok_or_else(|| bad_cursor(index, cursor))?;
        let text = |i: usize| parts.get(i).and_then(Value::as_str).map(str::to_owned);
        if by_path {
            let (Some(path), Some(id), 2) = (text(0), text(1), parts.len()) else {
                return Err(bad_cursor(index, cursor));
            };
            binds.push(SqlValue::Text(path));
            binds.push(SqlValue::Text(id));
            let n = binds.len();
            let (p, i) = (n - 1, n);
            sql.push_str(&format!(
                " AND (path > ?{p} OR (path = ?{p} AND id > ?{i}))"
            ));
        } else {
            let (Some(id), 1) = (text(0), parts.len()) else {
                return Err(bad_cursor(index, cursor));
            };
            binds.push(SqlValue::Text(id));
            sql.push_str(&format!(" AND id > ?{}", binds.len()));
        }
    }
    sql.push_str(if by_path {
        " ORDER BY path, id"
    } else {
        " ORDER BY id"
    });
    sql.push_str(&limit(req.size));

    let mut docs = Vec::new();
    let mut last_path = None;
    {
        let mut stmt = tx.prepare_cached(&sql).map_err(err)?;
        let mut rows = stmt.query(rusqlite::params_from_iter(binds)).map_err(err)?;
        while let Some(row) = rows.next().map_err(err)? {
            last_path = row.get::<_, Option<String>>(3).map_err(err)?;
            docs.push(stored_doc(index, row, &context)?);
        }
    }
    let next = match docs.last() {
        Some(last) if docs.len() == req.size && !req.single_page => Some(Cursor(if by_path {
            serde_json::json!([last_path, last.id])
        } else {
            serde_json::json!([last.id])
        })),
        _ => None,
    };
    Ok(Page { docs, next })
}

/// A [`Scope::InTurn`]: one query a scope, each in its own order and without what the scopes
/// before it hold, until the page is full. Each query walks its own index range, where one
/// query ranking them all would read and sort every match of the large ones.
fn search_in_turn(
    tx: &rusqlite::Transaction<'_>,
    table: &str,
    index: &str,
    scopes: &[Scope],
    req: &SearchRequest,
) -> Result<Page> {
    let context = format!("searching `{index}`");
    req.one_page_in_turn(&context)?;
    let err = |e| sql_error(&context, e);
    let mut docs = Vec::new();
    for (i, scope) in scopes.iter().enumerate() {
        let room = req.size.saturating_sub(docs.len());
        if room == 0 {
            break;
        }
        let mut binds = vec![SqlValue::Text(index.to_owned())];
        let mut sql = format!("SELECT id, seq_no, source FROM {table} WHERE idx = ?1");
        sql.push_str(&scope_filter(scope, &mut binds));
        for earlier in &scopes[..i] {
            // `COALESCE`: a comparison with a missing path is NULL, which must not count as
            // "held by an earlier scope".
            let filter = scope_filter(earlier, &mut binds);
            sql.push_str(&format!(" AND NOT COALESCE((1{filter}), 0)"));
        }
        sql.push_str(if scope.sorted_by_path() {
            " ORDER BY path, id"
        } else {
            " ORDER BY id"
        });
        sql.push_str(&limit(room));
        let mut stmt = tx.prepare_cached(&sql).map_err(err)?;
        let mut rows = stmt.query(rusqlite::params_from_iter(binds)).map_err(err)?;
        while let Some(row) = rows.next().map_err(err)? {
            docs.push(stored_doc(index, row, &context)?);
        }
    }
    Ok(Page { docs, next: None })
}

pub(super) fn count(conn: &mut Connection, nrt: bool, index: &str, scope: &Scope) -> Result<u64> {
    let context = format!("counting `{index}`");
    let err = |e| sql_error(&context, e);
    let table = if nrt { SEARCHABLE } else { LIVE };
    let tx = conn.transaction().map_err(err)?;
    index_seq(&tx, index)?;
    let mut binds = vec![SqlValue::Text(index.to_owned())];
    let sql = format!(
        "SELECT COUNT(*) FROM {table} WHERE idx = ?1{}",
        scope_filter(scope, &mut binds)
    );
    let n: i64 = tx
        .prepare_cached(&sql)
        .and_then(|mut stmt| stmt.query_row(rusqlite::params_from_iter(binds), |row| row.get(0)))
        .map_err(err)?;
    Ok(u64::try_from(n).unwrap_or(0))
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
