//! The values the search is made of: a call that takes part in it ([`Part`]), and the bit
//! sets of calls placed. Below both the search (`linear.rs`) and its dead-end test
//! (`dead_end.rs`), which read them.

/// A call that takes part in the search.
#[derive(Debug, Clone)]
pub(super) struct Part {
    /// Its index in `History::calls`.
    pub(super) index: usize,
    /// When it was invoked.
    pub(super) invoked: u64,
    /// When it completed; `u64::MAX` for an optional call (it never holds others back).
    pub(super) completed: u64,
    /// An ok call (must be placed), or an optional one (may be).
    pub(super) required: bool,
    /// For an optional call that must take effect before it completed, if at all: its
    /// completion (it cannot come after a call invoked later); else `u64::MAX`.
    pub(super) expires: u64,
}

impl Part {
    /// An optional call that may come at any time after its invocation (an unknown call):
    /// the only kind the canonical order of [`super::commute`] moves later.
    pub(super) fn movable(&self) -> bool {
        !self.required && self.expires == u64::MAX
    }
}

/// Whether bit `pos` is set.
pub(super) fn is_set(bits: &[u64], pos: usize) -> bool {
    bits.get(pos / 64)
        .is_some_and(|word| word & (1 << (pos % 64)) != 0)
}

/// Sets bit `pos`.
pub(super) fn set(bits: &mut [u64], pos: usize) {
    if let Some(word) = bits.get_mut(pos / 64) {
        *word |= 1 << (pos % 64);
    }
}
