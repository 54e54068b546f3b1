//! [`HeldLocks`]: the locks one client holds, with their reentrancy counts, leases and losses.

use std::collections::{BTreeMap, HashMap};

use crate::error::{LockError, Result};
use crate::outcome::Taken;
use crate::plan::LockItem;
use crate::protocol::Renewal;

/// A lock held by this client.
#[derive(Debug, Clone)]
struct Held {
    taken: Taken,
    /// How many guards of this client hold it (reentrancy).
    refcount: u32,
    /// Set when renewal found the lock taken over or removed: it is no longer ours, so release
    /// leaves the document alone and reports the loss.
    lost: bool,
    /// When our hold ends unless renewed (epoch milliseconds, by our clock): the expiry we
    /// last wrote successfully.
    expires_at: i64,
}

/// The locks a client holds, by lock document id. Ordered by id, so that renewals and
/// releases send their items in the same order every time (a seeded replay depends on it).
#[derive(Debug, Default, Clone)]
pub(crate) struct HeldLocks {
    own: BTreeMap<String, Held>,
    /// The intention locks borrowed from the process's [`Lender`](crate::lender::Lender),
    /// with how many guards of this client borrowed each.
    borrowed: BTreeMap<String, (LockItem, u32)>,
}

/// What giving up holds on some locks left to release in the store.
#[derive(Debug, Default)]
pub(crate) struct GivenUp {
    /// The locks no guard holds any more, to release.
    pub(crate) last: Vec<Taken>,
    /// The labels of locks given up that were lost before.
    pub(crate) lost_before: Vec<String>,
    /// Until when each lock in `last` (by label) is ours beyond doubt: nobody may take over or
    /// remove a lock before its lease ran out (and the clocks' skew with it).
    pub(crate) leased: HashMap<String, i64>,
}

impl HeldLocks {
    /// Returns true if the client holds nothing, of its own or borrowed.
    pub(crate) fn is_empty(&self) -> bool {
        self.own.is_empty() && self.borrowed.is_empty()
    }

    /// Records that a guard borrowed `items`.
    pub(crate) fn borrow(&mut self, items: &[LockItem]) {
        for item in items {
            self.borrowed
                .entry(item.id.clone())
                .or_insert_with(|| (item.clone(), 0))
                .1 += 1;
        }
    }

    /// Records that a guard gave back what it borrowed, `ids`.
    pub(crate) fn unborrow(&mut self, ids: &[String]) {
        for id in ids {
            if let Some((_, n)) = self.borrowed.get_mut(id) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    self.borrowed.remove(id);
                }
            }
        }
    }

    /// Returns the ids of what guards of this client borrowed.
    pub(crate) fn borrowed_ids(&self) -> Vec<String> {
        self.borrowed.keys().cloned().collect()
    }

    /// Returns true if the client holds the lock `id`.
    pub(crate) fn contains(&self, id: &str) -> bool {
        self.own.contains_key(id)
    }

    /// Returns the items of `items` that are not held yet. Those held in a covering mode need
    /// nothing more (reentrancy).
    ///
    /// # Errors
    /// [`LockError::Upgrade`] for an item held in a weaker mode.
    pub(crate) fn needed(&self, items: &[LockItem]) -> Result<Vec<LockItem>> {
        let mut needed = Vec::new();
        for item in items {
            match self.own.get(&item.id) {
                Some(h) if h.taken.item.mode.covers(item.mode) => {}
                Some(_) => return Err(LockError::Upgrade { path: item.label() }),
                None => needed.push(item.clone()),
            }
        }
        Ok(needed)
    }

    /// Records `taken` as held until `expires_at`, by no guard yet ([`HeldLocks::add_refs`]).
    pub(crate) fn hold(&mut self, taken: Taken, expires_at: i64) {
        self.own.insert(
            taken.item.id.clone(),
            Held {
                taken,
                refcount: 0,
                lost: false,
                expires_at,
            },
        );
    }

    /// Counts one more guard on each of `ids` that is held.
    pub(crate) fn add_refs<'a>(&mut self, ids: impl IntoIterator<Item = &'a str>) {
        for id in ids {
            if let Some(h) = self.own.get_mut(id) {
                h.refcount += 1;
            }
        }
    }

    /// Gives up one guard's hold on each of `ids`; returns those no guard holds any more
    /// (they are forgotten here, and are to be released in the store) and what was lost.
    /// `skew_ms`: the clock skew allowed, by which a lease ends earlier for us.
    pub(crate) fn give_up(&mut self, ids: &[String], skew_ms: i64) -> GivenUp {
        let mut given_up = GivenUp::default();
        for id in ids {
            let Some(h) = self.own.get_mut(id) else {
                continue;
            };
            if h.lost {
                given_up.lost_before.push(h.taken.item.label());
            }
            h.refcount = h.refcount.saturating_sub(1);
            if h.refcount > 0 {
                continue;
            }
            if let Some(h) = self.own.remove(id) {
                if !h.lost {
                    let until = h.expires_at.saturating_sub(skew_ms);
                    given_up.leased.insert(h.taken.item.label(), until);
                    given_up.last.push(h.taken);
                }
            }
        }
        given_up
    }

    /// Forgets `ids`, whatever holds them.
    pub(crate) fn forget(&mut self, ids: &[String]) {
        for id in ids {
            self.own.remove(id);
        }
    }

    /// Returns true if any held lock is lost.
    pub(crate) fn any_lost(&self) -> bool {
        self.own.values().any(|h| h.lost)
    }

    /// Returns until when every lock of `ids` is held (the earliest expiry written), 0 if any
    /// is lost or not held.
    pub(crate) fn held_until(&self, ids: &[String]) -> i64 {
        let mut until = i64::MAX;
        for id in ids {
            match self.own.get(id) {
                Some(h) if !h.lost => until = until.min(h.expires_at),
                _ => return 0,
            }
        }
        until
    }

    /// Returns the earliest expiry of a held lock, if any is held.
    pub(crate) fn earliest_expiry(&self) -> Option<i64> {
        self.own.values().map(|h| h.expires_at).min()
    }

    /// Returns the held items (with the mode each document really has), by id, and the
    /// borrowed ones: what a job's journal records for recovery to take over.
    pub(crate) fn items(&self) -> Vec<LockItem> {
        let own = self.own.values().map(|h| h.taken.item.clone());
        own.chain(self.borrowed.values().map(|(item, _)| item.clone()))
            .collect()
    }

    /// Returns the held ids, sorted.
    pub(crate) fn ids(&self) -> Vec<String> {
        self.own.keys().cloned().collect()
    }

    /// Returns the ids of the held locks not known to be lost: those to renew.
    pub(crate) fn renewable(&self) -> Vec<String> {
        self.own
            .iter()
            .filter(|(_, h)| !h.lost)
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Records what a renewal to `expires_at` did; returns the label of a lock found lost.
    pub(crate) fn renewed(&mut self, renewal: Renewal, expires_at: i64) -> Option<String> {
        match renewal {
            Renewal::Renewed { id, written } => {
                if let Some(h) = self.own.get_mut(&id) {
                    if let Some((version, source)) = written {
                        h.taken.version = version;
                        h.taken.source = source;
                    }
                    h.expires_at = expires_at;
                }
                None
            }
            Renewal::Lost { id } => {
                let h = self.own.get_mut(&id)?;
                h.lost = true;
                Some(h.taken.item.label())
            }
        }
    }
}
