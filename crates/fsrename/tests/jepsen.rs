//! The Jepsen-style test (`fs-jepsen`, `docs/reliability.md`): several clients, through the
//! command line and the service, make random renames, copies, deletes, mkdirs and touches on
//! one small tree while a nemesis strikes; then recovery, a final read, and the checker: no
//! id lost, duplicated or unexplained, the end one that the acknowledged calls (and some of
//! the unknown ones) make in an order that respects real time, no failed call with an effect,
//! nothing left behind (fsck clean, no lock, no journal entry, no task, no search context).
//!
//! Here: the embedded store with client processes killed and paused past their lease, and
//! osmem behind the Elasticsearch-behaviour proxy with network storms (failover replays
//! among them) as well. On a real three-node cluster (ignored unless asked for, with
//! `FSRENAME_TEST_ES_CLUSTER` and the node commands of `docs/elasticsearch.md`): nodes
//! killed, paused and partitioned, and the flood-stage block, as well.
//! `FSRENAME_TEST_JEPSEN_SEED` replays a seed; `FSRENAME_TEST_JEPSEN_OUT` keeps every
//! history as JSON in that directory; `FSRENAME_TEST_JEPSEN_MINUTES` makes each cluster
//! history last so long, its gauges (`fs_jepsen::gauges`) read every five minutes.

use std::time::Duration;

use fs_jepsen::{check, FaultKind, Fsrename, Plan, Run, Stage, Workload};

