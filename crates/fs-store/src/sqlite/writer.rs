//! [`Writer`]: the writes of one call, in one `IMMEDIATE` transaction (one writer at a time,
//! also across processes), with the index's sequence numbers.

use rusqlite::types::ToSql;
use rusqlite::{params, Connection, OptionalExtension, Transaction, TransactionBehavior};
use serde_json::Value;

use super::sql::{index_seq, parse_source, sql_error, version, PRIMARY_TERM};
use crate::error::{Result, StoreError};
use crate::types::{BulkItemResult, BulkOp, Chained, StoredDoc, Version, WithFirst};

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

/// Replaces a document at the sequence number bound last.
const UPDATE_AT: &str = "UPDATE docs SET seq_no = ?3, path = ?4, parent = ?5, source = ?6
    WHERE idx = ?1 AND id = ?2 AND seq_no = ?7";

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

    /// Runs `write` in one transaction on `index`, committed if it succeeds.
    pub(super) fn write<T>(
        conn: &'c mut Connection,
        index: &str,
        nrt: bool,
        write: impl FnOnce(&mut Writer<'c>) -> Result<T>,
    ) -> Result<T> {
        let mut writer = Writer::begin(conn, index, nrt)?;
        let written = write(&mut writer)?;
        writer.finish()?;
        Ok(written)
    }

    /// One transaction: `first` (one write to `first_index`) and the writes `with_first`,
    /// then, only if they all landed, `rest` on `index`, committed. A first write that does
    /// not land (a conflict, a missing index), or any write of `with_first` that does not,
    /// rolls back and comes back as [`Chained::FirstFailed`].
    pub(super) fn chained<T>(
        conn: &'c mut Connection,
        nrt: bool,
        (first_index, first, with_first): (&str, &BulkOp, Option<&WithFirst>),
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
        if let Some(with) = with_first {
            match writer.switch_index(&with.index) {
                Ok(()) => {}
                Err(e @ StoreError::IndexNotFound { .. }) => return Ok(Chained::FirstFailed(e)),
                Err(e) => return Err(e),
            }
            // Dropped unfinished, the writer rolls back: the first write goes with them.
            if let Some(Err(e)) = writer.bulk(&with.ops)?.into_iter().find(Result::is_err) {
                return Ok(Chained::FirstFailed(e));
            }
        }
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
        let (seq, _) = self.write_row(UPSERT, id, source, None)?;
        self.mark_pending(id)?;
        Ok(version(seq))
    }

    pub(super) fn create(&mut self, id: &str, source: &Value) -> Result<Version> {
        let (seq, inserted) = self.write_row(INSERT_NEW, id, source, None)?;
        if !inserted {
            let current = self.current(id)?;
            return Err(StoreError::conflict(&self.index, id, current));
        }
        self.mark_pending(id)?;
        Ok(version(seq))
    }

    /// Runs `sql` ([`UPSERT`], [`INSERT_NEW`], or [`UPDATE_AT`] with `expected`, the
    /// sequence number the row must be at) for `id`; returns the sequence number it wrote and
    /// whether it changed a row.
    fn write_row(
        &mut self,
        sql: &str,
        id: &str,
        source: &Value,
        expected: Option<i64>,
    ) -> Result<(i64, bool)> {
        let (path, parent) = self.columns(id, source)?;
        let seq = self.next_seq();
        let text = source.to_string();
        let mut binds: Vec<&dyn ToSql> = vec![&self.index, &id, &seq, &path, &parent, &text];
        if let Some(expected) = &expected {
            binds.push(expected);
        }
        let changed = self
            .tx
            .prepare_cached(sql)
            .and_then(|mut stmt| stmt.execute(&*binds))
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
        let (seq, updated) = self.write_row(UPDATE_AT, id, source, Some(expected.seq_no))?;
        if !updated {
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

    /// Makes one write: a store call's, or an item of a bulk request.
    pub(super) fn apply(&mut self, op: &BulkOp) -> Result<Version> {
        match op {
            BulkOp::Create { id, source } => self.create(id, source),
            BulkOp::Index {
                id,
                source,
                if_version,
            } => self.index(id, source, *if_version),
            BulkOp::Delete { id, if_version } => self.delete(id, *if_version),
        }
    }

    pub(super) fn bulk(&mut self, ops: &[BulkOp]) -> Result<Vec<BulkItemResult>> {
        let mut results = Vec::with_capacity(ops.len());
        for op in ops {
            match self.apply(op) {
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
