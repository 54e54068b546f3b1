//! Creating documents under fresh ids whatever the network did to the request.
//!
//! A create of a fresh random id can be sent again safely: if the first send landed, the
//! second finds the document and is refused (409), and nothing else could have made a document
//! under that id. So a 409 on such a create is the create's own earlier landing (a request
//! replayed by a failover, or resent after its answer was lost), and a request that failed
//! transiently (its connection cut, its outcome unknown) is sent again until it is answered.
//! Found by the Jepsen-style test (`docs/reliability.md`, anomaly 7): `mkdir` and `touch`
//! reported failed with their document made.

use fs_store::{BulkOp, SharedStore, StoreError};
use serde_json::Value;

use crate::error::{RenameError, Result};
use crate::resend;

/// One document to create: its fresh id, its source, and what to name it in an error.
pub(crate) struct Fresh {
    pub id: String,
    pub source: Value,
    pub name: String,
}

/// Creates every document of `docs` (ids never used before) in `index`, in one bulk
/// request, sent again while it or some of its items fail transiently ([`resend::ITEMS`]); a
/// 409 counts as created. If the resends run out, the documents still unanswered are read
/// back: those found were created.
///
/// # Errors
/// [`RenameError::Store`] naming the first document that was refused for good;
/// [`RenameError::CreateUnanswered`] for the first one whose creates were never answered and
/// which was not found when read back (a send may still land: its outcome is unknown).
pub(crate) async fn create_fresh(
    store: &SharedStore,
    index: &str,
    docs: &[Fresh],
    context: &str,
) -> Result<()> {
    let mut backoff = resend::ITEMS.start();
    let mut pending: Vec<usize> = (0..docs.len()).collect();
    loop {
        let ops = pending
            .iter()
            .map(|&i| BulkOp::Create {
                id: docs[i].id.clone(),
                source: docs[i].source.clone(),
            })
            .collect();
        let answers = match store.bulk(index, ops).await {
            Ok(answers) => answers,
            Err(e) if e.is_retryable() => pending.iter().map(|_| Err(e.clone())).collect(),
            Err(e) => return Err(RenameError::store(context.to_owned())(e)),
        };
        let mut again = Vec::new();
        let mut last = None;
        for (i, answer) in pending.into_iter().zip(answers) {
            match answer {
                // A fresh id found taken: our own earlier send landed.
                Ok(_) | Err(StoreError::Conflict { .. }) => {}
                Err(e) if e.is_retryable() => {
                    again.push(i);
                    last = Some(e);
                }
                Err(e) => return Err(RenameError::store(format!("adding `{}`", docs[i].name))(e)),
            }
        }
        let Some(e) = last else {
            return Ok(());
        };
        pending = again;
        if !backoff.wait().await {
            return read_back(store, index, docs, &pending, e).await;
        }
    }
}

/// Reads back the documents at `pending` whose creates stayed unanswered (`e` the last
/// failure): created if found. One not found was not created yet, but not surely never: a
/// send whose connection was cut, or that waits on a paused node, may still be carried out,
/// so it is reported unknown, not failed (a failed `mkdir` must not take effect later).
async fn read_back(
    store: &SharedStore,
    index: &str,
    docs: &[Fresh],
    pending: &[usize],
    e: StoreError,
) -> Result<()> {
    let ids: Vec<String> = pending.iter().map(|&i| docs[i].id.clone()).collect();
    let found = store
        .mget(index, &ids)
        .await
        .map_err(RenameError::store(format!(
            "reading back {} documents whose creates were not answered",
            ids.len()
        )))?;
    match pending.iter().zip(found).find(|(_, doc)| doc.is_none()) {
        Some((&i, _)) => Err(RenameError::CreateUnanswered {
            name: docs[i].name.clone(),
            cause: e,
        }),
        None => Ok(()),
    }
}
