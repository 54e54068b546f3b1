//! When two calls commute, so that the search need not try an unknown call everywhere.
//!
//! An unknown call may be placed anywhere after its invocation. Tried at every point, it
//! multiplies the search: each backtrack tries it at each level again. But two adjacent
//! calls that are independent (whatever the tree, if one then the other is possible, so
//! is the other then the one, and it makes the same tree) can be swapped, and an unknown
//! call never holds back another, so moving one later, or an ok call earlier past it,
//! breaks no real-time order. By such swaps any order becomes a canonical one, where in
//! each run of unknown calls between two ok calls:
//!
//! - each unknown call depends on a later call of the run or on the ok call after it
//!   (one that depends on neither is moved past that ok call, into the next run);
//! - two adjacent unknown calls that are independent are in invocation order.
//!
//! (Each swap moves an unknown call later or sorts a run, so the swapping ends.) The
//! search only tries canonical orders: it keeps, since the last ok call placed, the
//! unknown calls no later call depends on yet, and places an ok call only if it depends
//! on each of them; the end may come after any. So an unknown call is tried where it can
//! matter, not at every level of every backtrack.
//!
//! Independence is judged from the paths each call reads and writes (a conservative
//! judgment: two calls may be found dependent that are not, never the reverse).

use crate::history::Op;
use crate::model::{is_under, parent};

/// The paths a call reads and writes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Footprint {
    /// The subtrees it may change (make, take or fill): a change anywhere in or above one
    /// of them, or to one of them, is a change to what it writes.
    writes: Vec<String>,
    /// The subtrees whose content it reads (what a copy or rename takes with it, what a
    /// delete removes).
    reads_subtree: Vec<String>,
    /// The paths whose presence and kind (only) it reads: the parent a new path needs,
    /// the path a touch may find there. Only a change at or above one changes that.
    reads_path: Vec<String>,
}

impl Footprint {
    /// The footprint of `op`.
    pub(super) fn of(op: &Op) -> Footprint {
        let parent_of = |path: &str| parent(path).map(str::to_string).into_iter().collect();
        match op {
            Op::Mkdir { path } => Footprint {
                writes: vec![path.clone()],
                reads_subtree: vec![],
                reads_path: parent_of(path),
            },
            Op::Touch { path } => {
                let mut reads_path: Vec<String> = parent_of(path);
                reads_path.push(path.clone());
                Footprint {
                    writes: vec![path.clone()],
                    reads_subtree: vec![],
                    reads_path,
                }
            }
            Op::Mv { from, to } => Footprint {
                writes: vec![from.clone(), to.clone()],
                reads_subtree: vec![from.clone()],
                reads_path: parent_of(to),
            },
            Op::Cp { from, to } => Footprint {
                writes: vec![to.clone()],
                reads_subtree: vec![from.clone()],
                reads_path: parent_of(to),
            },
            Op::Rm { path } => Footprint {
                writes: vec![path.clone()],
                reads_subtree: vec![path.clone()],
                reads_path: vec![],
            },
        }
    }

    /// Whether the calls of `self` and `other` may not commute: one writes where the
    /// other reads or writes.
    pub(super) fn depends(&self, other: &Footprint) -> bool {
        self.disturbs(other) || other.disturbs(self)
    }

    /// Whether what `self` writes may change what `other` reads or writes.
    fn disturbs(&self, other: &Footprint) -> bool {
        self.writes.iter().any(|w| {
            other
                .writes
                .iter()
                .chain(&other.reads_subtree)
                .any(|x| is_under(x, w) || is_under(w, x))
                || other.reads_path.iter().any(|p| is_under(p, w))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{Entry, Kind};
    use crate::model::Tree;

    fn op(text: &str) -> Op {
        let words: Vec<&str> = text.split(' ').collect();
        let s = |i: usize| words.get(i).copied().unwrap_or("").to_string();
        match words.first().copied() {
            Some("mkdir") => Op::Mkdir { path: s(1) },
            Some("touch") => Op::Touch { path: s(1) },
            Some("mv") => Op::Mv {
                from: s(1),
                to: s(2),
            },
            Some("cp") => Op::Cp {
                from: s(1),
                to: s(2),
            },
            _ => Op::Rm { path: s(1) },
        }
    }

    fn depends(a: &str, b: &str) -> bool {
        Footprint::of(&op(a)).depends(&Footprint::of(&op(b)))
    }

    #[test]
    fn calls_on_unrelated_paths_are_independent() {
        assert!(
            !depends("mkdir /a/x", "mkdir /a/y"),
            "siblings only read /a"
        );
        assert!(!depends("touch /a/x", "rm /b"));
        assert!(!depends("mv /a/x /b/x", "cp /c /d"));
        assert!(!depends("mv /a/x /b/x", "mkdir /a/y"));
    }

    #[test]
    fn calls_on_related_paths_depend() {
        assert!(depends("mkdir /a/x", "rm /a"), "takes the parent");
        assert!(depends("mkdir /a/x", "mkdir /a/x"));
        assert!(depends("touch /a/x/f", "mv /a /b"));
        assert!(depends("cp /a /c", "touch /a/f"), "fills what is copied");
        assert!(depends("mv /a /b", "mkdir /b"), "the destination");
        assert!(depends("rm /a/x", "mv /a /c"));
        assert!(depends("mkdir /a", "mkdir /a/x"), "makes the parent");
    }

    /// Independence is sound: on small trees, any two independent calls possible in one
    /// order are possible in the other, and make the same tree.
    #[test]
    fn independent_calls_commute() {
        let start = Tree::from_entries(
            &[
                ("/", Kind::Dir),
                ("/a", Kind::Dir),
                ("/a/x", Kind::Dir),
                ("/a/x/f", Kind::File),
                ("/b", Kind::Dir),
                ("/c", Kind::File),
            ]
            .map(|(path, kind)| Entry {
                path: path.into(),
                id: path.into(),
                kind,
            }),
        );
        let paths = [
            "/a", "/a/x", "/a/x/f", "/a/y", "/b", "/b/x", "/b/a", "/c", "/c/z", "/d",
        ];
        let mut ops = Vec::new();
        for p in paths {
            ops.push(format!("mkdir {p}"));
            ops.push(format!("touch {p}"));
            ops.push(format!("rm {p}"));
            for q in paths {
                ops.push(format!("mv {p} {q}"));
                ops.push(format!("cp {p} {q}"));
            }
        }
        let ops: Vec<Op> = ops.iter().map(|o| op(o)).collect();
        // Trees to start from: the start and what one call makes of it.
        let mut trees = vec![start.clone()];
        trees.extend(ops.iter().filter_map(|o| start.apply(99, o)));
        let mut checked = 0;
        for (i, u) in ops.iter().enumerate() {
            for (j, v) in ops.iter().enumerate() {
                if Footprint::of(u).depends(&Footprint::of(v)) {
                    continue;
                }
                for tree in trees.iter().step_by(7) {
                    let Some(uv) = tree.apply(i, u).and_then(|t| t.apply(1000 + j, v)) else {
                        continue;
                    };
                    let vu = tree.apply(1000 + j, v).and_then(|t| t.apply(i, u));
                    assert_eq!(vu.as_ref(), Some(&uv), "{u} then {v}");
                    checked += 1;
                }
            }
        }
        assert!(checked > 1000, "{checked}");
    }
}
