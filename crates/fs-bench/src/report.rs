//! The markdown report and the target checks.

use std::fmt::Write as _;

use fs_rename::Strategy;

use crate::measure::{BackendResults, Plan};

/// One target of issue 9 and whether the run met it.
pub struct Target {
    pub what: String,
    pub measured: String,
    pub met: bool,
}

pub fn targets(results: &[BackendResults]) -> Vec<Target> {
    let mut out = Vec::new();
    for r in results {
        let worst = r
            .locks
            .iter()
            .map(|l| l.batched.0.max(l.batched.1))
            .max()
            .unwrap_or(0);
        out.push(Target {
            what: format!(
                "{}: lock + unlock ≤ 2 round trips each, every depth",
                r.name
            ),
            measured: format!("at most {worst} per operation"),
            met: worst <= 2,
        });
        for row in r.renames.iter().filter(|row| row.docs >= 10_000) {
            let ratio = row.rate() / row.raw_rate();
            out.push(Target {
                what: format!(
                    "{}: rename of {} docs ≥ 90 % of the raw bulk rate",
                    r.name, row.docs
                ),
                measured: format!("{:.0} %", ratio * 100.0),
                met: ratio >= 0.9,
            });
        }
        let at = |s: Strategy| {
            r.concurrency
                .iter()
                .find(|c| c.k == 16 && c.strategy == s)
                .map(|c| c.per_sec)
        };
        if let (Some(tree), Some(global)) = (at(Strategy::Tree), at(Strategy::Global)) {
            out.push(Target {
                what: format!("{}: tree locking at K = 16 ≥ 8 × the global lock", r.name),
                measured: format!("{:.1} ×", tree / global),
                met: tree >= 8.0 * global,
            });
        }
    }
    out
}

fn machine() -> String {
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
    let _ = writeln!(s, "Written by `{command}` on {}. The embedded store is SQLite in memory; osmem is osmem-server 0.1.6 over HTTP on loopback (an in-memory OpenSearch stand-in, not Elasticsearch: its absolute figures say little about a real cluster, its round trips say a lot). Lock timings are means over {} repetitions.\n", machine(), plan.lock_repeat);
    let _ = writeln!(
        s,
        "## Targets\n\n| target | measured | met |\n| --- | --- | --- |"
    );
    for t in targets(results) {
        let _ = writeln!(
            s,
            "| {} | {} | {} |",
            t.what,
            t.measured,
            if t.met { "yes" } else { "**no**" }
        );
    }
    let _ = writeln!(s, "\n## 1. Lock + unlock of a tree lock by depth\n\nRound trips as lock + unlock. *Batched* is fsrename (compare-and-set: one `mget` and one `bulk` to lock, one `bulk` to unlock). *Text* is the source text's sequence, one request per lock document; without scripts each shared lock costs a read and a conditional write (with the text's painless script, one request: depth + depth).\n");
    for r in results {
        let _ = writeln!(s, "**{}**\n\n| depth | batched RT | batched ms | text RT | text ms |\n| --- | --- | --- | --- | --- |", r.name);
        for l in &r.locks {
            let _ = writeln!(
                s,
                "| {} | {} + {} | {:.3} | {} + {} | {:.3} |",
                l.depth, l.batched.0, l.batched.1, l.batched_ms, l.book.0, l.book.1, l.book_ms
            );
        }
        let _ = writeln!(s);
    }
    let _ = writeln!(s, "## 2. Directory rename against the raw bulk rewrite\n\nThe rename (tree locks, checks, journal, versioned writes) against the same scan and bulk rewrite with no lock, check or version (the store's limit). Best of two runs each, pages of 1 000. Plot: `bench-rename.svg`.\n\n| backend | N | rename s | docs/s | raw docs/s | ratio | round trips |\n| --- | --- | --- | --- | --- | --- | --- |");
    for r in results {
        for row in &r.renames {
            let _ = writeln!(
                s,
                "| {} | {} | {:.3} | {:.0} | {:.0} | {:.0} % | {} |",
                r.name,
                row.docs,
                row.rename_s,
                row.rate(),
                row.raw_rate(),
                100.0 * row.rate() / row.raw_rate(),
                row.round_trips
            );
        }
    }
    let _ = writeln!(s, "\n## 3. K concurrent renames of disjoint subtrees\n\nK jobs, each renaming its own `/p/sI` (of {} documents) back and forth for {} s; renames per second in all. Plot: `bench-concurrency.svg`.\n", plan.concurrent_docs, plan.concurrent_secs);
    for r in results {
        let _ = writeln!(
            s,
            "**{}**\n\n| K | tree | document | global |\n| --- | --- | --- | --- |",
            r.name
        );
        for &k in &plan.ks {
            let at = |st: Strategy| {
                r.concurrency
                    .iter()
                    .find(|c| c.k == k && c.strategy == st)
                    .map_or(0.0, |c| c.per_sec)
            };
            let _ = writeln!(
                s,
                "| {k} | {:.1} | {:.1} | {:.1} |",
                at(Strategy::Tree),
                at(Strategy::Document),
                at(Strategy::Global)
            );
        }
        let _ = writeln!(s);
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
    s
}
