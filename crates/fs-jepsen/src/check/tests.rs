//! The checker on histories built by hand to be right or wrong in one way, on random valid
//! histories from a simulation of concurrent clients on the model, and against a brute
//! force search on small random histories.

use std::time::Instant;

use super::linear::{Failed, Finding, Search};
use super::*;
use crate::history::{Call, Entry, Kind, Op, Via};
use crate::model::{is_under, Slot, Tree};

fn entry(path: &str, id: &str, kind: Kind) -> Entry {
    Entry {
        path: path.into(),
        id: id.into(),
        kind,
    }
}

fn dir(path: &str, id: &str) -> Entry {
    entry(path, id, Kind::Dir)
}

fn file(path: &str, id: &str) -> Entry {
    entry(path, id, Kind::File)
}

fn call(client: &str, op: Op, (invoked, completed): (u64, u64), outcome: Outcome) -> Call {
    Call {
        client: client.into(),
        via: Via::Cli,
        op,
        invoked,
        completed,
        outcome,
    }
}

fn ok() -> Outcome {
    Outcome::Ok
}

fn failed() -> Outcome {
    Outcome::Failed {
        error: "503 Service Unavailable".into(),
    }
}

fn unknown() -> Outcome {
    Outcome::Unknown {
        why: "client killed".into(),
    }
}

fn mkdir(path: &str) -> Op {
    Op::Mkdir { path: path.into() }
}

fn touch(path: &str) -> Op {
    Op::Touch { path: path.into() }
}

fn mv(from: &str, to: &str) -> Op {
    Op::Mv {
        from: from.into(),
        to: to.into(),
    }
}

fn history(start: Vec<Entry>, calls: Vec<Call>, end: Vec<Entry>) -> History {
    History {
        start,
        calls,
        faults: vec![],
        end,
    }
}

/// The only anomaly of `verdict`, which must be a [`Anomaly::NotLinearizable`].
fn not_linearizable(verdict: &Verdict) -> (usize, Vec<usize>, String) {
    match verdict.anomalies.as_slice() {
        [Anomaly::NotLinearizable {
            placed,
            stuck,
            detail,
        }] => (*placed, stuck.clone(), detail.clone()),
        other => panic!("one NotLinearizable expected, got {other:?}"),
    }
}

#[test]
fn concurrent_calls_in_the_reverse_of_invocation_order_pass() {
    // The touch is invoked first, but can only have taken effect after the mkdir of its
    // parent: the calls overlap, so that order respects real time.
    let start = vec![dir("/", "R")];
    let calls = vec![
        call("cli-0", touch("/x/f"), (0, 10), ok()),
        call("cli-1", mkdir("/x"), (1, 5), ok()),
    ];
    let end = vec![dir("/", "R"), dir("/x", "N1"), file("/x/f", "N2")];
    let verdict = check(&history(start.clone(), calls.clone(), end.clone()));
    assert!(verdict.passed(), "{verdict}");
    assert_eq!(verdict.linearization, Some(vec![1, 0]));

    // Had the touch completed before the mkdir was invoked, no order would fit.
    let mut sequential = calls;
    sequential[0].completed = 1;
    sequential[1].invoked = 2;
    let verdict = check(&history(start, sequential, end));
    let (placed, stuck, detail) = not_linearizable(&verdict);
    assert_eq!((placed, stuck), (0, vec![0]), "{detail}");
    assert!(detail.contains("#0 cli-0 [0, 1] `touch /x/f`: its precondition fails"));
}

#[test]
fn an_unknown_call_may_have_taken_effect_or_not() {
    let start = vec![dir("/", "R"), dir("/a", "A")];
    let calls = vec![
        call("cli-0", mkdir("/a/u"), (0, 5), unknown()),
        call("cli-1", mkdir("/b"), (10, 12), ok()),
    ];
    let took = vec![
        dir("/", "R"),
        dir("/a", "A"),
        dir("/a/u", "U"),
        dir("/b", "B"),
    ];
    let verdict = check(&history(start.clone(), calls.clone(), took));
    assert!(verdict.passed(), "{verdict}");
    assert_eq!(verdict.linearization, Some(vec![1, 0]));

    let did_not = vec![dir("/", "R"), dir("/a", "A"), dir("/b", "B")];
    let verdict = check(&history(start, calls, did_not));
    assert!(verdict.passed(), "{verdict}");
    assert_eq!(verdict.linearization, Some(vec![1]));
}

