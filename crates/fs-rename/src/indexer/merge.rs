//! The walk merged with one scan of the store, both in path order, so that a run over a tree
//! the store already holds remembers only what differs.
//!
//! Each entry the walk finds at a path where the store holds a document that is up to date
//! (same kind, size, modification time and identity, and its text if text is wanted) is
//! counted and forgotten at once: neither side is kept. Everything else (entries new or
//! changed on disk, documents no longer there, files with other names on disk, what the
//! walk could not read or skipped) is
//! the *residue*, which the locked pass then matches by path and searches for moves exactly
//! as it would the whole tree. A re-index of an unchanged tree thus keeps a page of the scan
//! and a few chunks of the walk, whatever the tree's size; one that finds a directory moved
//! keeps the moved subtree twice (at its old path in the store, at its new one on disk).
//!
//! The merge only saves memory, it decides nothing: a pair it misses (a store that scans in
//! another order, a name that sorts differently) goes to the residue on both sides, where
//! the matching by path still pairs it.

use std::collections::VecDeque;
use std::sync::Arc;

use fs_model::FsPath;
use fs_store::{Scan, Scope, READ_PAGE};

use super::content::{self, Plan};
use super::walk::{Links, Walk, Walked};
use super::IndexReport;
use crate::error::Result;
use crate::tree::{next_entries, Entry, FsTree};

/// What [`merge`] leaves for the locked pass.
pub(super) enum Merged {
    /// The store holds nothing under the target: the walk is untouched, to be written as it
    /// comes.
    Nothing,
    /// The run was told to stop while merging.
    Stopped,
    /// The residue: what differs between the disk and the store.
    Residue(Residue),
}

/// What differs between the disk and the store under the target, in the order each side
/// came; everything else was up to date, counted in the report as unchanged.
pub(super) struct Residue {
    /// The store's documents the walk did not find up to date at their path.
    pub stored: Vec<Entry>,
    /// The walk's entries not found up to date in the store, and those that are not
    /// documents (skipped, unread, symbolic links).
    pub walked: Vec<Walked>,
    /// How many pairs were up to date, and forgotten.
    pub forgotten: u64,
    /// How many entries the walk found in all.
    pub seen: u64,
}

/// How [`merge`] runs: the text wanted (see [`content::plan`]), whether to stop, and where
/// to say how far the walk is.
pub(super) struct MergeOptions<'a> {
    pub content: Option<u64>,
    pub stopping: &'a (dyn Fn() -> bool + Sync),
    pub tell: &'a mut (dyn FnMut(u64, &IndexReport) + Send),
}

/// Reads what the store holds under `at` page by page while taking `walk` chunk by chunk,
/// both in path order, and keeps only the residue (see the module's documentation). Counts
/// the entries forgotten in `report` (directories, files, bytes, unchanged) as the locked
/// pass counts the others.
///
/// # Errors
/// Store failures of the scan; the walk's own failure.
pub(super) async fn merge(
    tree: &FsTree,
    at: &FsPath,
    walk: &mut Walk,
    options: MergeOptions<'_>,
    report: &mut IndexReport,
) -> Result<Merged> {
    tree.refresh().await?;
    let scope = Scope::Subtree(at.clone());
    let mut scan = Scan::new(Arc::clone(tree.store()), tree.index(), scope, READ_PAGE);
    let merged = merge_scanned(tree, at, &mut scan, walk, options, report).await;
    scan.close().await;
    merged
}

async fn merge_scanned(
    tree: &FsTree,
    at: &FsPath,
    scan: &mut Scan,
    walk: &mut Walk,
    options: MergeOptions<'_>,
    report: &mut IndexReport,
) -> Result<Merged> {
    let mut stored = Pages {
        scan,
        tree,
        at,
        page: VecDeque::new(),
        ended: false,
    };
    if !stored.fill().await? {
        return Ok(Merged::Nothing);
    }
    let mut residue = Residue {
        stored: Vec::new(),
        walked: Vec::new(),
        forgotten: 0,
        seen: 0,
    };
    while let Some(chunk) = walk.next_chunk().await? {
        if (options.stopping)() {
            return Ok(Merged::Stopped);
        }
        residue.seen += chunk.len() as u64;
        for item in chunk {
            let Walked::Doc(found, links) = &item else {
                residue.walked.push(item);
                continue;
            };
            // The store's documents before this path are not on disk here.
            while let Some(entry) = stored.next_before(&found.path).await? {
                residue.stored.push(entry);
            }
            if let Some(entry) = stored.take_at(&found.path) {
                // A file with other names is kept, unchanged or not: the moves count the
                // names of each identity on disk, and trust none held twice.
                let linked = *links == Links::Many;
                if !linked
                    && content::plan(Some(&entry.doc), found, options.content) == Plan::Unchanged
                {
                    if found.is_dir() {
                        report.dirs += 1;
                    } else {
                        report.files += 1;
                        report.bytes += found.size;
                    }
                    report.unchanged += 1;
                    residue.forgotten += 1;
                    continue;
                }
                residue.stored.push(entry);
            }
            residue.walked.push(item);
        }
        (options.tell)(residue.seen, report);
    }
    // What the store holds past the walk's last entry.
    while let Some(entry) = stored.next().await? {
        residue.stored.push(entry);
    }
    tracing::debug!(
        %at,
        forgotten = residue.forgotten,
        stored = residue.stored.len(),
        walked = residue.walked.len(),
        "the walk merged with the store: what differs is kept"
    );
    Ok(Merged::Residue(residue))
}

