//! Keeping the index in step with the disk: what moved on disk is renamed in the store (ids
//! kept), not deleted and created again. The known failures of a crawler that matches by path
//! and modification date (fscrawler's issues #110, #136, #148, #244, #379, #1300) as tests
//! that pass here, on every backend.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use common::*;
use std::sync::Arc;

use fs_model::{FindQuery, NameGlob};
use fs_rename::{fsck, index_dir, IndexOptions, IndexReport, Renamer};

fn options(prune: bool) -> IndexOptions {
    IndexOptions {
        prune,
        ..IndexOptions::default()
    }
}

async fn index(env: &Env, dir: &Path, prune: bool) -> IndexReport {
    index_dir(&env.tree(), dir, &p("/t"), &options(prune), None)
        .await
        .expect("index")
}

/// `/t/a/x`, `/t/a/y`, `/t/a/sub/z`, `/t/b/`.
fn make_tree(dir: &Path) {
    std::fs::create_dir_all(dir.join("a/sub")).expect("mkdir");
    std::fs::create_dir_all(dir.join("b")).expect("mkdir");
    std::fs::write(dir.join("a/x"), b"x").expect("write");
    std::fs::write(dir.join("a/y"), b"yy").expect("write");
    std::fs::write(dir.join("a/sub/z"), b"zzz").expect("write");
}

/// The id of each path.
async fn ids(env: &Env) -> BTreeMap<String, String> {
    paths_by_id(env)
        .await
        .into_iter()
        .map(|(id, path)| (path, id))
        .collect()
}

async fn assert_whole(env: &Env) {
    let report = fsck(env.store.clone(), &env.index, &p("/"))
        .await
        .expect("fsck");
    assert!(report.is_clean(), "{report}");
    assert_eq!(locks_left(env).await, 0);
}

/// fscrawler #136, #379: a file renamed in place came back as a new document and the old one
/// stayed.
async fn a_file_renamed_in_place_keeps_its_id(env: Env) {
    let work = tempfile::tempdir().expect("temp dir");
    make_tree(work.path());
    index(&env, work.path(), true).await;
    let before = ids(&env).await;
    std::fs::rename(work.path().join("a/x"), work.path().join("a/x2")).expect("mv");
    let r = index(&env, work.path(), true).await;
    assert_eq!(
        (r.moves, r.moved, r.created, r.pruned),
        (1, 1, 0, 0),
        "{r:?}"
    );
    let after = ids(&env).await;
    assert_eq!(after.get("/t/a/x2"), before.get("/t/a/x"));
    assert!(!after.contains_key("/t/a/x"));
    assert_eq!(after.len(), before.len());
    assert_whole(&env).await;
}

/// fscrawler #148, #1300: a file moved to another directory was deleted at its origin and not
/// added at its destination (or added as a new document).
async fn a_file_moved_to_another_directory_keeps_its_id(env: Env) {
    let work = tempfile::tempdir().expect("temp dir");
    make_tree(work.path());
    index(&env, work.path(), true).await;
    let before = ids(&env).await;
    std::fs::rename(work.path().join("a/sub/z"), work.path().join("b/z")).expect("mv");
    let r = index(&env, work.path(), true).await;
    assert_eq!((r.moves, r.created, r.pruned), (1, 0, 0), "{r:?}");
    let after = ids(&env).await;
    assert_eq!(after.get("/t/b/z"), before.get("/t/a/sub/z"));
    assert!(!after.contains_key("/t/a/sub/z"));
    assert_whole(&env).await;
}

