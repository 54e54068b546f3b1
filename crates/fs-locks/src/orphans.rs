//! [`Orphans`]: what an acquisition may do about a lock whose holders died, besides waiting.

use async_trait::async_trait;

use crate::error::Blocker;

/// What an acquisition refused by a lock whose holders' leases have all ended does besides
/// waiting. Without one (the default) it waits, by the book's rule: an expired lock is not
/// free, since it may protect a half-done job, and only recovery acts on it. A caller that can
/// finish what such a holder left (fs-rename's recovery rolls the dead job forward and clears
/// its locks) gives one to the client ([`LockClientBuilder::orphans`]); an acquisition then asks
/// it once for each lock document that refuses it this way, holding no lock meanwhile, and
/// tries again at once if it did something.
///
/// [`LockClientBuilder::orphans`]: crate::LockClientBuilder::orphans
#[async_trait]
pub trait Orphans: Send + Sync {
    /// Finishes or clears what the holders of `blocker` left (their leases have ended);
    /// returns true if it did something, so that the lock may be free now.
    async fn settle(&self, blocker: &Blocker) -> bool;
}
