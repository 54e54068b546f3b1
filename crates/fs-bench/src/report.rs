//! The markdown report and the target checks.

use std::fmt::Write as _;

use fs_locks::LockProtocol;
use fs_rename::Strategy;

use crate::fairness::{self, Trial, Waiting};
use crate::measure::{BackendResults, LockRow, Plan};

/// One target of issue 9 and whether the run met it.
pub struct Target {
    pub what: String,
    pub measured: String,
    pub met: bool,
}

pub fn targets(results: &[BackendResults]) -> Vec<Target> {
    let mut out = Vec::new();
    for r in results {
        // Only where this run measured the locks.
        if !r.locks.is_empty() {
            let worst = |t: &dyn Fn(&LockRow) -> Option<(u32, u32)>| {
                r.locks
                    .iter()
                    .filter_map(t)
                    .fold((0, 0), |(a, b), (c, d)| (a.max(c), b.max(d)))
            };
            // Unlocking is one round trip either way; locking takes `limit`.
            let trips = |how: &str, (locks, unlocks): (u32, u32), limit: u32| Target {
                what: format!(
                    "{}: lock + unlock ≤ {limit} + 1 round trips with {how}, every depth",
                    r.name
                ),
                measured: format!("at most {locks} + {unlocks}"),
                met: locks <= limit && unlocks <= 1,
            };
            out.push(trips("compare-and-set", worst(&|l| Some(l.batched)), 2));
            if r.locks.iter().any(|l| l.atomic.is_some()) {
                let atomic = worst(&|l| l.atomic.map(|a| a.0));
                out.push(trips("atomic updates", atomic, 1));
            }
        }
        for row in r.renames.iter().filter(|row| row.docs >= 10_000) {
            let ratio = row.rate() / row.raw_rate();
            let goal = if row.docs >= 100_000 { 0.97 } else { 0.9 };
            out.push(Target {
                what: format!(
                    "{}: rename of {} docs ≥ {:.0} % of the raw bulk rate",
                    r.name,
                    row.docs,
                    goal * 100.0
                ),
                // One decimal: 96.8 % must not read as a met 97 %.
                measured: format!("{:.1} %", ratio * 100.0),
                met: ratio >= goal,
            });
        }
        for row in r.renames.iter().filter(|row| row.docs >= 20_000) {
            if let (Some(peer), Some(server)) = (row.peer_rate(), row.server_rate()) {
                out.push(Target {
                    what: format!(
                        "{}: rename of {} docs rewritten by the server at least as fast as `_update_by_query` (the client's rewrite: {:.0} %)",
                        r.name,
                        row.docs,
                        100.0 * row.rate() / peer
                    ),
                    measured: format!("{:.0} %", 100.0 * server / peer),
                    met: server >= peer,
                });
            }
        }
        let at = |k: usize, s: Strategy| {
            r.concurrency
                .iter()
                .find(|c| c.k == k && c.strategy == s && c.protocol == LockProtocol::Auto)
        };
        let rate = |s: Strategy| at(16, s).map(|c| c.per_sec);
        if let (Some(tree), Some(none)) = (rate(Strategy::Tree), rate(Strategy::None)) {
            // `remote` is the store with a capacity of its own: there the locks must not
            // cost much of it. On the others the clients share the store's cores.
            let goal = if r.name == "remote" { 0.6 } else { 0.8 };
            out.push(Target {
                what: format!("{}: tree locking at K = 16 ≥ {goal} × no locks", r.name),
                measured: format!("{:.2} ×", tree / none),
                met: tree >= goal * none,
            });
        }
        if r.name == "remote" {
            if let (Some(tree), Some(global)) = (rate(Strategy::Tree), rate(Strategy::Global)) {
                out.push(Target {
                    what: format!("{}: tree locking at K = 16 ≥ 8 × the global lock", r.name),
                    measured: format!("{:.1} ×", tree / global),
                    met: tree >= 8.0 * global,
                });
            }
            let lock_ms = |k: usize| at(k, Strategy::Tree).map(|c| c.lock_ms);
            if let (Some(one), Some(sixteen)) = (lock_ms(1), lock_ms(16)) {
                out.push(Target {
                    what: format!(
                        "{}: tree lock ms per rename at K = 16 ≤ 3 × at K = 1",
                        r.name
                    ),
                    measured: format!(
                        "{sixteen:.1} ms against {one:.1} ms ({:.1} ×)",
                        sixteen / one
                    ),
                    met: sixteen <= 3.0 * one,
                });
            }
        }
        let service = |s: Strategy| {
            r.service
                .iter()
                .find(|row| row.k == 16 && row.instances == 1 && row.strategy == s && !row.shared)
                .map(|row| row.per_sec)
        };
        if let (Some(tree), Some(none)) = (service(Strategy::Tree), service(Strategy::None)) {
            out.push(Target {
                what: format!("{}: service: tree at K = 16 ≥ 0.8 × no locks", r.name),
                measured: format!("{:.2} ×", tree / none),
                met: tree >= 0.8 * none,
            });
        }
        let shared = r
            .service
            .iter()
            .find(|row| row.k == 16 && row.instances == 1 && row.shared)
            .map(|row| row.per_sec);
        if let (Some(shared), Some(none)) = (shared, service(Strategy::None)) {
            out.push(Target {
                what: format!(
                    "{}: service: tree, intention locks shared, at K = 16 ≥ 0.85 × no locks (issue 51)",
                    r.name
                ),
                measured: format!("{:.2} ×", shared / none),
                met: shared >= 0.85 * none,
            });
        }
    }
    out
}

