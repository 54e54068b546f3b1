//! A trap that a test sets at one step of a protocol, where a schedule of random faults would
//! strike only by chance: once a request matching `after` has come, the next `count` requests
//! matching `then` are answered 503 without being carried out ([`Action::Refuse`]), or are
//! carried out and their connection cut before the answer ([`Action::CutAfter`]). The
//! Jepsen-style test found `mkdir` reported failed, its directory made, when its lock release
//! failed; a trap places that failure (`after` the tree's bulk write, `then` the lock index)
//! on purpose.

use std::sync::Mutex;

/// The trap, if one is set.
#[derive(Debug, Default)]
pub(super) struct Trap {
    set: Mutex<Option<Armed>>,
}

#[derive(Debug)]
struct Armed {
    after: String,
    then: String,
    left: usize,
    sprung: bool,
    action: Action,
}

/// What the trap does to the requests it catches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Answered 503 `unavailable_shards_exception`, not carried out.
    Refuse,
    /// Carried out, then the connection cut before the answer is whole.
    CutAfter,
}

impl Trap {
    /// Sets the trap (replacing any other).
    pub(super) fn set(&self, after: &str, then: &str, count: usize, action: Action) {
        *self.set.lock().unwrap_or_else(|e| e.into_inner()) = Some(Armed {
            after: after.to_owned(),
            then: then.to_owned(),
            left: count,
            sprung: false,
            action,
        });
    }

    /// Clears the trap.
    pub(super) fn clear(&self) {
        *self.set.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// What to do to the request `line` (`METHOD /path?query`), if it is caught; notes the
    /// requests that spring the trap.
    pub(super) fn catches(&self, line: &str) -> Option<Action> {
        let mut set = self.set.lock().unwrap_or_else(|e| e.into_inner());
        let armed = set.as_mut()?;
        if armed.sprung && armed.left > 0 && line.contains(&armed.then) {
            armed.left -= 1;
            return Some(armed.action);
        }
        if line.contains(&armed.after) {
            armed.sprung = true;
        }
        None
    }
}
