//! Measurement 2: renames (and raw rewrites) by size and by bulk requests in flight; the
//! trees they rename, and the profiler's repeated rename.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Instant;

use fs_model::{FsDoc, FsPath};
use fs_rename::{FsTree, Renamer, Rewrite};
use fs_store::{BulkOp, Scan, Scope, SharedStore};

use super::{embedded, median, ms, Embedded, InFlightRow, Plan, RenameRow};

/// Deletes a tree's three indices (the tree, its locks, its journal): a run against a real
/// server leaves nothing behind.
pub async fn drop_tree(tree: &FsTree) -> anyhow::Result<()> {
    let store = tree.store();
    store.delete_index(tree.index()).await?;
    store.delete_index(&tree.lock_index()).await?;
    store
        .delete_index(&fs_model::journal_index_name(tree.index()))
        .await?;
    Ok(())
}

/// A tree `/big` of `docs` documents in directories of 1 000.
pub(super) async fn big_tree(
    store: &SharedStore,
    docs: usize,
    top: &str,
) -> anyhow::Result<FsTree> {
    let tree = FsTree::new(Arc::clone(store), fs_testkit::unique_name("bench-fs"));
    tree.ensure_indices().await?;
    insert_dir(&tree, docs, top).await?;
    Ok(tree)
}

pub async fn insert_dir(tree: &FsTree, docs: usize, top: &str) -> anyhow::Result<()> {
    let top = FsPath::parse(top)?;
    let mut all = vec![FsDoc::dir(top.clone(), 0)];
    let mut d = 0;
    while all.len() < docs {
        let dir = top.join(&format!("d{d}"))?;
        all.push(FsDoc::dir(dir.clone(), 0));
        let mut f = 0;
        while all.len() < docs && f < 999 {
            all.push(FsDoc::file(dir.join(&format!("f{f}"))?, 1, 0));
            f += 1;
        }
        d += 1;
    }
    for chunk in all.chunks(10_000) {
        tree.insert_all(chunk.to_vec()).await?;
    }
    tree.refresh().await?;
    Ok(())
}

/// The store's limit: the same scan and the same rewrite of every document, with no lock, no
/// check and no version condition, pipelined as the rename is (`in_flight` bulk requests at
/// once, the next page read meanwhile).
async fn raw_rewrite(
    tree: &FsTree,
    from: &FsPath,
    to: &FsPath,
    in_flight: usize,
) -> anyhow::Result<usize> {
    let store = tree.store();
    let scope = Scope::Subtree(from.clone());
    let mut scan = Scan::new(Arc::clone(store), tree.index(), scope, 1_000);
    let (mut n, mut failure) = (0, None);
    scan.pipeline(
        in_flight,
        |docs| async move {
            let mut ops = Vec::with_capacity(docs.len());
            for d in docs {
                let doc: FsDoc = serde_json::from_value(d.source)?;
                let moved = doc.renamed(from, to)?;
                ops.push(BulkOp::Index {
                    id: d.id,
                    source: serde_json::to_value(&moved)?,
                    if_version: None,
                });
            }
            let sent = ops.len();
            for r in store.bulk(tree.index(), ops).await? {
                r?;
            }
            anyhow::Ok(sent)
        },
        |written| match written {
            Ok(sent) => {
                n += sent;
                ControlFlow::Continue(())
            }
            Err(e) => {
                failure.get_or_insert(e);
                ControlFlow::Break(())
            }
        },
    )
    .await?;
    if let Some(e) = failure {
        return Err(e);
    }
    store.refresh(tree.index()).await?;
    Ok(n)
}