/// fscrawler #110, #244: a folder renamed left a copy of everything at its old path.
async fn a_folder_renamed_is_one_rename_and_leaves_no_copy(env: Env) {
    let work = tempfile::tempdir().expect("temp dir");
    make_tree(work.path());
    for i in 0..200 {
        std::fs::write(work.path().join(format!("a/sub/f{i}")), b"f").expect("write");
    }
    index(&env, work.path(), true).await;
    let before = ids(&env).await;
    std::fs::rename(work.path().join("a"), work.path().join("c")).expect("mv");
    let r = index(&env, work.path(), true).await;
    // a, a/x, a/y, a/sub, a/sub/z and 200 files: one rename of 205 documents. The one update
    // is `/t`, whose modification time the rename on disk changed.
    assert_eq!(
        (r.moves, r.moved, r.created, r.updated, r.pruned, r.stale),
        (1, 205, 0, 1, 0, 0),
        "{r:?}"
    );
    let after = ids(&env).await;
    for (path, id) in &before {
        if let Some(rest) = path.strip_prefix("/t/a") {
            assert_eq!(after.get(&format!("/t/c{rest}")), Some(id), "{path}");
            assert!(!after.contains_key(path), "a copy left at {path}");
        }
    }
    assert_eq!(after.len(), before.len());
    assert_whole(&env).await;
}

/// fscrawler #110 (moving a file does not change its date, so a date-based crawler never
/// sees it): a file moved into the tree with a modification time years old is indexed.
async fn a_file_moved_in_with_an_old_date_is_indexed(env: Env) {
    let work = tempfile::tempdir().expect("temp dir");
    let (tree_dir, outside) = (work.path().join("tree"), work.path().join("outside"));
    make_tree(&tree_dir);
    std::fs::create_dir_all(&outside).expect("mkdir");
    index(&env, &tree_dir, true).await;
    let old = outside.join("old.txt");
    std::fs::write(&old, b"old").expect("write");
    let years_ago = SystemTime::now() - Duration::from_secs(20 * 365 * 24 * 3600);
    std::fs::File::options()
        .write(true)
        .open(&old)
        .and_then(|f| f.set_modified(years_ago))
        .expect("set the modification time");
    std::fs::rename(&old, tree_dir.join("b/old.txt")).expect("mv in");
    let r = index(&env, &tree_dir, true).await;
    assert_eq!((r.moves, r.created), (0, 1), "{r:?}");
    assert!(ids(&env).await.contains_key("/t/b/old.txt"));
    assert_whole(&env).await;
}

/// Moved out of the tree: deleted with --prune, reported
/// without.
async fn a_directory_moved_out_is_pruned(env: Env) {
    let work = tempfile::tempdir().expect("temp dir");
    let (tree_dir, outside) = (work.path().join("tree"), work.path().join("outside"));
    make_tree(&tree_dir);
    index(&env, &tree_dir, true).await;
    std::fs::rename(tree_dir.join("a"), &outside).expect("mv out");
    let kept = index(&env, &tree_dir, false).await;
    assert_eq!((kept.moves, kept.stale, kept.pruned), (0, 5, 0), "{kept:?}");
    let pruned = index(&env, &tree_dir, true).await;
    assert_eq!((pruned.stale, pruned.pruned), (5, 5), "{pruned:?}");
    let after = ids(&env).await;
    assert!(after.keys().all(|p| !p.starts_with("/t/a")), "{after:?}");
    assert_whole(&env).await;
}

/// `dirs` directories under `dir`, each with two files and a subdirectory holding one.
fn many_dirs(dir: &Path, dirs: usize) {
    for i in 0..dirs {
        let d = dir.join(format!("d{i:03}"));
        std::fs::create_dir_all(d.join("sub")).expect("mkdir");
        for f in ["one", "two", "sub/three"] {
            std::fs::write(d.join(f), f).expect("write");
        }
    }
}

/// Hundreds of directories gone (`rm -rf`, or a restart after it): pruned under one lock in
/// a few requests, not a journaled `rm -r` job each (issue 48: 711 directories took 44.8 s
/// on Elasticsearch, 3 940 documents after a restart 97 s).
async fn many_directories_gone_are_pruned_in_a_few_requests(env: Env) {
    let work = tempfile::tempdir().expect("temp dir");
    let tree_dir = work.path().join("tree");
    many_dirs(&tree_dir, 200);
    std::fs::write(tree_dir.join("kept"), b"k").expect("write");
    index(&env, &tree_dir, true).await;
    for i in 0..200 {
        std::fs::remove_dir_all(tree_dir.join(format!("d{i:03}"))).expect("rm -r");
    }
    let counting = Arc::new(fs_store::CountingStore::new(Arc::clone(&env.store)));
    let counted = env.through(counting.clone());
    let r = index(&counted, &tree_dir, true).await;
    assert_eq!((r.stale, r.pruned, r.failed), (1_000, 1_000, 0), "{r:?}");
    // One journaled job a directory made at least six requests each (1 200 in all).
    let requests = counting.round_trips();
    assert!(
        requests < 60,
        "{requests} requests to prune 200 directories"
    );
    assert_eq!(
        ids(&env).await.keys().collect::<Vec<_>>(),
        ["/t", "/t/kept"]
    );
    assert_whole(&env).await;
}

