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

use std::time::Duration;

use anyhow::Context as _;
use fs_model::FsPath;

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
    /// The operations to measure, of [`STEPS`] (`cp` copies `/t` to `/c`, or its first group
    /// of a million documents on a tree of ten; `rm` removes a copy of the same made just
    /// before, its peer another copy made the same way).
    pub steps: Vec<String>,
}

/// The operations `--scale` can measure, in the order it measures them.
pub const STEPS: [&str; 9] = [
    "index", "fsck", "ls", "find", "watch", "mv", "recover", "cp", "rm",
];

/// One operation measured, with its peer where it has one.
#[derive(Debug, Clone)]
pub struct Row {
    pub store: String,
    pub shards: Option<u32>,
    pub docs: usize,
    /// The documents the operation went through: the tree's, or the part's (`cp`, `rm`).
    pub handled: usize,
    pub step: &'static str,
    pub seconds: f64,
    pub peak_kb: Option<u64>,
    /// The HTTP requests the server answered meanwhile (`None` on the embedded store).
    pub requests: Option<u64>,
    /// The peer, where it has one.
    pub peer: Option<PeerRun>,
}

/// What a peer took.
#[derive(Debug, Clone, Copy)]
pub struct PeerRun {
    pub name: &'static str,
    pub seconds: f64,
    pub requests: Option<u64>,
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
                for (step, (m, requests), peer) in measured {
                    rows.push(Row {
                        store: place.label(),
                        shards,
                        docs: shape.docs(),
                        handled: if matches!(step, "cp -r" | "rm -r") {
                            shape.part_docs()
                        } else {
                            shape.docs()
                        },
                        step,
                        seconds: m.seconds,
                        peak_kb: m.peak_kb,
                        requests,
                        peer,
                    });
                }
                place.clean().await?;
            }
        }
    }
    Ok(rows)
}

/// An operation's name, what it took with the requests it sent, and its peer.
type Step = (
    &'static str,
    (child::Measured, Option<u64>),
    Option<PeerRun>,
);

/// Prints a step as soon as it is measured (a ten-million-document run takes an hour: what
/// it measured stays on the terminal if a later step fails).
fn say(step: &Step) {
    let (name, (m, requests), peer) = step;
    let count = |n: &Option<u64>| n.map_or("–".to_owned(), |n| n.to_string());
    eprintln!(
        "  {name:<28} {:>8.1} s {:>8.1} MiB {:>8} requests{}",
        m.seconds,
        m.peak_kb.map_or(0.0, |kb| kb as f64 / 1024.0),
        count(requests),
        peer.map_or(String::new(), |p| format!(
            "   {}: {:.1} s, {} requests",
            p.name,
            p.seconds,
            count(&p.requests)
        ))
    );
}