/// The scan, a page at a time.
struct Pages<'s> {
    scan: &'s mut Scan,
    tree: &'s FsTree,
    at: &'s FsPath,
    page: VecDeque<Entry>,
    ended: bool,
}

impl Pages<'_> {
    /// Reads the next page if the one held is used up; returns whether an entry is held.
    async fn fill(&mut self) -> Result<bool> {
        while self.page.is_empty() && !self.ended {
            let at = self.at;
            let context = || format!("reading what the store holds under `{at}` to index it");
            match next_entries(self.scan, self.tree.index(), context).await? {
                Some(entries) => {
                    for entry in entries {
                        self.page.push_back(entry?);
                    }
                }
                None => self.ended = true,
            }
        }
        Ok(!self.page.is_empty())
    }

    /// The next entry, if any.
    async fn next(&mut self) -> Result<Option<Entry>> {
        self.fill().await?;
        Ok(self.page.pop_front())
    }

    /// The next entry if its path sorts before `path`.
    async fn next_before(&mut self, path: &FsPath) -> Result<Option<Entry>> {
        self.fill().await?;
        Ok(self.pop_if(|entry| entry.doc.path < *path))
    }

    /// The next entry if it is at `path` (the page is filled by [`Pages::next_before`]).
    fn take_at(&mut self, path: &FsPath) -> Option<Entry> {
        self.pop_if(|entry| entry.doc.path == *path)
    }

    fn pop_if(&mut self, take: impl FnOnce(&Entry) -> bool) -> Option<Entry> {
        if self.page.front().is_some_and(take) {
            self.page.pop_front()
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;

    use fs_model::FsPath;
    use fs_store::{SharedStore, SqliteStore};

    use super::*;
    use crate::indexer::{index_dir, IndexOptions};

    fn p(s: &str) -> FsPath {
        FsPath::parse(s).expect("path")
    }

    /// Directories and files whose names sort around `/`: `a-b` and `a.c` come between `a`
    /// and `a/x` in path order.
    fn tree(root: &Path) {
        for dir in ["a", "a/x", "a-b", "a-b/y", "b", "é"] {
            std::fs::create_dir(root.join(dir)).expect("mkdir");
        }
        for file in ["a.c", "a/x/f", "a/g", "a-b/y/h", "b/i", "é/j", "B"] {
            std::fs::write(root.join(file), file.as_bytes()).expect("write");
        }
    }

    async fn residue(tree: &FsTree, root: &Path) -> (Residue, IndexReport) {
        let at = p("/t");
        let mut walk = Walk::start(root, &at);
        let mut report = IndexReport::default();
        let mut told = 0;
        let mut tell = |walked: u64, _: &IndexReport| told = walked;
        let how = MergeOptions {
            content: None,
            stopping: &|| false,
            tell: &mut tell,
        };
        let merged = merge(tree, &at, &mut walk, how, &mut report).await;
        match merged.expect("merged") {
            Merged::Residue(residue) => {
                assert_eq!(told, residue.seen, "progress tells the whole walk");
                (residue, report)
            }
            Merged::Nothing => panic!("the store holds the tree"),
            Merged::Stopped => panic!("not stopped"),
        }
    }

    fn paths_walked(residue: &Residue) -> Vec<String> {
        let mut paths: Vec<String> = residue
            .walked
            .iter()
            .map(|w| match w {
                Walked::Doc(doc, _) => doc.path.to_string(),
                _ => "(not a document)".to_owned(),
            })
            .collect();
        paths.sort();
        paths
    }

    #[tokio::test]
    async fn an_unchanged_tree_leaves_no_residue_and_a_changed_one_only_what_changed() {
        let work = tempfile::tempdir().expect("temp dir");
        tree(work.path());
        let store: SharedStore = Arc::new(SqliteStore::in_memory().expect("store"));
        let fs = FsTree::new(store, "fs");
        let options = IndexOptions::default();
        index_dir(&fs, work.path(), &p("/t"), &options, None)
            .await
            .expect("first index");

        let (unchanged, report) = residue(&fs, work.path()).await;
        assert!(unchanged.stored.is_empty(), "nothing kept from the store");
        assert!(
            paths_walked(&unchanged).is_empty(),
            "nothing kept from the walk"
        );
        assert_eq!(unchanged.forgotten, 14);
        assert_eq!((report.dirs, report.files, report.unchanged), (7, 7, 14));

        // One file changed, one new, one gone: only they are kept. The kernel stamps a
        // modification with a clock that moves a tick at a time (up to 10 ms), and the first
        // index can take less: without the pause a directory changed now may keep the time
        // it had when it was made, and look unchanged.
        std::thread::sleep(std::time::Duration::from_millis(50));
        std::fs::write(work.path().join("a/g"), b"longer than before").expect("write");
        std::fs::write(work.path().join("a-b/new"), b"new").expect("write");
        std::fs::remove_file(work.path().join("b/i")).expect("rm");
        let (changed, report) = residue(&fs, work.path()).await;
        let stored: Vec<String> = changed
            .stored
            .iter()
            .map(|e| e.doc.path.to_string())
            .collect();
        // Their directories changed too (their modification times).
        assert_eq!(stored, ["/t/a-b", "/t/a/g", "/t/b", "/t/b/i"]);
        assert_eq!(
            paths_walked(&changed),
            ["/t/a-b", "/t/a-b/new", "/t/a/g", "/t/b"]
        );
        assert_eq!((changed.forgotten, report.unchanged), (10, 10));
    }
}
