//! `--scale`: each operation of fsrename at 100 000 documents and more, against what a user's
//! own tool would do with the same documents (issue 49), with its time and peak memory.
//!
//! For each store (the embedded one, a real Elasticsearch at a URL), size and shard count: a
//! tree of directories of 1 000 empty files is made on disk (once, kept in --scale-dir), and
//! the release `fsrename` binary runs as a child process on it, measured (`child.rs`):
//! `index` (a first index), `index` again (nothing changed), `fsck`, `ls -R`, `mv` (on
//! Elasticsearch the default, server-side), `mv --rewrite client` back, and `rm -r`. The peers
//! (`peers.rs`) are the same documents written by raw bulk requests (a user's own loader),
//! one plain read of every document (a scroll by `_doc` on Elasticsearch; the store's scan on
//! the embedded store) and, on Elasticsearch, the rename as one `_update_by_query` with
//! `slices=auto`. The section goes into `docs/benchmarks.md` between its own markers.

mod child;
mod markdown;
mod peers;
mod tree;

use std::path::PathBuf;

use anyhow::Context as _;

pub use markdown::{render, write_into};

/// What `--scale` measures.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Documents of each tree (directories included).
    pub sizes: Vec<usize>,
    /// `embedded` or `es=URL`.
    pub stores: Vec<String>,
    /// Shard counts of the tree index on Elasticsearch (the embedded store has none).
    pub shards: Vec<u32>,
    /// Where the trees on disk and the embedded databases go.
    pub dir: PathBuf,
    /// The operations to measure, of [`STEPS`] (`cp` copies `/t` to `/c`; `rm` removes `/t`,
    /// its peer deleting `/c`).
    pub steps: Vec<String>,
}

/// The operations `--scale` can measure, in the order it measures them.
pub const STEPS: [&str; 6] = ["index", "fsck", "ls", "mv", "cp", "rm"];

/// One operation measured, with its peer where it has one.
#[derive(Debug, Clone)]
pub struct Row {
    pub store: String,
    pub shards: Option<u32>,
    pub docs: usize,
    pub step: &'static str,
    pub seconds: f64,
    pub peak_kb: Option<u64>,
    /// The peer's name and time.
    pub peer: Option<(&'static str, f64)>,
}

/// Runs the plan; returns a row per operation.
///
/// # Errors
/// If a tree cannot be made, a command fails, or a peer fails.
pub async fn run(plan: &Plan) -> anyhow::Result<Vec<Row>> {
    let binary = child::fsrename_binary()?;
    std::fs::create_dir_all(&plan.dir)
        .with_context(|| format!("creating {}", plan.dir.display()))?;
    let mut rows = Vec::new();
    for &docs in &plan.sizes {
        let shape = tree::Shape::of(docs);
        let disk = tree::on_disk(&plan.dir, &shape)?;
        for store in &plan.stores {
            let layouts: Vec<Option<u32>> = if store == "embedded" {
                vec![None]
            } else {
                plan.shards.iter().copied().map(Some).collect()
            };
            for shards in layouts {
                let place = peers::Place::new(store, &plan.dir, docs, shards)?;
                eprintln!("scale: {} documents on {place}", shape.docs());
                let measured = measure(&binary, &place, &disk, &shape, &plan.steps).await?;
                for (step, m, peer) in measured {
                    eprintln!(
                        "  {step:<28} {:>8.1} s {:>8.1} MiB{}",
                        m.seconds,
                        m.peak_kb.map_or(0.0, |kb| kb as f64 / 1024.0),
                        peer.map_or(String::new(), |(name, s)| format!("   {name}: {s:.1} s"))
                    );
                    rows.push(Row {
                        store: place.label(),
                        shards,
                        docs: shape.docs(),
                        step,
                        seconds: m.seconds,
                        peak_kb: m.peak_kb,
                        peer,
                    });
                }
                place.clean().await?;
            }
        }
    }
    Ok(rows)
}

type Step = (&'static str, child::Measured, Option<(&'static str, f64)>);

/// The operations on one store among `steps`, each after the one before (the tree is indexed,
/// checked, listed, renamed there and back, and removed), with their peers.
async fn measure(
    binary: &std::path::Path,
    place: &peers::Place,
    disk: &std::path::Path,
    shape: &tree::Shape,
    steps: &[String],
) -> anyhow::Result<Vec<Step>> {
    place.clean().await?;
    let run = |args: &[&str]| {
        let mut all = place.args();
        all.extend(args.iter().map(|a| (*a).to_owned()));
        child::run(binary, &all)
    };
    let wanted = |step: &str| steps.iter().any(|s| s == step);
    let disk = disk.to_string_lossy().into_owned();
    let mut out = Vec::new();
    if wanted("index") {
        let bulk = peers::raw_bulk(place, shape).await?;
        out.push((
            "index (first)",
            run(&["index", &disk, "--as", "/t"])?,
            Some(("raw _bulk", bulk)),
        ));
        out.push((
            "index again (unchanged)",
            run(&["index", &disk, "--as", "/t"])?,
            None,
        ));
    } else {
        // What the other steps work on, unmeasured.
        run(&["index", &disk, "--as", "/t"])?;
    }
    if wanted("fsck") {
        let read = peers::plain_read(place).await?;
        out.push(("fsck", run(&["fsck"])?, Some(("one plain read", read))));
    }
    if wanted("ls") {
        out.push(("ls -R", run(&["ls", "-R", "/t"])?, None));
    }
    if wanted("mv") {
        let by_query = peers::update_by_query(place).await?;
        let mv = run(&["mv", "/t", "/t2"])?;
        out.push((
            "mv",
            mv,
            by_query.map(|s| ("_update_by_query slices=auto", s)),
        ));
        out.push((
            "mv --rewrite client",
            run(&["mv", "--rewrite", "client", "/t2", "/t"])?,
            None,
        ));
    }
    if wanted("cp") {
        // The peer first: its copy is deleted (by the rm step's peer where it runs) before
        // fsrename's copy of the same subtree to the same place.
        let bulk = peers::raw_bulk_copy(place, shape).await?;
        peers::delete_by_query(place, "/c").await?;
        out.push((
            "cp -r",
            run(&["cp", "-r", "/t", "/c"])?,
            bulk.map(|s| ("raw _bulk of the copies, 5 000 a request", s)),
        ));
    }
    if wanted("rm") {
        // The peer deletes a subtree of the same size, the copy (made by `cp`, or by the raw
        // bulk here when that step did not run), before fsrename removes `/t`.
        if !wanted("cp") {
            peers::raw_bulk_copy(place, shape).await?;
        }
        let by_query = peers::delete_by_query(place, "/c").await?;
        if let Some((_, deleted)) = by_query {
            anyhow::ensure!(
                deleted as usize == shape.docs(),
                "_delete_by_query deleted {deleted} documents, not {}",
                shape.docs()
            );
        }
        out.push((
            "rm -r",
            run(&["rm", "-r", "/t"])?,
            by_query.map(|(s, _)| ("_delete_by_query slices=auto", s)),
        ));
    }
    Ok(out)
}