/// Measurement 2: Directory renames of N documents against the raw rewrite of the same documents.
pub(super) async fn renames(
    store: &SharedStore,
    plan: &Plan,
    max: usize,
    url: Option<&str>,
) -> anyhow::Result<(Vec<RenameRow>, Vec<InFlightRow>)> {
    let (mut rows, mut in_flight_rows) = (Vec::new(), Vec::new());
    for &docs in plan.sizes.iter().filter(|n| **n <= max) {
        let tree = big_tree(store, docs, "/big").await?;
        let peer = match url.map(crate::peer::Peer::new) {
            Some(peer) if peer.runs_scripts(tree.index()).await => Some(peer),
            _ => None,
        };
        let (big, moved) = (FsPath::parse("/big")?, FsPath::parse("/moved")?);
        let (rename_s, raw_s, round_trips) = alternate(
            store,
            &tree,
            (&big, &moved),
            plan.rename_repeat,
            plan.in_flight,
        )
        .await?;
        // The bulk requests in flight, at 10 000 documents: the measurement behind the
        // default (`fs_rename::DEFAULT_IN_FLIGHT`).
        if docs == plan.in_flight_docs {
            for &in_flight in &plan.in_flights {
                let (rename_s, raw_s, round_trips) =
                    alternate(store, &tree, (&big, &moved), 1, in_flight).await?;
                eprintln!(
                    "rename {docs} with {in_flight} in flight: {:.0} docs/s, raw {:.0} docs/s",
                    docs as f64 / rename_s,
                    docs as f64 / raw_s
                );
                in_flight_rows.push(InFlightRow {
                    in_flight,
                    row: RenameRow {
                        docs,
                        rename_s,
                        raw_s,
                        round_trips,
                        peer_s: None,
                        server_s: None,
                        scan_s: None,
                    },
                });
            }
        }
        // The server-side peer, paired with the rename the server rewrites.
        let (peer_s, server_s) = match &peer {
            Some(peer) => {
                let (peer_s, server_s) =
                    against_peer(store, &tree, peer, (&big, &moved), plan.rename_repeat).await?;
                (Some(peer_s), Some(server_s))
            }
            None => (None, None),
        };
        let mut scans = Vec::new();
        for _ in 0..3 {
            let started = Instant::now();
            let scan = Scan::new(
                Arc::clone(store),
                tree.index(),
                Scope::Subtree(big.clone()),
                1_000,
            );
            let n = scan.read_all().await?.len();
            scans.push(started.elapsed().as_secs_f64());
            anyhow::ensure!(n == docs, "the scan read {n} of {docs}");
        }
        let scan_s = Some(median(&mut scans));
        crate::measure::drop_tree(&tree).await?;
        let row = RenameRow {
            docs,
            rename_s,
            raw_s,
            round_trips,
            peer_s,
            server_s,
            scan_s,
        };
        eprintln!(
            "rename {docs}: {:.0} docs/s, raw {:.0} docs/s{}",
            row.rate(),
            row.raw_rate(),
            row.peer_rate()
                .map(|r| format!(", _update_by_query {r:.0} docs/s"))
                .unwrap_or_default(),
        );
        if let Some(server) = row.server_rate() {
            eprintln!("  rewritten by the server: {server:.0} docs/s");
        }
        rows.push(row);
    }
    Ok((rows, in_flight_rows))
}

/// Runs `first` and `second` paired, both ways round (`first` there, `second` back, `second`
/// there, `first` back) `repeat` times, so that both see the same store (sizes, caches) and
/// the same directions of travel through the path index; returns the seconds of each run of
/// each.
async fn paired(
    (big, moved): (&FsPath, &FsPath),
    repeat: usize,
    mut first: impl AsyncFnMut(&FsPath, &FsPath) -> anyhow::Result<()>,
    mut second: impl AsyncFnMut(&FsPath, &FsPath) -> anyhow::Result<()>,
) -> anyhow::Result<(Vec<f64>, Vec<f64>)> {
    let (mut firsts, mut seconds) = (Vec::new(), Vec::new());
    for _ in 0..repeat {
        for step in 0..4 {
            let (from, to) = if step % 2 == 0 {
                (big, moved)
            } else {
                (moved, big)
            };
            let started = Instant::now();
            if step == 0 || step == 3 {
                first(from, to).await?;
                firsts.push(started.elapsed().as_secs_f64());
            } else {
                second(from, to).await?;
                seconds.push(started.elapsed().as_secs_f64());
            }
        }
    }
    Ok((firsts, seconds))
}