#[test]
fn an_unknown_call_may_take_effect_after_later_calls() {
    // The client gave up on the rename at 5; recovery finished it after the touch at
    // 10..12: the touched file moved with its directory.
    let start = vec![dir("/", "R"), dir("/a", "A")];
    let calls = vec![
        call("cli-0", mv("/a", "/c"), (0, 5), unknown()),
        call("cli-1", touch("/a/f"), (10, 12), ok()),
    ];
    let end = vec![dir("/", "R"), dir("/c", "A"), file("/c/f", "F")];
    let verdict = check(&history(start, calls, end));
    assert!(verdict.passed(), "{verdict}");
    assert_eq!(verdict.linearization, Some(vec![1, 0]));
}

#[test]
fn a_lost_rename_is_not_linearizable() {
    let start = vec![dir("/", "R"), dir("/a", "A"), file("/a/f", "F")];
    let calls = vec![
        call("cli-0", mv("/a", "/b"), (0, 10), ok()),
        call("cli-1", touch("/g"), (2, 4), ok()),
    ];
    // The end is the start plus the touch: the acknowledged rename is not there.
    let end = vec![
        dir("/", "R"),
        dir("/a", "A"),
        file("/a/f", "F"),
        file("/g", "G"),
    ];
    let verdict = check(&history(start, calls, end));
    let (placed, stuck, detail) = not_linearizable(&verdict);
    assert_eq!((placed, stuck), (2, vec![]));
    assert!(detail.contains("missing /b (dir)"), "{detail}");
    assert!(detail.contains("extra /a (id A)"), "{detail}");
    assert_eq!(verdict.linearization, None);
}

#[test]
fn a_duplicated_id_is_reported() {
    // A rename that left its source: the same document at two paths.
    let start = vec![dir("/", "R"), dir("/a", "A"), file("/a/f", "F")];
    let calls = vec![call("cli-0", mv("/a", "/c"), (0, 10), ok())];
    let end = vec![
        dir("/", "R"),
        dir("/a", "A"),
        file("/a/f", "F"),
        dir("/c", "A"),
        file("/c/f", "F"),
    ];
    let verdict = check(&history(start, calls, end));
    assert_eq!(
        verdict.anomalies[..2],
        [
            Anomaly::DuplicateId {
                id: "A".into(),
                paths: vec!["/a".into(), "/c".into()],
            },
            Anomaly::DuplicateId {
                id: "F".into(),
                paths: vec!["/a/f".into(), "/c/f".into()],
            },
        ]
    );
    assert!(matches!(
        verdict.anomalies[2..],
        [Anomaly::NotLinearizable { .. }]
    ));
}

#[test]
fn a_rename_applied_twice_is_not_linearizable() {
    // cli-0 moves /a/f to /b/f, then cli-1 moves it back. The end shows it at /b/f: only
    // the first rename, applied again after the second (a replayed job), makes that. No
    // id is lost, duplicated or new: only the order tells.
    let start = vec![
        dir("/", "R"),
        dir("/a", "A"),
        file("/a/f", "F"),
        dir("/b", "B"),
    ];
    let calls = vec![
        call("cli-0", mv("/a/f", "/b/f"), (0, 10), ok()),
        call("cli-1", mv("/b/f", "/a/f"), (20, 30), ok()),
    ];
    let end = vec![
        dir("/", "R"),
        dir("/a", "A"),
        dir("/b", "B"),
        file("/b/f", "F"),
    ];
    let verdict = check(&history(start, calls, end));
    let (placed, stuck, detail) = not_linearizable(&verdict);
    assert_eq!((placed, stuck), (2, vec![]));
    assert_eq!(
        detail,
        "all 2 acknowledged calls placed, the end differs: \
         missing /a/f (file); extra /b/f (id F)"
    );
}