/// The requests the server answered while `work` ran (`None` on the embedded store).
async fn counted<T>(
    place: &peers::Place,
    work: impl std::future::Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<(T, Option<u64>)> {
    let before = peers::requests(place).await?;
    let done = work.await?;
    let after = peers::requests(place).await?;
    Ok((done, before.zip(after).map(|(b, a)| a.saturating_sub(b))))
}

/// A peer's run, counted, where it has one.
async fn peer_run(
    place: &peers::Place,
    name: &'static str,
    work: impl std::future::Future<Output = anyhow::Result<Option<f64>>>,
) -> anyhow::Result<Option<PeerRun>> {
    let (seconds, requests) = counted(place, work).await?;
    Ok(seconds.map(|seconds| PeerRun {
        name,
        seconds,
        requests,
    }))
}

/// The operations on one store among `steps`, each after the one before (the tree is indexed,
/// checked, listed, searched, watched, renamed there and back, renamed by a job killed
/// half-way and recovered, copied, and removed), with their peers.
async fn measure(
    binary: &std::path::Path,
    place: &peers::Place,
    disk: &std::path::Path,
    shape: &tree::Shape,
    steps: &[String],
) -> anyhow::Result<Vec<Step>> {
    place.clean().await?;
    let command = |args: &[&str]| {
        let mut all = place.args();
        all.extend(args.iter().map(|a| (*a).to_owned()));
        all
    };
    let run = |args: &[&str]| {
        let all = command(args);
        counted(place, async move { child::run(binary, &all) })
    };
    let wanted = |step: &str| steps.iter().any(|s| s == step);
    let disk = disk.to_string_lossy().into_owned();
    let mut out: Vec<Step> = Vec::new();
    let push = |out: &mut Vec<Step>, step: Step| {
        say(&step);
        out.push(step);
    };
    if wanted("index") {
        let bulk = peer_run(place, "raw _bulk", async {
            peers::raw_bulk(place, shape).await.map(Some)
        })
        .await?;
        push(
            &mut out,
            (
                "index (first)",
                run(&["index", &disk, "--as", "/t"]).await?,
                bulk,
            ),
        );
        push(
            &mut out,
            (
                "index again (unchanged)",
                run(&["index", &disk, "--as", "/t"]).await?,
                None,
            ),
        );
    } else {
        // What the other steps work on, unmeasured.
        child::run(binary, &command(&["index", &disk, "--as", "/t"]))?;
    }
    if wanted("fsck") {
        let read = peer_run(place, "one plain read", async {
            peers::plain_read(place).await.map(Some)
        })
        .await?;
        push(&mut out, ("fsck", run(&["fsck"]).await?, read));
    }
    if wanted("ls") {
        push(&mut out, ("ls -R", run(&["ls", "-R", "/t"]).await?, None));
    }
    if wanted("find") {
        // One name in every directory: as many entries as directories, from every one.
        push(
            &mut out,
            (
                "find --name f0999",
                run(&["find", "/t", "--name", "f0999", "--limit", "10000"]).await?,
                None,
            ),
        );
    }
    if wanted("watch") {
        // `index --watch` on the indexed tree: its first pass (the walk, the comparison with
        // the store, a watch on every directory) to its first report, then Ctrl-C.
        let all = command(&["index", &disk, "--as", "/t", "--watch", "--json"]);
        push(
            &mut out,
            (
                "index --watch (first pass)",
                counted(place, async move { child::run_to_first_line(binary, &all) }).await?,
                None,
            ),
        );
    }
    let mut mv_seconds = None;
    if wanted("mv") {
        let by_query = peer_run(
            place,
            "_update_by_query slices=auto",
            peers::update_by_query(place),
        )
        .await?;
        let mv = run(&["mv", "/t", "/t2"]).await?;
        mv_seconds = Some(mv.0.seconds);
        push(&mut out, ("mv", mv, by_query));
        push(
            &mut out,
            (
                "mv --rewrite client",
                run(&["mv", "--rewrite", "client", "/t2", "/t"]).await?,
                None,
            ),
        );
    }
    let mut root = FsPath::parse("/t")?;
    if wanted("recover") {
        // The whole tree's rename killed with SIGKILL at 40 % of its time (of the `mv`
        // measured above, or of a guess), then `recover`, which finishes it: a server-side
        // task goes on without its client, and recovery waits for it, or resumes a client-side
        // rewrite where the journal says it stopped.
        let guess =
            Duration::from_secs_f64(mv_seconds.unwrap_or(shape.docs() as f64 / 40_000.0) * 0.4)
                .max(Duration::from_millis(100));
        let killed = child::run_killed_after(binary, &command(&["mv", "/t", "/t3"]), guess)?;
        // On a small tree the rename may end first: then `recover` finds nothing to finish,
        // and says so in the table.
        let label = match killed {
            Some(_) => "recover (mv killed at 40 %)",
            None => "recover (the mv ended before its kill)",
        };
        push(&mut out, (label, run(&["recover"]).await?, None));
        child::run(binary, &command(&["fsck"])).context("fsck after recover")?;
        // Rolled forward: the tree is where the killed job was taking it.
        if child::run(binary, &command(&["ls", "/t3"])).is_ok() {
            root = FsPath::parse("/t3")?;
        }
    }
    let part = peers::part_path(&root, shape)?.to_string();
    if wanted("cp") {
        // The peer first: its copy is deleted before fsrename's copy of the same subtree to
        // the same place.
        let bulk = peer_run(
            place,
            "raw _bulk of the copies, 5 000 a request",
            peers::raw_bulk_copy(place, shape),
        )
        .await?;
        peers::delete_by_query(place, "/c").await?;
        push(
            &mut out,
            ("cp -r", run(&["cp", "-r", &part, "/c"]).await?, bulk),
        );
    }
    if wanted("rm") {
        // Both deletes on the same subtree as the server sees it: each on a copy of the part
        // made by `cp -r` just before it (the same documents, written the same way, as
        // fresh), the peer's first. The part itself is no such subtree: written by `index`
        // (and renamed there and back where `mv` ran), its segments are older and merged
        // otherwise, and it is slower to delete (on one shard, at 20 000: `rm -r` of the part
        // 0.7-0.9 s, of a fresh copy 0.6 s).
        if place.is_server() {
            child::run(binary, &command(&["cp", "-r", &part, "/d"]))
                .context("cp -r before the peer's delete")?;
        }
        let ((by_query, _), requests) = counted(place, async {
            Ok((peers::delete_by_query(place, "/d").await?, ()))
        })
        .await?;
        if let Some((_, deleted)) = by_query {
            anyhow::ensure!(
                deleted as usize == shape.part_docs(),
                "_delete_by_query deleted {deleted} documents, not {}",
                shape.part_docs()
            );
        }
        child::run(binary, &command(&["cp", "-r", &part, "/e"])).context("cp -r before rm -r")?;
        push(
            &mut out,
            (
                "rm -r",
                run(&["rm", "-r", "/e"]).await?,
                by_query.map(|(seconds, _)| PeerRun {
                    name: "_delete_by_query slices=auto",
                    seconds,
                    requests,
                }),
            ),
        );
    }
    Ok(out)
}
