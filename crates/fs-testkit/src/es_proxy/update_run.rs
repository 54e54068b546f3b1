//! A run of update items in one bulk request, as a shard of Elasticsearch runs it.
//!
//! Inside Elasticsearch the items of a bulk request run one after the other on the primary
//! shard: several updates of one document in one request never race each other, each starts
//! from what the one before wrote, and no round trip separates them. The proxy does the same
//! with the server behind: one `mget` of every document the run updates, the items of each
//! document run in order on what the one before left, then one conditional write a document
//! (a `_create` where the document was missing), all in one `bulk`. A document whose write
//! lost a race (another request wrote it between the read and the write) has its items run
//! again one by one, each the usual way ([`scripted::update`], with its `retry_on_conflict`).
//! Items that are not lock scripts (a partial-document update, an unknown script) run the
//! usual way too, with every other item of their document after them.

use std::collections::{BTreeMap, HashMap};

use fs_model::lock_scripts::LockScript;
use fs_store::{
    plan_update, BulkOp, DocStore, PlannedWrite, ScriptedUpdate, StoreError, StoredDoc,
    UpdateOutcome, UpdateResult, Version,
};
use serde_json::Value;

use super::scripted::{self, Outcome};
use super::{Counters, Proxy};

/// One update item of a bulk request.
pub(crate) struct UpdateItem {
    pub(crate) index: String,
    pub(crate) id: String,
    pub(crate) body: Value,
    pub(crate) retry_on_conflict: u32,
}

/// One document the run updates, with its items: their positions in the run, scripts and updates.
struct Doc<'a> {
    index: &'a str,
    id: &'a str,
    items: Vec<(usize, &'static LockScript, ScriptedUpdate)>,
}

/// Runs `run`, returning one outcome per item, in order.
pub(crate) async fn run_updates(proxy: &Proxy, run: &[UpdateItem]) -> Result<Vec<Outcome>, String> {
    let mut outcomes: Vec<Option<Outcome>> = (0..run.len()).map(|_| None).collect();
    // Documents in order of their first item; a document with an item that is not a lock
    // script runs item by item.
    let mut docs: Vec<Doc<'_>> = Vec::new();
    let mut position: HashMap<(&str, &str), usize> = HashMap::new();
    let mut one_by_one: Vec<(&str, &str)> = Vec::new();
    for (at, item) in run.iter().enumerate() {
        let key = (item.index.as_str(), item.id.as_str());
        let script = scripted::lock_script_of(proxy, &item.body);
        let slot = *position.entry(key).or_insert_with(|| {
            docs.push(Doc {
                index: key.0,
                id: key.1,
                items: Vec::new(),
            });
            docs.len() - 1
        });
        match script {
            Some(script) => docs[slot].items.push((
                at,
                script,
                ScriptedUpdate {
                    id: item.id.clone(),
                    script: script.id.to_owned(),
                    params: item.body["script"]["params"].clone(),
                    upsert: item.body.get("upsert").cloned(),
                },
            )),
            None => one_by_one.push(key),
        }
    }
    let (folded, alone): (Vec<Doc<'_>>, Vec<Doc<'_>>) = docs
        .into_iter()
        .partition(|d| !one_by_one.contains(&(d.index, d.id)));
    let raced = fold(proxy, &folded, &mut outcomes).await?;
    // Item by item: documents with an item that is not a lock script, and documents whose
    // write lost a race.
    let mut again: Vec<usize> = alone
        .iter()
        .flat_map(|d| {
            let (index, id) = (d.index, d.id);
            run.iter()
                .enumerate()
                .filter(move |(_, i)| i.index == index && i.id == id)
                .map(|(at, _)| at)
        })
        .collect();
    again.extend(raced);
    again.sort_unstable();
    for at in again {
        let item = &run[at];
        outcomes[at] = Some(
            scripted::update(
                proxy,
                &item.index,
                &item.id,
                &item.body,
                item.retry_on_conflict,
            )
            .await?,
        );
    }
    outcomes
        .into_iter()
        .enumerate()
        .map(|(at, o)| o.ok_or_else(|| format!("update item {at} of a bulk request not run")))
        .collect()
}

