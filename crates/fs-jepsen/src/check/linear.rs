//! Linearizability: is there an order of the calls, one that respects real time, in which
//! each call's precondition holds where it is placed and which makes the end tree?
//!
//! The search is Wing & Gong's, as Knossos and Porcupine do it: depth first, from the
//! start tree, place next one of the calls that may come next, backtrack when none fits,
//! and remember every (set of calls placed, state) seen, so that no state is searched
//! twice. It is exhaustive: "none" means none.
//!
//! - An acknowledged (ok) call must be placed, once. A call may come next only if no
//!   unplaced ok call completed before it was invoked.
//! - An unknown call may be placed, once, or never; it never holds others back (it may
//!   have taken effect at any time after its invocation).
//! - A failed call is left out; the checker's second search takes it as having maybe
//!   taken effect after all (see [`Failed`]).
//! - The end is read as a last ok call, invoked after every completion, whose
//!   precondition is that the tree is the end tree ([`Tree::matches_end`]).
//!
//! Three things keep it fast on a history where most calls are concurrent only with their
//! neighbours and a few are unknown:
//!
//! - the calls that may come next are found from a short window: the calls in invocation
//!   order, up to the first completion of an unplaced ok call;
//! - a state from which no order can succeed is given up at once (see
//!   [`super::dead_end`]), not after every order of the calls after it was tried;
//! - an unknown call is only tried where it matters: just before a call that does not
//!   commute with it, or at the end (see [`super::commute`]).

use std::collections::HashSet;

use super::commute::Footprint;
use super::dead_end::Futures;
use super::part::{is_set, set, Part};

use crate::history::{History, Outcome};
use crate::model::Tree;

/// The virtual last call: the read of the end tree.
const END: usize = usize::MAX;

/// Most stuck calls a [`Finding::NotLinearizable`] detail describes.
const MAX_DESCRIBED: usize = 5;

/// What a search found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Finding {
    /// An order: call indices, the unknown calls placed included.
    Linearizable {
        /// The order.
        order: Vec<usize>,
        /// States explored.
        explored: u64,
    },
    /// No order.
    NotLinearizable {
        /// The most ok calls placed on any branch.
        placed: usize,
        /// The ok calls that could come next at the first state that deep.
        stuck: Vec<usize>,
        /// What went wrong there.
        detail: String,
        /// States explored.
        explored: u64,
    },
    /// The budget of states ran out.
    Inconclusive {
        /// States explored.
        explored: u64,
    },
}

impl Finding {
    /// The states the search explored.
    pub(crate) fn explored(&self) -> u64 {
        match self {
            Finding::Linearizable { explored, .. }
            | Finding::NotLinearizable { explored, .. }
            | Finding::Inconclusive { explored } => *explored,
        }
    }
}

/// What a search makes of the calls reported failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failed {
    /// They took no effect: left out.
    LeftOut,
    /// Each may have taken effect, once, between its invocation and its completion (its
    /// status misreported), or never: optional, but only until a call invoked after its
    /// completion is placed. Few are in flight at a time: a quick search.
    InTime,
    /// Each may have taken effect, once, at any time after its invocation (as an unknown
    /// call), or never.
    AsUnknown,
}

/// One state on the search's path: the tree, the calls placed to make it, and the calls
/// that may come next (those not yet tried).
#[derive(Debug)]
struct Frame {
    tree: Tree,
    /// Bit `pos` set: `Search::parts[pos]` placed.
    placed: Vec<u64>,
    /// How many ok calls are placed.
    placed_required: usize,
    /// Every ok call before this one in `Search::required` is placed.
    required_lo: usize,
    /// Every ok call before this one in `Search::by_completion` is placed.
    completion_lo: usize,
    /// The calls that may come next (positions in `Search::parts`, or [`END`]).
    candidates: Vec<usize>,
    /// The next of `candidates` to try.
    next: usize,
    /// The call placed to come here (an index into `History::calls`); none at the root.
    via: Option<usize>,
    /// The latest invocation of a call placed: an optional call that completed before it
    /// can no longer be placed.
    max_invoked: u64,
    /// The movable call placed to come here (a position), if it was one: a movable call
    /// independent of it may only come next if it comes later in invocation order (see
    /// [`super::commute`]).
    after_optional: Option<usize>,
    /// The movable calls placed since the last other call that no call placed after them
    /// depends on yet (positions, sorted): the next other call must depend on each.
    pending: Vec<usize>,
}