#[test]
fn a_failed_call_that_took_effect_is_reported() {
    let start = vec![dir("/", "R"), dir("/a", "A")];
    let calls = vec![
        call("cli-0", mkdir("/b"), (0, 5), ok()),
        call("cli-1", mv("/a", "/c"), (6, 9), failed()),
        call("cli-0", touch("/b/t"), (7, 8), failed()),
    ];
    let end = vec![dir("/", "R"), dir("/b", "B"), dir("/c", "A")];
    let verdict = check(&history(start, calls, end));
    assert_eq!(
        verdict.anomalies,
        vec![Anomaly::FailedTookEffect { calls: vec![1] }]
    );
    assert_eq!(verdict.linearization, Some(vec![0, 1]));
}

#[test]
fn a_second_search_out_of_budget_leaves_not_linearizable_with_a_note() {
    let start = vec![dir("/", "R"), dir("/a", "A")];
    let mut calls = vec![call("cli-0", mv("/a", "/b"), (0, 10), ok())];
    for path in ["/x", "/y", "/z"] {
        calls.push(call("cli-1", mkdir(path), (1, 20), failed()));
    }
    // The rename is lost, and no failed call explains it: but only a search of every
    // subset of the failed calls can tell, and 3 states are not enough for it.
    let end = vec![dir("/", "R"), dir("/a", "A")];
    let h = history(start, calls, end);
    let (_, _, detail) = not_linearizable(&check_with_budget(&h, 3));
    assert!(
        detail.ends_with("the search ran out of budget)"),
        "{detail}"
    );
    let (_, _, detail) = not_linearizable(&check(&h));
    assert!(!detail.contains("budget"), "{detail}");
}

#[test]
fn verdicts_read_one_line_per_anomaly_and_serialize_tagged() {
    let verdict = Verdict {
        anomalies: vec![
            Anomaly::LostId {
                id: "A".into(),
                path: "/a".into(),
            },
            Anomaly::FailedTookEffect { calls: vec![3, 7] },
        ],
        explored: 12,
        linearization: None,
    };
    assert!(!verdict.passed());
    assert_eq!(
        verdict.to_string(),
        "lost id A (at /a at the start; no delete)\n\
         calls reported failed took effect: #3, #7 (only then is the history linearizable)"
    );
    let json = serde_json::to_value(&verdict.anomalies[1]).unwrap();
    assert_eq!(
        json,
        serde_json::json!({"anomaly": "failed_took_effect", "calls": [3, 7]})
    );
}

/// A small deterministic random source (SplitMix64), so that the tests need no crate.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }

    fn percent(&mut self, p: u64) -> bool {
        self.below(100) < p
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        items.get(self.below(items.len() as u64) as usize)
    }
}

const NAMES: [&str; 6] = ["a", "b", "c", "d", "e", "f"];

fn depth(path: &str) -> usize {
    path.matches('/').count()
}

/// A random path, of a depth up to 3, that may not exist.
fn random_path(rng: &mut Rng) -> String {
    let mut path = String::new();
    for _ in 0..=rng.below(3) {
        path.push('/');
        path.push_str(rng.pick(&NAMES).copied().unwrap_or("a"));
    }
    path
}

/// A new name in a directory of `tree`, mostly (as the workload's generator does).
fn destination(rng: &mut Rng, tree: &Tree) -> String {
    let dirs: Vec<&String> = tree
        .entries()
        .iter()
        .filter(|(p, (k, _))| *k == Kind::Dir && depth(p) < 4)
        .map(|(p, _)| p)
        .collect();
    let name = rng.pick(&NAMES).copied().unwrap_or("a");
    match rng.pick(&dirs) {
        Some(parent) if rng.percent(90) => {
            if parent.as_str() == "/" {
                format!("/{name}")
            } else {
                format!("{parent}/{name}")
            }
        }
        _ => random_path(rng),
    }
}

