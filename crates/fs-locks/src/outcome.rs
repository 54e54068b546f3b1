//! What lock operations come to: the public outcomes ([`Grant`], [`ReleaseReport`],
//! [`ReleasedAfter`]), the write a release may depend on ([`FirstWrite`]), and the protocols'
//! own results ([`Taken`], [`Attempt`], [`Released`]). Plain values, no I/O.

use std::time::Duration;

use fs_model::FsPath;
use fs_store::{BulkOp, StoreError, Version};
use serde_json::Value;

use crate::error::{Blocker, Result};
use crate::plan::LockItem;

/// What an acquisition cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Grant {
    /// Store round trips, over all attempts (including undoing refused ones).
    pub round_trips: u32,
    /// Scripted updates sent again because they lost a race with another update of the same
    /// lock document (Elasticsearch's 409 between two scripted updates); 0 with
    /// compare-and-set, whose conflicts are rounds of their own.
    pub races: u32,
    /// Attempts made; 1 when nothing was in the way.
    pub attempts: u32,
    /// Time from the first attempt to the grant.
    pub waited: Duration,
}

/// What a release cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReleaseReport {
    /// Store round trips.
    pub round_trips: u32,
    /// Release items sent again because they lost a race (see [`Grant::races`]).
    pub races: u32,
}

/// A write that a release depends on, made just before it: a job's journal entry closed
/// (see [`LockGuard::release_after`](crate::LockGuard)).
#[derive(Debug, Clone, PartialEq)]
pub struct FirstWrite {
    /// The index written (not the lock index).
    pub index: String,
    /// The write: conditional, so that it fails rather than overwrite a change it did not see.
    pub op: BulkOp,
    /// Writes that land with it or not at all (a small rename's whole rewrite, with its
    /// journal entry): only where the store chains the release
    /// ([`LockClient::chains_release`](crate::LockClient::chains_release)); elsewhere such a
    /// write is refused and nothing changes.
    pub with: Option<fs_store::WithFirst>,
}

/// How [`LockGuard::release_after`](crate::LockGuard) ended.
#[derive(Debug, Clone, PartialEq)]
pub enum ReleasedAfter {
    /// The write landed; then the locks were released, or the release failed (as
    /// `LockGuard::release` fails).
    Released(Result<ReleaseReport>),
    /// The write did not land (why): nothing was released, and the locks are no longer
    /// renewed, so they stay until their leases expire (as after `LockGuard::abandon`).
    FirstFailed(StoreError),
}

/// A lock document this owner has written (or adopted): what is needed to release or renew it
/// without reading it first.
#[derive(Debug, Clone)]
pub(crate) struct Taken {
    /// The item, with the mode the document really has (an adopted exclusive document may
    /// cover a shared request).
    pub(crate) item: LockItem,
    pub(crate) version: Version,
    pub(crate) source: Value,
}

impl Taken {
    /// An item sent in a write whose fate is unknown: what is given back if it landed. The
    /// version is not known (a release reads it first, or needs none).
    pub(crate) fn unknown(item: LockItem, source: Value) -> Taken {
        Taken {
            item,
            version: Version {
                seq_no: -1,
                primary_term: -1,
            },
            source,
        }
    }

    /// Where this lock goes in a release: the targets (S, X) before the intention locks,
    /// deepest first within each, so that no ancestor becomes free while a lock below it is
    /// still held.
    pub(crate) fn release_key(&self) -> (bool, std::cmp::Reverse<usize>, String) {
        let depth = self.item.path.as_ref().map_or(0, FsPath::depth);
        (
            self.item.mode.is_intention(),
            std::cmp::Reverse(depth),
            self.item.id.clone(),
        )
    }
}

/// The outcome of one attempt of a protocol.
pub(crate) enum Attempt {
    /// Every item is now held; these are the documents written or adopted.
    Granted(Vec<Taken>),
    /// Refused; nothing is held. `blocker` is the first refusal; `refusing` every item that
    /// refused, where the request may register as a waiter.
    Refused {
        blocker: Blocker,
        refusing: Vec<LockItem>,
    },
}

impl Attempt {
    /// Refused by `blocker`, with nowhere to register as a waiter.
    pub(crate) fn refused(blocker: Blocker) -> Attempt {
        Attempt::Refused {
            blocker,
            refusing: Vec::new(),
        }
    }
}

/// What a release found.
#[derive(Debug, Default)]
pub(crate) struct Released {
    /// Locks that were no longer ours (taken over or removed after our lease expired).
    pub(crate) lost: Vec<String>,
    /// Why the write to make before the release did not land, if it did not: then nothing
    /// was released (see `LockGuard::release_after`).
    pub(crate) first_failed: Option<StoreError>,
}

impl Released {
    /// Nothing released, because the write to make first did not land (why).
    pub(crate) fn first_failed(why: StoreError) -> Released {
        Released {
            lost: Vec::new(),
            first_failed: Some(why),
        }
    }
}