/// A state of the search, as memoized.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    /// The calls placed.
    placed: Box<[u64]>,
    /// The tree's hash.
    tree: u64,
    /// The optional call just placed, if any.
    after_optional: Option<usize>,
    /// The optional calls pending.
    pending: Box<[usize]>,
}

impl Key {
    /// The state of `placed` and a tree of hash `tree`, the next call free.
    fn free(placed: &[u64], tree: u64) -> Key {
        Key {
            placed: placed.into(),
            tree,
            after_optional: None,
            pending: Box::new([]),
        }
    }
}

/// The first state with the most ok calls placed, to say where the search got stuck.
#[derive(Debug)]
struct Deepest {
    tree: Tree,
    placed_required: usize,
    candidates: Vec<usize>,
    /// Why it can no longer become the end tree, if it cannot.
    dead: Option<String>,
}

/// One search: the calls taking part, sorted for the window, and what finds dead ends and
/// independent calls.
#[derive(Debug)]
pub(crate) struct Search<'h> {
    history: &'h History,
    /// The calls taking part, in invocation order.
    parts: Vec<Part>,
    /// Positions of the ok calls, in invocation order.
    required: Vec<usize>,
    /// Positions of the optional calls, in invocation order.
    optional: Vec<usize>,
    /// Positions of the ok calls, in completion order.
    by_completion: Vec<usize>,
    /// What the calls left can still do, to find dead ends.
    futures: Futures<'h>,
    /// For each movable call (by position), the calls it may not commute with (a bitset by
    /// position); none for another (only a movable call's are asked for).
    dependents: Vec<Option<Vec<u64>>>,
    /// The ids of the start tree.
    start_ids: HashSet<String>,
}