/// An operation on `tree`, mostly on paths that exist, of the workload's mix; fewer
/// deletes below `size` documents, fewer new ones above.
fn random_op(rng: &mut Rng, tree: &Tree, size: usize) -> Op {
    let existing: Vec<&String> = tree.entries().keys().filter(|p| *p != "/").collect();
    let source = |rng: &mut Rng| match rng.pick(&existing) {
        Some(path) if rng.percent(85) => (*path).clone(),
        _ => random_path(rng),
    };
    let roll = rng.below(100);
    let roll = if (45..60).contains(&roll) && tree.len() < size * 3 / 4 {
        40
    } else if roll >= 60 && tree.len() > size * 5 / 4 {
        50
    } else {
        roll
    };
    match roll {
        0..=44 => {
            let from = source(rng);
            let mut to = destination(rng, tree);
            for _ in 0..5 {
                if !is_under(&to, &from) {
                    break;
                }
                to = destination(rng, tree);
            }
            let size = tree.entries().keys().filter(|p| is_under(p, &from)).count();
            if roll >= 35 && size <= 8 {
                Op::Cp { from, to }
            } else {
                Op::Mv { from, to }
            }
        }
        45..=59 => {
            // A delete of a large subtree would empty the tree at once: a rename instead.
            let path = source(rng);
            let size = tree.entries().keys().filter(|p| is_under(p, &path)).count();
            if size <= 8 {
                Op::Rm { path }
            } else {
                Op::Mv {
                    to: destination(rng, tree),
                    from: path,
                }
            }
        }
        60..=79 => Op::Mkdir {
            path: destination(rng, tree),
        },
        _ => Op::Touch {
            path: destination(rng, tree),
        },
    }
}

/// The entries of `tree`, a fresh document's id named after its call.
fn read(tree: &Tree) -> Vec<Entry> {
    tree.entries()
        .iter()
        .map(|(path, (kind, slot))| Entry {
            path: path.clone(),
            id: match slot {
                Slot::Known(id) => id.clone(),
                Slot::Fresh { call, n } => format!("new-{call}-{n}"),
            },
            kind: *kind,
        })
        .collect()
}

/// A random start tree of about `size` documents.
fn random_start(rng: &mut Rng, size: usize) -> Vec<Entry> {
    let mut tree = Tree::from_entries(&[dir("/", "root")]);
    let mut made = 0;
    for attempt in 0..size * 20 {
        if tree.len() >= size {
            break;
        }
        let path = destination(rng, &tree);
        let op = if rng.percent(60) {
            mkdir(&path)
        } else {
            touch(&path)
        };
        if let Some(next) = tree.apply(attempt, &op) {
            if next != tree {
                made += 1;
                tree = next;
            }
        }
    }
    assert!(made > 0);
    // Start documents have ids of their own, not those of calls.
    read(&tree)
        .into_iter()
        .map(|mut e| {
            if e.path != "/" {
                e.id = format!("s{}", e.path.replace('/', "."));
            }
            e
        })
        .collect()
}

/// A valid history: `clients` clients each making calls one after the other (`calls` in
/// all), each call taking effect at a random moment between its invocation and its
/// completion, ok if its precondition held then, failed if not; `unknown` of them made
/// unknown, half of those never taking effect and the others at a moment that may be
/// after the client gave up. The end is the model's tree after them all.
fn simulate(seed: u64, calls: usize, clients: usize, unknowns: usize, size: usize) -> History {
    let mut rng = Rng(seed);
    let start = random_start(&mut rng, size);
    // (client, invoked, completed, moment of effect)
    let mut timeline = Vec::new();
    for client in 0..clients {
        let mut t = rng.below(20);
        for _ in 0..calls / clients + usize::from(client < calls % clients) {
            let duration = 5 + rng.below(60);
            let moment = t + rng.below(duration + 1);
            timeline.push((client, t, t + duration, moment));
            t += duration + rng.below(15);
        }
    }
    timeline.sort_by_key(|&(client, invoked, ..)| (invoked, client));
    let mut unknown_at = Vec::new();
    while unknown_at.len() < unknowns.min(timeline.len()) {
        let at = rng.below(timeline.len() as u64) as usize;
        if !unknown_at.contains(&at) {
            unknown_at.push(at);
        }
    }
    let mut effects: Vec<(u64, usize, bool)> = Vec::new();
    for (index, &(_, invoked, completed, moment)) in timeline.iter().enumerate() {
        if unknown_at.contains(&index) {
            let takes_effect = rng.percent(50);
            let late = invoked + rng.below(3 * (completed - invoked) + 1);
            effects.push((late, index, takes_effect));
        } else {
            effects.push((moment, index, true));
        }
    }
    effects.sort();
    let mut tree = Tree::from_entries(&start);
    let mut history_calls: Vec<Option<Call>> = vec![None; timeline.len()];
    for (_, index, takes_effect) in effects {
        let (client, invoked, completed, _) = timeline[index];
        let op = random_op(&mut rng, &tree, size);
        let applied = if takes_effect {
            tree.apply(index, &op)
        } else {
            None
        };
        let outcome = if unknown_at.contains(&index) {
            unknown()
        } else if applied.is_some() {
            ok()
        } else {
            Outcome::Failed {
                error: "precondition".into(),
            }
        };
        if let Some(next) = applied {
            tree = next;
        }
        history_calls[index] = Some(call(
            &format!("cli-{client}"),
            op,
            (invoked, completed),
            outcome,
        ));
    }
    History {
        start,
        calls: history_calls.into_iter().flatten().collect(),
        faults: vec![],
        end: read(&tree),
    }
}