pub(crate) fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".to_owned());
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    format!(
        "{cores} cores ({cpu}), {} {}",
        std::env::consts::OS,
        std::env::consts::ARCH
    )
}

pub fn markdown(results: &[BackendResults], plan: &Plan, command: &str) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# Benchmarks\n");
    let _ = writeln!(
        s,
        "Written by `{command}` on {}. Lock timings are means over {} repetitions. The backends:\n",
        machine(),
        plan.lock_repeat
    );
    for r in results {
        let _ = writeln!(s, "- **{}**: {}.", r.name, r.about);
        for failure in &r.failures {
            let _ = writeln!(s, "  - **failed** (not in the tables): {failure}");
        }
    }
    let _ = writeln!(s, "\nosmem is an in-memory OpenSearch stand-in, not Elasticsearch: its absolute figures say little about a real cluster, its round trips say a lot. `remote` is what neither of the other two can show on one machine: a store that many clients wait on at once without sharing their cores.\n\nOn a real server: `docker compose -f docker/docker-compose.yml up -d elasticsearch`, then `cargo run --release -p fs-bench -- --backends es=http://127.0.0.1:9200 --out target/bench-es` (any Elasticsearch or OpenSearch URL; several `es=` allowed, beside the other backends). Every measurement runs there too, and the renames gain the server-side peer, `_update_by_query`, where the server runs painless.\n");
    let _ = writeln!(
        s,
        "## Targets\n\n| target | measured | met |\n| --- | --- | --- |"
    );
    let targets = targets(results);
    for t in &targets {
        let _ = writeln!(
            s,
            "| {} | {} | {} |",
            t.what,
            t.measured,
            if t.met { "yes" } else { "**no**" }
        );
    }
    if targets.iter().all(|t| t.met) {
        let _ = writeln!(s);
    } else {
        misses(&mut s);
    }
    locks(&mut s, results);
    renames(&mut s, results, plan);
    concurrency(&mut s, results, plan);
    affected(&mut s, results, plan);
    fairness(&mut s, results, plan);
    service(&mut s, results, plan);
    s
}