/// Renames `/big` to `/moved` and back with the renamer, and rewrites it raw, [paired];
/// returns the medians (rename, raw) and a rename's round trips.
async fn alternate(
    store: &SharedStore,
    tree: &FsTree,
    ends: (&FsPath, &FsPath),
    repeat: usize,
    in_flight: usize,
) -> anyhow::Result<(f64, f64, u64)> {
    let docs = tree.count_under(ends.0).await? as usize;
    // The client's rewrite, against the client's raw rewrite; the server's is `against_peer`.
    let renamer = Renamer::builder(Arc::clone(store), tree.index())
        .in_flight(in_flight)
        .rewrite(Rewrite::Client)
        .build();
    let mut round_trips = 0;
    let (mut renames, mut raws) = paired(
        ends,
        repeat,
        async |from, to| {
            round_trips = renamer.rename(from, to).await?.round_trips;
            Ok(())
        },
        async |from, to| {
            let n = raw_rewrite(tree, from, to, in_flight).await?;
            anyhow::ensure!(n == docs, "raw rewrite moved {n} of {docs}");
            Ok(())
        },
    )
    .await?;
    // The runs themselves, for a reader who wants to judge the spread behind the medians.
    eprintln!("  {docs} documents, seconds a run: rename {renames:.3?}, raw {raws:.3?}");
    Ok((median(&mut renames), median(&mut raws), round_trips))
}

/// The rename the server rewrites (`--rewrite server`) [paired] with the unsafe peer; returns
/// the medians (peer, server rename).
async fn against_peer(
    store: &SharedStore,
    tree: &FsTree,
    peer: &crate::peer::Peer,
    ends: (&FsPath, &FsPath),
    repeat: usize,
) -> anyhow::Result<(f64, f64)> {
    let docs = tree.count_under(ends.0).await?;
    let renamer = Renamer::builder(Arc::clone(store), tree.index())
        .rewrite(Rewrite::Server)
        .build();
    let (mut servers, mut peers) = paired(
        ends,
        repeat,
        async |from, to| {
            let moved = renamer.rename(from, to).await?.rewritten;
            anyhow::ensure!(moved == docs, "the server moved {moved} of {docs}");
            Ok(())
        },
        async |from, to| {
            let n = peer.rename(tree.index(), from, to).await?;
            anyhow::ensure!(n == docs, "_update_by_query moved {n} of {docs}");
            Ok(())
        },
    )
    .await?;
    eprintln!("  {docs} documents, seconds a run: server rename {servers:.3?}, _update_by_query {peers:.3?}");
    let back = tree.count_under(ends.0).await?;
    anyhow::ensure!(back == docs, "after the peer, {back} of {docs} under /big");
    Ok((median(&mut peers), median(&mut servers)))
}

/// Renames of a directory of `docs` documents on the embedded store, back and forth
/// `times` times, for a profiler (the tree is built once, so the renames dominate the
/// profile). Prints each rename's phases; returns the median seconds per rename.
pub async fn profile_rename(docs: usize, times: usize, kind: Embedded) -> anyhow::Result<f64> {
    let (store, _dir) = embedded(kind)?;
    let tree = big_tree(&store, docs, "/big").await?;
    let renamer = Renamer::builder(Arc::clone(&store), tree.index()).build();
    let (a, b) = (FsPath::parse("/big")?, FsPath::parse("/moved")?);
    let mut seconds = Vec::new();
    for i in 0..times {
        let (from, to) = if i % 2 == 0 { (&a, &b) } else { (&b, &a) };
        let started = Instant::now();
        let report = renamer.rename(from, to).await?;
        let took = started.elapsed().as_secs_f64();
        anyhow::ensure!(
            report.rewritten as usize == docs,
            "moved {}",
            report.rewritten
        );
        let p = report.phases;
        eprintln!(
            "rename {from} -> {to}: {took:.3} s; locking {:.1} ms, checking {:.1} ms, rewriting {:.1} ms, releasing {:.1} ms; {} round trips",
            ms(p.locking),
            ms(p.checking),
            ms(p.rewriting),
            ms(p.releasing),
            report.round_trips
        );
        seconds.push(took);
    }
    Ok(median(&mut seconds))
}