/// What a document's items leave, before it is written.
struct Folded {
    /// The version read, if the document existed.
    read: Option<Version>,
    /// What it holds after its items (None: missing or deleted).
    source: Option<Value>,
    /// Whether any item wrote.
    wrote: bool,
    /// Each item's result, with the write still to make.
    results: Vec<(usize, &'static LockScript, Result<UpdateResult, StoreError>)>,
}

/// Reads every document of `docs` at once (per index), runs their items in order, and writes
/// each document once. Fills `outcomes`; returns the items of documents that lost a race.
async fn fold(
    proxy: &Proxy,
    docs: &[Doc<'_>],
    outcomes: &mut [Option<Outcome>],
) -> Result<Vec<usize>, String> {
    let mut by_index: BTreeMap<&str, Vec<&Doc<'_>>> = BTreeMap::new();
    for doc in docs {
        by_index.entry(doc.index).or_default().push(doc);
    }
    let mut raced = Vec::new();
    for (index, docs) in by_index {
        let ids: Vec<String> = docs.iter().map(|d| d.id.to_owned()).collect();
        let read = match proxy.docs.mget(index, &ids).await {
            Ok(read) => read,
            // The index is missing, say: each item finds that out alone.
            Err(_) => {
                raced.extend(docs.iter().flat_map(|d| d.items.iter().map(|i| i.0)));
                continue;
            }
        };
        let folded: Vec<Folded> = docs
            .iter()
            .zip(read)
            .map(|(doc, current)| run_items(index, doc, current))
            .collect();
        scripted::race_pause(proxy).await;
        let mut ops = Vec::new();
        let mut op_of = Vec::with_capacity(folded.len());
        for (doc, f) in docs.iter().zip(&folded) {
            op_of.push(write_of(doc.id, f).map(|op| {
                ops.push(op);
                ops.len() - 1
            }));
        }
        let written = match ops.is_empty() {
            true => Vec::new(),
            false => proxy
                .docs
                .bulk(index, ops)
                .await
                .map_err(|e| format!("writing scripted updates of `{index}`: {e}"))?,
        };
        for ((doc, f), op) in docs.iter().zip(folded).zip(op_of) {
            let version = match op.map(|at| written.get(at)) {
                None => f.read,
                Some(Some(Ok(version))) => Some(*version),
                Some(Some(Err(e))) if e.is_conflict() => {
                    Counters::add(&proxy.counters.races, 1);
                    raced.extend(doc.items.iter().map(|i| i.0));
                    continue;
                }
                Some(other) => {
                    let why = other.map_or_else(|| "no answer".to_owned(), |e| format!("{e:?}"));
                    return Err(format!("writing `{index}/{}`: {why}", doc.id));
                }
            };
            for (at, script, result) in f.results {
                Counters::add(&proxy.counters.updates, 1);
                let result = result.map(|result| UpdateOutcome {
                    result,
                    version: version.or(f.read),
                });
                outcomes[at] = Some(scripted::answer_of(proxy, index, doc.id, script, result)?);
            }
        }
    }
    Ok(raced)
}

/// Runs a document's items in order on what it holds.
fn run_items(index: &str, doc: &Doc<'_>, current: Option<StoredDoc>) -> Folded {
    let read = current.as_ref().map(|d| d.version);
    let mut state = current;
    let mut wrote = false;
    let mut results = Vec::with_capacity(doc.items.len());
    for (at, script, update) in &doc.items {
        let result = plan_update(index, script, update, state.clone()).map(|planned| {
            let result = planned.result();
            let version = state.as_ref().map_or(UNWRITTEN, |d| d.version);
            match planned {
                PlannedWrite::Noop(_) => {}
                PlannedWrite::Create(source) | PlannedWrite::Index { source, .. } => {
                    wrote = true;
                    state = Some(StoredDoc {
                        id: update.id.clone(),
                        version,
                        source,
                    });
                }
                PlannedWrite::Delete(_) => {
                    wrote = true;
                    state = None;
                }
            }
            result
        });
        results.push((*at, *script, result));
    }
    Folded {
        read,
        source: state.map(|d| d.source),
        wrote,
        results,
    }
}

/// Stands in for the version of a document created in the run and not yet written.
const UNWRITTEN: Version = Version {
    seq_no: -1,
    primary_term: -1,
};

/// The one write that leaves the document as its items did, if any.
fn write_of(id: &str, f: &Folded) -> Option<BulkOp> {
    if !f.wrote {
        return None;
    }
    let id = id.to_owned();
    match (f.read, &f.source) {
        (None, Some(source)) => Some(BulkOp::Create {
            id,
            source: source.clone(),
        }),
        (Some(version), Some(source)) => Some(BulkOp::Index {
            id,
            source: source.clone(),
            if_version: Some(version),
        }),
        (Some(version), None) => Some(BulkOp::Delete {
            id,
            if_version: Some(version),
        }),
        // Created and deleted within the run: nothing to write.
        (None, None) => None,
    }
}