/// Why targets are missed on these backends, and what would close them.
fn misses(s: &mut String) {
    let _ = writeln!(s, "\nHow to read the misses. A rename costs a fixed number of round trips more than the raw rewrite: the locks, the check (one search, which also reads the first page of a large subtree: the scan reads one page fewer), the journal entry (sent while the first pages are read, its writes waiting for it), its close (sent with the refresh), the release. Where the store makes several writes in one transaction (embedded, remote), a rename whose check read its whole subtree sends its entry with its rewrite, and a job closes its entry with its release: a small rename is four requests, not six (`docs/renaming.md`). On **remote** the locks, the check and the release are three round trips on the critical path, 7–10 ms at 2 ms each with the queueing, less the first page the check read: a few percent of a 10 000-document rename. Both rewrites are pipelined (the next page read while up to `--in-flight` bulk requests are under way), and on `remote` both share one SQLite connection on the client's two cores, so the rename's per-document work (the versioned write, parsing each page into entries) also shows. On **embedded** everything runs on the client's cores one call at a time: the rename ratios move by 5 to 10 points from run to run, and at K = 16 three of a tree-locked rename's four requests are write transactions (locks, entry with rewrite, close with release), where a rename with no lock makes one write and four reads. On **osmem** and Elasticsearch at K = 16 every job updates the shared lock of the common ancestor twice a rename; the jobs of one process send their scripted lock updates together while a request of theirs is in flight, so that document is read and written once a request, not twice a job (`docs/locking.md`, \"Jobs of one process share requests\"). On a server named with `es=` on this machine, the server shares the two cores with the clients too: the locks' extra writes cost the server's own CPU, which atomic updates already keep to one request each (compare the *tree (CAS)* column). Where the time goes: [profile.md](profile.md).\n");
}

fn locks(s: &mut String, results: &[BackendResults]) {
    if results.iter().all(|r| r.locks.is_empty()) {
        return;
    }
    let _ = writeln!(s, "## 1. Lock + unlock of a tree lock by depth\n\nRound trips as lock + unlock. *CAS* is fsrename with compare-and-set, for servers without scripts: one `mget` and one `bulk` to lock (on a server, one `bulk` of creates until the process has found a lock document existing), one `bulk` to unlock. *Atomic* is fsrename where the store updates a lock document atomically (the stored painless scripts on Elasticsearch, the same logic inside one transaction on the embedded store): one `bulk` to lock, one to unlock. *Text* is the source text's sequence, one request per lock document; without scripts each shared lock costs a read and a conditional write (with the text's painless script, one request: depth + depth).\n");
    for r in results.iter().filter(|r| !r.locks.is_empty()) {
        let _ = writeln!(s, "**{}**\n\n| depth | CAS RT | CAS ms | atomic RT | atomic ms | text RT | text ms |\n| --- | --- | --- | --- | --- | --- | --- |", r.name);
        for l in &r.locks {
            let (atomic_rt, atomic_ms) = match l.atomic {
                Some(((lock, unlock), ms)) => (format!("{lock} + {unlock}"), format!("{ms:.3}")),
                None => ("–".to_owned(), "–".to_owned()),
            };
            let _ = writeln!(
                s,
                "| {} | {} + {} | {:.3} | {atomic_rt} | {atomic_ms} | {} + {} | {:.3} |",
                l.depth, l.batched.0, l.batched.1, l.batched_ms, l.book.0, l.book.1, l.book_ms
            );
        }
        let _ = writeln!(s);
    }
}