#[test]
fn large_valid_histories_pass() {
    // 300 calls of 6 clients, 15 unknown, on a tree of about 60 documents: a few seeds,
    // for the time a check takes varies with how far back a wrong guess shows.
    for seed in 0..6 {
        let h = simulate(seed, 300, 6, 15, 60);
        let (oks, fails, unknowns) = h.outcomes();
        assert_eq!((h.calls.len(), unknowns), (300, 15));
        let began = Instant::now();
        let verdict = check(&h);
        let took = began.elapsed();
        eprintln!(
            "seed {seed}: 300 calls ({oks} ok, {fails} failed, {unknowns} unknown), {} start \
             and {} end entries: {} states explored in {took:?}",
            h.start.len(),
            h.end.len(),
            verdict.explored
        );
        assert!(verdict.passed(), "seed {seed}: {verdict}");
        let order = verdict.linearization.unwrap_or_default();
        assert!(order.len() >= oks && order.len() <= oks + unknowns);
        // The order found is one: replayed, it makes the end.
        let mut tree = Tree::from_entries(&h.start);
        for &c in &order {
            tree = tree.apply(c, &h.calls[c].op).unwrap();
        }
        let start_ids = h.start.iter().map(|e| e.id.clone()).collect();
        assert_eq!(tree.matches_end(&h.end, &start_ids), Ok(()));
    }
}

#[test]
fn many_random_valid_histories_pass() {
    for seed in 0..20 {
        let h = simulate(100 + seed, 120, 5, 10, 30);
        let verdict = check(&h);
        assert!(verdict.passed(), "seed {seed}: {verdict}");
    }
}

#[test]
fn a_long_history_does_not_overflow_the_stack() {
    // A thousand frames deep: the search keeps them on the heap.
    let h = simulate(3, 1000, 3, 5, 30);
    let verdict = check(&h);
    assert!(verdict.passed(), "{verdict}");
}

#[test]
fn a_tiny_budget_is_inconclusive() {
    let h = simulate(7, 300, 6, 15, 60);
    let verdict = check_with_budget(&h, 10);
    assert_eq!(
        verdict.anomalies,
        vec![Anomaly::Inconclusive { explored: 11 }]
    );
    assert_eq!(verdict.linearization, None);
}

