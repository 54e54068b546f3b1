//! [`LockMode`]: Gray's four modes of multi-granularity locking and their compatibility
//! table, the one place both protocols and the document shapes take them from.

use serde::{Deserialize, Serialize};

/// The four modes of multi-granularity locking (Gray): intention locks on the ancestors of
/// what is locked, and shared (read) or exclusive (write) locks on it.
///
/// The book's tree locking uses two of them: its "shared" lock on every ancestor of a change is
/// [`LockMode::IntentExclusive`], its exclusive lock is [`LockMode::Exclusive`]. Readers of a
/// whole subtree take [`LockMode::Shared`] on it and [`LockMode::IntentShared`] on its ancestors.
/// Serialized as `IS`, `IX`, `S`, `X`; the book's words `shared` and `exclusive` (what journals
/// written before the modes recorded) read as `IX` and `X`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum LockMode {
    /// IS: something below is being read. Refuses only [`LockMode::Exclusive`].
    #[serde(rename = "IS")]
    IntentShared,
    /// IX: something below is being changed (the book's shared lock). Refuses
    /// [`LockMode::Shared`] and [`LockMode::Exclusive`].
    #[serde(rename = "IX", alias = "shared")]
    IntentExclusive,
    /// S: the whole subtree is being read and must not change. Refuses
    /// [`LockMode::IntentExclusive`] and [`LockMode::Exclusive`].
    #[serde(rename = "S")]
    Shared,
    /// X: the whole subtree is being changed. Refuses every other lock.
    #[serde(rename = "X", alias = "exclusive")]
    Exclusive,
}

impl LockMode {
    /// Every mode, weakest first.
    pub const ALL: [LockMode; 4] = [
        LockMode::IntentShared,
        LockMode::IntentExclusive,
        LockMode::Shared,
        LockMode::Exclusive,
    ];

    /// Returns Gray's abbreviation: `IS`, `IX`, `S` or `X`.
    pub fn as_str(self) -> &'static str {
        match self {
            LockMode::IntentShared => "IS",
            LockMode::IntentExclusive => "IX",
            LockMode::Shared => "S",
            LockMode::Exclusive => "X",
        }
    }

    /// Parses `IS`, `IX`, `S`, `X` (and the book's `shared` = IX and `exclusive` = X). Anything
    /// else is `None`.
    pub fn parse(text: &str) -> Option<LockMode> {
        match text {
            "IS" => Some(LockMode::IntentShared),
            "IX" | "shared" => Some(LockMode::IntentExclusive),
            "S" => Some(LockMode::Shared),
            "X" | "exclusive" => Some(LockMode::Exclusive),
            _ => None,
        }
    }

    /// Returns true if grants in `self` and `other` on the same path by two owners can
    /// coexist: Gray's compatibility table.
    pub fn compatible(self, other: LockMode) -> bool {
        use LockMode::*;
        matches!(
            (self, other),
            (IntentShared, IntentShared | IntentExclusive | Shared)
                | (IntentExclusive, IntentShared | IntentExclusive)
                | (Shared, IntentShared | Shared)
        )
    }

    /// Returns true if holding `self` makes a request for `other` on the same path by the same
    /// owner needless (reentrancy).
    pub fn covers(self, other: LockMode) -> bool {
        use LockMode::*;
        self == other
            || self == Exclusive
            || (other == IntentShared && matches!(self, IntentExclusive | Shared))
    }

    /// Returns true for the intention modes (IS, IX), which are taken on ancestors.
    pub fn is_intention(self) -> bool {
        matches!(self, LockMode::IntentShared | LockMode::IntentExclusive)
    }

    /// Returns the intention mode a lock in this mode takes on every ancestor: IS for S, IX
    /// for X.
    pub fn intention(self) -> LockMode {
        match self {
            LockMode::IntentShared | LockMode::Shared => LockMode::IntentShared,
            LockMode::IntentExclusive | LockMode::Exclusive => LockMode::IntentExclusive,
        }
    }
}

impl std::fmt::Display for LockMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