fn renames(s: &mut String, results: &[BackendResults], plan: &Plan) {
    if results.iter().all(|r| r.renames.is_empty()) {
        return;
    }
    let _ = writeln!(s, "## 2. Directory rename against the raw bulk rewrite\n\nThe rename (tree locks, checks, journal, versioned writes) against the same scan and bulk rewrite with no lock, check or version (the store's limit). The two alternate both ways round (rename there, raw back, raw there, rename back), {} runs each; the medians are compared. Pages of 1 000. Plot: `bench-rename.svg`. On a server named with `--backends es=URL` that runs painless, the last four columns are the server-side peer: one `_update_by_query` with a painless prefix rewrite (no lock, no check, no journal), {} runs, and the rename's rate against it; then the rename rewritten by the server (`--rewrite server`: the same locks, check and journal, the rewrite one `_update_by_query` task, `docs/renaming.md`), paired with the peer (server rename there, peer back, peer there, server rename back), and its rate against the peer's. *Scan docs/s* reads every page and writes nothing (median of 3): the reading's ceiling. While it is well above the rewrite's rate, the read-ahead keeps reads off the critical path, and splitting the scan into slices could not pay; on Elasticsearch slices also cost more than they give on an index of one shard, as fsrename's tree index is.\n\n| backend | N | rename s | docs/s | raw docs/s | ratio | round trips | scan docs/s | `_update_by_query` docs/s | rename / it | server-side docs/s | server-side / it |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |", plan.rename_repeat * 2, plan.rename_repeat * 2);
    for r in results {
        for row in &r.renames {
            let _ = writeln!(
                s,
                "| {} | {} | {:.3} | {:.0} | {:.0} | {:.0} % | {} | {} | {} | {} | {} | {} |",
                r.name,
                row.docs,
                row.rename_s,
                row.rate(),
                row.raw_rate(),
                100.0 * row.rate() / row.raw_rate(),
                row.round_trips,
                row.scan_rate()
                    .map(|r| format!("{r:.0}"))
                    .unwrap_or_else(|| "–".to_owned()),
                row.peer_rate()
                    .map(|p| format!("{p:.0}"))
                    .unwrap_or_else(|| "–".to_owned()),
                row.peer_rate()
                    .map(|p| format!("{:.0} %", 100.0 * row.rate() / p))
                    .unwrap_or_else(|| "–".to_owned()),
                row.server_rate()
                    .map(|p| format!("{p:.0}"))
                    .unwrap_or_else(|| "–".to_owned()),
                row.server_rate()
                    .zip(row.peer_rate())
                    .map(|(s, p)| format!("{:.0} %", 100.0 * s / p))
                    .unwrap_or_else(|| "–".to_owned()),
            );
        }
    }
    let _ = writeln!(s);
    if results.iter().all(|r| r.in_flight.is_empty()) {
        return;
    }
    let _ = writeln!(s, "**Bulk requests in flight.** The rename and the raw rewrite read the next page while they write, with up to this many bulk requests under way (one run each way round, N = {} documents). The default, {} (`--in-flight`), is chosen from this table.\n\n| backend | in flight | rename docs/s | raw docs/s | ratio |\n| --- | --- | --- | --- | --- |", plan.in_flight_docs, plan.in_flight);
    for r in results {
        for f in &r.in_flight {
            let _ = writeln!(
                s,
                "| {} | {} | {:.0} | {:.0} | {:.0} % |",
                r.name,
                f.in_flight,
                f.row.rate(),
                f.row.raw_rate(),
                100.0 * f.row.rate() / f.row.raw_rate()
            );
        }
    }
    let _ = writeln!(s);
}

