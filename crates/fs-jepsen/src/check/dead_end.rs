//! Dead ends: states of the search from which no order of the calls left can succeed, found
//! as soon as the search reaches them rather than after it has tried every order of the
//! calls after them.
//!
//! It matters because a wrong order of two concurrent calls often shows much later: a copy
//! placed after a rename of part of its source, rather than before, copies less, and only
//! a delete of the part not copied, forty calls on, fails. Between the two the search would
//! try every order of the calls in flight, again and again.
//!
//! Everything here rests on one fact of the model: a document is only ever taken from a
//! path by a `mv` or `rm` of that path or of one above it (nothing overwrites: every call
//! that makes or brings a document needs its path free), and only brought to a path by a
//! `mkdir` or `touch` of it, or a `mv` or `cp` to it or to one above it. So:
//!
//! - the end: a path whose document is not the end's needs a taker left, an end document
//!   not at its path a bringer left;
//! - the ok calls left (each must still be placed): one that needs a path there (`rm`,
//!   the source of `mv` and `cp`, the parent of what `mkdir`, `mv` and `cp` make) needs it
//!   there or a bringer left; one that needs a path free (`mkdir`, the destination of `mv`
//!   and `cp`) needs it free or a taker left. The bringer or taker must come before the
//!   ok call, so it must have been invoked before the ok call completed.
//!
//! Each test gives up only a state that cannot succeed: the search stays exhaustive.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::Bound;

use super::part::{is_set, Part};
use crate::history::{Entry, History, Op};
use crate::model::{ancestors, parent, Tree};

/// Paths to the calls (positions in the search) that act on them in one way.
type Index<'h> = HashMap<&'h str, Vec<usize>>;

/// What the calls of a search can still do, indexed by path.
#[derive(Debug)]
pub(super) struct Futures<'h> {
    history: &'h History,
    /// The calls of the search, by position (in invocation order).
    parts: Vec<Part>,
    /// Calls that can take what is at a path or under it: `mv` from it, `rm` of it.
    takers: Index<'h>,
    /// Calls that can make a document at exactly a path: `mkdir`, `touch`.
    makers: Index<'h>,
    /// Calls that can bring documents to a path or under it: `mv` and `cp` to it.
    bringers: Index<'h>,
    /// Ok calls that need a path there, by path (sorted, to find those under a path).
    need_there: BTreeMap<&'h str, Vec<usize>>,
    /// Ok calls that need a path free, by path.
    need_free: BTreeMap<&'h str, Vec<usize>>,
    /// The end tree by path (the first entry of a path read twice: the end match says it),
    /// sorted, to find the end paths under a path.
    end: BTreeMap<&'h str, &'h Entry>,
    /// The ids of the start tree.
    start_ids: HashSet<String>,
}

