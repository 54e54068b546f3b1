//! A seed's workload: the jobs ([`Job`]: renames, copies, deletes) and the consistent readers
//! it runs, drawn from the seed.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use fs_model::{FsDoc, FsPath};
use fs_rename::{
    list_consistent, FsTree, JobKind, LockSettings, RenameEvent, RenameOutcome, Renamer,
};
use fs_testkit::FaultyStore;
use rand::rngs::StdRng;
use rand::Rng;

use crate::watch::{self, World};
use crate::INDEX;

/// One job of a workload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Job {
    /// `mv from to`.
    Rename { from: FsPath, to: FsPath },
    /// `cp -r from to`.
    Copy { from: FsPath, to: FsPath },
    /// `rm -r path`.
    Delete { path: FsPath },
}

impl Job {
    /// Draws job `j`: half renames, a quarter copies, a quarter deletes. The source is a
    /// path of the initial tree, or (three times in ten) what an earlier job of the workload
    /// makes, so that jobs also rename, copy and delete each other's results; the destination
    /// is `n<j>` (no other job makes that path) in a directory of the initial tree, the root,
    /// or (one time in seven) what an earlier job makes.
    pub fn draw(
        rng: &mut StdRng,
        j: usize,
        paths: &[FsPath],
        dirs: &[FsPath],
        earlier: &[Job],
    ) -> Job {
        let made: Vec<&FsPath> = earlier.iter().filter_map(Job::makes).collect();
        let pick = |rng: &mut StdRng, odds: f64, among: &[FsPath]| {
            if !made.is_empty() && rng.random_bool(odds) {
                made[rng.random_range(0..made.len())].clone()
            } else {
                among[rng.random_range(0..among.len())].clone()
            }
        };
        let kind = rng.random_range(0..4);
        let from = pick(rng, 0.3, paths);
        let to = pick(rng, 1.0 / 7.0, dirs)
            .join(&format!("n{j}"))
            .expect("join");
        match kind {
            0 | 1 => Job::Rename { from, to },
            2 => Job::Copy { from, to },
            _ => Job::Delete { path: from },
        }
    }

    pub fn kind(&self) -> JobKind {
        match self {
            Job::Rename { .. } => JobKind::Rename,
            Job::Copy { .. } => JobKind::Copy,
            Job::Delete { .. } => JobKind::Delete,
        }
    }

    /// The path this job makes, if it makes one.
    fn makes(&self) -> Option<&FsPath> {
        match self {
            Job::Rename { to, .. } | Job::Copy { to, .. } => Some(to),
            Job::Delete { .. } => None,
        }
    }

    /// Runs the job to its end (or forever, if its process dies).
    pub async fn run(&self, renamer: &Renamer) -> RenameOutcome {
        match self {
            Job::Rename { from, to } => renamer.rename_reporting(from, to).await,
            Job::Copy { from, to } => renamer.copy_reporting(from, to).await,
            Job::Delete { path } => renamer.remove_reporting(path, true).await,
        }
    }
}

/// The progress sink of a job: every refusal by an older waiter is checked against the
/// waiter registrations seen ([`World::refused`]), except the first one reported after the
/// job's process froze, whose attempt may have started before the freeze.
pub fn refusals(world: Arc<World>, store: Arc<FaultyStore>) -> fs_rename::ProgressSink {
    let froze = AtomicBool::new(false);
    Arc::new(move |event| {
        if let RenameEvent::Waiting { blocker, .. } = event {
            if store.has_frozen() && !froze.swap(true, Ordering::SeqCst) {
                return;
            }
            world.refused(&blocker, watch::now_ms());
        }
    })
}

/// Lists `path` recursively under a shared lock ([`list_consistent`]) and has the world
/// compare the listing with the model states it overlapped. Returns whether it listed.
pub async fn read(
    world: &World,
    store: Arc<FaultyStore>,
    locks: &LockSettings,
    path: &FsPath,
) -> bool {
    let tree = FsTree::new(store, INDEX);
    let first = world.version();
    let mut listing: BTreeMap<String, FsDoc> = BTreeMap::new();
    let listed = list_consistent(&tree, locks, format!("ls -R {path}"), path, true, |entry| {
        listing.insert(entry.id.clone(), entry.doc.clone());
        Ok(())
    })
    .await;
    match listed {
        Ok(()) => {
            world.listed(path, &listing, (first, world.version()));
            true
        }
        Err(e) => {
            world.record(|| format!("ls -R {path} failed: {e}"));
            false
        }
    }
}