fn concurrency(s: &mut String, results: &[BackendResults], plan: &Plan) {
    if results.iter().all(|r| r.concurrency.is_empty()) {
        return;
    }
    let _ = writeln!(s, "## 3. K concurrent renames of disjoint subtrees\n\nK jobs, each renaming its own `/p/sI` (of {} documents) back and forth for {} s; renames per second in all. *None* takes no lock at all: the store's own ceiling for these renames, which no locking scheme can pass. *RT / rename* counts every store round trip of a rename (locks, journal, rewrite); *lock ms* is the time a rename spends taking and releasing its locks, waiting included. Where the store updates lock documents atomically (embedded, remote, a server that runs the stored scripts), *tree* uses that and *tree (CAS)* is the same tree locking by compare-and-set, as on a server without scripts. Plot: `bench-concurrency.svg`.\n", plan.concurrent_docs, plan.concurrent_secs);
    for r in results.iter().filter(|r| !r.concurrency.is_empty()) {
        let cas = r
            .concurrency
            .iter()
            .any(|c| c.protocol == LockProtocol::Cas);
        let (cas_head, cas_rule) = if cas {
            (" tree (CAS) | tree (CAS) lock ms |", " --- | --- |")
        } else {
            ("", "")
        };
        let _ = writeln!(
            s,
            "**{}**\n\n| K | tree | document | global | none | tree ÷ none | tree ÷ global | tree RT / rename | tree lock ms / rename | global lock ms / rename |{cas_head}\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |{cas_rule}",
            r.name
        );
        for &k in &plan.ks {
            let row = |st: Strategy, p: LockProtocol| {
                r.concurrency
                    .iter()
                    .find(|c| c.k == k && c.strategy == st && c.protocol == p)
            };
            let at = |st: Strategy| row(st, LockProtocol::Auto).map_or(0.0, |c| c.per_sec);
            let tree_trips = row(Strategy::Tree, LockProtocol::Auto).map_or(0.0, |c| c.round_trips);
            let lock_ms = |st: Strategy| row(st, LockProtocol::Auto).map_or(0.0, |c| c.lock_ms);
            let cas_cells = match row(Strategy::Tree, LockProtocol::Cas) {
                Some(c) => format!(" {:.1} | {:.1} |", c.per_sec, c.lock_ms),
                None => String::new(),
            };
            let _ = writeln!(
                s,
                "| {k} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2} | {:.1} | {tree_trips:.1} | {:.1} | {:.1} |{cas_cells}",
                at(Strategy::Tree),
                at(Strategy::Document),
                at(Strategy::Global),
                at(Strategy::None),
                at(Strategy::Tree) / at(Strategy::None),
                at(Strategy::Tree) / at(Strategy::Global),
                lock_ms(Strategy::Tree),
                lock_ms(Strategy::Global),
            );
        }
        let _ = writeln!(s);
    }
}

fn affected(s: &mut String, results: &[BackendResults], plan: &Plan) {
    if results.iter().all(|r| r.affected.is_empty()) {
        return;
    }
    let _ = writeln!(s, "## 4. Locking cost by affected documents\n\nLock acquisition round trips and the time spent locking and releasing, for one rename of a directory of N documents.\n\n| backend | N | tree RT | tree ms | document RT | document ms |\n| --- | --- | --- | --- | --- | --- |");
    for r in results {
        for &n in &plan.affected {
            let at = |st: Strategy| r.affected.iter().find(|a| a.docs == n && a.strategy == st);
            if let (Some(t), Some(d)) = (at(Strategy::Tree), at(Strategy::Document)) {
                let _ = writeln!(
                    s,
                    "| {} | {n} | {} | {:.2} | {} | {:.2} |",
                    r.name, t.round_trips, t.lock_ms, d.round_trips, d.lock_ms
                );
            }
        }
    }
}

fn fairness(s: &mut String, results: &[BackendResults], plan: &Plan) {
    if results.iter().all(|r| r.fairness.is_empty()) {
        return;
    }
    // Section 4 ends without a blank line; a heading needs one before it.
    if !s.is_empty() && !s.ends_with("\n\n") {
        s.push('\n');
    }
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    let _ = writeln!(
        s,
        "## 5. A rename of a directory under streams of small renames (fair waiting)\n\n\
         Whether a rename of a directory can be starved by renames below it. {k} streams, each \
         with a client of its own, rename `/p/dI/fN` to `/p/dI/gN` over and over (held {hold} ms), \
         so that someone almost always holds an IX on `/p`; another client renames `/p` to `/q` \
         (an X on `/p`, held {parent} ms), {trials} times, each time after {warm} more small \
         renames. The wait runs from its first attempt to its grant, in ms; p50 and p99 by \
         nearest rank (below 100 trials, p99 is the longest wait). *After* is fair waiting: \
         refused for 50 ms, the rename registers as a waiter on `/p` and the younger small \
         renames are refused there, so its wait is bounded (`docs/locking.md`, *The bound*). \
         *Before* is the same rename by a client that already \
         holds a lock elsewhere, which ignores the queue as every request did before fair \
         waiting: it is granted only at an instant when no small rename holds `/p`, and gives up \
         after {cap} s, a timeout that is starvation (`≥` marks a figure that is such a \
         timeout). The library's default backoff, 5 ms doubling to 500 ms. No timing is \
         asserted; to measure again: `cargo run --release -p fs-bench -- --only fairness` \
         (`--backends` picks the backends, `--quick` runs fewer trials).\n",
        k = fairness::STREAMS,
        hold = ms(fairness::STREAM_HOLD),
        parent = ms(fairness::PARENT_HOLD),
        trials = plan.fairness_trials,
        warm = fairness::WARM_UP_RENAMES,
        cap = fairness::NO_QUEUE_CAP.as_secs(),
    );
    let wait = |t: Option<Trial>| match t {
        Some(t) if t.timed_out => format!("≥ {:.0}", ms(t.waited)),
        Some(t) => format!("{:.1}", ms(t.waited)),
        None => "-".to_owned(),
    };
    for r in results.iter().filter(|r| !r.fairness.is_empty()) {
        let _ = writeln!(
            s,
            "**{}**\n\n| rename of `/p` | trials | p50 ms | p99 ms | max ms | timeouts |\n| --- | --- | --- | --- | --- | --- |",
            r.name
        );
        for waiting in [Waiting::NoQueue, Waiting::Fair] {
            if let Some(row) = r.fairness.iter().find(|row| row.waiting == waiting) {
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {} | {} | {} |",
                    waiting.label(),
                    row.trials.len(),
                    wait(row.percentile(50)),
                    wait(row.percentile(99)),
                    wait(row.max()),
                    row.timeouts(),
                );
            }
        }
        let _ = writeln!(s);
    }
}

