//! A read of a large subtree in path order, in parts (`Scan::in_parts`, which asks the store
//! for the counts and the directories this plans from).
//!
//! On Elasticsearch a page sorted by path costs the server a pass over every document its
//! query matches, whatever the page's size: a read of N documents in pages of P costs N × N / P
//! (`docs/scale.md`). Split into parts of about [`PART_PAGES`] pages, each a range of paths read
//! in path order, a page costs its part's documents instead, and the whole read about
//! N × [`PART_PAGES`]. The parts follow one another in path order, so their pages, in turn,
//! are the pages of the whole subtree; they share one point in time (the request says parts
//! follow, and the store keeps it open across their short last pages), so the read is still
//! one snapshot.
//!
//! Where to split comes from the directories, which a query on `kind` reads without sorting
//! the files: every k-th directory in path order starts a part, k chosen for parts of about
//! [`PART_PAGES`] pages if the files spread evenly over the directories. They need not:
//! the split only has to cut the path order into consecutive ranges, and any bounds do that.
//! A directory holding millions of entries itself stays one part. A store that holds nothing
//! for a paged search (the embedded one, which walks its path index, so a page costs the
//! page), or whose cursor is bound to its query (a scroll), reads in one part.

use std::collections::VecDeque;

use fs_model::FsPath;

use crate::types::Scope;

/// About how many pages a part holds. Smaller parts cost the server less sorting and more
/// requests (each part ends with a short page).
pub const PART_PAGES: u64 = 5;

/// The parts of a read of `root`'s subtree: planned at its first page, from the count of its
/// documents and of its directories, then its directories in path order.
#[derive(Debug)]
pub(crate) struct Parts {
    root: FsPath,
    /// About how many documents a part holds.
    part_docs: u64,
    planned: bool,
    /// While planning: every how many directories a part starts, and how many were offered.
    every: u64,
    offered: u64,
    /// The first paths of the parts after the one being read, in order.
    starts: VecDeque<FsPath>,
}

impl Parts {
    pub(crate) fn new(root: FsPath, page_size: usize) -> Parts {
        Parts {
            root,
            part_docs: PART_PAGES * page_size.max(1) as u64,
            planned: false,
            every: 0,
            offered: 0,
            starts: VecDeque::new(),
        }
    }

    /// The subtree read.
    pub(crate) fn root(&self) -> &FsPath {
        &self.root
    }

    /// True once planned (the plan is made once, whatever it found).
    pub(crate) fn is_planned(&self) -> bool {
        self.planned
    }

    /// True if a subtree of `docs` documents is worth splitting: two parts or more.
    pub(crate) fn worth_splitting(&self, docs: u64) -> bool {
        docs / self.part_docs >= 2
    }

    /// Begins the plan for a subtree of `docs` documents of which `dirs` directories: true if
    /// it is worth splitting, and the directories are to be [offered](Parts::offer) next.
    pub(crate) fn begin(&mut self, docs: u64, dirs: u64) -> bool {
        self.planned = true;
        let parts = docs / self.part_docs;
        if !self.worth_splitting(docs) || dirs < 2 {
            return false;
        }
        self.every = (dirs / parts).max(1);
        true
    }

    /// Offers the next directory, in path order: every `every`-th starts a part.
    pub(crate) fn offer(&mut self, path: &str) {
        self.offered += 1;
        if self.every == 0 || self.offered % self.every != 0 {
            return;
        }
        // Strictly after the root and the start before: a broken tree may hold a path twice.
        let after = self.starts.back().unwrap_or(&self.root);
        if path <= after.as_str() {
            return;
        }
        if let Ok(path) = FsPath::parse(path) {
            self.starts.push_back(path);
        }
    }

    /// Ends the plan: the scope of the first part, or `None` if the subtree is read in one.
    pub(crate) fn first(&mut self) -> Option<Scope> {
        self.planned = true;
        (!self.starts.is_empty()).then(|| self.scope(self.root.clone()))
    }

    /// True while a part follows the one being read.
    pub(crate) fn follow(&self) -> bool {
        !self.starts.is_empty()
    }

    /// Moves on to the next part: its scope, or `None` after the last.
    pub(crate) fn next(&mut self) -> Option<Scope> {
        let start = self.starts.pop_front()?;
        Some(self.scope(start))
    }

    /// The part from `start` to the next part's start (or the end of the subtree).
    fn scope(&self, start: FsPath) -> Scope {
        match self.starts.front() {
            Some(end) => Scope::SubtreeRange {
                root: self.root.clone(),
                start,
                end: end.clone(),
            },
            None => Scope::SubtreeFrom {
                root: self.root.clone(),
                start,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> FsPath {
        FsPath::parse(s).expect("path")
    }

    #[test]
    fn parts_start_at_every_kth_directory_and_cover_the_subtree_in_order() {
        // 100 documents in pages of 4: parts of 20, so 5 parts over 10 directories.
        let mut parts = Parts::new(p("/t"), 4);
        assert!(parts.begin(100, 10));
        for d in [
            "/t", "/t/a", "/t/b", "/t/c", "/t/d", "/t/e", "/t/f", "/t/g", "/t/h", "/t/i",
        ] {
            parts.offer(d);
        }
        let mut scopes = vec![parts.first().expect("split")];
        while let Some(next) = parts.next() {
            scopes.push(next);
        }
        let range = |start: &str, end: &str| Scope::SubtreeRange {
            root: p("/t"),
            start: p(start),
            end: p(end),
        };
        assert_eq!(
            scopes,
            vec![
                range("/t", "/t/a"),
                range("/t/a", "/t/c"),
                range("/t/c", "/t/e"),
                range("/t/e", "/t/g"),
                range("/t/g", "/t/i"),
                Scope::SubtreeFrom {
                    root: p("/t"),
                    start: p("/t/i"),
                },
            ]
        );
    }

    #[test]
    fn a_small_subtree_or_one_directory_is_one_part() {
        let mut small = Parts::new(p("/t"), 5_000);
        assert!(!small.begin(40_000, 1_000));
        assert_eq!(small.first(), None);
        let mut flat = Parts::new(p("/t"), 10);
        assert!(!flat.begin(1_000_000, 1));
        assert_eq!(flat.first(), None);
        // The root, a path offered twice, or out of order, starts no part.
        let mut broken = Parts::new(p("/t"), 1);
        assert!(broken.begin(100, 4));
        for d in ["/t", "/t/b", "/t/b", "/t/a"] {
            broken.offer(d);
        }
        assert_eq!(
            broken.first(),
            Some(Scope::SubtreeRange {
                root: p("/t"),
                start: p("/t"),
                end: p("/t/b"),
            })
        );
        assert_eq!(
            broken.next(),
            Some(Scope::SubtreeFrom {
                root: p("/t"),
                start: p("/t/b"),
            })
        );
        assert_eq!(broken.next(), None);
    }
}
