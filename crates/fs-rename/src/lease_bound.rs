//! A write made under locks that may not outlive them: [`within_lease`].
//!
//! A store may keep sending a write for a long while (the Elasticsearch store resends one
//! refused with 429 or 503 for up to its retry deadline, 30 s). Past the locks' lease a
//! recoverer may clear them and another job change what the write relies on: found by the
//! Jepsen-style test on a real cluster (`docs/reliability.md`, anomaly 8), where `mkdir /d/f`
//! waited out the flood-stage block (which refused its lock renewals too), recovery cleared
//! its expired locks, `mv /d /a/b` moved the parent, and the create landed after it: a
//! directory under a parent that was gone. So the write is made only while the locks are
//! certainly held, and given up, its outcome unknown, once they may no longer be.

use std::future::Future;

use fs_locks::LockClient;
use fs_model::FsPath;

use crate::error::{RenameError, Result};

/// Runs `write`, the one write of an operation on `path` under `client`'s locks, if they are
/// certainly still held, and for no longer than they certainly are as it goes out: the write
/// is dropped (no resend goes out after that) once the lease left then has passed. Renewals
/// made while it is out do not extend it: the lease is not read again meanwhile, since a
/// renewal that the store keeps resending holds the client's locks (and so
/// [`LockClient::lease_left`]) until it is answered, which is just when the bound matters.
///
/// # Errors
/// [`RenameError::Lock`] (`LeaseLost`) before the write; [`RenameError::WriteUnanswered`] if
/// the lease ran out while it was out (the write may have happened); or the write's own.
pub(crate) async fn within_lease<T>(
    client: &LockClient,
    path: &FsPath,
    write: impl Future<Output = Result<T>>,
) -> Result<T> {
    client.ensure_held(path.as_str()).await?;
    // Nothing held (no locks taken): nothing to outlive.
    let Some(left) = client.lease_left().await else {
        return write.await;
    };
    let started = tokio::time::Instant::now();
    tokio::select! {
        // An answer that came with the deadline counts.
        biased;
        written = write => written,
        () = tokio::time::sleep(left) => Err(RenameError::WriteUnanswered {
            path: path.clone(),
            waited_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        }),
    }
}
