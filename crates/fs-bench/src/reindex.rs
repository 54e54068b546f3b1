//! A directory moved on disk, then indexed again: issue 18's target, "no longer than a rename
//! of those documents plus the walk".
//!
//! Each round, on one embedded store and one local directory of `files` files:
//!
//! 1. `mv dir/big dir/moved` on disk, then `index_dir` (timed): it must report one move of
//!    `files + 1` documents, nothing created, nothing deleted;
//! 2. back on disk and in the store, untimed;
//! 3. the rename of the same documents in the store (`Renamer::rename`, timed), and back;
//! 4. a walk of the directory with each entry's metadata, as `find -printf '%i %s %T@'` does
//!    (timed).
//!
//! Rounds are paired, so that the machine's drift between rounds cancels out in each round's
//! difference: `index - (rename + walk)`, which the target wants at or below zero.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context as _;
use fs_model::FsPath;
use fs_rename::{index_dir, FsTree, IndexOptions, Renamer};

use crate::measure::{embedded, Embedded};

/// What [`moved_dir`] measured: medians in seconds, and each round's difference.
pub struct Reindexed {
    pub files: usize,
    pub index: f64,
    pub rename: f64,
    pub walk: f64,
    /// Each round's `index - (rename + walk)`, in seconds, sorted.
    pub over: Vec<f64>,
}

impl Reindexed {
    /// The median of the rounds' differences.
    pub fn median_over(&self) -> f64 {
        self.over
            .get(self.over.len() / 2)
            .copied()
            .unwrap_or(f64::NAN)
    }
}

impl std::fmt::Display for Reindexed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ms = |s: f64| s * 1e3;
        writeln!(
            f,
            "a directory of {} files moved on disk, then indexed again ({} rounds, medians):",
            self.files,
            self.over.len()
        )?;
        writeln!(f, "  index after the move   {:7.1} ms", ms(self.index))?;
        writeln!(f, "  rename in the store    {:7.1} ms", ms(self.rename))?;
        writeln!(f, "  walk of the directory  {:7.1} ms", ms(self.walk))?;
        let (first, last) = (
            self.over.first().copied().unwrap_or(f64::NAN),
            self.over.last().copied().unwrap_or(f64::NAN),
        );
        write!(
            f,
            "  index - (rename + walk), by round: median {:+.1} ms (from {:+.1} to {:+.1}); target: at most 0: {}",
            ms(self.median_over()),
            ms(first),
            ms(last),
            if self.median_over() <= 0.0 { "met" } else { "missed" }
        )
    }
}

/// Measures `rounds` paired rounds on a directory of `files` files (see the module notes).
pub async fn moved_dir(files: usize, rounds: usize, kind: Embedded) -> anyhow::Result<Reindexed> {
    let disk = tempfile::tempdir()?;
    let root = disk.path().join("tree");
    let (big, moved) = (root.join("big"), root.join("moved"));
    std::fs::create_dir_all(&big).with_context(|| format!("creating {}", big.display()))?;
    for i in 0..files {
        let file = big.join(format!("f{i}"));
        std::fs::write(&file, b"x").with_context(|| format!("writing {}", file.display()))?;
    }
    let (store, _db) = embedded(kind)?;
    let tree = FsTree::new(Arc::clone(&store), fs_testkit::unique_name("bench-fs"));
    let at = FsPath::parse("/t")?;
    let options = IndexOptions::default();
    let first = index_dir(&tree, &root, &at, &options, None).await?;
    anyhow::ensure!(
        first.created as usize == files + 2,
        "the first index created {}",
        first.created
    );
    let renamer = Renamer::builder(Arc::clone(&store), tree.index()).build();
    let (a, b) = (at.join("big")?, at.join("moved")?);
    let (mut index, mut rename, mut walk, mut over) = (vec![], vec![], vec![], vec![]);
    for _ in 0..rounds {
        std::fs::rename(&big, &moved)?;
        let started = Instant::now();
        let report = index_dir(&tree, &root, &at, &options, None).await?;
        let took = started.elapsed().as_secs_f64();
        anyhow::ensure!(
            report.moves == 1
                && report.moved as usize == files + 1
                && report.created == 0
                && report.stale == 0,
            "the index after the move did not find one move of {} documents: {} move(s) of {}, {} created, {} stale",
            files + 1,
            report.moves,
            report.moved,
            report.created,
            report.stale
        );
        index.push(took);
        std::fs::rename(&moved, &big)?;
        index_dir(&tree, &root, &at, &options, None).await?;

        let started = Instant::now();
        let renamed = renamer.rename(&a, &b).await?;
        rename.push(started.elapsed().as_secs_f64());
        anyhow::ensure!(
            renamed.rewritten as usize == files + 1,
            "the rename moved {}",
            renamed.rewritten
        );
        renamer.rename(&b, &a).await?;

        let root = root.clone();
        let walked = tokio::task::spawn_blocking(move || walk_with_metadata(&root)).await??;
        walk.push(walked);
        over.push(took - rename[rename.len() - 1] - walked);
    }
    over.sort_by(f64::total_cmp);
    Ok(Reindexed {
        files,
        index: median(&mut index),
        rename: median(&mut rename),
        walk: median(&mut walk),
        over,
    })
}

/// Walks `root` reading each entry's metadata; returns the seconds it took.
fn walk_with_metadata(root: &Path) -> anyhow::Result<f64> {
    let started = Instant::now();
    let mut seen = 0u64;
    for entry in walkdir::WalkDir::new(root).follow_links(false) {
        let meta = entry?.metadata()?;
        seen += meta.len().min(1);
    }
    std::hint::black_box(seen);
    Ok(started.elapsed().as_secs_f64())
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}
