//! Concurrent renames on every backend (the embedded store in near-real-time mode, osmem over
//! HTTP): the book's scenario raced 200 times and many overlapping renames checked against a
//! model; and the demo's four runs.
//!
//! `FSRENAME_TEST_SEED` replays a seed.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use common::*;
use fs_model::{FsDoc, FsPath};
use fs_rename::clinton::{
    build_clinton_tree, run_scenario, Narration, Narrator, Scenario, Stage, README_ASCIIDOC,
    README_TXT,
};
use fs_rename::{fsck, FsTree, RenameError, RenameHooks, Renamer};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

async fn the_clinton_race_200_times(first: Env) {
    let seed = seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let (mut b_first, mut a_first, mut resolved) = (0, 0, 0);
    for round in 0..200 {
        let env = Env {
            index: fs_testkit::unique_name("fs"),
            ..first.clone()
        };
        let tree = env.tree();
        tree.ensure_indices().await.expect("indices");
        let docs = build_clinton_tree(&tree, 40).await.expect("tree");
        let readme_id = tree
            .find(&p(README_TXT))
            .await
            .expect("find")
            .expect("readme")
            .id;
        // Alternate who starts first, and jitter both starts.
        let (delay_a, delay_b) = if round % 2 == 0 {
            (rng.random_range(0..300), rng.random_range(300..1_500))
        } else {
            (rng.random_range(300..1_500), rng.random_range(0..300))
        };
        let job = |from: &'static str, to: &'static str, delay: u64| {
            let renamer = Renamer::builder(Arc::clone(&env.store), env.index.clone())
                .page_size(7)
                .build();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_micros(delay)).await;
                renamer.rename(&p(from), &p(to)).await
            })
        };
        // Under network faults, the faults strike the two jobs only, not the set-up or checks.
        first.storm();
        let a = job("/clinton", "/gormley", delay_a);
        let b = job(README_TXT, README_ASCIIDOC, delay_b);
        let (a, b) = (a.await.expect("job a"), b.await.expect("job b"));
        first.lull();
        let context = format!("seed {seed} round {round}");
        let a = a.unwrap_or_else(|e| panic!("{context}: A failed: {e}"));
        resolved += a.ambiguous_resolved;
        if let Ok(b) = &b {
            resolved += b.ambiguous_resolved;
        }
        tree.refresh().await.expect("refresh");
        let readme_at = paths_by_id(&env)
            .await
            .remove(&readme_id)
            .expect("README survives");
        match b {
            Ok(_) => {
                b_first += 1;
                assert_eq!(
                    readme_at, "/gormley/projects/elasticsearch/README.asciidoc",
                    "{context}"
                );
            }
            Err(RenameError::SourceNotFound { .. }) => {
                a_first += 1;
                assert_eq!(
                    readme_at, "/gormley/projects/elasticsearch/README.txt",
                    "{context}"
                );
            }
            Err(e) => panic!("{context}: B failed otherwise: {e}"),
        }
        assert_eq!(
            tree.count_under(&FsPath::root()).await.expect("count"),
            docs,
            "{context}"
        );
        let report = fsck(Arc::clone(&env.store), &env.index, &FsPath::root())
            .await
            .expect("fsck");
        assert!(report.is_clean(), "{context}: {report}");
        assert_eq!(locks_left(&env).await, 0, "{context}: locks left");
    }
    first.calm();
    println!("B finished first {b_first} times, A first {a_first} times; {resolved} own landed writes recognised");
    assert!(
        b_first > 0 && a_first > 0,
        "seed {seed}: both orders must have happened"
    );
}

/// Builds a 5-level tree of 2 000 documents: 4 + 16 + 64 + 256 directories, 1 660 files.
async fn five_levels(env: &Env) -> FsTree {
    let tree = env.tree();
    tree.ensure_indices().await.expect("indices");
    let mut docs = Vec::new();
    let mut level: Vec<FsPath> = vec![FsPath::root()];
    for depth in 1..=4 {
        let mut next = Vec::new();
        for parent in &level {
            for i in 0..4 {
                let dir = parent.join(&format!("l{depth}d{i}")).expect("join");
                docs.push(FsDoc::dir(dir.clone(), 0));
                next.push(dir);
            }
        }
        level = next;
    }
    for f in 0..(2_000 - docs.len()) {
        let dir = &level[f % level.len()];
        docs.push(FsDoc::file(dir.join(&format!("f{f}")).expect("join"), 1, 0));
    }
    assert_eq!(docs.len(), 2_000);
    tree.insert_all(docs).await.expect("insert");
    tree.refresh().await.expect("refresh");
    tree
}

