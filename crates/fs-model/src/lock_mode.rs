//! The four lock modes and Gray's tables, defined once: the typed locks of `fs-locks`, the
//! Rust twins of the lock scripts and the painless sources (whose tables are built from these
//! at compile time, see [`crate::lock_scripts`]) all read them from here.

use serde::{Deserialize, Serialize};

/// The four modes of multi-granularity locking (Gray): intention locks on the ancestors of
/// what is locked, and shared (read) or exclusive (write) locks on it.
///
/// The book's tree locking uses two of them: its "shared" lock on every ancestor of a change is
/// [`LockMode::IntentExclusive`], its exclusive lock is [`LockMode::Exclusive`]. Readers of a
/// whole subtree take [`LockMode::Shared`] on it and [`LockMode::IntentShared`] on its ancestors.
/// Serialized as `IS`, `IX`, `S`, `X`; the book's words `shared` and `exclusive` (what journals
/// written before the modes recorded) read as `IX` and `X`.
///
/// ```
/// use fs_model::LockMode;
///
/// assert!(LockMode::IntentShared.compatible(LockMode::Shared));
/// assert!(!LockMode::IntentExclusive.compatible(LockMode::Shared));
/// assert!(LockMode::Exclusive.covers(LockMode::IntentShared));
/// ```
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
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

/// Gray's compatibility table: whether grants in the row's mode and the column's mode on the
/// same path by two owners can coexist. Rows and columns in the order of [`LockMode::ALL`]
/// (IS, IX, S, X).
const COMPATIBLE: [[bool; 4]; 4] = [
    //  IS     IX     S      X
    [true, true, true, false],    // IS
    [true, true, false, false],   // IX
    [true, false, true, false],   // S
    [false, false, false, false], // X
];

/// Whether holding the row's mode makes a request for the column's mode on the same path by
/// the same owner needless (reentrancy). Same order as [`COMPATIBLE`].
const COVERS: [[bool; 4]; 4] = [
    //  IS     IX     S      X
    [true, false, false, false], // IS
    [true, true, false, false],  // IX
    [true, false, true, false],  // S
    [true, true, true, true],    // X
];

impl LockMode {
    /// Every mode, weakest first: the order of the rows and columns of the tables.
    pub const ALL: [LockMode; 4] = [
        LockMode::IntentShared,
        LockMode::IntentExclusive,
        LockMode::Shared,
        LockMode::Exclusive,
    ];

    /// Returns Gray's abbreviation: `IS`, `IX`, `S` or `X`.
    pub const fn as_str(self) -> &'static str {
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

    /// Returns the mode's place in [`LockMode::ALL`] (the painless scripts' `rank`).
    pub const fn rank(self) -> usize {
        self as usize
    }

    /// Returns true if grants in `self` and `other` on the same path by two owners can
    /// coexist: Gray's compatibility table.
    pub const fn compatible(self, other: LockMode) -> bool {
        COMPATIBLE[self.rank()][other.rank()]
    }

    /// Returns true if holding `self` makes a request for `other` on the same path by the same
    /// owner needless (reentrancy).
    pub const fn covers(self, other: LockMode) -> bool {
        COVERS[self.rank()][other.rank()]
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

/// The compatibility table as the painless scripts hold it: 16 letters `y` or `n`, row after
/// row in the order of [`LockMode::ALL`].
pub(crate) const COMPATIBLE_LETTERS: [u8; 16] = letters(&COMPATIBLE);

/// The covering table as the painless scripts hold it (see [`COMPATIBLE_LETTERS`]).
pub(crate) const COVERS_LETTERS: [u8; 16] = letters(&COVERS);

const fn letters(table: &[[bool; 4]; 4]) -> [u8; 16] {
    let mut out = [b'n'; 16];
    let mut i = 0;
    while i < 16 {
        if table[i / 4][i % 4] {
            out[i] = b'y';
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tables_say_what_the_modes_promise() {
        use LockMode::*;
        // Read from the modes' docs rather than from the tables under test.
        for a in LockMode::ALL {
            for b in LockMode::ALL {
                let refuses = |m: LockMode, n: LockMode| match m {
                    IntentShared => n == Exclusive,
                    IntentExclusive => matches!(n, Shared | Exclusive),
                    Shared => matches!(n, IntentExclusive | Exclusive),
                    Exclusive => true,
                };
                assert_eq!(a.compatible(b), !refuses(a, b), "{a} with {b}");
                assert_eq!(a.compatible(b), b.compatible(a), "{a} with {b}: symmetric");
                let covers = a == b || a == Exclusive || (b == IntentShared && a != IntentShared);
                assert_eq!(a.covers(b), covers, "{a} covers {b}");
            }
        }
        assert_eq!(&COMPATIBLE_LETTERS, b"yyynyynnynynnnnn");
        assert_eq!(&COVERS_LETTERS, b"ynnnyynnynynyyyy");
    }

    #[test]
    fn modes_read_the_books_words() {
        for mode in LockMode::ALL {
            assert_eq!(LockMode::parse(mode.as_str()), Some(mode));
            let json = serde_json::to_value(mode).expect("a mode serializes");
            assert_eq!(json, mode.as_str());
            assert_eq!(serde_json::from_value::<LockMode>(json).ok(), Some(mode));
            assert_eq!(LockMode::ALL[mode.rank()], mode);
        }
        assert_eq!(LockMode::parse("shared"), Some(LockMode::IntentExclusive));
        let exclusive = serde_json::from_value::<LockMode>("exclusive".into()).ok();
        assert_eq!(exclusive, Some(LockMode::Exclusive));
        assert_eq!(LockMode::parse("U"), None);
    }
}