/// The seed of a history: `FSRENAME_TEST_JEPSEN_SEED`, else `default`.
fn seed(default: u64) -> u64 {
    std::env::var("FSRENAME_TEST_JEPSEN_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn fsrename(store: &str, index: &str, lease: &str, wait: Duration, extra: &[&str]) -> Fsrename {
    let mut global: Vec<String> = ["--store", store, "--index", index, "--lease", lease]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    global.extend(extra.iter().map(|s| (*s).to_owned()));
    Fsrename {
        binary: env!("CARGO_BIN_EXE_fsrename").into(),
        global,
        wait,
        serve: Vec::new(),
        clocks: fs_jepsen::ClockFaults::default(),
    }
}

/// Checks `run`: its row of the table of runs, or, if anything is wrong, everything a reader
/// needs.
fn verify(name: &str, run: &Run) -> Result<String, String> {
    if let Ok(dir) = std::env::var("FSRENAME_TEST_JEPSEN_OUT") {
        let path = std::path::Path::new(&dir).join(format!("{name}.json"));
        let json = serde_json::to_string_pretty(&run.history).expect("a history in JSON");
        std::fs::write(&path, json).expect("write the history");
        let log = std::path::Path::new(&dir).join(format!("{name}.service.log"));
        std::fs::write(&log, &run.service_log).expect("write the service log");
        let gauges = std::path::Path::new(&dir).join(format!("{name}.gauges.json"));
        let json = serde_json::to_string_pretty(&run.samples).expect("the gauges in JSON");
        std::fs::write(&gauges, json).expect("write the gauges");
    }
    let verdict = check(&run.history);
    let (ok, failed, unknown) = run.history.outcomes();
    let mut kinds = std::collections::BTreeMap::<FaultKind, usize>::new();
    for fault in &run.history.faults {
        *kinds.entry(fault.kind).or_default() += 1;
    }
    let row = format!(
        "| {name} | {} | {ok} / {failed} / {unknown} | {} | {kinds:?} | {} | {:.0} s |",
        run.history.calls.len(),
        run.history.faults.len(),
        if verdict.passed() && run.leftovers.is_empty() {
            "none".to_owned()
        } else {
            format!("{} + {} left", verdict.anomalies.len(), run.leftovers.len())
        },
        run.took.as_secs_f64()
    );
    eprintln!("{row}");
    if !verdict.passed() || !run.leftovers.is_empty() {
        let mut calls = String::new();
        for (i, call) in run.history.calls.iter().enumerate() {
            calls.push_str(&format!(
                "#{i} {} {:?} [{:.3}, {:.3}] {} → {:?}\n",
                call.client,
                call.via,
                call.invoked as f64 / 1e6,
                call.completed as f64 / 1e6,
                call.op,
                call.outcome
            ));
        }
        // The log's end: the whole of it goes beside the history (FSRENAME_TEST_JEPSEN_OUT).
        let lines: Vec<&str> = run.service_log.lines().collect();
        let tail = lines[lines.len().saturating_sub(300)..].join("\n");
        return Err(format!(
            "{name}: {verdict}\nleft behind: {:?}\nstart: {:?}\nend: {:?}\nfaults: {:?}\ncalls:\n{calls}\nservice log (its last 300 lines):\n{tail}",
            run.leftovers, run.history.start, run.history.end, run.history.faults
        ));
    }
    Ok(row)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_store_clients_killed_and_paused() {
    let dir = tempfile::tempdir().expect("a directory");
    let store = dir.path().join("jepsen.db");
    // The service instances lend their jobs the intention locks they hold (issue 51): killed
    // and paused, they leave holds that recovery must clear only once no borrower may act.
    let mut fsrename = fsrename(
        store.to_str().expect("a UTF-8 path"),
        "fs",
        "1s",
        Duration::from_secs(3),
        &[],
    );
    fsrename.serve = vec!["--share-intentions".to_owned()];
    let workload = Workload {
        fsrename,
        cli_clients: 4,
        service_clients: 2,
        services: 2,
        calls: 80,
        seed: seed(50),
        think: Duration::from_millis(100),
        call_deadline: Duration::from_secs(60),
        limit: Duration::from_secs(100),
        es: None,
        contexts_patience: Duration::ZERO,
        gauge_every: None,
    };
    let plan = Plan {
        kinds: vec![
            FaultKind::ClientKill,
            FaultKind::ClientPause,
            FaultKind::ClockSkew,
            FaultKind::ClockJump,
        ],
        min_faults: 4,
        gap: (Duration::from_millis(300), Duration::from_millis(1500)),
        outage: (Duration::from_secs(1), Duration::from_secs(2)),
        partition: (Duration::ZERO, Duration::ZERO),
        lease: Duration::from_secs(1),
    };
    let run = workload.run(Stage::Local, plan).await.expect("a history");
    if let Err(failure) = verify("embedded", &run) {
        panic!("{failure}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_network_storms_and_clients_killed_and_paused() {
    // Renames by query as a task (the server-side rewrite), and scripted updates of lock
    // documents racing in a window ten times Elasticsearch's usual.
    let proxy = fs_testkit::start_es_proxy(fs_testkit::EsProxyOptions {
        update_by_query: true,
        race_window: Duration::from_millis(20),
        ..fs_testkit::EsProxyOptions::default()
    });
    let index = fs_testkit::unique_name("jepsen");
    let workload = Workload {
        // Every rename (command line and service) by query, as a task of the server: the
        // small renames here would otherwise be rewritten by the client. The tree on three
        // shards, so that the storms' answers can lack one (anomaly 10).
        fsrename: fsrename(
            proxy.url(),
            &index,
            "2s",
            Duration::from_secs(5),
            &["--rewrite", "server", "--shards", "3", "--replicas", "0"],
        ),
        cli_clients: 4,
        service_clients: 2,
        services: 2,
        calls: 80,
        seed: seed(51),
        think: Duration::from_millis(300),
        call_deadline: Duration::from_secs(60),
        limit: Duration::from_secs(100),
        es: None,
        contexts_patience: Duration::ZERO,
        gauge_every: None,
    };
    let plan = Plan {
        kinds: vec![
            FaultKind::NetStorm,
            FaultKind::ClientKill,
            FaultKind::NetStorm,
            FaultKind::ClientPause,
            FaultKind::ClockSkew,
            FaultKind::ClockJump,
        ],
        min_faults: 6,
        gap: (Duration::from_millis(500), Duration::from_millis(1500)),
        outage: (Duration::from_secs(2), Duration::from_secs(4)),
        partition: (Duration::ZERO, Duration::ZERO),
        lease: Duration::from_secs(2),
    };
    let run = workload
        .run(Stage::Proxy(&proxy), plan)
        .await
        .expect("a history");
    if let Err(failure) = verify("proxy", &run) {
        panic!("{failure}");
    }
    assert_eq!(proxy.running_tasks(), 0, "a by-query task still runs");
    let open = proxy.open_contexts_on(&[&index]);
    assert!(open.is_empty(), "search contexts left open: {open:?}");
}

/// On a real three-node cluster: `FSRENAME_TEST_JEPSEN_RUNS` histories (default 1) of at least
/// `FSRENAME_TEST_JEPSEN_CALLS` calls (default 200) from 4 command-line clients and 2 service
/// clients (two instances), each with at least 8 faults, one of each kind: a node killed and
/// started again, a node paused, a node partitioned from the others, a client killed (a
/// process, or a service instance, started again under a new name), a client paused past its
/// lease, the flood-stage block, clients' clocks skewed and stepped (libfaketime). Prints a
/// row of the table of `docs/reliability.md` per history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real Elasticsearch cluster: FSRENAME_TEST_ES_CLUSTER and the kill, start, pause, resume, partition and heal commands (docs/elasticsearch.md)"]
async fn real_cluster_histories_under_faults() {
    let cluster = fs_testkit::RealCluster::from_env();
    cluster.require_pause();
    assert!(
        cluster.can_partition(),
        "this test partitions nodes: set FSRENAME_TEST_ES_PARTITION and FSRENAME_TEST_ES_HEAL (docs/elasticsearch.md)"
    );
    let runs: u64 = std::env::var("FSRENAME_TEST_JEPSEN_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let calls: usize = std::env::var("FSRENAME_TEST_JEPSEN_CALLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    // A history of so many minutes, however many calls (issue 72's hour), its gauges read
    // every five minutes.
    let minutes: Option<u64> = std::env::var("FSRENAME_TEST_JEPSEN_MINUTES")
        .ok()
        .and_then(|s| s.parse().ok());
    let (calls, limit) = match minutes {
        Some(m) => (usize::MAX, Duration::from_secs(m * 60)),
        None => (calls, Duration::from_secs(900)),
    };
    // A search of several shards keeps each shard's context from its query phase to its
    // fetch; a partition that cuts the coordinator off between the two strands the context,
    // for `search.default_keep_alive` (5 min by default: longer than the end's patience, and
    // not fsrename's, whose scans name their own keep-alive). Seed 1300 at 1c46482 ended so,
    // on the node partitioned last. One minute strands it no longer than a killed client's
    // scan.
    let keep_alive = serde_json::json!({"persistent": {"search.default_keep_alive": "1m"}});
    let set = cluster.put("/_cluster/settings", &keep_alive).await;
    assert_eq!(set["acknowledged"], true, "{set}");
    let urls = cluster.nodes.join(",");
    let mut rows = Vec::new();
    let mut failures = Vec::new();
    for run in 0..runs {
        cluster.wait_green(Duration::from_secs(300)).await;
        let index = fs_testkit::unique_name("jepsen");
        let seed = seed(1_000) + run;
        let mut fsrename = fsrename(
            &urls,
            &index,
            "5s",
            Duration::from_secs(20),
            &["--shards", "3", "--replicas", "1"],
        );
        // Every other history, the service instances share their jobs' intention locks (the
        // default from 0.2.0); the others take their own.
        fsrename.serve = vec![if run % 2 == 1 {
            "--share-intentions".to_owned()
        } else {
            "--no-share-intentions".to_owned()
        }];
        let workload = Workload {
            fsrename,
            cli_clients: 4,
            service_clients: 2,
            services: 2,
            calls,
            seed,
            think: Duration::from_millis(400),
            call_deadline: Duration::from_secs(120),
            limit,
            es: Some(cluster.nodes[0].clone()),
            // The keep-alive of a killed client's scroll or of a stranded search context (1 min,
            // above), then the reaper's round.
            contexts_patience: Duration::from_secs(150),
            gauge_every: minutes.map(|_| Duration::from_secs(300)),
        };
        let plan = Plan {
            kinds: vec![
                FaultKind::NodeKill,
                FaultKind::NodePause,
                FaultKind::Partition,
                FaultKind::ClientKill,
                FaultKind::ClientPause,
                FaultKind::FloodStage,
                FaultKind::ClockSkew,
                FaultKind::ClockJump,
            ],
            min_faults: 8,
            gap: (Duration::from_secs(1), Duration::from_secs(4)),
            outage: (Duration::from_secs(5), Duration::from_secs(15)),
            partition: (Duration::from_secs(30), Duration::from_secs(34)),
            lease: Duration::from_secs(5),
        };
        let history = workload
            .run(Stage::Cluster(&cluster, &index), plan)
            .await
            .expect("a history");
        let name = format!("seed {seed}{}", if run % 2 == 1 { " shared" } else { "" });
        eprintln!("{name}: gauges\n{}", fs_jepsen::gauges::TABLE_HEADER);
        for sample in &history.samples {
            eprintln!("{sample}");
        }
        match verify(&name, &history) {
            Ok(row) => rows.push(row),
            // Every history runs, and the failures are told at the end.
            Err(failure) => {
                eprintln!("{failure}");
                rows.push(format!("| seed {seed} | FAILED |"));
                failures.push(seed);
            }
        }
    }
    eprintln!("| history | calls | ok / failed / unknown | faults | by kind | anomalies | took |");
    eprintln!("| --- | --- | --- | --- | --- | --- | --- |");
    for row in rows {
        eprintln!("{row}");
    }
    assert!(
        failures.is_empty(),
        "histories that failed: seeds {failures:?}"
    );
}
