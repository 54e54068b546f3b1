//! The tree as the checker models it, and what each operation does to it.
//!
//! A state maps every path to its kind and to the document that is there. A document is
//! either one of the start tree's (its id is known) or one that a call made (a directory,
//! a file, or one of a copy's documents): its id is only known once the end is read, so the
//! model names it by the call that made it, and the end must show, at its path, an id that
//! was not in the start tree.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashSet};
use std::hash::{Hash, Hasher};

use crate::history::{Entry, Kind, Op};

/// Most differences a [`Tree::matches_end`] error lists (the first ones, in path order).
const MAX_LISTED: usize = 5;

/// The document at a path: one from the start tree, or one a call made.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Slot {
    /// A document of the start tree, with its id.
    Known(String),
    /// A document made by `call` (an index into `History::calls`).
    Fresh {
        /// The call that made it.
        call: usize,
        /// Which of the call's documents (a copy makes several: 0, 1, 2, ... in the path
        /// order of its source subtree).
        n: usize,
    },
}

impl Slot {
    /// Whether an end id can be this document: the same id for a known one; for a fresh
    /// one, an id the start tree did not have (a new document cannot reuse an old id).
    pub fn fits(&self, id: &str, start_ids: &HashSet<String>) -> bool {
        match self {
            Slot::Known(known) => known == id,
            Slot::Fresh { .. } => !start_ids.contains(id),
        }
    }
}

/// What a call changes in a state: the paths it takes away, then the entries it puts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Effect {
    /// The paths taken away.
    removed: Vec<String>,
    /// The entries put (at paths free once `removed` are gone).
    added: Vec<(String, (Kind, Slot))>,
    /// The hash of the state made.
    hash: u64,
}

impl Effect {
    /// The [`Tree::state_hash`] of the state it makes.
    pub fn state_hash(&self) -> u64 {
        self.hash
    }

    /// Whether it changes nothing (a touch of a path that is there).
    pub fn is_nothing(&self) -> bool {
        self.removed.is_empty() && self.added.is_empty()
    }
}

/// A state of the tree: every path, its kind and its document.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Tree {
    /// Path to kind and document, in path order (which keeps each subtree's paths
    /// together after its top: see [`Tree::under`]).
    entries: BTreeMap<String, (Kind, Slot)>,
    /// The sum of the entries' hashes, kept up to date as entries come and go: the
    /// search hashes every state it reaches, and a call changes only a few entries.
    hash: u64,
}

impl Tree {
    /// The tree of `entries` (a start tree), every document known. Were a path listed twice,
    /// the first listing would count (a read tree has each path once).
    pub fn from_entries(entries: &[Entry]) -> Tree {
        let mut tree = Tree::default();
        for entry in entries {
            if !tree.entries.contains_key(&entry.path) {
                tree.insert(
                    entry.path.clone(),
                    (entry.kind, Slot::Known(entry.id.clone())),
                );
            }
        }
        tree
    }

    /// Every path, with its kind and document, in path order.
    pub fn entries(&self) -> &BTreeMap<String, (Kind, Slot)> {
        &self.entries
    }

    /// The kind and document at `path`, if any.
    pub fn get(&self, path: &str) -> Option<&(Kind, Slot)> {
        self.entries.get(path)
    }

    /// How many paths (the root included).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the tree has no path at all (not even the root).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The state after `op`, made by call `call_index`, if its precondition holds here;
    /// `None` if it does not (an acknowledged call cannot then be placed at this point).
    pub fn apply(&self, call_index: usize, op: &Op) -> Option<Tree> {
        self.effect(call_index, op).map(|effect| self.with(&effect))
    }