fn service(s: &mut String, results: &[BackendResults], plan: &Plan) {
    if results.iter().all(|r| r.service.is_empty()) {
        return;
    }
    let _ = writeln!(s, "## 6. Renames through the service\n\n`fsrename serve` in process on the backend: K clients each rename their own `/p/sI` (of {} documents) back and forth through the HTTP API (`POST /renames`, then `GET /renames/ID` every 2 ms until done) for {} s; medians over {} rounds, each running tree, tree with the instances' intention locks shared among their jobs (*shared*, `serve --share-intentions`), global and no locks in a rotating order. Read *tree ÷ none* as what the locks cost a job served over HTTP, against the same service taking none; *latency* is a client's submit-to-done time, polling included; *requests / job* counts every store request of the service while it runs (locks, rewrite, the job's records in the jobs index), over the jobs finished (the service sends the lock and journal requests of jobs running at once as one request: a group commit); *lock writes / job* the documents written to the lock index (takes, releases, renewals, waiters: an item of a bulk is one), and *on `/p`* those of the parent all the clients share; *failed* the jobs that ended failed over all the rounds, tree / shared / global / none (a client whose job failed stops; the first failure of each is under the tables). With several instances, they serve one store and the clients are spread over them.\n", plan.concurrent_docs, plan.concurrent_secs, plan.service_rounds);
    for r in results.iter().filter(|r| !r.service.is_empty()) {
        let _ = writeln!(
            s,
            "**{}**\n\n| instances | K | tree /s | shared /s | global /s | none /s | tree ÷ none | shared ÷ none | tree latency ms | none latency ms | tree requests / job | shared requests / job | none requests / job | tree lock writes / job | on `/p` | shared lock writes / job | on `/p` | failed |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
            r.name
        );
        for &n in &plan.service_instances {
            for &k in &plan.service_ks {
                let row = |st: Strategy| {
                    r.service
                        .iter()
                        .find(|c| c.k == k && c.instances == n && c.strategy == st && !c.shared)
                };
                let shared = r
                    .service
                    .iter()
                    .find(|c| c.k == k && c.instances == n && c.shared);
                let rate = |st: Strategy| row(st).map_or(0.0, |c| c.per_sec);
                let lat = |st: Strategy| row(st).map_or(0.0, |c| c.latency_ms);
                let req = |st: Strategy| row(st).map_or(0.0, |c| c.requests);
                let failed = |st: Strategy| row(st).map_or(0, |c| c.failed);
                let tree = row(Strategy::Tree);
                let _ = writeln!(
                    s,
                    "| {n} | {k} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2} | {:.2} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {} / {} / {} / {} |",
                    rate(Strategy::Tree),
                    shared.map_or(0.0, |c| c.per_sec),
                    rate(Strategy::Global),
                    rate(Strategy::None),
                    rate(Strategy::Tree) / rate(Strategy::None),
                    shared.map_or(0.0, |c| c.per_sec) / rate(Strategy::None),
                    lat(Strategy::Tree),
                    lat(Strategy::None),
                    req(Strategy::Tree),
                    shared.map_or(0.0, |c| c.requests),
                    req(Strategy::None),
                    tree.map_or(0.0, |c| c.lock_writes),
                    tree.map_or(0.0, |c| c.shared_lock_writes),
                    shared.map_or(0.0, |c| c.lock_writes),
                    shared.map_or(0.0, |c| c.shared_lock_writes),
                    failed(Strategy::Tree),
                    shared.map_or(0, |c| c.failed),
                    failed(Strategy::Global),
                    failed(Strategy::None),
                );
            }
        }
        for c in r.service.iter().filter(|c| c.failed > 0) {
            let _ = writeln!(
                s,
                "\n- {} instance(s), K = {}, {:?}{}: {}",
                c.instances,
                c.k,
                c.strategy,
                if c.shared { " shared" } else { "" },
                c.first_failure.as_deref().unwrap_or("-")
            );
        }
        let _ = writeln!(
            s,
            "\nWhere a job's time goes (means in ms, from the service's own record of each job: queued is submitted to started, the phases are the job's report's, other is the rest of its run (journal entry, the job's records), seen after is finished to seen done by the client), and the CPU a job cost: *here* is this process (the clients and the service), *server* every other process on the machine (a server named with `es=` on this machine), *busy* the cores' busy share in the window:\n\n| instances | K | locks | queued | locking | checking | rewriting | releasing | other | seen after | CPU here | CPU server | busy |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
        );
        for &n in &plan.service_instances {
            for &k in &plan.service_ks {
                for (st, shared) in [
                    (Strategy::Tree, false),
                    (Strategy::Tree, true),
                    (Strategy::Global, false),
                    (Strategy::None, false),
                ] {
                    let found = r.service.iter().find(|c| {
                        c.k == k && c.instances == n && c.strategy == st && c.shared == shared
                    });
                    if let Some(c) = found {
                        let p = c.split;
                        let name = if shared {
                            "Tree, shared".to_owned()
                        } else {
                            format!("{st:?}")
                        };
                        let _ = writeln!(
                            s,
                            "| {n} | {k} | {name} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.0} % |",
                            p.queued, p.locking, p.checking, p.rewriting, p.releasing, p.other, p.seen_after,
                            p.own_cpu, p.others_cpu, p.busy * 100.0
                        );
                    }
                }
            }
        }
        service_connection(s, r, plan);
        let _ = writeln!(s);
    }
}

