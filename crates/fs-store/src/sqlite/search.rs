//! Searches and counts: scopes as SQL filters, pages in path or id order, scopes in turn.

use rusqlite::types::Value as SqlValue;
use rusqlite::Connection;
use serde_json::Value;

use super::sql::{reading, searched, sql_error, stored_doc};
use crate::error::{Result, StoreError};
use crate::types::{Cursor, Page, Scope, SearchRequest};

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
            // The range `[p, p0)` around both comes first, alone: SQLite walks the path index
            // only over a range it can see whole, and `path = p OR (path >= p/ AND …)` made it
            // scan every document of the index (10-20 ms a query at 31 000 documents, where
            // the range takes 0.1 ms). What the range holds between `p` and `p/` (`p-x`,
            // `p.txt`) is left out by the second condition.
            binds.push(SqlValue::Text(p.as_str().to_owned()));
            binds.push(SqlValue::Text(format!("{p}/")));
            binds.push(SqlValue::Text(format!("{p}0")));
            let n = binds.len();
            let (at, below, after) = (n - 2, n - 1, n);
            format!(" AND path >= ?{at} AND path < ?{after} AND (path = ?{at} OR path >= ?{below})")
        }
        Scope::SubtreeFrom { root, start } => {
            let subtree = scope_filter(&Scope::Subtree(root.clone()), binds);
            binds.push(SqlValue::Text(start.as_str().to_owned()));
            format!("{subtree} AND path >= ?{}", binds.len())
        }
        // The kind is in the source only: the path range picks the rows first.
        Scope::SubtreeDirs(p) => {
            let subtree = scope_filter(&Scope::Subtree(p.clone()), binds);
            format!("{subtree} AND json_extract(source, '$.kind') = 'dir'")
        }
        Scope::SubtreeDirsFrom { root, start } => {
            let from = Scope::SubtreeFrom {
                root: root.clone(),
                start: start.clone(),
            };
            let subtree = scope_filter(&from, binds);
            format!("{subtree} AND json_extract(source, '$.kind') = 'dir'")
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
    let table = searched(nrt);
    let tx = reading(conn, index, &context)?;
    if let Scope::InTurn(scopes) = &req.scope {
        return search_in_turn(&tx, table, index, scopes, req);
    }
    let (sql, binds) = page_sql(table, index, req)?;
    let by_path = req.scope.sorted_by_path();

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

/// The statement of one page of a search and its bindings: the scope's filter, then where
/// the cursor left off, in the scope's order.
fn page_sql(table: &str, index: &str, req: &SearchRequest) -> Result<(String, Vec<SqlValue>)> {
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
            // `path >= p` alone first, for the index range (see `scope_filter`).
            sql.push_str(&format!(
                " AND path >= ?{p} AND (path > ?{p} OR (path = ?{p} AND id > ?{i}))"
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
    Ok((sql, binds))
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
        let (sql, binds) = in_turn_sql(table, index, (scope, &scopes[..i]), room);
        let mut stmt = tx.prepare_cached(&sql).map_err(err)?;
        let mut rows = stmt.query(rusqlite::params_from_iter(binds)).map_err(err)?;
        while let Some(row) = rows.next().map_err(err)? {
            docs.push(stored_doc(index, row, &context)?);
        }
    }
    Ok(Page { docs, next: None })
}

/// The statement of one scope of a [`Scope::InTurn`] and its bindings: its own matches that
/// none of the `earlier` scopes holds, `room` at most.
fn in_turn_sql(
    table: &str,
    index: &str,
    (scope, earlier): (&Scope, &[Scope]),
    room: usize,
) -> (String, Vec<SqlValue>) {
    let mut binds = vec![SqlValue::Text(index.to_owned())];
    let mut sql = format!("SELECT id, seq_no, source FROM {table} WHERE idx = ?1");
    sql.push_str(&scope_filter(scope, &mut binds));
    for earlier in earlier {
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
    (sql, binds)
}

pub(super) fn count(conn: &mut Connection, nrt: bool, index: &str, scope: &Scope) -> Result<u64> {
    let context = format!("counting `{index}`");
    let err = |e| sql_error(&context, e);
    let table = searched(nrt);
    let tx = reading(conn, index, &context)?;
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

#[cfg(test)]
mod plan_tests;
