//! The tree of the scale runs: directories of 1 000 empty files under one root, made on disk
//! once and kept (a million files take minutes to make), and the same tree as documents for
//! the raw bulk peer.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use fs_model::{FsDoc, FsPath};

/// Files in each directory.
const FILES_PER_DIR: usize = 1_000;

/// Directories in each group, on a tree of more than this many: ten million documents are
/// ten groups of about a million, so that `cp -r` and `rm -r` of one group measure a million
/// documents inside a tree of ten (a tree of a million or fewer is one level, as before).
const DIRS_PER_GROUP: usize = 1_000;

/// How many directories, and files in each (the last one may hold fewer); more than
/// [`DIRS_PER_GROUP`] directories go in groups (`/t/g00/d00000/f0000`).
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub dirs: usize,
    pub files: usize,
}

impl Shape {
    /// The shape whose documents (the root, the groups, the directories and their files)
    /// come closest to `docs` from above.
    pub fn of(docs: usize) -> Shape {
        let dirs = docs.saturating_sub(1).div_ceil(FILES_PER_DIR + 1).max(1);
        let groups = if dirs > DIRS_PER_GROUP {
            dirs.div_ceil(DIRS_PER_GROUP)
        } else {
            0
        };
        let files = docs.saturating_sub(1 + groups + dirs).max(1);
        Shape { dirs, files }
    }

    /// The group directories (none on a tree of one level).
    fn groups(&self) -> usize {
        if self.dirs > DIRS_PER_GROUP {
            self.dirs.div_ceil(DIRS_PER_GROUP)
        } else {
            0
        }
    }

    /// Its documents: the root, the groups, the directories and the files.
    pub fn docs(&self) -> usize {
        1 + self.groups() + self.dirs + self.files
    }

    /// The subtree `cp -r` and `rm -r` take, relative to the root: the first group, or the
    /// whole tree (`None`) when it has no groups.
    pub fn part(&self) -> Option<String> {
        (self.groups() > 0).then(|| group_name(0))
    }

    /// The documents of [`Shape::part`].
    pub fn part_docs(&self) -> usize {
        if self.groups() == 0 {
            return self.docs();
        }
        let dirs = self.part_dirs();
        1 + dirs.len() + dirs.map(|d| self.files_in(d)).sum::<usize>()
    }

    /// The directories of [`Shape::part`].
    pub fn part_dirs(&self) -> std::ops::Range<usize> {
        match self.groups() {
            0 => 0..self.dirs,
            _ => 0..DIRS_PER_GROUP.min(self.dirs),
        }
    }

    /// The files of directory `d`.
    fn files_in(&self, d: usize) -> usize {
        self.files
            .saturating_sub(d * FILES_PER_DIR)
            .min(FILES_PER_DIR)
    }

    /// Directory `d` relative to the root: `d00000`, or in its group `g00/d00000`.
    fn dir_at(&self, d: usize) -> String {
        match self.groups() {
            0 => dir_name(d),
            _ => format!("{}/{}", group_name(d / DIRS_PER_GROUP), dir_name(d)),
        }
    }

    /// The documents of directory `d` (it first, after its group when it is the group's
    /// first), as indexed at `root`.
    pub fn dir_docs(&self, root: &FsPath, d: usize) -> anyhow::Result<Vec<FsDoc>> {
        let mut docs = Vec::with_capacity(2 + self.files_in(d));
        if self.groups() > 0 && d % DIRS_PER_GROUP == 0 {
            docs.push(FsDoc::dir(root.join(&group_name(d / DIRS_PER_GROUP))?, 0));
        }
        let mut dir = root.clone();
        for name in self.dir_at(d).split('/') {
            dir = dir.join(name)?;
        }
        docs.push(FsDoc::dir(dir.clone(), 0));
        for f in 0..self.files_in(d) {
            docs.push(FsDoc::file(dir.join(&file_name(f))?, 0, 0));
        }
        Ok(docs)
    }
}

fn group_name(g: usize) -> String {
    format!("g{g:02}")
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
        let sub = root.join(shape.dir_at(d));
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
        assert_eq!(Shape::of(1_001_001).part(), None, "a million: one level");
        let ten = Shape::of(10_000_000);
        assert_eq!(ten.part().as_deref(), Some("g00"));
        assert_eq!(ten.part_docs(), 1 + 1_000 + 1_000_000, "{ten:?}");
    }

    #[test]
    fn a_grouped_tree_on_disk_is_its_documents() {
        let shape = Shape {
            dirs: DIRS_PER_GROUP + 2,
            files: 3,
        };
        let root = FsPath::parse("/t").expect("path");
        let docs: Vec<FsDoc> = (0..shape.dirs)
            .flat_map(|d| shape.dir_docs(&root, d).expect("docs"))
            .collect();
        assert_eq!(docs.len() + 1, shape.docs());
        assert_eq!(docs[0].path.as_str(), "/t/g00");
        assert_eq!(docs[1].path.as_str(), "/t/g00/d00000");
        assert!(docs.iter().any(|d| d.path.as_str() == "/t/g01/d01000"));
        let part = docs
            .iter()
            .filter(|d| d.path.as_str().starts_with("/t/g00"))
            .count();
        assert_eq!(part, shape.part_docs());
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