    /// What `op`, made by call `call_index`, would change here, if its precondition holds;
    /// with the hash of the state it would make, so that a search can find that state seen
    /// before without making it (see [`Tree::with`]).
    pub fn effect(&self, call_index: usize, op: &Op) -> Option<Effect> {
        let (removed, added) = match op {
            Op::Mkdir { path } => (vec![], vec![self.create(path, Kind::Dir, call_index)?]),
            Op::Touch { path } => {
                // `touch` of an existing path (file or directory) changes nothing and
                // succeeds, as the command line does.
                if self.entries.contains_key(path) {
                    (vec![], vec![])
                } else {
                    (vec![], vec![self.create(path, Kind::File, call_index)?])
                }
            }
            Op::Mv { from, to } => {
                let moved = self.movable(from, to)?;
                let added = moved
                    .iter()
                    .map(|(path, value)| (rebase(path, from, to), value.clone()))
                    .collect();
                (moved, added)
            }
            Op::Cp { from, to } => {
                let copied = self.movable(from, to)?;
                let added = copied
                    .into_iter()
                    .enumerate()
                    .map(|(n, (path, (kind, _)))| {
                        let slot = Slot::Fresh {
                            call: call_index,
                            n,
                        };
                        (rebase(&path, from, to), (kind, slot))
                    })
                    .collect();
                (vec![], added)
            }
            Op::Rm { path } => {
                if path == "/" || !self.entries.contains_key(path) {
                    return None;
                }
                (self.subtree(path), vec![])
            }
        };
        let mut hash = self.hash;
        for (path, value) in &removed {
            hash = hash.wrapping_sub(entry_hash(path, value));
        }
        for (path, value) in &added {
            hash = hash.wrapping_add(entry_hash(path, value));
        }
        Some(Effect {
            removed: removed.into_iter().map(|(path, _)| path).collect(),
            added,
            hash,
        })
    }

    /// The state `effect` (found by [`Tree::effect`] on this very state) makes.
    pub fn with(&self, effect: &Effect) -> Tree {
        let mut next = self.clone();
        for path in &effect.removed {
            next.entries.remove(path);
        }
        for (path, value) in &effect.added {
            next.entries.insert(path.clone(), value.clone());
        }
        // Hashed once already, by `effect`.
        next.hash = effect.hash;
        next
    }

    /// The new document of `kind` at `path`, if `path` is free and its parent a directory.
    fn create(&self, path: &str, kind: Kind, call: usize) -> Option<(String, (Kind, Slot))> {
        if !valid(path) || self.entries.contains_key(path) || !self.is_dir(parent(path)?) {
            return None;
        }
        Some((path.to_string(), (kind, Slot::Fresh { call, n: 0 })))
    }

    /// Puts `value` at `path` (free), keeping the hash.
    fn insert(&mut self, path: String, value: (Kind, Slot)) {
        self.hash = self.hash.wrapping_add(entry_hash(&path, &value));
        self.entries.insert(path, value);
    }

    /// The subtree a rename or copy of `from` to `to` takes, if its precondition holds:
    /// `from` there and not the root, `to` free, valid, not under `from` (a tree cannot go
    /// into itself) and its parent a directory.
    fn movable(&self, from: &str, to: &str) -> Option<Vec<(String, (Kind, Slot))>> {
        if from == "/"
            || !self.entries.contains_key(from)
            || !valid(to)
            || self.entries.contains_key(to)
            || is_under(to, from)
            || !self.is_dir(parent(to)?)
        {
            return None;
        }
        Some(self.subtree(from))
    }

    /// Whether `path` is a directory here.
    fn is_dir(&self, path: &str) -> bool {
        matches!(self.entries.get(path), Some((Kind::Dir, _)))
    }

