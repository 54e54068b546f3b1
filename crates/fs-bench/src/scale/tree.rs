//! The tree of the scale runs: directories of 1 000 empty files under one root, made on disk
//! once and kept (a million files take minutes to make), and the same tree as documents for
//! the raw bulk peer.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use fs_model::{FsDoc, FsPath};

/// Files in each directory.
const FILES_PER_DIR: usize = 1_000;

/// How many directories, and files in each (the last one may hold fewer).
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub dirs: usize,
    pub files: usize,
}

impl Shape {
    /// The shape whose documents (the root, the directories and their files) come closest to
    /// `docs` from above.
    pub fn of(docs: usize) -> Shape {
        let dirs = docs.saturating_sub(1).div_ceil(FILES_PER_DIR + 1).max(1);
        let files = docs.saturating_sub(1 + dirs).max(1);
        Shape { dirs, files }
    }

    /// Its documents: the root, the directories and the files.
    pub fn docs(&self) -> usize {
        1 + self.dirs + self.files
    }

    /// The files of directory `d`.
    fn files_in(&self, d: usize) -> usize {
        self.files
            .saturating_sub(d * FILES_PER_DIR)
            .min(FILES_PER_DIR)
    }

    /// The documents of directory `d` (it first), as indexed at `root`.
    pub fn dir_docs(&self, root: &FsPath, d: usize) -> anyhow::Result<Vec<FsDoc>> {
        let dir = root.join(&dir_name(d))?;
        let mut docs = vec![FsDoc::dir(dir.clone(), 0)];
        for f in 0..self.files_in(d) {
            docs.push(FsDoc::file(dir.join(&file_name(f))?, 0, 0));
        }
        Ok(docs)
    }
}

fn dir_name(d: usize) -> String {
    format!("d{d:05}")
}

fn file_name(f: usize) -> String {
    format!("f{f:04}")
}

/// The tree of `shape` under `dir`, made unless a finished one is there.
///
/// # Errors
/// If it cannot be made.
pub fn on_disk(dir: &Path, shape: &Shape) -> anyhow::Result<PathBuf> {
    let root = dir.join(format!("tree-{}", shape.docs()));
    let done = dir.join(format!("tree-{}.done", shape.docs()));
    if done.exists() {
        return Ok(root);
    }
    eprintln!(
        "scale: making {} ({} documents)",
        root.display(),
        shape.docs()
    );
    if root.exists() {
        std::fs::remove_dir_all(&root).with_context(|| format!("removing {}", root.display()))?;
    }
    for d in 0..shape.dirs {
        let sub = root.join(dir_name(d));
        std::fs::create_dir_all(&sub).with_context(|| format!("creating {}", sub.display()))?;
        for f in 0..shape.files_in(d) {
            let file = sub.join(file_name(f));
            std::fs::write(&file, b"").with_context(|| format!("creating {}", file.display()))?;
        }
    }
    std::fs::write(&done, b"").with_context(|| format!("creating {}", done.display()))?;
    Ok(root)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shape_holds_about_the_documents_asked_for() {
        for docs in [2, 1_000, 100_000, 1_000_000, 10_000_000] {
            let shape = Shape::of(docs);
            assert!(shape.docs() >= docs, "{docs}: {shape:?}");
            assert!(shape.docs() <= docs + 1, "{docs}: {shape:?}");
            let files: usize = (0..shape.dirs).map(|d| shape.files_in(d)).sum();
            assert_eq!(files, shape.files, "{docs}: {shape:?}");
        }
        assert_eq!(Shape::of(1_001_001).dirs, 1_000);
    }

    #[test]
    fn the_tree_on_disk_is_the_shape() {
        let dir = tempfile::tempdir().expect("temp dir");
        let shape = Shape::of(2_500);
        let root = on_disk(dir.path(), &shape).expect("made");
        let entries = walkdir::WalkDir::new(&root).into_iter().count();
        assert_eq!(entries, shape.docs());
        let docs = shape
            .dir_docs(&FsPath::parse("/t").expect("path"), 0)
            .expect("docs");
        assert_eq!(docs.len(), 1 + shape.files_in(0));
    }
}