/// Where the time of the SQLite connection under the service went, for a backend with one.
fn service_connection(s: &mut String, r: &BackendResults, plan: &Plan) {
    if r.service.iter().all(|c| c.connection.is_none()) {
        return;
    }
    let _ = writeln!(
        s,
        "\nWhere the SQLite connection's time goes: one connection serves every call of the store in turn, so where it is busy most of the window a job's rate is one over the time its calls hold it. *busy* is the share of the window some call held it; then the time a job's calls held it, in µs, in all and by kind of call, the costliest first (calls a job in brackets), in the round of median rate:\n\n| instances | K | locks | busy | µs / job | by call |\n| --- | --- | --- | --- | --- | --- |"
    );
    for &n in &plan.service_instances {
        for &k in &plan.service_ks {
            for c in r.service.iter().filter(|c| c.k == k && c.instances == n) {
                let Some(used) = &c.connection else { continue };
                let name = if c.shared {
                    "Tree, shared".to_owned()
                } else {
                    format!("{:?}", c.strategy)
                };
                let _ = writeln!(
                    s,
                    "| {n} | {k} | {name} | {:.0} % | {:.0} | {} |",
                    used.busy * 100.0,
                    used.micros_per_job(),
                    used.describe()
                );
            }
        }
    }
}

/// Where the watcher's section of `benchmarks.md` (`--watch-costs`) begins; a full run, which
/// does not measure the watcher, carries it over from the file it replaces.
pub const WATCH_COSTS_START: &str = "<!-- watch-costs:start -->";
/// Where it ends.
pub const WATCH_COSTS_END: &str = "<!-- watch-costs:end -->";
/// Where the scale section (`--scale`) begins; carried over as the watcher's is.
pub const SCALE_START: &str = "<!-- scale:start -->";
/// Where it ends.
pub const SCALE_END: &str = "<!-- scale:end -->";