    /// `top` and everything under it, in path order. Every path under `top` (but `top`)
    /// starts with `top/`: those sort between `top/` and `top0` (`0` follows `/`), a range
    /// of the map, while a sibling such as `top-x` sorts elsewhere.
    pub fn under<'a>(&'a self, top: &str) -> impl Iterator<Item = (&'a String, &'a (Kind, Slot))> {
        let below = if top == "/" {
            // Everything but the root itself, listed first.
            self.entries.range::<String, _>(..)
        } else {
            self.entries.range(format!("{top}/")..format!("{top}0"))
        };
        let itself = self.entries.get_key_value(top);
        itself
            .into_iter()
            .chain(below.filter(|(path, _)| path.as_str() != "/"))
    }

    /// [`Tree::under`], owned.
    fn subtree(&self, top: &str) -> Vec<(String, (Kind, Slot))> {
        self.under(top)
            .map(|(path, value)| (path.clone(), value.clone()))
            .collect()
    }

    /// Whether this state is the tree read at the end: the same paths, the same kind at
    /// each, a known document's id where it is, and for each document a call made an id
    /// the start tree did not have, a different one for each (two new documents are two
    /// ids; duplicates are reported on their own too, but this does not count on it).
    /// The error names the first differences, in path order.
    pub fn matches_end(&self, end: &[Entry], start_ids: &HashSet<String>) -> Result<(), String> {
        let mut by_path: BTreeMap<&str, Vec<&Entry>> = BTreeMap::new();
        for entry in end {
            by_path.entry(entry.path.as_str()).or_default().push(entry);
        }
        let mut differences = Vec::new();
        // Which fresh document took each new id, to find one id given to two of them.
        let mut fresh_ids: BTreeMap<&str, &str> = BTreeMap::new();
        for (path, (kind, slot)) in &self.entries {
            let Some(found) = by_path.get(path.as_str()) else {
                differences.push(format!("missing {path} ({})", kind_name(*kind)));
                continue;
            };
            let Some(first) = found.first() else {
                continue;
            };
            if found.len() > 1 {
                differences.push(format!("{path} read {} times", found.len()));
            }
            if first.kind != *kind {
                differences.push(format!(
                    "{path}: a {} expected, a {} found",
                    kind_name(*kind),
                    kind_name(first.kind)
                ));
            }
            match slot {
                Slot::Known(id) if *id != first.id => {
                    differences.push(format!("{path}: id {id} expected, {} found", first.id));
                }
                Slot::Known(_) => {}
                Slot::Fresh { call, .. } => {
                    if start_ids.contains(&first.id) {
                        differences.push(format!(
                            "{path}: a new id expected (made by call #{call}), \
                             start id {} found",
                            first.id
                        ));
                    } else if let Some(other) = fresh_ids.insert(first.id.as_str(), path) {
                        differences.push(format!(
                            "{path}: id {} already at {other}, two new documents expected",
                            first.id
                        ));
                    }
                }
            }
        }
        for (path, found) in &by_path {
            if !self.entries.contains_key(*path) {
                for entry in found {
                    differences.push(format!("extra {path} (id {})", entry.id));
                }
            }
        }
        if differences.is_empty() {
            return Ok(());
        }
        // Missing and wrong paths were found first, extra ones after: sort so that the
        // listed ones are the first in path order whatever their sort.
        differences.sort_by(|a, b| difference_path(a).cmp(difference_path(b)));
        let total = differences.len();
        let mut text = differences
            .into_iter()
            .take(MAX_LISTED)
            .collect::<Vec<_>>()
            .join("; ");
        if total > MAX_LISTED {
            text.push_str(&format!("; and {} more", total - MAX_LISTED));
        }
        Err(text)
    }

    /// A cheap 64-bit hash of this state, for memoizing the states a search has seen: the
    /// sum of its entries' hashes (std's `DefaultHasher` of each path, kind and document),
    /// kept as entries come and go.
    pub fn state_hash(&self) -> u64 {
        self.hash
    }
}

/// The hash of one entry, a term of [`Tree::state_hash`].
fn entry_hash(path: &str, value: &(Kind, Slot)) -> u64 {
    let mut hasher = DefaultHasher::new();
    path.hash(&mut hasher);
    value.hash(&mut hasher);
    hasher.finish()
}

/// The path a [`Tree::matches_end`] difference is about, to sort them.
fn difference_path(difference: &str) -> &str {
    let text = difference
        .strip_prefix("missing ")
        .or_else(|| difference.strip_prefix("extra "))
        .unwrap_or(difference);
    text.split([' ', ':']).next().unwrap_or(text)
}

/// `dir` or `file`, for messages.
pub fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Dir => "dir",
        Kind::File => "file",
    }
}

/// The parent of `path`: `/a` of `/a/b`, `/` of `/a`; none for the root or a path that
/// is not absolute.
pub fn parent(path: &str) -> Option<&str> {
    if path == "/" {
        return None;
    }
    match path.rfind('/') {
        Some(0) => Some("/"),
        Some(at) => Some(&path[..at]),
        None => None,
    }
}

/// Whether `path` is `top` or under it (everything is under the root).
pub fn is_under(path: &str, top: &str) -> bool {
    top == "/"
        || path == top
        || (path.len() > top.len()
            && path.starts_with(top)
            && path.as_bytes().get(top.len()) == Some(&b'/'))
}