/// A prune refused half-way (a delete of the deepest documents refused) leaves a whole tree:
/// deepest first, a directory only once all under it went. The next run prunes the rest.
async fn a_prune_cut_short_leaves_a_whole_tree(env: Env) {
    let work = tempfile::tempdir().expect("temp dir");
    let tree_dir = work.path().join("tree");
    many_dirs(&tree_dir, 20);
    index(&env, &tree_dir, true).await;
    for i in 0..20 {
        std::fs::remove_dir_all(tree_dir.join(format!("d{i:03}"))).expect("rm -r");
    }
    // The run without pruning writes what changed (the target's own document), so that the
    // next run's first write to the tree index is the prune's.
    let unpruned = index(&env, &tree_dir, false).await;
    assert_eq!(unpruned.stale, 100, "{unpruned:?}");
    let flaky = Arc::new(Flaky {
        inner: Arc::clone(&env.store),
        index: env.index.clone(),
        fault: Fault::Dropped,
        remaining: AtomicUsize::new(1),
        failing_refreshes: AtomicUsize::new(0),
    });
    let cut = index(&env.through(flaky), &tree_dir, true).await;
    assert_eq!(cut.failed, 1, "{cut:?}");
    assert!(cut.pruned < 100, "{cut:?}");
    let left = ids(&env).await;
    // The directories are all there: the deepest documents' deletes were refused.
    assert_eq!(
        left.keys().filter(|p| p.ends_with("/sub")).count(),
        20,
        "{left:?}"
    );
    assert_whole(&env).await;
    let rest = index(&env, &tree_dir, true).await;
    assert_eq!(
        (rest.pruned, rest.failed),
        (100 - cut.pruned, 0),
        "{rest:?}"
    );
    assert_eq!(ids(&env).await.keys().collect::<Vec<_>>(), ["/t"]);
    assert_whole(&env).await;
}

/// Hard links: the same file at two paths on disk. Its identity is not trusted for moves: a
/// link renamed comes out as a creation and a stale document.
async fn hard_links_are_not_taken_for_moves(env: Env) {
    let work = tempfile::tempdir().expect("temp dir");
    make_tree(work.path());
    std::fs::hard_link(work.path().join("a/x"), work.path().join("b/x-link")).expect("link");
    index(&env, work.path(), false).await;
    std::fs::rename(work.path().join("a/x"), work.path().join("a/x2")).expect("mv");
    let r = index(&env, work.path(), false).await;
    assert_eq!((r.moves, r.created, r.stale), (0, 1, 1), "{r:?}");
    assert_whole(&env).await;
}

/// A tree index created before identities (a strict mapping without them) is extended by the
/// first index run, not refused document by document.
async fn an_index_made_before_identities_is_extended(env: Env) {
    let mut body = fs_model::tree_index_body();
    if let Some(properties) = body["mappings"]["properties"].as_object_mut() {
        properties.remove("identity");
        properties.remove("content");
    }
    env.store
        .create_index(&env.index, &body)
        .await
        .expect("an index of the old shape");
    let work = tempfile::tempdir().expect("temp dir");
    make_tree(work.path());
    let r = index(&env, work.path(), false).await;
    // /t, a, a/sub, b and three files.
    assert_eq!((r.created, r.failed), (7, 0), "{r:?}");
    // The text of files too.
    let r = index_dir(&env.tree(), work.path(), &p("/t"), &with_text(), None)
        .await
        .expect("index with text");
    assert_eq!((r.texts, r.failed), (3, 0), "{r:?}");
    assert_eq!(
        found(&env, FindQuery::under(p("/t")).text("zzz")).await,
        ["/t/a/sub/z"]
    );
    assert_whole(&env).await;
}

