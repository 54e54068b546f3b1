//! Lease renewal by compare-and-set: every held document read, the renew script's twin run on
//! it, and written back conditionally.

use fs_model::lock_scripts::{self, ScriptOp};
use fs_store::BulkOp;

use crate::calls::Calls;
use crate::error::Result;
use crate::protocol::Renewal;
use crate::script_params::{renew_params, run_locally};

/// Pushes the expiry of `ids` to `expires_at`: one `mget` (other holders and waiters change
/// every held document, exclusive ones included: a waiter registers on them) and one `bulk`
/// of conditional writes.
pub(super) async fn renew(
    calls: &mut Calls<'_>,
    ids: &[String],
    expires_at: i64,
) -> Result<Vec<Renewal>> {
    let owner = calls.owner;
    let fresh = calls.mget(ids).await?;
    let params = renew_params(owner, expires_at);
    // (id, new source, version it is conditional on) for every lock still ours.
    let mut writes = Vec::new();
    let mut lost = Vec::new();
    for id in ids {
        let renewed = fresh.get(id).and_then(|doc| {
            match run_locally(&lock_scripts::RENEW, &doc.source, &params) {
                Ok((ScriptOp::Index, source)) => Some((source, doc.version)),
                _ => None,
            }
        });
        match renewed {
            Some((source, version)) => writes.push((id.clone(), source, version)),
            // Gone, or no longer lists us: it was reaped or taken over.
            None => lost.push(id.clone()),
        }
    }
    let ops = writes
        .iter()
        .map(|(id, source, version)| BulkOp::Index {
            id: id.clone(),
            source: source.clone(),
            if_version: Some(*version),
        })
        .collect();
    let results = calls.bulk(ops).await?;
    let mut renewals = Vec::with_capacity(ids.len());
    for ((id, source, _), result) in writes.into_iter().zip(results) {
        match result {
            Ok(version) => renewals.push(Renewal::Renewed {
                id,
                written: Some((version, source)),
            }),
            // Someone changed the document since we read it: the next round renews it, well
            // within the lease (renewal runs every third of it).
            Err(e) if e.is_conflict() => {}
            Err(e) if e.is_not_found() => lost.push(id),
            Err(e) => tracing::warn!(lock = %id, error = %e, "renewing a lock failed"),
        }
    }
    renewals.extend(lost.into_iter().map(|id| Renewal::Lost { id }));
    Ok(renewals)
}
