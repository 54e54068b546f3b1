//! [`LockGuard`]: proof that a set of locks is held, and the way to give them back.

use crate::client::LockClient;
use crate::error::Result;
use crate::outcome::{FirstWrite, Grant, ReleaseReport, ReleasedAfter};
use crate::release::IfFirstFails;

/// A set of held locks. Release it with [`LockGuard::release`]; a guard dropped without that
/// still releases its locks, in a background task, and logs a warning: code paths should
/// release explicitly so they can see and report a failure.
#[derive(Debug)]
#[must_use = "locks are held until the guard is released"]
pub struct LockGuard {
    client: LockClient,
    ids: Vec<String>,
    /// The intention locks borrowed from the process's lender, given back after `ids`.
    borrowed: Vec<String>,
    wanted: String,
    grant: Grant,
    released: bool,
    keep_on_drop: bool,
}

impl LockGuard {
    pub(crate) fn new(client: LockClient, ids: Vec<String>, wanted: String, grant: Grant) -> Self {
        LockGuard {
            client,
            ids,
            borrowed: Vec::new(),
            wanted,
            grant,
            released: false,
            keep_on_drop: false,
        }
    }

    /// The guard of `borrowed` too, intention locks borrowed from the client's lender.
    pub(crate) fn with_borrowed(mut self, borrowed: Vec<String>) -> Self {
        self.borrowed = borrowed;
        self
    }

    /// Returns the ids of the intention locks this guard borrowed from its process (see
    /// [`crate::SharedIntentions`]), which the process holds for it.
    pub fn borrowed(&self) -> &[String] {
        &self.borrowed
    }

    /// Returns what the acquisition cost.
    pub fn grant(&self) -> Grant {
        self.grant
    }

    /// Returns a description of what is held, e.g. "tree lock on `/clinton`".
    pub fn wanted(&self) -> &str {
        &self.wanted
    }

    /// Returns the ids of the lock documents this guard holds, in acquisition order.
    pub fn ids(&self) -> &[String] {
        &self.ids
    }

    /// Returns the client that holds these locks.
    pub fn client(&self) -> &LockClient {
        &self.client
    }

    /// Releases the locks: exclusive first, then shared from the deepest path up.
    ///
    /// # Errors
    /// [`LockError::LeaseLost`](crate::LockError::LeaseLost) if a lock had been taken over
    /// (the others are released all the same); [`LockError::Store`](crate::LockError::Store)
    /// if the store failed, in which case the leases expire what is left.
    pub async fn release(mut self) -> Result<ReleaseReport> {
        self.released = true;
        let ids = std::mem::take(&mut self.ids);
        let released = self.client.release_ids(&ids).await;
        let borrowed = std::mem::take(&mut self.borrowed);
        self.client
            .return_borrowed(&borrowed, released.is_err())
            .await;
        released
    }
}

impl LockGuard {
    /// Makes `first`, then releases the locks if it landed. Where the store
    /// [chains](LockClient::chains_release) them, both go in one request and one transaction:
    /// a job closes its journal entry and releases its locks in one round trip, and neither
    /// lands without the other. Elsewhere `first` goes alone, and the release follows once it
    /// landed.
    pub async fn release_after(mut self, first: FirstWrite) -> ReleasedAfter {
        self.released = true;
        let ids = std::mem::take(&mut self.ids);
        let released = self
            .client
            .release_ids_after(&ids, Some(first), IfFirstFails::GiveUp)
            .await;
        // Where the write or the release failed, what the job's locks protect is not known
        // to be finished: what it borrowed is left to expire with them.
        let failed = !matches!(released, ReleasedAfter::Released(Ok(_)));
        let borrowed = std::mem::take(&mut self.borrowed);
        self.client.return_borrowed(&borrowed, failed).await;
        released
    }

    /// [`LockGuard::release_after`], where a `first` that does not land changes nothing: the
    /// guard comes back ([`ReleasedOrKept::Kept`]) still holding its locks, for the job to go
    /// on the usual way. So a small rename can send its whole rewrite with its journal entry
    /// and its release ([`FirstWrite::with`]), and fall back to the usual steps if any of it
    /// does not land.
    pub async fn release_after_or_keep(mut self, first: FirstWrite) -> ReleasedOrKept {
        let released = self
            .client
            .release_ids_after(&self.ids, Some(first), IfFirstFails::Keep)
            .await;
        let released = match released {
            ReleasedAfter::FirstFailed(why) => return ReleasedOrKept::Kept(self, why),
            ReleasedAfter::Released(released) => released,
        };
        self.released = true;
        self.ids.clear();
        let borrowed = std::mem::take(&mut self.borrowed);
        self.client
            .return_borrowed(&borrowed, released.is_err())
            .await;
        ReleasedOrKept::Released(released)
    }

    /// Makes a drop without [`LockGuard::release`] leave the locks to expire instead of
    /// releasing them: once a rename has journaled itself, a job whose future is dropped
    /// half-way must leave its tree locked for recovery, not open it to others.
    pub fn keep_on_drop(&mut self) {
        self.keep_on_drop = true;
    }

    /// Stops holding the locks without releasing them: they are no longer renewed and stay in
    /// the store until their leases expire, for recovery to take over. A rename job abandons
    /// its locks when it stops half-way, since releasing them would let others see and change
    /// a half-renamed tree.
    pub async fn abandon(mut self) {
        self.released = true;
        let ids = std::mem::take(&mut self.ids);
        // The caller says so in its own words (a job's error names its journal entry): a
        // warning here would only repeat it, raw, among a user's messages.
        tracing::info!(wanted = %self.wanted, "abandoning locks to expire for recovery");
        self.client.forget(&ids).await;
        let borrowed = std::mem::take(&mut self.borrowed);
        self.client.return_borrowed(&borrowed, true).await;
    }
}

/// How [`LockGuard::release_after_or_keep`] ended.
#[derive(Debug)]
pub enum ReleasedOrKept {
    /// The write landed (with what goes with it); then the locks were released, or their
    /// release failed, as [`LockGuard::release`] tells it.
    Released(Result<ReleaseReport>),
    /// The write did not land (why): nothing changed, and the guard still holds its locks.
    Kept(LockGuard, fs_store::StoreError),
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        if self.keep_on_drop {
            // The client forgets them when it is dropped, which stops their renewal.
            tracing::info!(wanted = %self.wanted, "lock guard dropped; its locks are left to expire for recovery");
            crate::background::kept();
            let borrowed = std::mem::take(&mut self.borrowed);
            if !borrowed.is_empty() {
                let client = self.client.clone();
                if let Ok(handle) = tokio::runtime::Handle::try_current() {
                    crate::background::spawn(&handle, async move {
                        client.return_borrowed(&borrowed, true).await;
                    });
                }
            }
            return;
        }
        // A verb stopped by Ctrl-C drops its guard; the process waits for this release.
        tracing::info!(wanted = %self.wanted, "lock guard dropped without release; releasing in the background");
        let ids = std::mem::take(&mut self.ids);
        let borrowed = std::mem::take(&mut self.borrowed);
        let client = self.client.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => crate::background::spawn(&handle, async move {
                let released = client.release_ids(&ids).await;
                if let Err(e) = &released {
                    tracing::warn!(error = %e, "background release failed; leases will expire the locks");
                }
                client.return_borrowed(&borrowed, released.is_err()).await;
            }),
            Err(_) => tracing::warn!("no runtime to release on; leases will expire the locks"),
        }
    }
}