/// `--content` with a 64-byte limit.
fn with_text() -> IndexOptions {
    IndexOptions {
        prune: true,
        content: Some(64),
        ..IndexOptions::default()
    }
}

/// The paths `query` finds, in the order found.
async fn found(env: &Env, query: FindQuery) -> Vec<String> {
    env.tree()
        .find_matching(&query, 100)
        .await
        .expect("find")
        .into_iter()
        .map(|e| {
            assert!(e.doc.content.is_none(), "hits come without their text");
            e.doc.path.to_string()
        })
        .collect()
}

/// The text stored in the document `id`.
async fn text_of(env: &Env, id: &str) -> Option<String> {
    let stored = env
        .store
        .get(&env.index, id)
        .await
        .expect("get")
        .expect("doc");
    stored.source["content"].as_str().map(str::to_owned)
}

/// `--content` and `find`: small UTF-8 files' text is stored and searched with names; binary
/// and large files have none; renames in the store and moves on disk carry the text along
/// unchanged; a changed file's text follows it; a run without `--content` keeps the text of
/// unchanged files.
async fn text_is_found_and_follows_renames_and_moves(env: Env) {
    let work = tempfile::tempdir().expect("temp dir");
    let dir = work.path();
    std::fs::create_dir_all(dir.join("docs/deep")).expect("mkdir");
    std::fs::write(dir.join("docs/alpha.md"), "Alpha beta, gamma.").expect("write");
    std::fs::write(dir.join("docs/deep/beta.txt"), "beta DELTA").expect("write");
    std::fs::write(dir.join("docs/bin.dat"), [0xffu8, 0xfe, b'b']).expect("write");
    std::fs::write(dir.join("large.txt"), "beta ".repeat(20)).expect("write");
    let tree = env.tree();
    let r = index_dir(&tree, dir, &p("/t"), &with_text(), None)
        .await
        .expect("index");
    assert_eq!((r.created, r.texts), (7, 2), "{r:?}");
    let under = || FindQuery::under(p("/t"));
    let glob = |g: &str| NameGlob::parse(g).expect("glob");
    assert_eq!(
        found(&env, under().text("beta")).await.len(),
        2,
        "the binary and the large file hold no text"
    );
    assert_eq!(
        found(&env, under().text("Delta BETA")).await,
        ["/t/docs/deep/beta.txt"]
    );
    assert_eq!(
        found(&env, under().name(glob("*.txt"))).await,
        ["/t/docs/deep/beta.txt", "/t/large.txt"]
    );
    assert_eq!(
        found(&env, under().name(glob("[ab]*")).text("gamma")).await,
        ["/t/docs/alpha.md"]
    );
    let ids_before = ids(&env).await;
    let alpha = ids_before["/t/docs/alpha.md"].clone();
    let alpha_text = text_of(&env, &alpha).await;
    assert_eq!(alpha_text.as_deref(), Some("Alpha beta, gamma."));

    // A rename in the store: the text goes along, unchanged.
    Renamer::builder(Arc::clone(&env.store), env.index.clone())
        .build()
        .rename(&p("/t/docs"), &p("/t/papers"))
        .await
        .expect("rename");
    assert_eq!(
        found(&env, under().text("gamma")).await,
        ["/t/papers/alpha.md"]
    );
    assert_eq!(text_of(&env, &alpha).await, alpha_text);
    // The disk says otherwise: the next run moves it back, text and all.
    let r = index_dir(&tree, dir, &p("/t"), &with_text(), None)
        .await
        .expect("index");
    assert_eq!((r.moves, r.created, r.texts), (1, 0, 0), "{r:?}");
    assert_eq!(
        found(&env, under().text("gamma")).await,
        ["/t/docs/alpha.md"]
    );

    // Moved on disk: renamed in the store, found at its new place by its words.
    std::fs::rename(dir.join("docs"), dir.join("moved")).expect("mv");
    let r = index_dir(&tree, dir, &p("/t"), &with_text(), None)
        .await
        .expect("index");
    assert_eq!(
        (r.moves, r.created, r.pruned, r.texts),
        (1, 0, 0, 0),
        "{r:?}"
    );
    assert_eq!(
        found(&env, under().text("delta")).await,
        ["/t/moved/deep/beta.txt"]
    );
    assert_eq!(ids(&env).await["/t/moved/alpha.md"], alpha);

    // A changed file: its new words are found, its old ones not.
    std::fs::write(
        dir.join("moved/alpha.md"),
        "Epsilon only, a longer text now",
    )
    .expect("write");
    let r = index_dir(&tree, dir, &p("/t"), &with_text(), None)
        .await
        .expect("index");
    assert_eq!((r.updated, r.texts), (1, 1), "{r:?}");
    assert_eq!(
        found(&env, under().text("epsilon")).await,
        ["/t/moved/alpha.md"]
    );
    assert!(found(&env, under().text("gamma")).await.is_empty());

    // Without --content: unchanged files keep their text, nothing is read.
    let r = index_dir(&tree, dir, &p("/t"), &options(true), None)
        .await
        .expect("index");
    assert_eq!((r.updated, r.texts), (0, 0), "{r:?}");
    assert_eq!(
        found(&env, under().text("delta")).await,
        ["/t/moved/deep/beta.txt"]
    );
    assert_whole(&env).await;
}