/// `path` itself, then each of its ancestors up to the root: `/a/b`, `/a`, `/`.
pub fn ancestors(path: &str) -> impl Iterator<Item = &str> {
    std::iter::successors(Some(path), |p| parent(p))
}

/// Whether a path can name a new document: absolute, not the root, no empty name, no
/// trailing slash. A call with another path can never take effect (its parent would not
/// be what [`parent`] says).
fn valid(path: &str) -> bool {
    path.len() > 1 && path.starts_with('/') && !path.ends_with('/') && !path.contains("//")
}

/// `path`, under `from`, moved to the same place under `to`.
fn rebase(path: &str, from: &str, to: &str) -> String {
    format!("{to}{}", &path[from.len()..])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(path: &str, id: &str, kind: Kind) -> Entry {
        Entry {
            path: path.into(),
            id: id.into(),
            kind,
        }
    }

    /// `/` (R), `/a` (A) with `/a/f` (F) and `/a/g` (G, a dir) with `/a/g/h` (H), `/b` (B),
    /// and a sibling `/a-x` (X) that sorts between `/a` and `/a/...`.
    fn start() -> Vec<Entry> {
        vec![
            entry("/", "R", Kind::Dir),
            entry("/a", "A", Kind::Dir),
            entry("/a/f", "F", Kind::File),
            entry("/a/g", "G", Kind::Dir),
            entry("/a/g/h", "H", Kind::File),
            entry("/a-x", "X", Kind::File),
            entry("/b", "B", Kind::Dir),
        ]
    }

    fn tree() -> Tree {
        Tree::from_entries(&start())
    }

    fn paths(tree: &Tree) -> Vec<&str> {
        tree.entries().keys().map(String::as_str).collect()
    }

    fn known(id: &str) -> Slot {
        Slot::Known(id.into())
    }

    fn mkdir(path: &str) -> Op {
        Op::Mkdir { path: path.into() }
    }

    fn touch(path: &str) -> Op {
        Op::Touch { path: path.into() }
    }

    fn mv(from: &str, to: &str) -> Op {
        Op::Mv {
            from: from.into(),
            to: to.into(),
        }
    }

    fn cp(from: &str, to: &str) -> Op {
        Op::Cp {
            from: from.into(),
            to: to.into(),
        }
    }

    fn rm(path: &str) -> Op {
        Op::Rm { path: path.into() }
    }

    #[test]
    fn paths_parents_and_subtrees() {
        assert_eq!(parent("/a/b"), Some("/a"));
        assert_eq!(parent("/a"), Some("/"));
        assert_eq!(parent("/"), None);
        assert_eq!(parent("a"), None);
        assert!(is_under("/a/b", "/a"));
        assert!(is_under("/a", "/a"));
        assert!(is_under("/a", "/"));
        assert!(!is_under("/a-x", "/a"));
        assert!(!is_under("/ab", "/a"));
        assert!(!is_under("/a", "/a/b"));
        assert_eq!(ancestors("/a/b").collect::<Vec<_>>(), ["/a/b", "/a", "/"]);
        let t = tree();
        let under = |top| t.under(top).map(|(p, _)| p.as_str()).collect::<Vec<_>>();
        assert_eq!(under("/a"), ["/a", "/a/f", "/a/g", "/a/g/h"]);
        assert_eq!(under("/a/g/h"), ["/a/g/h"]);
        assert_eq!(under("/z"), Vec::<&str>::new());
        assert_eq!(under("/").len(), t.len());
        assert_eq!(under("/")[0], "/");
    }

    #[test]
    fn mkdir_needs_a_free_path_in_a_directory() {
        let t = tree();
        let next = t.apply(3, &mkdir("/b/n")).unwrap();
        assert_eq!(
            next.get("/b/n"),
            Some(&(Kind::Dir, Slot::Fresh { call: 3, n: 0 }))
        );
        assert_eq!(next.len(), t.len() + 1);
        assert!(t.apply(3, &mkdir("/a")).is_none(), "exists");
        assert!(t.apply(3, &mkdir("/z/n")).is_none(), "no parent");
        assert!(t.apply(3, &mkdir("/a/f/n")).is_none(), "parent is a file");
        assert!(t.apply(3, &mkdir("/")).is_none(), "the root");
        assert!(t.apply(3, &mkdir("/b/")).is_none(), "not a valid path");
    }

    #[test]
    fn touch_makes_a_file_or_changes_nothing() {
        let t = tree();
        let next = t.apply(1, &touch("/b/t")).unwrap();
        assert_eq!(
            next.get("/b/t"),
            Some(&(Kind::File, Slot::Fresh { call: 1, n: 0 }))
        );
        assert_eq!(t.apply(1, &touch("/a/f")), Some(t.clone()), "existing file");
        assert_eq!(t.apply(1, &touch("/a")), Some(t.clone()), "existing dir");
        assert!(t.apply(1, &touch("/z/t")).is_none(), "no parent");
        assert!(t.apply(1, &touch("/a/f/t")).is_none(), "parent is a file");
    }

    #[test]
    fn mv_moves_the_whole_subtree_and_keeps_ids() {
        let t = tree();
        let next = t.apply(0, &mv("/a", "/b/a2")).unwrap();
        assert_eq!(
            paths(&next),
            [
                "/",
                "/a-x",
                "/b",
                "/b/a2",
                "/b/a2/f",
                "/b/a2/g",
                "/b/a2/g/h"
            ]
        );
        assert_eq!(next.get("/b/a2"), Some(&(Kind::Dir, known("A"))));
        assert_eq!(next.get("/b/a2/g/h"), Some(&(Kind::File, known("H"))));
        // The sibling that shares a prefix stays.
        assert_eq!(next.get("/a-x"), Some(&(Kind::File, known("X"))));
    }

    #[test]
    fn mv_preconditions() {
        let t = tree();
        assert!(t.apply(0, &mv("/z", "/b/z")).is_none(), "no source");
        assert!(t.apply(0, &mv("/a", "/b")).is_none(), "destination exists");
        assert!(
            t.apply(0, &mv("/a", "/z/a")).is_none(),
            "no destination parent"
        );
        assert!(
            t.apply(0, &mv("/a", "/a-x/a")).is_none(),
            "parent is a file"
        );
        assert!(t.apply(0, &mv("/", "/b/r")).is_none(), "the root");
        assert!(
            t.apply(0, &mv("/a", "/a/g/a")).is_none(),
            "into its own subtree"
        );
        assert!(t.apply(0, &mv("/a", "/a/n")).is_none(), "into itself");
        // A destination that only shares a prefix with the source is not under it.
        assert!(t.apply(0, &mv("/a/f", "/a-y")).is_some());
    }

    #[test]
    fn cp_copies_with_fresh_ids_in_path_order() {
        let t = tree();
        let next = t.apply(7, &cp("/a", "/b/c")).unwrap();
        for (path, value) in t.entries() {
            assert_eq!(next.get(path), Some(value), "the source stays: {path}");
        }
        assert_eq!(
            next.get("/b/c"),
            Some(&(Kind::Dir, Slot::Fresh { call: 7, n: 0 }))
        );
        assert_eq!(
            next.get("/b/c/f"),
            Some(&(Kind::File, Slot::Fresh { call: 7, n: 1 }))
        );
        assert_eq!(
            next.get("/b/c/g"),
            Some(&(Kind::Dir, Slot::Fresh { call: 7, n: 2 }))
        );
        assert_eq!(
            next.get("/b/c/g/h"),
            Some(&(Kind::File, Slot::Fresh { call: 7, n: 3 }))
        );
        assert_eq!(next.len(), t.len() + 4, "the sibling /a-x is not copied");
        assert!(t.apply(7, &cp("/a", "/b")).is_none(), "destination exists");
        assert!(
            t.apply(7, &cp("/a", "/a/g/c")).is_none(),
            "into its own subtree"
        );
        assert!(t.apply(7, &cp("/", "/b/r")).is_none(), "the root");
        assert!(t.apply(7, &cp("/b", "/")).is_none(), "onto the root");
    }

    #[test]
    fn rm_removes_the_subtree_only() {
        let t = tree();
        let next = t.apply(0, &rm("/a")).unwrap();
        assert_eq!(paths(&next), ["/", "/a-x", "/b"]);
        assert!(t.apply(0, &rm("/z")).is_none(), "absent");
        assert!(t.apply(0, &rm("/")).is_none(), "the root");
    }

    #[test]
    fn matches_end_checks_paths_kinds_and_ids() {
        let start_ids: HashSet<String> = start().into_iter().map(|e| e.id).collect();
        let t = tree();
        assert_eq!(t.matches_end(&start(), &start_ids), Ok(()));

        let made = t.apply(4, &cp("/a/g", "/b/g")).unwrap();
        let mut end = start();
        end.push(entry("/b/g", "N1", Kind::Dir));
        end.push(entry("/b/g/h", "N2", Kind::File));
        assert_eq!(made.matches_end(&end, &start_ids), Ok(()));

        // A fresh document cannot have a start id, and two cannot share one.
        let mut reused = start();
        reused.push(entry("/b/g", "G", Kind::Dir));
        reused.push(entry("/b/g/h", "N2", Kind::File));
        let err = made.matches_end(&reused, &start_ids).unwrap_err();
        assert!(err.contains("/b/g: a new id expected"), "{err}");
        let mut shared = start();
        shared.push(entry("/b/g", "N1", Kind::Dir));
        shared.push(entry("/b/g/h", "N1", Kind::File));
        let err = made.matches_end(&shared, &start_ids).unwrap_err();
        assert!(err.contains("id N1 already at /b/g"), "{err}");

        let mut wrong = start();
        wrong.retain(|e| e.path != "/a/f");
        wrong.push(entry("/z", "Z", Kind::Dir));
        if let Some(e) = wrong.iter_mut().find(|e| e.path == "/b") {
            e.kind = Kind::File;
        }
        if let Some(e) = wrong.iter_mut().find(|e| e.path == "/a/g") {
            e.id = "Q".into();
        }
        let err = t.matches_end(&wrong, &start_ids).unwrap_err();
        assert_eq!(
            err,
            "missing /a/f (file); /a/g: id G expected, Q found; \
             /b: a dir expected, a file found; extra /z (id Z)"
        );
    }

    #[test]
    fn matches_end_lists_at_most_five_differences() {
        let start_ids = HashSet::new();
        let t = Tree::from_entries(&[entry("/", "id/", Kind::Dir)]);
        let end: Vec<Entry> = ["/", "/1", "/2", "/3", "/4", "/5", "/6", "/7"]
            .iter()
            .map(|p| entry(p, &format!("id{p}"), Kind::Dir))
            .collect();
        let err = t.matches_end(&end, &start_ids).unwrap_err();
        assert_eq!(err.matches("extra").count(), 5, "{err}");
        assert!(err.ends_with("; and 2 more"), "{err}");
    }

    #[test]
    fn equal_states_hash_equal() {
        let a = tree().apply(2, &mkdir("/b/n")).unwrap();
        let b = tree().apply(2, &mkdir("/b/n")).unwrap();
        let c = tree().apply(3, &mkdir("/b/n")).unwrap();
        assert_eq!(a.state_hash(), b.state_hash());
        assert_ne!(a.state_hash(), c.state_hash(), "made by another call");
        assert_ne!(a.state_hash(), tree().state_hash());
        // The same state reached two ways hashes the same: the hash follows the entries.
        let moved = tree().apply(0, &mv("/a", "/b/a")).unwrap();
        let back = moved.apply(1, &mv("/b/a", "/a")).unwrap();
        assert_eq!(back, tree());
        assert_eq!(back.state_hash(), tree().state_hash());
        let gone = tree().apply(0, &rm("/a")).unwrap();
        let fresh = Tree::from_entries(&[
            entry("/", "R", Kind::Dir),
            entry("/a-x", "X", Kind::File),
            entry("/b", "B", Kind::Dir),
        ]);
        assert_eq!(gone.state_hash(), fresh.state_hash());
        // The effect knows the hash of the state it makes before it is made.
        for op in [
            mkdir("/b/n"),
            touch("/a"),
            mv("/a", "/b/a"),
            cp("/a", "/b/c"),
            rm("/a"),
        ] {
            let effect = tree().effect(5, &op).unwrap();
            assert_eq!(
                effect.state_hash(),
                tree().with(&effect).state_hash(),
                "{op}"
            );
            assert_eq!(effect.is_nothing(), op == touch("/a"), "{op}");
        }
    }
}
