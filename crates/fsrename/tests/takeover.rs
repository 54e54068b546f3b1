//! The takeover of a dead instance's jobs, one case each, without waiting for a kill to land
//! at the right moment: the jobs index holds the jobs of an instance `ghost` whose heartbeat
//! stopped long ago, a service starts, and each job must end as `adopt.rs` says:
//!
//! - queued (no journal id): run again, `done`;
//! - journal id, nothing journaled there: run again, `done`;
//! - journal id, entry open (the rename died after its first page): finished by recovery,
//!   `done`, and not run a second time;
//! - journal id, entry closed (the rename finished and its instance died before saying so):
//!   `done` at once (run again, it would fail: its source is gone);
//! - finished a week ago: deleted.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use fs_model::{FsDoc, FsPath};
use fs_rename::{fsck, Entry, FsTree, Journal, RenameHooks, Renamer};
use fs_store::{Scope, SharedStore};
use fs_testkit::Backend;
use fsrename::serve::{ServeConfig, Server};
use serde_json::{json, Value};
use tokio::sync::{oneshot, Notify};

/// Records the journal id; with `die`, stops the job for good at its first page (the test
/// then aborts it, as a SIGKILL would: its locks are left to expire).
struct Dies {
    journal: Mutex<Option<String>>,
    die: bool,
    parked: Notify,
}

#[async_trait]
impl RenameHooks for Dies {
    async fn journaling(&self, job_id: &str) -> Result<(), String> {
        *self.journal.lock().unwrap() = Some(job_id.to_owned());
        Ok(())
    }

    async fn before_write(&self, _page: &[Entry]) {
        if self.die {
            self.parked.notify_one();
            std::future::pending::<()>().await;
        }
    }
}

/// Runs `mv from to` in this process and returns its journal id; with `die`, kills it after
/// it journaled, before its first write.
async fn rename(store: &SharedStore, index: &str, from: &str, to: &str, die: bool) -> String {
    let hooks = Arc::new(Dies {
        journal: Mutex::new(None),
        die,
        parked: Notify::new(),
    });
    let renamer = Renamer::builder(Arc::clone(store), index)
        .page_size(5)
        .lease(Duration::from_millis(300))
        .hooks(Arc::clone(&hooks) as Arc<dyn RenameHooks>)
        .build();
    let (from, to) = (FsPath::parse(from).unwrap(), FsPath::parse(to).unwrap());
    let job = tokio::spawn(async move { renamer.rename(&from, &to).await });
    if die {
        hooks.parked.notified().await;
        job.abort();
        let _ = job.await;
    } else {
        job.await.expect("task").expect("rename");
    }
    let id = hooks.journal.lock().unwrap().clone();
    id.expect("journal id")
}

/// The document of a job of the dead instance `ghost`.
fn ghost_job(id: &str, from: &str, to: &str, state: &str, journal: Option<&str>) -> Value {
    json!({
        "type": "job", "id": id, "kind": "rename", "from": from, "to": to,
        "strategy": "tree", "state": state, "progress": { "done": 0, "total": 0 },
        "waiting_for": null, "report": null, "error": null, "warnings": [],
        "accepted_by": "ghost", "instance": "ghost", "journal": journal,
        "submitted_at": 1, "started_at": null, "finished_at": null
    })
}