/// `dirs` directories under `dir`, each with `files` small files holding text.
fn wide_tree(dir: &Path, dirs: usize, files: usize) {
    for d in 0..dirs {
        let sub = dir.join(format!("d{d:02}"));
        std::fs::create_dir_all(&sub).expect("mkdir");
        for f in 0..files {
            std::fs::write(sub.join(format!("f{f:03}")), format!("file {d} {f}")).expect("write");
        }
    }
}

/// The paths whose parent is not in `paths` (the target's own document aside).
fn orphans(paths: &BTreeMap<String, String>) -> Vec<String> {
    paths
        .keys()
        .filter(|path| path.as_str() != "/t" && path.as_str() != "/")
        .filter(|path| {
            let parent = path.rsplit_once('/').map_or("/", |(parent, _)| parent);
            !paths.contains_key(parent)
        })
        .cloned()
        .collect()
}

/// A first index (nothing in the store under the target) is streamed, the walk taken chunk
/// by chunk and nothing of it kept (issue 49): a tree of more than one chunk of the walk,
/// written in batches that do not line up with its chunks, comes out whole, texts included.
async fn a_first_index_streamed_is_whole(env: Env) {
    let work = tempfile::tempdir().expect("temp dir");
    wide_tree(work.path(), 30, 80);
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    let progress: fs_rename::IndexProgressSink = Arc::new(move |_| {
        counted.fetch_add(1, Ordering::Relaxed);
    });
    let options = IndexOptions {
        batch_size: 300,
        ..with_text()
    };
    let r = index_dir(&env.tree(), work.path(), &p("/t"), &options, Some(progress))
        .await
        .expect("index");
    let entries = 30 * 80 + 30 + 1;
    assert_eq!(
        (r.files, r.dirs, r.created, r.texts, r.failed, r.stale),
        (2_400, 31, entries, 2_400, 0, 0),
        "{r:?}"
    );
    // One call a batch of 300: the walk's chunks of 1 000 are cut to the batch size.
    assert_eq!(calls.load(Ordering::Relaxed), 2_431usize.div_ceil(300));
    let paths = ids(&env).await;
    for d in 0..30 {
        for f in 0..80 {
            let path = format!("/t/d{d:02}/f{f:03}");
            assert!(paths.contains_key(&path), "{path} missing");
        }
    }
    assert_eq!(
        paths.keys().filter(|path| path.starts_with("/t")).count() as u64,
        entries
    );
    assert!(orphans(&paths).is_empty(), "{:?}", orphans(&paths));
    let id = paths.get("/t/d07/f042").expect("/t/d07/f042");
    assert_eq!(text_of(&env, id).await.as_deref(), Some("file 7 42"));
    assert_whole(&env).await;
    // The next run is the general one (the store holds the tree): everything unchanged.
    let again = index_dir(&env.tree(), work.path(), &p("/t"), &options, None)
        .await
        .expect("index");
    assert_eq!(
        (again.created, again.updated, again.unchanged, again.stale),
        (0, 0, entries, 0),
        "{again:?}"
    );
}