/// The sections other commands than a full run write, each between its markers.
const SECTIONS: [(&str, &str); 2] = [
    (WATCH_COSTS_START, WATCH_COSTS_END),
    (SCALE_START, SCALE_END),
];

/// The byte range of the section of `doc` between `start` and `end`, markers included, if it
/// has one.
pub fn section_span(doc: &str, start: &str, end: &str) -> Option<(usize, usize)> {
    let from = doc.find(start)?;
    let to = from + doc[from..].find(end)? + end.len();
    Some((from, to))
}

/// `new` (a full run's report) with the watcher's and the scale sections of `old` (the file
/// it replaces) after it, where `old` has them and `new` has not.
pub fn carry_over(new: &str, old: &str) -> String {
    let mut out = new.to_owned();
    for (start, end) in SECTIONS {
        if let Some((from, to)) = section_span(old, start, end) {
            if section_span(&out, start, end).is_none() {
                out = format!("{}\n\n{}\n", out.trim_end(), &old[from..to]);
            }
        }
    }
    out
}

/// Puts `section` in place of the section between `markers` of `dir/benchmarks.md`, or at
/// its end if it has none (or there is no file yet); returns the file's path.
///
/// # Errors
/// If the file cannot be read or written.
pub fn write_section(
    dir: &std::path::Path,
    markers: (&str, &str),
    section: &str,
) -> anyhow::Result<std::path::PathBuf> {
    use anyhow::Context as _;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let md = dir.join("benchmarks.md");
    let old = match std::fs::read_to_string(&md) {
        Ok(old) => old,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e).with_context(|| format!("reading {}", md.display())),
    };
    std::fs::write(&md, splice(&old, markers, section))
        .with_context(|| format!("writing {}", md.display()))?;
    Ok(md)
}

/// `doc` with its section between `start` and `end` replaced by `section`, or `section`
/// appended.
pub fn splice(doc: &str, (start, end): (&str, &str), section: &str) -> String {
    match section_span(doc, start, end) {
        Some((from, to)) => format!("{}{section}{}", &doc[..from], &doc[to..]),
        None if doc.is_empty() => format!("{section}\n"),
        None => format!("{}\n\n{section}\n", doc.trim_end()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_run_carries_the_watchers_section_over() {
        let section = format!("{WATCH_COSTS_START}\n## 7. The watcher\n\n| a |\n{WATCH_COSTS_END}");
        let old = format!("# Benchmarks\n\nold figures\n\n{section}\n");
        let new = "# Benchmarks\n\nnew figures\n";
        assert_eq!(
            carry_over(new, &old),
            format!("# Benchmarks\n\nnew figures\n\n{section}\n")
        );
        // Nothing to carry: the new report as it is.
        assert_eq!(carry_over(new, "# Benchmarks\n\nold figures\n"), new);
        assert_eq!(carry_over(new, ""), new);
        // An end marker missing: no section.
        assert_eq!(carry_over(new, &format!("x\n{WATCH_COSTS_START}\n")), new);
        // Both sections, in their order.
        let scale = format!("{SCALE_START}\n## 8. Scale\n{SCALE_END}");
        let old = format!("# Benchmarks\n\n{section}\n\n{scale}\n");
        assert_eq!(
            carry_over(new, &old),
            format!("# Benchmarks\n\nnew figures\n\n{section}\n\n{scale}\n")
        );
    }
}