/// Whether some order of `h`'s calls, of all orders (no memo, no pruning, no window),
/// explains it, the failed calls taken as `failed` says.
fn brute_force(h: &History, failed: Failed) -> bool {
    /// The search, from `tree` with `placed` placed.
    fn go(h: &History, failed: Failed, tree: &Tree, placed: &mut Vec<bool>) -> bool {
        let is_failed = |c: &Call| matches!(c.outcome, Outcome::Failed { .. });
        let takes_part = |c: &Call| failed != Failed::LeftOut || !is_failed(c);
        let required = |c: &Call| matches!(c.outcome, Outcome::Ok);
        let start_ids = h.start.iter().map(|e| e.id.clone()).collect();
        let all_placed = h
            .calls
            .iter()
            .zip(placed.iter())
            .all(|(c, &p)| p || !required(c));
        if all_placed && tree.matches_end(&h.end, &start_ids).is_ok() {
            return true;
        }
        for (i, c) in h.calls.iter().enumerate() {
            if placed[i] || !takes_part(c) {
                continue;
            }
            // Real time: an ok call that completed before `c` was invoked comes before
            // it; and, in time, a failed call comes before any invoked after it completed.
            let blocked = h
                .calls
                .iter()
                .enumerate()
                .any(|(j, p)| !placed[j] && required(p) && p.completed < c.invoked);
            let expired = failed == Failed::InTime
                && is_failed(c)
                && h.calls
                    .iter()
                    .enumerate()
                    .any(|(j, p)| placed[j] && p.invoked > c.completed);
            if blocked || expired {
                continue;
            }
            if let Some(next) = tree.apply(i, &c.op) {
                placed[i] = true;
                if go(h, failed, &next, placed) {
                    return true;
                }
                placed[i] = false;
            }
        }
        false
    }
    let mut placed = vec![false; h.calls.len()];
    go(h, failed, &Tree::from_entries(&h.start), &mut placed)
}

/// Spoils a valid history in one of several ways (or not at all).
fn spoil(rng: &mut Rng, h: &mut History) {
    match rng.below(6) {
        0 => {}
        1 => {
            let at = rng.below(h.end.len() as u64) as usize;
            if h.end.len() > 1 && h.end[at].path != "/" {
                h.end.remove(at);
            }
        }
        2 => {
            let a = rng.below(h.end.len() as u64) as usize;
            let b = rng.below(h.end.len() as u64) as usize;
            let id = h.end[a].id.clone();
            h.end[a].id = h.end[b].id.clone();
            h.end[b].id = id;
        }
        3 => {
            let path = random_path(rng);
            if !h.end.iter().any(|e| e.path == path) {
                let id = h.start[rng.below(h.start.len() as u64) as usize].id.clone();
                h.end.push(dir(&path, &id));
            }
        }
        4 => {
            let at = rng.below(h.calls.len() as u64) as usize;
            h.calls[at].outcome = match h.calls[at].outcome {
                Outcome::Ok => failed(),
                _ => ok(),
            };
        }
        _ => {
            let at = rng.below(h.calls.len() as u64) as usize;
            h.calls[at].completed = h.calls[at].invoked;
        }
    }
}

#[test]
fn the_search_agrees_with_brute_force_on_small_histories() {
    let (mut yes, mut no, mut rescued) = (0, 0, 0);
    for seed in 0..600 {
        // 6 to 8 calls, 2 to 4 clients, 1 to 4 unknown, on a start tree of 5 to 8.
        let calls = 6 + (seed % 3) as usize;
        let clients = 2 + (seed % 3) as usize;
        let unknowns = 1 + (seed % 4) as usize;
        let size = 5 + (seed % 4) as usize;
        let mut h = simulate(1000 + seed, calls, clients, unknowns, size);
        spoil(&mut Rng(seed), &mut h);
        let modes = [Failed::LeftOut, Failed::InTime, Failed::AsUnknown];
        let expected = modes.map(|mode| brute_force(&h, mode));
        for (mode, expected) in modes.into_iter().zip(expected) {
            let found = Search::new(&h, mode).run(DEFAULT_BUDGET);
            assert_eq!(
                matches!(found, Finding::Linearizable { .. }),
                expected,
                "seed {seed}, {mode:?}: {found:?}\n{h:#?}"
            );
        }
        let expected = [expected[0], expected[2]];
        let verdict = check(&h);
        let not_linearizable = verdict
            .anomalies
            .iter()
            .any(|a| matches!(a, Anomaly::NotLinearizable { .. }));
        let failed_took_effect = verdict
            .anomalies
            .iter()
            .any(|a| matches!(a, Anomaly::FailedTookEffect { .. }));
        let counted = match expected {
            [true, _] => &mut yes,
            [false, true] => &mut rescued,
            [false, false] => &mut no,
        };
        *counted += 1;
        assert_eq!(
            (not_linearizable, failed_took_effect),
            (expected == [false, false], expected == [false, true]),
            "seed {seed}: {verdict}"
        );
    }
    assert!(
        yes > 100 && no > 100 && rescued > 10,
        "{yes} {rescued} {no}"
    );
}