/// A first index told to stop part of the way leaves a well-formed tree: each document's
/// parent is there (parents are written first, as walked), and the next run writes the rest.
async fn a_first_index_stopped_leaves_parents_first(env: Env) {
    let work = tempfile::tempdir().expect("temp dir");
    wide_tree(work.path(), 30, 80);
    let stop = Arc::new(AtomicBool::new(false));
    let stopper = Arc::clone(&stop);
    // Told to stop after the third batch: the run ends before the fourth.
    let progress: fs_rename::IndexProgressSink = Arc::new(move |progress| {
        if progress.walked >= 3 * 250 {
            stopper.store(true, Ordering::Relaxed);
        }
    });
    let options = IndexOptions {
        batch_size: 250,
        stop: Some(stop),
        ..IndexOptions::default()
    };
    let r = index_dir(&env.tree(), work.path(), &p("/t"), &options, Some(progress))
        .await
        .expect("index");
    assert!(r.interrupted, "{r:?}");
    assert_eq!((r.created, r.stale, r.failed), (750, 0, 0), "{r:?}");
    let paths = ids(&env).await;
    assert_eq!(
        paths.keys().filter(|path| path.starts_with("/t")).count(),
        750
    );
    assert!(orphans(&paths).is_empty(), "{:?}", orphans(&paths));
    assert_whole(&env).await;
    let rest = index(&env, work.path(), false).await;
    assert_eq!(
        (rest.created, rest.unchanged, rest.interrupted),
        (2_431 - 750, 750, false),
        "{rest:?}"
    );
    let paths = ids(&env).await;
    assert_eq!(
        paths.keys().filter(|path| path.starts_with("/t")).count(),
        2_431
    );
    assert!(orphans(&paths).is_empty(), "{:?}", orphans(&paths));
    assert_whole(&env).await;
}

/// A directory moved away and made again, with one of its files moved back into it: the
/// file is up to date at its path (same identity, size and time) and the merge of the walk
/// with the store forgets it, but the rename of the directory carries its document away. A
/// second pass puts it back, in the same run.
async fn a_file_moved_back_into_a_directory_made_again(env: Env) {
    let work = tempfile::tempdir().expect("temp dir");
    make_tree(work.path());
    index(&env, work.path(), true).await;
    std::fs::rename(work.path().join("a"), work.path().join("c")).expect("mv a c");
    std::fs::create_dir(work.path().join("a")).expect("mkdir a");
    std::fs::rename(work.path().join("c/x"), work.path().join("a/x")).expect("mv c/x a/x");
    let r = index(&env, work.path(), true).await;
    assert_eq!(r.moves, 1, "{r:?}");
    let after = ids(&env).await;
    let paths: Vec<&str> = after.keys().map(String::as_str).collect();
    assert_eq!(
        paths,
        [
            "/t",
            "/t/a",
            "/t/a/x",
            "/t/b",
            "/t/c",
            "/t/c/sub",
            "/t/c/sub/z",
            "/t/c/y"
        ],
        "{r:?}"
    );
    assert_whole(&env).await;
}

on_every_backend!(
    an_index_made_before_identities_is_extended,
    text_is_found_and_follows_renames_and_moves,
    a_file_renamed_in_place_keeps_its_id,
    a_file_moved_to_another_directory_keeps_its_id,
    a_folder_renamed_is_one_rename_and_leaves_no_copy,
    a_file_moved_in_with_an_old_date_is_indexed,
    a_directory_moved_out_is_pruned,
    many_directories_gone_are_pruned_in_a_few_requests,
    a_prune_cut_short_leaves_a_whole_tree,
    hard_links_are_not_taken_for_moves,
    a_file_moved_back_into_a_directory_made_again,
    a_first_index_streamed_is_whole,
    a_first_index_stopped_leaves_parents_first,
);
