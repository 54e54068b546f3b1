//! The statements a search sends walk the path index over the range they ask for: checked
//! in SQLite's own plan (`EXPLAIN QUERY PLAN`), on the tables `prepare` makes.

use std::time::Duration;

use fs_model::FsPath;
use rusqlite::types::Value as SqlValue;
use rusqlite::Connection;
use serde_json::json;

use super::{in_turn_sql, page_sql};
use crate::sqlite::schema::prepare;
use crate::sqlite::sql::LIVE;
use crate::types::{Cursor, Scope, SearchRequest};

fn p(s: &str) -> FsPath {
    FsPath::parse(s).expect("path")
}

fn connection() -> Connection {
    let mut conn = Connection::open_in_memory().expect("sqlite");
    prepare(&mut conn, "memory", false, Duration::from_secs(1), false).expect("schema");
    conn
}

/// SQLite's plan of `sql`, its lines joined.
fn plan_of(conn: &Connection, sql: &str, binds: Vec<SqlValue>) -> String {
    let mut stmt = conn
        .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
        .expect("explain");
    let rows = stmt
        .query_map(rusqlite::params_from_iter(binds), |row| {
            row.get::<_, String>(3)
        })
        .expect("plan");
    rows.map(|r| r.expect("row")).collect::<Vec<_>>().join("; ")
}

/// A subtree (the check of a rename, a page of `ls -R`) is a range of the path index, not
/// every document of the index filtered (what `path = p OR (path >= p/ AND …)` made SQLite
/// do, issue 48).
#[test]
fn a_subtree_is_a_range_of_the_path_index() {
    let conn = connection();
    let request = SearchRequest::first(Scope::Subtree(p("/a/b")), 100);
    let (sql, binds) = page_sql(LIVE, "fs", &request).expect("sql");
    let plan = plan_of(&conn, &sql, binds);
    assert!(
        plan.contains("docs_by_path (idx=? AND path>? AND path<?)"),
        "{plan}"
    );

    let next = SearchRequest {
        after: Some(Cursor(json!(["/a/b/c", "some-id"]))),
        ..request
    };
    let (sql, binds) = page_sql(LIVE, "fs", &next).expect("sql");
    let plan = plan_of(&conn, &sql, binds);
    assert!(
        plan.contains("docs_by_path (idx=? AND path>? AND path<?)"),
        "{plan}"
    );
}

/// Scopes in turn (what a rename reads of its source and destination) each walk their own
/// range, the scopes before them only filtering what it holds.
#[test]
fn scopes_in_turn_each_walk_their_own_range() {
    let conn = connection();
    let scopes = [Scope::Subtree(p("/src")), Scope::Subtree(p("/dst"))];
    let (sql, binds) = in_turn_sql(LIVE, "fs", (&scopes[1], &scopes[..1]), 100);
    let plan = plan_of(&conn, &sql, binds);
    assert!(
        plan.contains("docs_by_path (idx=? AND path>? AND path<?)"),
        "{plan}"
    );
    assert!(!plan.contains("TEMP B-TREE"), "sorted by the index: {plan}");
}
