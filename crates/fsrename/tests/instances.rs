//! Several `fsrename serve` processes on one store (a database file, and osmem behind the
//! Elasticsearch-behaviour proxy): 300 renames submitted round-robin, every job readable from
//! every instance, one instance killed with SIGKILL half-way. Every job must end `done` or
//! `failed` with a reason, the tree be whole (fsck clean, count unchanged, every done rename
//! in place), and no lock or journal entry be left.

use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use fs_model::{FsDoc, FsPath};
use fs_rename::{fsck, FsTree, Journal};
use fs_store::{Scope, SharedStore, SqliteStore};
use serde_json::{json, Value};

const INSTANCES: usize = 3;
const RENAMES: usize = 300;
/// Directories holding the renamed ones: ten renames share each (their shared locks meet).
const TOPS: usize = 10;
const FILES: usize = 10;
struct Place {
    /// The locks' lease: short, so that the killed instance is found dead (two leases) and
    /// its locks expire soon.
    lease: &'static str,
    arg: String,
    index: String,
    store: SharedStore,
}

/// A running `fsrename serve`, killed when dropped.
struct Instance {
    name: String,
    base: String,
    child: Child,
    log: Arc<Mutex<Vec<String>>>,
}

impl Instance {
    fn start(place: &Place, name: &str) -> Instance {
        let mut child = Command::new(env!("CARGO_BIN_EXE_fsrename"))
            .args([
                "--store",
                &place.arg,
                "--index",
                &place.index,
                "--lease",
                place.lease,
            ])
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--instance",
                name,
                "--max-jobs",
                "1",
                "--wait",
                "60s",
                "--recover-every",
                "1s",
            ])
            .env_remove("FSRENAME_STORE")
            .env("FSRENAME_LOG", "fsrename=info,fs_rename=info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start fsrename serve");
        let stderr = child.stderr.take().expect("stderr");
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel();
        let lines = Arc::clone(&log);
        // Drains standard error to the end, so that the instance never blocks on it.
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Some(rest) = line.split("serving on ").nth(1) {
                    let url = rest.split_whitespace().next().unwrap_or("").to_owned();
                    let _ = tx.send(url);
                }
                lines.lock().unwrap().push(line);
            }
        });
        let base = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("{name} did not start: {:?}", log.lock().unwrap()));
        Instance {
            name: name.to_owned(),
            base,
            child,
            log,
        }
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn get(http: &reqwest::Client, url: &str) -> (u16, Value) {
    let answer = http.get(url).send().await.expect("GET");
    let status = answer.status().as_u16();
    (status, answer.json().await.unwrap_or(Value::Null))
}

/// The value of the series `name{instance="..."}` in `/metrics` of `instance`.
async fn metric(http: &reqwest::Client, instance: &Instance, name: &str) -> u64 {
    let text = http
        .get(format!("{}/metrics", instance.base))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    let series = format!("{name}{{instance=\"{}\"}} ", instance.name);
    text.lines()
        .find_map(|l| l.strip_prefix(&series))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {series} in {text}"))
}

async fn build(place: &Place) -> u64 {
    let tree = FsTree::new(Arc::clone(&place.store), place.index.clone());
    tree.ensure_indices().await.expect("indices");
    let mut docs = Vec::new();
    for t in 0..TOPS {
        docs.push(FsDoc::dir(FsPath::parse(&format!("/top{t}")).unwrap(), 0));
    }
    for i in 0..RENAMES {
        let dir = FsPath::parse(&format!("/top{}/d{i}", i % TOPS)).unwrap();
        docs.push(FsDoc::dir(dir.clone(), 0));
        for f in 0..FILES {
            docs.push(FsDoc::file(dir.join(&format!("f{f}")).unwrap(), 1, 0));
        }
    }
    let n = docs.len() as u64;
    tree.insert_all(docs).await.expect("insert");
    tree.refresh().await.expect("refresh");
    n
}

async fn count(place: &Place, index: &str) -> u64 {
    match place.store.refresh(index).await {
        Ok(()) => {}
        Err(fs_store::StoreError::IndexNotFound { .. }) => return 0,
        Err(e) => panic!("refresh {index}: {e}"),
    }
    place.store.count(index, &Scope::All).await.expect("count")
}

async fn exists(place: &Place, path: &str) -> bool {
    place
        .store
        .count(&place.index, &Scope::Exact(FsPath::parse(path).unwrap()))
        .await
        .expect("count")
        > 0
}

