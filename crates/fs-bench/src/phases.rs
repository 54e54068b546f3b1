//! `--profile-concurrency K`: where the time of a rename goes when K run at once on `remote`
//! (or, with `--profile-on`, on the embedded store, osmem or a server at `--profile-url`), phase by phase, with tree locks and
//! with none. On a store whose cost is latency a CPU profiler sees only the client waiting;
//! the phases say what it waits for.

use std::sync::Arc;
use std::time::Duration;

use fs_locks::LockProtocol;
use fs_model::{FsDoc, FsPath};
use fs_rename::{FsTree, RenameReport, Strategy};
use fs_store::SharedStore;
use fs_testkit::LatencyStore;

/// The mean time per rename of each phase, and the rate.
#[derive(Debug, Default, Clone)]
struct Phases {
    renames: u64,
    round_trips: u64,
    locking: Duration,
    checking: Duration,
    rewriting: Duration,
    releasing: Duration,
    /// Everything else: the journal entry written and closed, and the job's own work.
    rest: Duration,
    elapsed: Duration,
}

impl Phases {
    fn add(&mut self, report: &RenameReport, took: Duration) {
        let p = &report.phases;
        let named = p.locking + p.checking + p.rewriting + p.releasing;
        self.renames += 1;
        self.round_trips += report.round_trips;
        self.locking += p.locking;
        self.checking += p.checking;
        self.rewriting += p.rewriting;
        self.releasing += p.releasing;
        self.rest += took.saturating_sub(named);
    }

    fn per(&self, d: Duration) -> f64 {
        d.as_secs_f64() * 1e3 / self.renames.max(1) as f64
    }

    fn rate(&self) -> f64 {
        self.renames as f64 / self.elapsed.as_secs_f64()
    }
}

/// Runs `k` jobs, each renaming its own `/p/sI` of `docs` documents back and forth for
/// `secs`, on `store`; returns the phases of all their renames.
async fn run(
    store: &SharedStore,
    strategy: Strategy,
    k: usize,
    docs: usize,
    secs: f64,
) -> anyhow::Result<Phases> {
    let tree = FsTree::new(Arc::clone(store), fs_testkit::unique_name("bench-phases"));
    tree.ensure_indices().await?;
    tree.insert_all(vec![FsDoc::dir(FsPath::parse("/p")?, 0)])
        .await?;
    for i in 0..k {
        crate::measure::insert_dir(&tree, docs, &format!("/p/s{i}")).await?;
    }
    let (reports, elapsed) =
        crate::measure::disjoint_renames(store, &tree, (strategy, LockProtocol::Auto), k, secs)
            .await?;
    let mut total = Phases::default();
    for (report, took) in &reports {
        total.add(report, *took);
    }
    total.elapsed = elapsed;
    crate::measure::drop_tree(&tree).await?;
    Ok(total)
}

/// The backends [`profile`] can run on.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Backend {
    Remote,
    Embedded,
    Osmem,
    Es,
}

/// Where [`profile`] runs: `remote` with its round trip, the embedded store, osmem, or a
/// server at a URL.
#[derive(Debug, Clone)]
pub enum On {
    Remote(Duration),
    Embedded(crate::measure::Embedded),
    Osmem,
    Es(String),
}

/// Profiles `k` concurrent renames `on` a backend, with tree locks and with none; returns a
/// markdown table of the mean milliseconds per rename in each phase.
pub async fn profile(k: usize, on: On, docs: usize, secs: f64) -> anyhow::Result<String> {
    let (store, _dir, described) = match on {
        On::Remote(rtt) => {
            let memory: SharedStore = Arc::new(fs_store::SqliteStore::in_memory()?);
            let remote: SharedStore = Arc::new(LatencyStore::new(memory, rtt));
            let described = format!("remote ({} ms a call)", rtt.as_secs_f64() * 1e3);
            (remote, None, described)
        }
        On::Embedded(kind) => {
            let (store, dir) = crate::measure::embedded(kind)?;
            (store, dir, format!("the embedded store ({kind:?})"))
        }
        On::Osmem => (crate::measure::osmem(), None, "osmem".to_owned()),
        On::Es(url) => {
            let config = fs_store::ElasticConfig::new(&url)?.with_env()?.replicas(0);
            let store: SharedStore = Arc::new(fs_store::ElasticStore::connect(config)?);
            (store, None, format!("the server at {url}"))
        }
    };
    let tree = run(&store, Strategy::Tree, k, docs, secs).await?;
    let none = run(&store, Strategy::None, k, docs, secs).await?;
    let mut out = format!(
        "K = {k} jobs on {described}, each renaming its own directory of {docs} \
         documents back and forth for {secs} s.\n\n\
         | per rename | tree | none | tree − none |\n| --- | --- | --- | --- |\n"
    );
    let mut row = |what: &str, t: f64, n: f64| {
        out.push_str(&format!("| {what} | {t:.1} | {n:.1} | {:+.1} |\n", t - n));
    };
    row("renames / s", tree.rate(), none.rate());
    row(
        "round trips",
        tree.round_trips as f64 / tree.renames.max(1) as f64,
        none.round_trips as f64 / none.renames.max(1) as f64,
    );
    for (what, t, n) in [
        ("locking ms (waits included)", tree.locking, none.locking),
        ("checking ms", tree.checking, none.checking),
        ("journal and the rest, ms", tree.rest, none.rest),
        ("rewriting ms", tree.rewriting, none.rewriting),
        ("releasing ms", tree.releasing, none.releasing),
    ] {
        row(what, tree.per(t), none.per(n));
    }
    let whole = |p: &Phases| p.per(p.locking + p.checking + p.rest + p.rewriting + p.releasing);
    row("whole rename ms", whole(&tree), whole(&none));
    Ok(out)
}
