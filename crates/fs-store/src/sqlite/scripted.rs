//! The lock scripts, run atomically: each scripted update reads its document, runs the
//! script's Rust twin ([`plan_update`], the one implementation every store without painless
//! shares) and writes the result, all inside the SQLite transaction of the request. So the
//! embedded store takes a lock in one round trip with no conflict rounds, as Elasticsearch does
//! with its stored scripts, also across processes sharing the file (the transaction is
//! `IMMEDIATE`: one writer at a time).
//!
//! Only the lock scripts are known ([`fs_model::lock_scripts`]); `put_script` of any other
//! source answers false, and the caller falls back to compare-and-set.

use async_trait::async_trait;
use fs_model::lock_scripts::LockScript;

use super::writer::Writer;
use super::SqliteStore;
use crate::error::{Result, StoreError};
use crate::scripted::{
    plan_update, unknown_script, PlannedWrite, ScriptedUpdate, ScriptedUpdates, UpdateItemResult,
    UpdateOutcome,
};
use crate::types::{Chain, Chained};

#[async_trait]
impl ScriptedUpdates for SqliteStore {
    async fn put_script(&self, id: &str, source: &str) -> Result<bool> {
        Ok(self.inner.scripts.store(id, source))
    }

    /// The painless source of a stored lock script: so a new lock client of this handle finds
    /// the scripts there and stores none (a handle's scripts live as long as the handle).
    async fn stored_script(&self, id: &str) -> Result<Option<String>> {
        Ok(self.inner.scripts.get(id).map(|s| s.painless.to_owned()))
    }

    async fn bulk_update(
        &self,
        index: &str,
        items: Vec<ScriptedUpdate>,
    ) -> Result<Vec<UpdateItemResult>> {
        let scripts = self.scripts_of(&items);
        let index = index.to_owned();
        self.run("bulk_update", move |conn, nrt| {
            Writer::write(conn, &index, nrt, |w| {
                update_all(w, &index, &items, &scripts)
            })
        })
        .await
    }

    fn chains(&self) -> bool {
        true
    }

    /// One transaction: the first write, then (only if it landed) the updates; a first write
    /// that fails rolls back and changes nothing.
    async fn bulk_update_after(
        &self,
        chain: Chain<'_, ScriptedUpdate>,
    ) -> Result<Chained<UpdateItemResult>> {
        let (first, with_first, items) = (chain.first, chain.with_first, chain.then);
        let scripts = self.scripts_of(&items);
        let (first_index, index) = (chain.first_index.to_owned(), chain.index.to_owned());
        let refresh = chain.refresh;
        self.run("bulk_update_after", move |conn, nrt| {
            let first = (first_index.as_str(), &first, with_first.as_ref());
            let chained = Writer::chained(conn, nrt, first, &index, |w| {
                update_all(w, &index, &items, &scripts)
            })?;
            if refresh {
                super::refresh_landed(conn, nrt, &index, &chained)?;
            }
            super::refresh_with_first(conn, nrt, with_first.as_ref(), &chained)?;
            Ok(chained)
        })
        .await
    }
}

impl SqliteStore {
    /// The stored lock script each of `items` names, if any.
    fn scripts_of(&self, items: &[ScriptedUpdate]) -> Vec<Option<&'static LockScript>> {
        items
            .iter()
            .map(|u| self.inner.scripts.get(&u.script))
            .collect()
    }
}

/// Runs `items` with their `scripts` in `writer`'s transaction; a database failure fails them
/// all, as in `bulk`.
fn update_all(
    writer: &mut Writer<'_>,
    index: &str,
    items: &[ScriptedUpdate],
    scripts: &[Option<&'static LockScript>],
) -> Result<Vec<UpdateItemResult>> {
    let mut results = Vec::with_capacity(items.len());
    for (update, script) in items.iter().zip(scripts) {
        let result = match script {
            Some(script) => update_one(writer, index, script, update),
            None => Err(unknown_script(index, update)),
        };
        match result {
            Err(e @ (StoreError::Backend { .. } | StoreError::Transient { .. })) => return Err(e),
            other => results.push(other),
        }
    }
    Ok(results)
}

/// One update, inside the writer's transaction: nothing can come between its read and its
/// write, so the conditional write cannot lose a race.
fn update_one(
    writer: &mut Writer<'_>,
    index: &str,
    script: &LockScript,
    update: &ScriptedUpdate,
) -> UpdateItemResult {
    let current = writer.read(&update.id)?;
    let planned = plan_update(index, script, update, current)?;
    let result = planned.result();
    let version = match planned {
        PlannedWrite::Noop(version) => version,
        PlannedWrite::Create(upsert) => writer.create(&update.id, &upsert)?,
        PlannedWrite::Index { source, version } => {
            writer.index(&update.id, &source, Some(version))?
        }
        PlannedWrite::Delete(version) => writer.delete(&update.id, Some(version))?,
    };
    Ok(UpdateOutcome {
        result,
        version: Some(version),
    })
}