/// The expected tree: every document's path by id, with each successful rename applied in the
/// order the renames completed their writes (while still holding their locks).
type Model = Arc<Mutex<BTreeMap<String, FsPath>>>;

fn apply(model: &Model, from: &FsPath, to: &FsPath) {
    let mut model = model.lock().unwrap_or_else(|p| p.into_inner());
    for path in model.values_mut() {
        if path.is_inside(from) {
            *path = path.rebase(from, to).expect("rebase");
        }
    }
}

struct Record {
    model: Model,
    from: FsPath,
    to: FsPath,
}

#[async_trait]
impl RenameHooks for Record {
    async fn rewritten(&self) {
        apply(&self.model, &self.from, &self.to);
    }
}

fn pick(rng: &mut StdRng, model: &Model, dirs_only: bool) -> FsPath {
    let model = model.lock().unwrap_or_else(|p| p.into_inner());
    let mut paths: Vec<&FsPath> = model
        .values()
        .filter(|p| !dirs_only || !p.name().starts_with('f'))
        .collect();
    paths.sort();
    // Favour shallow paths (big subtrees) so renames overlap on purpose.
    let shallow: Vec<&FsPath> = paths.iter().copied().filter(|p| p.depth() <= 2).collect();
    let pool = if rng.random_bool(0.5) && !shallow.is_empty() {
        &shallow
    } else {
        &paths
    };
    pool[rng.random_range(0..pool.len())].clone()
}

async fn random_overlapping_renames_keep_the_tree_whole(env: Env) {
    let seed = seed();
    let tree = five_levels(&env).await;
    let model: Model = Arc::new(Mutex::new(
        paths_by_id(&env)
            .await
            .into_iter()
            .map(|(id, path)| (id, p(&path)))
            .collect(),
    ));
    env.storm();
    let mut jobs = tokio::task::JoinSet::new();
    for job in 0..8u64 {
        let (env, model) = (env.clone(), Arc::clone(&model));
        jobs.spawn(async move {
            let mut rng = StdRng::seed_from_u64(seed.wrapping_add(job));
            let mut outcomes: BTreeMap<&'static str, u32> = BTreeMap::new();
            for n in 0..25 {
                let from = pick(&mut rng, &model, false);
                let to = if rng.random_bool(0.1) {
                    pick(&mut rng, &model, false) // often exists already
                } else {
                    pick(&mut rng, &model, true)
                        .join(&format!("r{job}x{n}"))
                        .expect("join")
                };
                let hooks = Arc::new(Record {
                    model: Arc::clone(&model),
                    from: from.clone(),
                    to: to.clone(),
                });
                let renamer = Renamer::builder(Arc::clone(&env.store), env.index.clone())
                    .page_size(100)
                    .hooks(hooks)
                    .build();
                let kind = match renamer.rename(&from, &to).await {
                    Ok(report) => {
                        // Writes whose answer was lost and that a resend found landed.
                        *outcomes
                            .entry("(own landed writes recognised)")
                            .or_default() +=
                            u32::try_from(report.ambiguous_resolved).unwrap_or(u32::MAX);
                        "renamed"
                    }
                    Err(RenameError::SourceNotFound { .. }) => "source gone",
                    Err(RenameError::DestinationExists { .. }) => "destination exists",
                    Err(RenameError::DestinationParentMissing { .. }) => "destination parent gone",
                    Err(RenameError::DestinationParentNotDir { .. }) => "destination parent a file",
                    Err(RenameError::MoveIntoItself { .. }) => "into itself",
                    // Safe (nothing changed), and expected until waiting is fair: a rename of
                    // a top directory can be starved for its whole --wait by a stream of
                    // renames under it, each holding a share of it (seen on osmem with seed
                    // 11266194702446736939, before and after the fences).
                    Err(RenameError::Lock(fs_locks::LockError::Timeout { .. })) => "starved",
                    Err(e) => panic!("seed {seed}: job {job}: {from} → {to}: {e}"),
                };
                *outcomes.entry(kind).or_default() += 1;
            }
            outcomes
        });
    }
    let mut totals: BTreeMap<&'static str, u32> = BTreeMap::new();
    while let Some(done) = jobs.join_next().await {
        for (kind, n) in done.expect("job") {
            *totals.entry(kind).or_default() += n;
        }
    }
    env.calm();
    println!("outcomes of 200 renames: {totals:?}");
    assert!(
        totals.get("renamed").copied().unwrap_or(0) >= 20,
        "seed {seed}: too few renames took effect: {totals:?}"
    );
    tree.refresh().await.expect("refresh");
    assert_eq!(
        tree.count_under(&FsPath::root()).await.expect("count"),
        2_000,
        "seed {seed}"
    );
    let report = fsck(Arc::clone(&env.store), &env.index, &FsPath::root())
        .await
        .expect("fsck");
    assert!(report.is_clean(), "seed {seed}: {report}");
    assert_eq!(locks_left(&env).await, 0, "seed {seed}");
    let expected: BTreeMap<String, String> = model
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .map(|(id, path)| (id.clone(), path.to_string()))
        .collect();
    let actual = paths_by_id(&env).await;
    let wrong: Vec<_> = expected
        .iter()
        .filter(|(id, path)| actual.get(*id) != Some(path))
        .take(5)
        .collect();
    assert!(
        wrong.is_empty(),
        "seed {seed}: documents not where the successful renames put them: {wrong:?}"
    );
}

