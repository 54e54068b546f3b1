//! The order a subtree read in path order is deleted in: every document after everything
//! under it, in pages that never hold a document and one of its ancestors, and with memory
//! that does not grow with the subtree.
//!
//! A page read in path order lists a directory before what it holds, the wrong way round for
//! a delete. Instead of reading the whole subtree first, each document waits only until the
//! scan has passed its subtree (the open documents, as `fsck` keeps them: see
//! [`fs_model::FsPath::may_hold_paths_after`]). Then everything under it has been read, and it has a
//! *height*: 0 for a file or an empty directory, one more than its highest child otherwise.
//! It joins the pending page of its height. A page of height `h` is sent only after every
//! page of lower height, so everything under a document is deleted (and acknowledged) before
//! it: whenever the job stops, every document still there has its parent still there.
//!
//! What is kept: the open documents (a path's depth, times the siblings whose names sort
//! inside a directory) and one pending page per height, at most the subtree's depth pages.

use crate::tree::Entry;

/// A document whose subtree the scan may still reach, and the height of what is under it so
/// far.
struct Open {
    entry: Entry,
    height: usize,
}

/// The deletes of a subtree, taken in path order and given back in pages that are safe to
/// send in the order given.
pub(super) struct DeleteOrder {
    page_size: usize,
    open: Vec<Open>,
    /// The pending page of each height.
    pages: Vec<Vec<Entry>>,
}

impl DeleteOrder {
    pub(super) fn new(page_size: usize) -> DeleteOrder {
        DeleteOrder {
            page_size: page_size.max(1),
            open: Vec::new(),
            pages: Vec::new(),
        }
    }

    /// Takes `entry`, the next document in path order, and returns the pages now ready, to be
    /// sent in the order returned (each acknowledged before the next).
    pub(super) fn add(&mut self, entry: Entry) -> Vec<Vec<Entry>> {
        let mut ready = Vec::new();
        while let Some(top) = self.open.last() {
            if top.entry.doc.path.may_hold_paths_after(&entry.doc.path) {
                break;
            }
            self.close_top(&mut ready);
        }
        self.open.push(Open { entry, height: 0 });
        ready
    }

    /// The pages left once the scan has ended, lowest first.
    pub(super) fn finish(mut self) -> Vec<Vec<Entry>> {
        let mut ready = Vec::new();
        while !self.open.is_empty() {
            self.close_top(&mut ready);
        }
        ready.extend(self.pages.into_iter().filter(|page| !page.is_empty()));
        ready
    }

    /// Closes the top open document: everything under it has been read. It joins the page of
    /// its height, and its parent, if open, is at least one higher.
    fn close_top(&mut self, ready: &mut Vec<Vec<Entry>>) {
        let Some(Open { entry, height }) = self.open.pop() else {
            return;
        };
        if let Some(parent) = entry.doc.path.parent() {
            // Usually the next one down; siblings that sort inside it may sit between.
            if let Some(open) = self
                .open
                .iter_mut()
                .rev()
                .find(|o| o.entry.doc.path == parent)
            {
                open.height = open.height.max(height + 1);
            }
        }
        if self.pages.len() <= height {
            self.pages.resize_with(height + 1, Vec::new);
        }
        self.pages[height].push(entry);
        if self.pages[height].len() >= self.page_size {
            // Whatever lies under this page's documents is in the lower pages: they go first.
            for page in &mut self.pages[..=height] {
                if !page.is_empty() {
                    ready.push(std::mem::take(page));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fs_model::{DocKind, FsDoc, FsPath};
    use fs_store::Version;

    fn entry(path: &str) -> Entry {
        Entry {
            id: path.to_owned(),
            version: Version {
                seq_no: 0,
                primary_term: 1,
            },
            doc: FsDoc::new(FsPath::parse(path).expect("path"), DocKind::Dir, 0, 0),
        }
    }

    /// The pages `paths` (in path order) are deleted in, with pages of `size`.
    fn pages(paths: &[&str], size: usize) -> Vec<Vec<String>> {
        let mut sorted = paths.to_vec();
        sorted.sort_unstable();
        let mut order = DeleteOrder::new(size);
        let mut out = Vec::new();
        for path in sorted {
            out.extend(order.add(entry(path)));
        }
        out.extend(order.finish());
        out.into_iter()
            .map(|page| page.into_iter().map(|e| e.doc.path.to_string()).collect())
            .collect()
    }

    /// Checks that every path is deleted once, after everything under it, and never in the
    /// page of one of its ancestors.
    fn assert_safe(paths: &[&str], pages: &[Vec<String>]) {
        let all: Vec<&String> = pages.iter().flatten().collect();
        assert_eq!(all.len(), paths.len(), "{pages:?}");
        let when = |p: &str| pages.iter().position(|page| page.iter().any(|q| q == p));
        for a in paths {
            for b in paths {
                let (pa, pb) = (FsPath::parse(a).expect("a"), FsPath::parse(b).expect("b"));
                if pb.is_descendant_of(&pa) {
                    assert!(
                        when(b) < when(a),
                        "`{b}` after its ancestor `{a}`: {pages:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn children_go_before_their_parents_and_never_with_them() {
        let paths = [
            "/a", "/a/b", "/a/b/c", "/a/b/d", "/a/b/e", "/a/x", "/a-b", "/a-b/c", "/a.c",
        ];
        for size in [1, 2, 3, 100] {
            let pages = pages(&paths, size);
            assert_safe(&paths, &pages);
            for page in &pages {
                assert!(page.len() <= size, "{pages:?}");
            }
        }
        // Heights: files and empty directories first, then their parents, and so on up.
        assert_eq!(
            pages(&paths, 100),
            vec![
                vec!["/a-b/c", "/a.c", "/a/b/c", "/a/b/d", "/a/b/e", "/a/x"],
                vec!["/a-b", "/a/b"],
                vec!["/a"]
            ]
        );
    }

    #[test]
    fn a_wide_tree_takes_about_one_page_per_page_of_documents() {
        let dirs: Vec<String> = (0..30).map(|d| format!("/t/d{d:02}")).collect();
        let mut owned: Vec<String> = vec!["/t".to_owned()];
        for dir in &dirs {
            owned.push(dir.clone());
            owned.extend((0..10).map(|f| format!("{dir}/f{f}")));
        }
        let paths: Vec<&str> = owned.iter().map(String::as_str).collect();
        let pages = pages(&paths, 100);
        assert_safe(&paths, &pages);
        // 300 files in 3 pages, 30 directories and the top in 2: no page sent half full but
        // the last of each height and those a fuller one had to push out.
        assert!(pages.len() <= 6, "{} pages: {pages:?}", pages.len());
    }

    #[test]
    fn one_file_is_one_page() {
        assert_eq!(pages(&["/f"], 10), vec![vec!["/f"]]);
    }
}