async fn dead_instance_jobs_are_taken_over(backend: Backend) {
    let store = backend.store();
    let index = fs_testkit::unique_name("takeover");
    let tree = FsTree::new(Arc::clone(&store), index.clone());
    tree.ensure_indices().await.expect("indices");
    let mut docs = Vec::new();
    for top in ["/open", "/queued", "/absent", "/closed"] {
        let dir = FsPath::parse(top).unwrap();
        docs.push(FsDoc::dir(dir.clone(), 0));
        for f in 0..20 {
            docs.push(FsDoc::file(dir.join(&format!("f{f}")).unwrap(), 1, 0));
        }
    }
    let n = docs.len() as u64;
    tree.insert_all(docs).await.expect("insert");
    tree.refresh().await.expect("refresh");

    let open = rename(&store, &index, "/open", "/opened", true).await;
    let closed = rename(&store, &index, "/closed", "/closed2", false).await;
    assert!(Journal::new(Arc::clone(&store), &index)
        .is_open(&open)
        .await
        .expect("journal"));

    let jobs_index = fs_model::jobs_index_name(&index);
    store
        .create_index(&jobs_index, &fs_model::jobs_index_body())
        .await
        .expect("jobs index");
    let ghost = [
        ghost_job("j-open", "/open", "/opened", "rewriting", Some(&open)),
        ghost_job("j-queued", "/queued", "/queued2", "queued", None),
        ghost_job(
            "j-absent",
            "/absent",
            "/absent2",
            "rewriting",
            Some("never-journaled"),
        ),
        ghost_job(
            "j-closed",
            "/closed",
            "/closed2",
            "rewriting",
            Some(&closed),
        ),
    ];
    for job in ghost {
        let id = job["id"].as_str().unwrap().to_owned();
        store.create(&jobs_index, &id, job).await.expect("job");
    }
    let beat = json!({ "type": "instance", "instance": "ghost", "listen": "127.0.0.1:1", "heartbeat_at": 1 });
    store
        .create(&jobs_index, "instance:ghost", beat)
        .await
        .expect("heartbeat");

    let mut config = ServeConfig::new(index.clone());
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.lease = Duration::from_millis(300);
    config.recover_every = Some(Duration::from_millis(300));
    config.instance = "heir".to_owned();
    let (stop, stopped) = oneshot::channel::<()>();
    let server = Server::start(config, Arc::clone(&store), async {
        let _ = stopped.await;
    })
    .await
    .expect("start");
    let base = format!("http://{}", server.addr());
    let http = reqwest::Client::new();

    let deadline = Instant::now() + Duration::from_secs(60);
    let mut ended = Vec::new();
    for id in ["j-open", "j-queued", "j-absent", "j-closed"] {
        ended.push(fs_testkit::rename_ended(&http, &base, id, deadline).await);
    }
    for job in &ended {
        assert_eq!(job["state"], "done", "{job}");
        assert_eq!(
            (&job["instance"], &job["adopted_from"]),
            (&json!("heir"), &json!("ghost")),
            "{job}"
        );
    }
    let warning = |i: usize| ended[i]["warnings"][0].as_str().unwrap_or("").to_owned();
    assert!(warning(0).contains("recovery finishes it"), "{}", ended[0]);
    assert!(warning(1).contains("run again"), "{}", ended[1]);
    assert!(warning(2).contains("run again"), "{}", ended[2]);
    assert!(warning(3).contains("finished the job"), "{}", ended[3]);
    // Run once each: the recovered one and the closed one were not run again.
    let report = |i: usize| !ended[i]["report"].is_null();
    assert_eq!(
        (report(0), report(1), report(2), report(3)),
        (false, true, true, false)
    );

    tree.refresh().await.expect("refresh");
    for (gone, there) in [
        ("/open", "/opened"),
        ("/queued", "/queued2"),
        ("/absent", "/absent2"),
        ("/closed", "/closed2"),
    ] {
        let count = |p: &str| {
            let store = Arc::clone(&store);
            let (index, p) = (index.clone(), FsPath::parse(p).unwrap());
            async move {
                store
                    .count(&index, &Scope::Subtree(p))
                    .await
                    .expect("count")
            }
        };
        assert_eq!((count(gone).await, count(there).await), (0, 21), "{there}");
    }
    assert_eq!(store.count(&index, &Scope::All).await.expect("count"), n);
    let metrics = http
        .get(format!("{base}/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    assert!(
        metrics.contains("fsrename_jobs_adopted_total{instance=\"heir\"} 4"),
        "{metrics}"
    );
    let old = http
        .get(format!("{base}/renames/j-old"))
        .send()
        .await
        .expect("GET");
    assert_eq!(
        old.status().as_u16(),
        404,
        "a job finished long ago is forgotten"
    );
    // The journal id with no entry was fenced before the job ran again: an entry its dead (or
    // only cut off) instance was still sending can never land after the second run.
    let absent = Journal::new(Arc::clone(&store), &index)
        .state_of("never-journaled")
        .await
        .expect("the journal");
    assert!(
        matches!(absent, fs_rename::JournalState::Fenced),
        "{absent:?}"
    );
    let _ = stop.send(());
    server.wait().await.expect("stopped");
    let report = fsck(Arc::clone(&store), &index, &FsPath::root())
        .await
        .expect("fsck");
    assert!(report.is_clean() && report.locks_active == 0, "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded() {
    dead_instance_jobs_are_taken_over(Backend::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn osmem() {
    dead_instance_jobs_are_taken_over(Backend::Osmem).await;
}