impl<'h> Futures<'h> {
    /// The indexes for the calls of a search, `parts` by position (in invocation order).
    pub(super) fn new(history: &'h History, parts: Vec<Part>) -> Futures<'h> {
        let mut futures = Futures {
            history,
            parts: Vec::new(),
            takers: HashMap::new(),
            makers: HashMap::new(),
            bringers: HashMap::new(),
            need_there: BTreeMap::new(),
            need_free: BTreeMap::new(),
            end: BTreeMap::new(),
            start_ids: history.start.iter().map(|e| e.id.clone()).collect(),
        };
        for (pos, part) in parts.iter().enumerate() {
            let mut there = Vec::new();
            let mut free = Vec::new();
            match &history.calls[part.index].op {
                Op::Mkdir { path } => {
                    futures.makers.entry(path).or_default().push(pos);
                    free.push(path.as_str());
                    there.extend(parent(path));
                }
                // A touch of a path that is there needs nothing: it needs no parent then.
                Op::Touch { path } => futures.makers.entry(path).or_default().push(pos),
                Op::Mv { from, to } | Op::Cp { from, to } => {
                    if matches!(history.calls[part.index].op, Op::Mv { .. }) {
                        futures.takers.entry(from).or_default().push(pos);
                    }
                    futures.bringers.entry(to).or_default().push(pos);
                    there.push(from.as_str());
                    there.extend(parent(to));
                    free.push(to.as_str());
                }
                Op::Rm { path } => {
                    futures.takers.entry(path).or_default().push(pos);
                    there.push(path.as_str());
                }
            }
            // Only an ok call must be placed: only its needs must be met.
            if part.required {
                for path in there {
                    futures.need_there.entry(path).or_default().push(pos);
                }
                for path in free {
                    futures.need_free.entry(path).or_default().push(pos);
                }
            }
        }
        for entry in &history.end {
            futures.end.entry(entry.path.as_str()).or_insert(entry);
        }
        futures.parts = parts;
        futures
    }

    /// Why the start state is a dead end, if it is: every test, on every path.
    pub(super) fn at_start(&self, tree: &Tree, placed: &[u64]) -> Option<String> {
        for path in self.need_there.keys() {
            if let Some(why) = self.need_there_met(tree, placed, path) {
                return Some(why);
            }
        }
        for path in self.need_free.keys() {
            if let Some(why) = self.need_free_met(tree, placed, path) {
                return Some(why);
            }
        }
        self.end_reachable(tree, placed)
    }

    /// Why the state `after`, made from `before` by `op`, is a dead end, if it is. Only
    /// what `op` changed can make a test fail that passed before `op`: a path it took (or
    /// one under it) that is needed there or is in the end; a path it brought that is
    /// needed free or is not as in the end; or, if `op` was the last call able to bring
    /// them, the paths needed there or in the end under where it brings. (The last call
    /// able to take a path took it, if it took anything: nothing is left to test.)
    pub(super) fn after(
        &self,
        before: &Tree,
        op: &Op,
        after: &Tree,
        placed: &[u64],
    ) -> Option<String> {
        let (took, brought) = match op {
            Op::Mkdir { path } | Op::Touch { path } => (None, Some(path)),
            Op::Mv { from, to } => (Some(from), Some(to)),
            Op::Cp { to, .. } => (None, Some(to)),
            Op::Rm { path } => (Some(path), None),
        };
        if let Some(from) = took {
            for (path, _) in before.under(from) {
                let why = self
                    .need_there_met(after, placed, path)
                    .or_else(|| self.end_bringer_met(after, placed, path));
                if why.is_some() {
                    return why;
                }
            }
        }
        if let Some(to) = brought {
            // A touch of a path that is there brings nothing.
            if before.get(to).is_none() {
                for (path, _) in after.under(to) {
                    let why = self
                        .need_free_met(after, placed, path)
                        .or_else(|| self.end_taker_met(after, placed, path));
                    if why.is_some() {
                        return why;
                    }
                }
            }
            for (path, _) in under(&self.need_there, to) {
                if let Some(why) = self.need_there_met(after, placed, path) {
                    return Some(why);
                }
            }
            for (path, _) in under(&self.end, to) {
                if let Some(why) = self.end_bringer_met(after, placed, path) {
                    return Some(why);
                }
            }
        }
        None
    }

    /// Why an ok call left that needs `path` there can never be placed, if one cannot:
    /// `path` is not there and no call left can bring it before the call must be placed.
    fn need_there_met(&self, tree: &Tree, placed: &[u64], path: &str) -> Option<String> {
        if tree.get(path).is_some() {
            return None;
        }
        let waiting = self.first_due(&self.need_there, placed, path)?;
        if self.can_bring(placed, path, waiting.completed) {
            return None;
        }
        Some(format!(
            "{} needs {path}, which is not there, and no call left can bring it in time",
            self.describe(waiting)
        ))
    }

    /// Why an ok call left that needs `path` free can never be placed, if one cannot:
    /// `path` is taken and no call left can take it away before the call must be placed.
    fn need_free_met(&self, tree: &Tree, placed: &[u64], path: &str) -> Option<String> {
        // Free: nothing to take.
        tree.get(path)?;
        let waiting = self.first_due(&self.need_free, placed, path)?;
        if self.can_take(placed, path, waiting.completed) {
            return None;
        }
        Some(format!(
            "{} needs {path} free, and no call left can take what is there in time",
            self.describe(waiting)
        ))
    }

    /// Why `tree` can never become the end tree, if it cannot: every path of both.
    fn end_reachable(&self, tree: &Tree, placed: &[u64]) -> Option<String> {
        tree.entries()
            .keys()
            .find_map(|path| self.end_taker_met(tree, placed, path))
            .or_else(|| {
                self.end
                    .keys()
                    .find_map(|path| self.end_bringer_met(tree, placed, path))
            })
    }

    /// Why `tree` can never become the end tree because of what is at `path`, if it
    /// cannot: something not as at the end, and no call left can take it.
    fn end_taker_met(&self, tree: &Tree, placed: &[u64], path: &str) -> Option<String> {
        let (kind, slot) = tree.get(path)?;
        let as_at_end = self
            .end
            .get(path)
            .is_some_and(|e| e.kind == *kind && slot.fits(&e.id, &self.start_ids));
        if as_at_end || self.can_take(placed, path, u64::MAX) {
            return None;
        }
        Some(format!(
            "{path} is not as at the end, and no call left can move or remove it"
        ))
    }

    /// Why `tree` can never become the end tree because of the end document at `path`, if
    /// it cannot: it is not there, and no call left can bring it.
    fn end_bringer_met(&self, tree: &Tree, placed: &[u64], path: &str) -> Option<String> {
        let entry = self.end.get(path)?;
        let as_at_end = tree
            .get(path)
            .is_some_and(|(k, s)| *k == entry.kind && s.fits(&entry.id, &self.start_ids));
        if as_at_end || self.can_bring(placed, path, u64::MAX) {
            return None;
        }
        Some(format!(
            "{path} (id {}) is not there as at the end, and no call left can bring it",
            entry.id
        ))
    }

    /// Whether a call left, invoked by `due`, can take what is at `path`.
    fn can_take(&self, placed: &[u64], path: &str, due: u64) -> bool {
        ancestors(path).any(|p| self.left(&self.takers, placed, p, due))
    }

    /// Whether a call left, invoked by `due`, can bring a document to `path`.
    fn can_bring(&self, placed: &[u64], path: &str, due: u64) -> bool {
        self.left(&self.makers, placed, path, due)
            || ancestors(path).any(|p| self.left(&self.bringers, placed, p, due))
    }

    /// Whether a call at `path` in `index`, invoked by `due`, is left (not placed). A call
    /// invoked later cannot come before one that completed at `due`.
    fn left(&self, index: &Index<'_>, placed: &[u64], path: &str, due: u64) -> bool {
        index.get(path).is_some_and(|calls| {
            calls
                .iter()
                .take_while(|&&pos| self.parts.get(pos).is_some_and(|p| p.invoked <= due))
                .any(|&pos| !is_set(placed, pos))
        })
    }

    /// The ok call left in `index` at `path` that completed first (the first that must be
    /// placed), if any.
    fn first_due(
        &self,
        index: &BTreeMap<&str, Vec<usize>>,
        placed: &[u64],
        path: &str,
    ) -> Option<&Part> {
        index
            .get(path)?
            .iter()
            .filter(|&&pos| !is_set(placed, pos))
            .filter_map(|&pos| self.parts.get(pos))
            .min_by_key(|part| part.completed)
    }

    /// A call, for messages: `#12 `mv /a /b``.
    fn describe(&self, part: &Part) -> String {
        match self.history.calls.get(part.index) {
            Some(call) => format!("#{} `{}`", part.index, call.op),
            None => format!("#{}", part.index),
        }
    }
}

/// The entries of `map` at `top` or under it (see [`Tree::under`]).
fn under<'a, 'h, V>(
    map: &'a BTreeMap<&'h str, V>,
    top: &str,
) -> impl Iterator<Item = (&'a &'h str, &'a V)> {
    let low = format!("{top}/");
    let high = format!("{top}0");
    let below: Vec<_> = if top == "/" {
        map.iter().filter(|(p, _)| **p != "/").collect()
    } else {
        map.range::<str, _>((
            Bound::Included(low.as_str()),
            Bound::Excluded(high.as_str()),
        ))
        .collect()
    };
    map.get_key_value(top).into_iter().chain(below)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{Call, Kind, Outcome, Via};

    fn dir(path: &str) -> Entry {
        Entry {
            path: path.into(),
            id: format!("id{path}"),
            kind: Kind::Dir,
        }
    }

    /// A history of ok calls `(op, invoked, completed)` from `/` and `/a`.
    fn history(calls: Vec<(Op, u64, u64)>, end: Vec<Entry>) -> History {
        History {
            start: vec![dir("/"), dir("/a")],
            calls: calls
                .into_iter()
                .map(|(op, invoked, completed)| Call {
                    client: "cli-0".into(),
                    via: Via::Cli,
                    op,
                    invoked,
                    completed,
                    outcome: Outcome::Ok,
                })
                .collect(),
            faults: vec![],
            end,
        }
    }

    /// Every call of `history` taking part, as ok.
    fn parts(history: &History) -> Vec<Part> {
        history
            .calls
            .iter()
            .enumerate()
            .map(|(index, call)| Part {
                index,
                invoked: call.invoked,
                completed: call.completed,
                required: true,
                expires: u64::MAX,
            })
            .collect()
    }

    fn mv(from: &str, to: &str) -> Op {
        Op::Mv {
            from: from.into(),
            to: to.into(),
        }
    }

    #[test]
    fn an_ok_call_whose_path_is_gone_for_good_is_a_dead_end() {
        // /a moved to /b: the end, were the rm not there.
        let moved = Entry {
            path: "/b".into(),
            ..dir("/a")
        };
        let end = vec![dir("/"), moved];
        let rm = Op::Rm { path: "/a".into() };
        let h = history(
            vec![(mv("/a", "/b"), 0, 10), (rm.clone(), 20, 30)],
            end.clone(),
        );
        let f = Futures::new(&h, parts(&h));
        let start = Tree::from_entries(&h.start);
        assert_eq!(f.at_start(&start, &[0]), None);
        let after = start.apply(0, &h.calls[0].op).unwrap();
        let why = f.after(&start, &h.calls[0].op, &after, &[0b1]).unwrap();
        assert!(why.starts_with("#1 `rm -r /a` needs /a"), "{why}");

        // A mkdir of /a invoked before the rm completed may still bring it back; one
        // invoked after cannot come before the rm.
        let mkdir = Op::Mkdir { path: "/a".into() };
        for (invoked, dead) in [(25, false), (31, true)] {
            let calls = vec![
                (mv("/a", "/b"), 0, 10),
                (rm.clone(), 20, 30),
                (mkdir.clone(), invoked, invoked + 1),
            ];
            let h = history(calls, end.clone());
            let f = Futures::new(&h, parts(&h));
            let why = f.after(&start, &h.calls[0].op, &after, &[0b1]);
            assert_eq!(why.is_some(), dead, "mkdir at {invoked}: {why:?}");
        }
    }

    #[test]
    fn a_path_the_end_lacks_needs_a_call_left_to_take_it() {
        let mkdir = Op::Mkdir { path: "/x".into() };
        let h = history(vec![(mkdir.clone(), 0, 10)], vec![dir("/"), dir("/a")]);
        let f = Futures::new(&h, parts(&h));
        let start = Tree::from_entries(&h.start);
        let after = start.apply(0, &mkdir).unwrap();
        let why = f.after(&start, &mkdir, &after, &[0b1]).unwrap();
        assert_eq!(
            why,
            "/x is not as at the end, and no call left can move or remove it"
        );

        // With a delete of the root's child /x left, not yet.
        let rm = Op::Rm { path: "/x".into() };
        let h = history(
            vec![(mkdir.clone(), 0, 10), (rm, 20, 30)],
            vec![dir("/"), dir("/a")],
        );
        let f = Futures::new(&h, parts(&h));
        assert_eq!(f.after(&start, &mkdir, &after, &[0b1]), None);
    }
}