async fn three_instances_one_killed(place: Place) {
    let n = build(&place).await;
    let instances: Vec<Instance> = (0..INSTANCES)
        .map(|i| Instance::start(&place, &format!("i{i}")))
        .collect();
    let http = reqwest::Client::new();

    // Round-robin, as a load balancer would, and all at once: each instance runs one job at
    // a time, so that the first has a queue when it is killed.
    let mut posts = tokio::task::JoinSet::new();
    for i in 0..RENAMES {
        let (http, to) = (http.clone(), instances[i % INSTANCES].base.clone());
        let body = json!({ "from": format!("/top{}/d{i}", i % TOPS), "to": format!("/top{}/e{i}", i % TOPS) });
        posts.spawn(async move {
            let answer = http
                .post(format!("{to}/renames"))
                .json(&body)
                .send()
                .await
                .expect("POST");
            let status = answer.status().as_u16();
            let answer: Value = answer.json().await.unwrap_or(Value::Null);
            assert_eq!(status, 202, "{to}: {answer}");
            (i, answer["id"].as_str().expect("id").to_owned())
        });
    }
    let mut ids = vec![String::new(); RENAMES];
    while let Some(posted) = posts.join_next().await {
        let (i, id) = posted.expect("POST task");
        ids[i] = id;
    }
    // Every job is readable from every instance at once.
    for id in ids.iter().take(10) {
        for instance in &instances {
            let (status, job) = get(&http, &format!("{}/renames/{id}", instance.base)).await;
            assert_eq!(status, 200, "{} on {}: {job}", id, instance.name);
            assert_eq!(job["id"], id.as_str());
        }
    }

    // Half-way through its share, the first instance dies.
    let mut victims = instances.into_iter();
    let mut victim = victims.next().expect("first");
    let survivors: Vec<Instance> = victims.collect();
    let share = (RENAMES / INSTANCES) as u64;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let done = metric(&http, &victim, "fsrename_jobs_done_total").await;
        if done >= share / 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{}: {}",
            victim.name,
            victim.log()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    victim.child.kill().expect("SIGKILL");
    victim.child.wait().expect("wait");
    let done_by_victim = metric_before_kill(&victim);

    // Every job ends, as seen from either survivor.
    let deadline = Instant::now() + Duration::from_secs(240);
    let mut states = Vec::with_capacity(RENAMES);
    for (i, id) in ids.iter().enumerate() {
        let survivor = &survivors[i % survivors.len()];
        loop {
            let (status, job) = get(&http, &format!("{}/renames/{id}", survivor.base)).await;
            assert_eq!(status, 200, "{id} on {}: {job}", survivor.name);
            if job["state"] == "done" || job["state"] == "failed" {
                states.push(job);
                break;
            }
            assert!(
                Instant::now() < deadline,
                "job {id} never ended: {job}\n{}: {}\n{}: {}",
                survivors[0].name,
                survivors[0].log(),
                survivors[1].name,
                survivors[1].log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    // And the two survivors say the same of every job.
    for id in &ids {
        let (_, a) = get(&http, &format!("{}/renames/{id}", survivors[0].base)).await;
        let (_, b) = get(&http, &format!("{}/renames/{id}", survivors[1].base)).await;
        assert_eq!(
            (&a["state"], &a["instance"]),
            (&b["state"], &b["instance"]),
            "{a}\n{b}"
        );
    }

    let mut done = 0;
    let mut adopted = 0;
    for (i, job) in states.iter().enumerate() {
        let (from, to) = (
            format!("/top{}/d{i}", i % TOPS),
            format!("/top{}/e{i}", i % TOPS),
        );
        if job["adopted_from"] == "i0" {
            adopted += 1;
        }
        if job["state"] == "done" {
            done += 1;
            assert!(
                exists(&place, &to).await && !exists(&place, &from).await,
                "done but not moved: {job}"
            );
        } else {
            let reason = job["error"].as_str().unwrap_or("");
            assert!(!reason.is_empty(), "failed without a reason: {job}");
            println!("failed: {job}");
        }
        if job["adopted_from"] == "i0" {
            println!("taken over: {} {}", job["state"], job["warnings"]);
        }
    }
    let taken_over: u64 = {
        let mut sum = 0;
        for s in &survivors {
            sum += metric(&http, s, "fsrename_jobs_adopted_total").await;
        }
        sum
    };
    println!(
        "{}: {done} of {RENAMES} done, {} failed; the killed instance had finished {done_by_victim:?}; {adopted} jobs taken over from it ({taken_over} by the survivors' metrics)",
        place.arg,
        RENAMES - done
    );
    assert!(
        adopted > 0,
        "the killed instance had no job left to take over"
    );
    assert_eq!(adopted, taken_over);

    // The tree is whole and nothing is left behind, once the dead instance's locks expired
    // and the survivors' recovery swept them.
    let lock_index = fs_model::lock_index_name(&place.index);
    let deadline = Instant::now() + Duration::from_secs(60);
    while count(&place, &lock_index).await > 0 {
        assert!(
            Instant::now() < deadline,
            "locks left: {}",
            survivors[0].log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let tree = FsTree::new(Arc::clone(&place.store), place.index.clone());
    tree.refresh().await.expect("refresh");
    assert_eq!(count(&place, &place.index).await, n, "document count");
    let report = fsck(Arc::clone(&place.store), &place.index, &FsPath::root())
        .await
        .expect("fsck");
    assert!(report.is_clean(), "{report}");
    let open = Journal::new(Arc::clone(&place.store), &place.index)
        .list()
        .await
        .expect("journal");
    assert!(open.is_empty(), "journal entries left: {open:?}");
}

/// What the killed instance said it had finished, from its log (its metrics died with it).
fn metric_before_kill(victim: &Instance) -> usize {
    victim
        .log
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.contains("job finished"))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_instances_on_a_database_file_one_killed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("shared.db");
    let store: SharedStore = Arc::new(SqliteStore::open(&path).expect("database file"));
    three_instances_one_killed(Place {
        lease: "1s",
        arg: format!("file:{}", path.display()),
        index: "fs".to_owned(),
        store,
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_instances_on_osmem_one_killed() {
    // Three instances, osmem and the proxy share two cores: a second of lease is tight there.
    three_instances_one_killed(Place {
        lease: "2s",
        arg: fs_testkit::es_proxy().url().to_owned(),
        index: fs_testkit::unique_name("instances"),
        store: Arc::new(fs_testkit::osmem_store()),
    })
    .await;
}