impl<'h> Search<'h> {
    /// A search of `history`, the failed calls taken as `failed` says.
    pub(crate) fn new(history: &'h History, failed: Failed) -> Search<'h> {
        let mut parts: Vec<Part> = history
            .calls
            .iter()
            .enumerate()
            .filter_map(|(index, call)| {
                let (required, expires) = match (&call.outcome, failed) {
                    (Outcome::Ok, _) => (true, u64::MAX),
                    (Outcome::Unknown { .. }, _) | (Outcome::Failed { .. }, Failed::AsUnknown) => {
                        (false, u64::MAX)
                    }
                    (Outcome::Failed { .. }, Failed::InTime) => (false, call.completed),
                    (Outcome::Failed { .. }, Failed::LeftOut) => return None,
                };
                Some(Part {
                    index,
                    invoked: call.invoked,
                    completed: if required { call.completed } else { u64::MAX },
                    required,
                    expires,
                })
            })
            .collect();
        parts.sort_by_key(|p| (p.invoked, p.index));

        let (required, optional): (Vec<usize>, Vec<usize>) =
            (0..parts.len()).partition(|&pos| parts[pos].required);
        let mut by_completion = required.clone();
        by_completion.sort_by_key(|&pos| (parts[pos].completed, pos));

        let futures = Futures::new(history, parts.clone());
        let footprints: Vec<Footprint> = parts
            .iter()
            .map(|p| Footprint::of(&history.calls[p.index].op))
            .collect();
        let dependents = parts
            .iter()
            .zip(&footprints)
            .map(|(part, footprint)| {
                part.movable().then(|| {
                    let mut bits = vec![0; parts.len().div_ceil(64)];
                    for (pos, other) in footprints.iter().enumerate() {
                        if footprint.depends(other) {
                            set(&mut bits, pos);
                        }
                    }
                    bits
                })
            })
            .collect();
        Search {
            history,
            parts,
            required,
            optional,
            by_completion,
            futures,
            dependents,
            start_ids: history.start.iter().map(|e| e.id.clone()).collect(),
        }
    }

    /// Searches, exploring at most `max_states` states.
    pub(crate) fn run(&self, max_states: u64) -> Finding {
        let words = self.parts.len().div_ceil(64);
        let root = self.frame(
            Tree::from_entries(&self.history.start),
            vec![0; words],
            0,
            (0, 0),
            (None, 0, None, Vec::new()),
        );
        let dead = self.futures.at_start(&root.tree, &root.placed);
        // A state is the calls placed and the tree, and what holds the next call: the
        // optional calls pending, the optional call just placed. Explored free, it need
        // not be explored held.
        let mut visited: HashSet<Key> = HashSet::new();
        visited.insert(Key::free(&root.placed, root.tree.state_hash()));
        let mut explored: u64 = 1;
        let mut deepest = None;
        // An explicit stack, not recursion: a history of a thousand calls is a thousand
        // frames deep, too deep for a test thread's stack.
        let mut stack = Vec::new();
        enter(root, dead, &mut stack, &mut deepest);

        while let Some(top) = stack.last_mut() {
            let Some(&pos) = top.candidates.get(top.next) else {
                stack.pop();
                continue;
            };
            top.next += 1;
            if pos == END {
                if top
                    .tree
                    .matches_end(&self.history.end, &self.start_ids)
                    .is_ok()
                {
                    let order = stack.iter().filter_map(|f| f.via).collect();
                    return Finding::Linearizable { order, explored };
                }
                continue;
            }
            let part = &self.parts[pos];
            if !self.in_canonical_order(top, pos) {
                continue;
            }
            let op = &self.history.calls[part.index].op;
            let Some(effect) = top.tree.effect(part.index, op) else {
                continue;
            };
            // An optional call that changes nothing (a touch of a path that is there) leads
            // only where leaving it out does, with one call fewer to place later.
            if !part.required && effect.is_nothing() {
                continue;
            }
            let mut placed = top.placed.clone();
            set(&mut placed, pos);
            let (after_optional, pending) = if part.movable() {
                let mut pending: Vec<usize> = top
                    .pending
                    .iter()
                    .copied()
                    .filter(|&u| !self.depend(u, pos))
                    .collect();
                pending.push(pos);
                pending.sort_unstable();
                (Some(pos), pending)
            } else {
                (None, Vec::new())
            };
            // The state is looked up before it is made: most states found seen before are
            // the same calls placed in another order.
            let free = Key::free(&placed, effect.state_hash());
            let key = Key {
                after_optional,
                pending: pending.clone().into_boxed_slice(),
                ..free.clone()
            };
            if key != free && visited.contains(&free) {
                continue;
            }
            if !visited.insert(key) {
                continue;
            }
            explored += 1;
            if explored > max_states {
                return Finding::Inconclusive { explored };
            }
            let tree = top.tree.with(&effect);
            let dead = self.futures.after(&top.tree, op, &tree, &placed);
            let child = self.frame(
                tree,
                placed,
                top.placed_required + usize::from(part.required),
                (top.required_lo, top.completion_lo),
                (
                    Some(part.index),
                    top.max_invoked.max(part.invoked),
                    after_optional,
                    pending,
                ),
            );
            enter(child, dead, &mut stack, &mut deepest);
        }
        self.not_linearizable(deepest, explored)
    }

    /// Whether placing `pos` next from `top` keeps the order canonical (see
    /// [`super::commute`]): a call that is not movable must depend on every movable call
    /// pending; a movable call right after a movable call it is independent of must come
    /// later in invocation order.
    fn in_canonical_order(&self, top: &Frame, pos: usize) -> bool {
        if self.parts[pos].movable() {
            top.after_optional
                .is_none_or(|last| last < pos || self.depend(last, pos))
        } else {
            top.pending.iter().all(|&u| self.depend(u, pos))
        }
    }

    /// Whether the movable call at position `movable` and the call at `pos` may not
    /// commute.
    fn depend(&self, movable: usize, pos: usize) -> bool {
        match self.dependents.get(movable) {
            Some(Some(bits)) => is_set(bits, pos),
            // Not asked for an ok call; were it, "may not commute" is the safe answer.
            _ => true,
        }
    }

    /// A new frame, with the calls that may come next: the end read if every ok call is
    /// placed, then the ok calls, then the optional ones, each in invocation order, up to
    /// the first completion of an unplaced ok call (a call invoked after it must come after
    /// it), and not an optional call expired. Ok calls first: an unknown call is then placed
    /// where something needs it.
    fn frame(
        &self,
        tree: Tree,
        placed: Vec<u64>,
        placed_required: usize,
        (mut required_lo, mut completion_lo): (usize, usize),
        (via, max_invoked, after_optional, pending): (
            Option<usize>,
            u64,
            Option<usize>,
            Vec<usize>,
        ),
    ) -> Frame {
        while self
            .required
            .get(required_lo)
            .is_some_and(|&pos| is_set(&placed, pos))
        {
            required_lo += 1;
        }
        while self
            .by_completion
            .get(completion_lo)
            .is_some_and(|&pos| is_set(&placed, pos))
        {
            completion_lo += 1;
        }
        let horizon = self
            .by_completion
            .get(completion_lo)
            .map_or(u64::MAX, |&pos| self.parts[pos].completed);
        let mut candidates = Vec::new();
        if required_lo == self.required.len() {
            candidates.push(END);
        }
        for list in [&self.required[required_lo..], &self.optional[..]] {
            for &pos in list {
                if self.parts[pos].invoked > horizon {
                    break;
                }
                if !is_set(&placed, pos) && self.parts[pos].expires >= max_invoked {
                    candidates.push(pos);
                }
            }
        }
        Frame {
            tree,
            placed,
            placed_required,
            required_lo,
            completion_lo,
            candidates,
            next: 0,
            via,
            max_invoked,
            after_optional,
            pending,
        }
    }

    /// The finding when no order was found: where the deepest branch got stuck, and why.
    fn not_linearizable(&self, deepest: Option<Deepest>, explored: u64) -> Finding {
        let Some(deepest) = deepest else {
            return Finding::NotLinearizable {
                placed: 0,
                stuck: vec![],
                detail: "nothing to search".into(),
                explored,
            };
        };
        let total = self.required.len();
        if deepest.placed_required == total {
            let detail = match deepest.tree.matches_end(&self.history.end, &self.start_ids) {
                Err(differences) => {
                    format!("all {total} acknowledged calls placed, the end differs: {differences}")
                }
                Ok(()) => format!(
                    "all {total} acknowledged calls placed; {}",
                    deepest
                        .dead
                        .as_deref()
                        .unwrap_or("no order reaches the end")
                ),
            };
            return Finding::NotLinearizable {
                placed: total,
                stuck: vec![],
                detail,
                explored,
            };
        }
        let stuck: Vec<usize> = deepest
            .candidates
            .iter()
            .filter(|&&pos| pos != END && self.parts[pos].required)
            .map(|&pos| self.parts[pos].index)
            .collect();
        let mut detail = format!(
            "{} of {total} acknowledged calls placed, then",
            deepest.placed_required
        );
        if let Some(dead) = &deepest.dead {
            detail.push_str(&format!(
                " the tree cannot become the end ({dead}); next were"
            ));
        }
        if stuck.is_empty() {
            detail.push_str(" no acknowledged call could come next");
        }
        for (i, &index) in stuck.iter().take(MAX_DESCRIBED).enumerate() {
            let call = &self.history.calls[index];
            let why = if deepest.tree.apply(index, &call.op).is_none() {
                "its precondition fails"
            } else {
                "it fits, but no order after it reaches the end"
            };
            let separator = if i == 0 { ":" } else { ";" };
            detail.push_str(&format!(
                "{separator} #{index} {} [{}, {}] `{}`: {why}",
                call.client, call.invoked, call.completed, call.op
            ));
        }
        if stuck.len() > MAX_DESCRIBED {
            detail.push_str(&format!("; and {} more", stuck.len() - MAX_DESCRIBED));
        }
        Finding::NotLinearizable {
            placed: deepest.placed_required,
            stuck,
            detail,
            explored,
        }
    }
}

/// Pushes `frame`, unless it is a dead end (`dead` says why); notes it if it is the first
/// with so many ok calls placed.
fn enter(
    frame: Frame,
    dead: Option<String>,
    stack: &mut Vec<Frame>,
    deepest: &mut Option<Deepest>,
) {
    if deepest
        .as_ref()
        .is_none_or(|d| frame.placed_required > d.placed_required)
    {
        *deepest = Some(Deepest {
            tree: frame.tree.clone(),
            placed_required: frame.placed_required,
            candidates: frame.candidates.clone(),
            dead: dead.clone(),
        });
    }
    if dead.is_none() {
        stack.push(frame);
    }
}