#[tokio::test]
async fn the_demo_shows_all_four_outcomes() {
    let damage = [
        None,
        None,
        Some("B's rename was lost: B reported success, yet README is at /gormley/projects/elasticsearch/README.txt"),
        Some("the tree is broken: "),
    ];
    for (scenario, damage) in Scenario::ALL.into_iter().zip(damage) {
        let outcome = run_scenario(scenario, 1_200).await.expect("scenario");
        assert!(outcome.as_expected, "{outcome}");
        let told = outcome.damage();
        let agrees = match (&told, damage) {
            (None, None) => true,
            (Some(told), Some(start)) => told.starts_with(start),
            _ => false,
        };
        assert!(agrees, "{}: {told:?}", scenario.title());
    }
}

/// A narrated stage (the live page's demo) tells every line of the timeline as it happens,
/// and the jobs' progress, on a store it is given and may use again.
#[tokio::test]
async fn a_narrated_stage_tells_the_timeline_as_it_goes() {
    let store: fs_store::SharedStore = Arc::new(
        fs_store::SqliteStore::in_memory_with(fs_store::SqliteOptions::new().near_real_time(true))
            .expect("store"),
    );
    let heard = Arc::new(Mutex::new(Vec::new()));
    let narrator: Narrator = {
        let heard = Arc::clone(&heard);
        Arc::new(move |n| heard.lock().expect("narration").push(n))
    };
    let stage = Stage::new(store, "demo").narrator(narrator);
    for scenario in [Scenario::TreeLocksBFirst, Scenario::VersionsOnly] {
        heard.lock().expect("narration").clear();
        // The index is cleared each time: the second run starts from a whole tree again.
        let outcome = stage.run(scenario, 600).await.expect("scenario");
        assert!(outcome.as_expected, "{outcome}");
        let heard = heard.lock().expect("narration").clone();
        let steps: Vec<_> = heard
            .iter()
            .filter_map(|n| match n {
                Narration::Step(entry) => Some(entry.clone()),
                Narration::Progress { .. } | Narration::Ready { .. } => None,
            })
            .collect();
        assert_eq!(
            heard.first(),
            Some(&Narration::Ready {
                documents: outcome.documents.0
            }),
            "the tree is ready before anything happens"
        );
        assert_eq!(steps, outcome.timeline, "{}", scenario.title());
        let a_done = heard.iter().rev().find_map(|n| match n {
            Narration::Progress {
                job: 'A',
                done,
                total,
            } => Some((*done, *total)),
            _ => None,
        });
        match scenario {
            Scenario::TreeLocksBFirst => {
                let all = outcome.documents.0;
                assert_eq!(a_done, Some((all, all)), "A moves every document");
            }
            _ => assert!(
                a_done.is_some_and(|(done, total)| done < total),
                "A stops half-way: {a_done:?}"
            ),
        }
    }
}

on_every_backend!(
    the_clinton_race_200_times,
    random_overlapping_renames_keep_the_tree_whole
);

with_network_faults!(
    the_clinton_race_200_times,
    random_overlapping_renames_keep_the_tree_whole
);
