//! How the connection's time is spent: the time each kind of call held it, for benchmarks and
//! profiles. One connection serves every call of a [`SqliteStore`](super::SqliteStore) in
//! turn, so under load its busy share, and the time a job's calls hold it, bound the rate of
//! everything built on the store.

use std::collections::BTreeMap;
use std::time::Duration;

/// The calls a store's connection served since it was opened: per kind of call (`"bulk"`,
/// `"search"`, `"bulk_update"`, ...), how many and how long they held the connection (from
/// taking it to giving it back: the database's work, and the thread's waits inside it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConnectionUse {
    /// Per kind of call.
    pub calls: BTreeMap<&'static str, CallUse>,
}

/// How many calls of one kind the connection served, and how long they held it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallUse {
    /// How many.
    pub count: u64,
    /// How long they held the connection, in all.
    pub held: Duration,
}

impl ConnectionUse {
    /// Adds one call of `kind` that held the connection for `held`.
    pub(super) fn add(&mut self, kind: &'static str, held: Duration) {
        let call = self.calls.entry(kind).or_default();
        call.count += 1;
        call.held += held;
    }

    /// What was used after `earlier`, a snapshot of the same store taken before this one.
    pub fn since(&self, earlier: &ConnectionUse) -> ConnectionUse {
        let calls = self
            .calls
            .iter()
            .map(|(&kind, now)| {
                let then = earlier.calls.get(kind).copied().unwrap_or_default();
                let call = CallUse {
                    count: now.count.saturating_sub(then.count),
                    held: now.held.saturating_sub(then.held),
                };
                (kind, call)
            })
            .filter(|(_, call)| call.count > 0)
            .collect();
        ConnectionUse { calls }
    }

    /// How long every call held the connection, in all.
    pub fn held(&self) -> Duration {
        self.calls.values().map(|c| c.held).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_keeps_only_the_calls_made_after() {
        let mut before = ConnectionUse::default();
        before.add("search", Duration::from_micros(200));
        let mut after = before.clone();
        after.add("search", Duration::from_micros(300));
        after.add("bulk", Duration::from_micros(1_000));
        after.add("bulk", Duration::from_micros(500));
        let used = after.since(&before);
        assert_eq!(
            used.calls.get("search"),
            Some(&CallUse {
                count: 1,
                held: Duration::from_micros(300)
            })
        );
        assert_eq!(used.calls.get("bulk").map(|c| c.count), Some(2));
        assert_eq!(used.held(), Duration::from_micros(1_800));
        assert!(before.since(&before).calls.is_empty());
    }
}
