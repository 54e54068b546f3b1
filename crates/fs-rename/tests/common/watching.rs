//! A watch run by a test: started on a directory, waited for (caught up, settled), held at
//! its next batch, stopped; and the store compared with a fresh index of the directory.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fs_rename::{
    index_dir, watch_dir, IndexOptions, WatchEvent, WatchOptions, WatchReport, WatchSink,
};
use fs_store::{Scan, Scope};
use tokio::sync::oneshot;

use super::{p, Env};

/// Held while a watch is created: the overflow test shrinks the kernel's queue for the watch
/// it creates, and no other watch may be created meanwhile.
pub static CREATING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// What the test saw of the batches.
struct Seen {
    /// When the last batch ended.
    last: Instant,
    /// A batch is being applied.
    busy: bool,
    rescans: u64,
    /// Whether the watcher said it caught up and has taken no event since.
    caught_up: bool,
}

/// Holds the watch at its next batch, before it is applied: `held` says it is held there,
/// and it goes on when `release` is sent to (or dropped).
struct Hold {
    held: std::sync::mpsc::Sender<()>,
    release: std::sync::mpsc::Receiver<()>,
}

/// A running watch: stop it to get its report.
pub struct Watching {
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<WatchReport>,
    seen: Arc<Mutex<Seen>>,
    hold: Arc<Mutex<Option<Hold>>>,
}

impl Watching {
    pub async fn start(env: &Env, root: &Path, options: WatchOptions) -> Watching {
        let (stop, stopped) = oneshot::channel::<()>();
        let (ready_tx, ready) = oneshot::channel::<()>();
        let ready_tx = Mutex::new(Some(ready_tx));
        let seen = Arc::new(Mutex::new(Seen {
            last: Instant::now(),
            busy: false,
            rescans: 0,
            caught_up: false,
        }));
        let hold: Arc<Mutex<Option<Hold>>> = Arc::default();
        let (seen_by_sink, hold_by_sink) = (Arc::clone(&seen), Arc::clone(&hold));
        let sink: WatchSink = Arc::new(move |event| match event {
            WatchEvent::Ready(_) => {
                if let Some(tx) = ready_tx.lock().unwrap().take() {
                    let _ = tx.send(());
                }
            }
            WatchEvent::Applying { .. } => {
                seen_by_sink.lock().unwrap().busy = true;
                let held = hold_by_sink.lock().unwrap().take();
                if let Some(hold) = held {
                    // Blocks the watch's task: nothing is taken from the watch meanwhile.
                    let _ = hold.held.send(());
                    let _ = hold.release.recv_timeout(Duration::from_secs(60));
                }
            }
            WatchEvent::CaughtUp => seen_by_sink.lock().unwrap().caught_up = true,
            WatchEvent::Gathering => seen_by_sink.lock().unwrap().caught_up = false,
            WatchEvent::Batch(b) => {
                let mut seen = seen_by_sink.lock().unwrap();
                seen.last = Instant::now();
                seen.busy = false;
                seen.rescans += u64::from(b.rescan);
                if let Some(why) = &b.rescan_reason {
                    println!("rescan: {why}");
                }
                assert!(b.failures.is_empty(), "{:?}", b.failures);
            }
        });
        let (tree, root) = (env.tree(), root.to_owned());
        let task = tokio::spawn(async move {
            watch_dir(
                &tree,
                &root,
                &p("/w"),
                &options,
                async {
                    let _ = stopped.await;
                },
                Some(sink),
            )
            .await
            .expect("watch")
        });
        ready.await.expect("the first run ends");
        Watching {
            stop,
            task,
            seen,
            hold,
        }
    }

    /// Waits until no batch is being applied and none ended for a while (the watcher caught
    /// up).
    pub async fn settle(&self, quiet: Duration) {
        let deadline = Instant::now() + Duration::from_secs(600);
        loop {
            tokio::time::sleep(quiet / 2).await;
            {
                let seen = self.seen.lock().unwrap();
                if !seen.busy && seen.last.elapsed() >= quiet {
                    return;
                }
            }
            assert!(Instant::now() < deadline, "the watcher never settled");
        }
    }

    /// Waits until the watcher is caught up with what was done before now: a little later
    /// (notify has taken the kernel's events by then), it said it caught up and has taken no
    /// event since.
    pub async fn caught_up(&self) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if self.seen.lock().unwrap().caught_up {
                return;
            }
            assert!(Instant::now() < deadline, "the watcher never caught up");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    pub fn rescans(&self) -> u64 {
        self.seen.lock().unwrap().rescans
    }

    /// Holds the watch at its next batch; returns (held, release).
    pub fn hold(&self) -> (std::sync::mpsc::Receiver<()>, std::sync::mpsc::Sender<()>) {
        let (held_tx, held) = std::sync::mpsc::channel();
        let (release, release_rx) = std::sync::mpsc::channel();
        *self.hold.lock().unwrap() = Some(Hold {
            held: held_tx,
            release: release_rx,
        });
        (held, release)
    }

    pub async fn stop(self) -> WatchReport {
        let _ = self.stop.send(());
        self.task.await.expect("watch task")
    }
}

/// What a tree index holds under `/w`, by path, ids aside.
pub async fn contents(env: &Env, index: &str) -> BTreeMap<String, (String, u64, i64)> {
    env.store.refresh(index).await.expect("refresh");
    let docs = Scan::new(
        Arc::clone(&env.store),
        index,
        Scope::Subtree(p("/w")),
        1_000,
    )
    .read_all()
    .await
    .expect("scan");
    docs.into_iter()
        .map(|d| {
            let s = d.source;
            (
                s["path"].as_str().unwrap_or("").to_owned(),
                (
                    s["kind"].as_str().unwrap_or("").to_owned(),
                    s["size"].as_u64().unwrap_or(0),
                    // A directory's time moves with every entry added or removed; compared by
                    // a fresh index taken at once, it is the same.
                    s["modified"].as_i64().unwrap_or(0),
                ),
            )
        })
        .collect()
}

/// Indexes `root` afresh into a new index of the same store and compares with the watched one.
pub async fn assert_like_a_fresh_index(env: &Env, root: &Path) {
    let fresh = Env {
        index: fs_testkit::unique_name("fresh"),
        ..env.clone()
    };
    index_dir(
        &fresh.tree(),
        root,
        &p("/w"),
        &IndexOptions::default(),
        None,
    )
    .await
    .expect("fresh index");
    let (watched, expected) = (
        contents(env, &env.index).await,
        contents(&fresh, &fresh.index).await,
    );
    let missing: Vec<_> = expected
        .keys()
        .filter(|k| !watched.contains_key(*k))
        .take(5)
        .collect();
    let extra: Vec<_> = watched
        .keys()
        .filter(|k| !expected.contains_key(*k))
        .take(5)
        .collect();
    let differ: Vec<_> = expected
        .iter()
        .filter(|(k, v)| watched.get(*k).is_some_and(|w| w != *v))
        .take(5)
        .collect();
    assert!(
        missing.is_empty() && extra.is_empty() && differ.is_empty(),
        "{} entries on disk, {} in the store; missing {missing:?}, extra {extra:?}, different {differ:?}",
        expected.len(),
        watched.len()
    );
}
