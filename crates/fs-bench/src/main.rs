//! `fsrename-bench`: runs every benchmark of issue 9 on the embedded store and on
//! osmem-server over HTTP, prints a table, checks the targets, and writes
//! `docs/benchmarks.md` with SVG plots.
//!
//! `cargo run --release -p fs-bench -- [--quick] [--max-docs N] [--rtt 2ms] [--out docs]`
//! `cargo run --release -p fs-bench -- --profile-rename 100000` (one rename, for a profiler)
//! `cargo run --release -p fs-bench -- --profile-concurrency 16 [--profile-on embedded]` (phases
//! of concurrent renames on `remote`, or on another backend)
//! `cargo run --release -p fs-bench -- --reindex-move 10000 [--rename-rounds 40]` (a directory
//! moved on disk and indexed again, against a rename of its documents plus a walk)
//! `cargo run --release -p fs-bench -- --event-streams 200 [--feed-seconds 10] [--rename-rounds 5]`
//! (the store's request rate while renames run through `fsrename serve`, with and without open
//! pages on the live feed)
//! `cargo run --release -p fs-bench -- --watch-costs [--backends embedded,osmem,es=URL]` (what
//! the directory watcher costs: catch-up and requests per change after each tool's workload,
//! idle CPU and memory; section 7 of `docs/benchmarks.md`)
//! `cargo build --release -p fsrename && cargo run --release -p fs-bench -- --scale
//! [--scale-sizes 100000,1000000] [--backends embedded,es=URL] [--scale-shards 1,3]` (each
//! operation at scale against a user's own tool, with fsrename's peak memory; section 8 of
//! `docs/benchmarks.md`)

// Library code returns its errors; tests may unwrap (clippy.toml allows it in tests).
#![deny(clippy::unwrap_used, clippy::expect_used)]

mod book;
mod cpu;
mod fairness;
mod feed_load;
mod measure;
mod peer;
mod phases;
mod plot;
mod reindex;
mod report;
mod scale;
mod watch_costs;

use anyhow::Context as _;
use clap::Parser;

/// Measures lock costs by depth, rename throughput against the raw bulk rewrite, concurrent
/// disjoint renames per locking scheme, locking cost by affected documents, and the wait of a
/// parent's rename under renames below it (fair waiting).
#[derive(Debug, Parser)]
#[command(name = "fsrename-bench", version, about)]
struct Args {
    /// Smaller sizes and fewer repetitions (a smoke run, not for the record).
    #[arg(long)]
    quick: bool,
    /// The largest directory renamed, in documents (osmem stops at 10 000 unless --full).
    #[arg(long, default_value_t = 100_000)]
    max_docs: usize,
    /// Also run 100 000-document renames on osmem (minutes).
    #[arg(long)]
    full: bool,
    /// Rounds of the directory renames against the raw rewrite: each round renames there and
    /// back and rewrites there and back, so each median is of twice this many runs.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    rename_rounds: Option<u32>,
    /// Where to write benchmarks.md and the plots; `-` writes nothing.
    #[arg(long, default_value = "docs")]
    out: String,
    /// The round trip of the `remote` backend (the embedded store behind a network).
    #[arg(long, default_value = "2ms", value_parser = humantime::parse_duration)]
    rtt: std::time::Duration,
    /// Runs only renames of a directory of this many documents on the embedded store, four
    /// times back and forth, and prints their times: the run to profile (`perf record -g target/release/fsrename-bench
    /// --profile-rename 100000`).
    #[arg(long, value_name = "DOCS")]
    profile_rename: Option<usize>,
    /// Runs only this: a directory of this many files moved on disk, then indexed again
    /// (`fsrename index`), against a rename of its documents in the store plus a walk of the
    /// directory, in paired rounds (`--rename-rounds`, default 25) on the embedded store
    /// (`--embedded`). Prints the medians and whether the index run took no longer.
    #[arg(long, value_name = "FILES")]
    reindex_move: Option<usize>,
    /// Runs only this: renames through `fsrename serve` (in process, on the embedded store,
    /// `--embedded`) for --feed-seconds, with no page open and with this many event streams
    /// open, in paired rounds (`--rename-rounds`, default 5); prints the store's requests a
    /// second each way and whether they agree within 10 %.
    #[arg(long, value_name = "STREAMS")]
    event_streams: Option<usize>,
    /// With --event-streams: how long each half of a round counts, in seconds.
    #[arg(long, default_value_t = 10.0, requires = "event_streams")]
    feed_seconds: f64,
    /// With --event-streams: clients renaming at once (each its own directory).
    #[arg(long, default_value_t = 8, requires = "event_streams")]
    feed_clients: usize,
    /// Runs only K concurrent renames on `remote` (`--rtt` a call), with tree locks and with
    /// none, and prints where a rename's time goes, phase by phase (the profile of
    /// `docs/profile.md`).
    #[arg(long, value_name = "K")]
    profile_concurrency: Option<usize>,
    /// With --profile-concurrency: where the renames run: `remote` (`--rtt` a call),
    /// `embedded` (`--embedded` says how it is opened), `osmem` (behind the tests' proxy) or
    /// `es` (the server at --profile-url).
    #[arg(
        long,
        value_enum,
        default_value = "remote",
        requires = "profile_concurrency"
    )]
    profile_on: phases::Backend,
    /// With --profile-on es: the Elasticsearch or OpenSearch server's URL.
    #[arg(long, value_name = "URL", requires = "profile_concurrency")]
    profile_url: Option<String>,
    /// With --profile-concurrency: how many documents each renamed directory holds.
    #[arg(long, default_value_t = 50, requires = "profile_concurrency")]
    profile_docs: usize,
    /// How the embedded store is opened: `file` (a database file with the default options,
    /// what fsrename runs), `memory`, or `near-real-time` (the tests' mode).
    #[arg(long, value_enum, default_value = "file")]
    embedded: measure::Embedded,
    /// Runs only these measurements (comma-separated). Default: all.
    #[arg(long, value_enum, value_delimiter = ',')]
    only: Vec<measure::Measurement>,
    /// The service measurement's clients, K (comma-separated). Default: 1,16,64.
    #[arg(long, value_name = "K,..", value_delimiter = ',',
        value_parser = clap::value_parser!(u32).range(1..))]
    service_ks: Vec<u32>,
    /// The service measurement's instances on one store, the clients spread over them
    /// (comma-separated: `1,4` runs each K on one instance and on four). Default: 1.
    #[arg(long, value_name = "N,..", value_delimiter = ',',
        value_parser = clap::value_parser!(u32).range(1..))]
    service_instances: Vec<u32>,
    /// Runs only on these backends (comma-separated): `embedded`, `osmem`, `remote`, and
    /// `es=URL` for an Elasticsearch or OpenSearch server (several allowed; credentials from
    /// FSRENAME_ES_USER/FSRENAME_ES_PASSWORD/FSRENAME_ES_API_KEY). Where the server runs
    /// painless, the renames gain the server-side peer, `_update_by_query`. Default: the first
    /// three.
    #[arg(long, value_delimiter = ',', value_parser = parse_backend)]
    backends: Vec<String>,
    /// Runs only this: what the directory watcher (`index --watch`) costs. On each backend of
    /// --backends (default: embedded and osmem; `remote` is not measured), a watched directory
    /// gets `cp -a`, `rsync -a --delete`, `tar -xf`, `mv`, `rm -rf`, `git checkout`s, an
    /// editor's saves and a burst of files: the tool's time, the catch-up after it, the store's
    /// requests per change. Then a large tree watched idle on the embedded store: the process's
    /// CPU time and memory. Prints the section and puts it in `benchmarks.md` under --out.
    #[arg(long)]
    watch_costs: bool,
    /// With --watch-costs: entries of the tree copied, synced, unpacked, moved and removed.
    /// Default: 3 299 (500 with --quick).
    #[arg(long, value_name = "N", requires = "watch_costs")]
    watch_entries: Option<usize>,
    /// With --watch-costs: files of the burst. Default: 5 000 (1 000 with --quick).
    #[arg(long, value_name = "N", requires = "watch_costs")]
    burst_files: Option<usize>,
    /// With --watch-costs: the editor's saves. Default: 20 (5 with --quick).
    #[arg(long, value_name = "N", requires = "watch_costs")]
    saves: Option<usize>,
    /// With --watch-costs: entries of the tree watched idle. Default: 100 000 (10 000 with
    /// --quick).
    #[arg(long, value_name = "N", requires = "watch_costs")]
    idle_entries: Option<usize>,
    /// With --watch-costs: how long the idle watch is measured, in seconds. Default: 10 (2
    /// with --quick).
    #[arg(long, value_name = "SECONDS", requires = "watch_costs")]
    idle_seconds: Option<f64>,
    /// With --watch-costs: the longest a workload's catch-up, or a first run, is waited for;
    /// a workload not caught up by then is reported so, and its backend's later ones are not
    /// run. Default: 4m.
    #[arg(long, default_value = "4m", value_parser = humantime::parse_duration, requires = "watch_costs")]
    watch_timeout: std::time::Duration,
    /// Runs only this: each operation at scale (issue 49). On each store of --backends
    /// (`embedded`, the default, and `es=URL`), for each size, the release `fsrename` binary
    /// (build it first: `cargo build --release -p fsrename`) indexes a tree of directories of
    /// 1 000 empty files, indexes it again, checks it, lists it, renames it there and back and
    /// removes it, each as a child process timed with its peak RSS; beside each, a user's own
    /// tool on the same documents (raw `_bulk`, one plain read, `_update_by_query`). Prints
    /// the section and puts it in `benchmarks.md` under --out.
    #[arg(long)]
    scale: bool,
    /// With --scale: the sizes, in documents. Default: 100 000 and 1 000 000 (10 000 with
    /// --quick).
    #[arg(long, value_name = "N,..", value_delimiter = ',', requires = "scale")]
    scale_sizes: Vec<usize>,
    /// With --scale: the shard counts of the tree index on Elasticsearch. Default: 1 and 3.
    #[arg(long, value_name = "N,..", value_delimiter = ',', requires = "scale",
          value_parser = clap::value_parser!(u32).range(1..=1024))]
    scale_shards: Vec<u32>,
    /// With --scale: where the trees on disk (kept for the next run: a million files take
    /// minutes to make) and the embedded databases go.
    #[arg(
        long,
        value_name = "DIR",
        default_value = "target/scale",
        requires = "scale"
    )]
    scale_dir: std::path::PathBuf,
    /// With --scale: only these operations (each with its peer), in their order: `index`
    /// (the first and the second), `fsck`, `ls`, `find` (one name in every directory),
    /// `watch` (the first pass of `index --watch`), `mv` (there and back), `recover` (after
    /// `kill -9` of a whole-tree `mv`), `cp` (`cp -r /t /c`, of the first group of a million
    /// on a tree of ten, beside a raw `_bulk` of the same copies), `rm` (`rm -r` of a copy of
    /// the same made just before, beside a `_delete_by_query` of another copy made the same
    /// way). Default: all.
    /// The tree is removed after a store's run whatever the steps.
    #[arg(long, value_name = "STEP,..", value_delimiter = ',', requires = "scale",
          value_parser = clap::builder::PossibleValuesParser::new(scale::STEPS))]
    scale_steps: Vec<String>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(docs) = args.profile_rename {
        let seconds = measure::profile_rename(docs, 4, args.embedded).await?;
        println!(
            "renamed {docs} documents in {seconds:.3} s (median of 4; {:.0} documents/s)",
            docs as f64 / seconds
        );
        return Ok(());
    }
    if let Some(files) = args.reindex_move {
        let rounds = args.rename_rounds.map_or(25, |r| r as usize);
        println!(
            "{}",
            reindex::moved_dir(files, rounds.max(1), args.embedded).await?
        );
        return Ok(());
    }
    if let Some(streams) = args.event_streams {
        let rounds = args.rename_rounds.map_or(5, |r| r as usize);
        let load = feed_load::feed_load(
            streams,
            args.feed_seconds.max(0.1),
            rounds.max(1),
            args.feed_clients.max(1),
            args.embedded,
        )
        .await?;
        println!("{load}");
        return Ok(());
    }
    if args.watch_costs {
        return watch_costs(&args).await;
    }
    if args.scale {
        return scale(&args).await;
    }
    if let Some(k) = args.profile_concurrency {
        let secs = if args.quick { 0.5 } else { 5.0 };
        let on = match args.profile_on {
            phases::Backend::Remote => phases::On::Remote(args.rtt),
            phases::Backend::Embedded => phases::On::Embedded(args.embedded),
            phases::Backend::Osmem => phases::On::Osmem,
            phases::Backend::Es => match args.profile_url.clone() {
                Some(url) => phases::On::Es(url),
                None => anyhow::bail!("--profile-on es needs --profile-url URL"),
            },
        };
        println!("{}", phases::profile(k, on, args.profile_docs, secs).await?);
        return Ok(());
    }
    let mut plan = measure::Plan::new(
        args.quick,
        args.max_docs,
        args.full,
        args.rtt,
        args.embedded,
    );
    if let Some(rounds) = args.rename_rounds {
        plan.rename_repeat = rounds as usize;
    }
    if !args.only.is_empty() {
        plan.only = args.only;
    }
    if !args.service_ks.is_empty() {
        plan.service_ks = args.service_ks.iter().map(|&k| k as usize).collect();
    }
    if !args.service_instances.is_empty() {
        plan.service_instances = args.service_instances.iter().map(|&n| n as usize).collect();
    }
    if !args.backends.is_empty() {
        plan.backends = args.backends;
    }
    let results = measure::run_all(&plan).await?;
    let text = report::markdown(&results, &plan, &command_line());
    println!("{text}");
    if args.out != "-" {
        let dir = std::path::Path::new(&args.out);
        std::fs::create_dir_all(dir)?;
        let md = dir.join("benchmarks.md");
        // The watcher's section is written by --watch-costs alone: kept from the file replaced.
        let text = match std::fs::read_to_string(&md) {
            Ok(old) => report::carry_over(&text, &old),
            Err(_) => text,
        };
        std::fs::write(&md, &text).with_context(|| format!("writing {}", md.display()))?;
        let mut wrote = vec![md];
        // A plot is written only from a run that measured it, so that a partial run
        // (`--only`, `--backends`) does not replace a full one's plot with an empty one.
        let measured = |f: fn(&measure::BackendResults) -> bool| results.iter().any(f);
        if measured(|r| !r.renames.is_empty()) {
            let svg = dir.join("bench-rename.svg");
            plot::rename_throughput(&results, &svg)?;
            wrote.push(svg);
        }
        if measured(|r| !r.concurrency.is_empty()) {
            let svg = dir.join("bench-concurrency.svg");
            plot::concurrency(&results, &svg)?;
            wrote.push(svg);
        }
        let wrote: Vec<String> = wrote.iter().map(|p| p.display().to_string()).collect();
        eprintln!("wrote {}", wrote.join(", "));
    }
    let missed = report::targets(&results).iter().filter(|t| !t.met).count();
    if missed > 0 {
        eprintln!("{missed} target(s) missed: see the table");
    }
    Ok(())
}

/// `--watch-costs`: measures, prints the section, and puts it in `benchmarks.md` under --out.
async fn watch_costs(args: &Args) -> anyhow::Result<()> {
    let quick = args.quick;
    let plan = watch_costs::Plan {
        sizes: watch_costs::Sizes {
            entries: args
                .watch_entries
                .unwrap_or(if quick { 500 } else { 3_299 })
                .max(2),
            burst: args
                .burst_files
                .unwrap_or(if quick { 1_000 } else { 5_000 }),
            saves: args.saves.unwrap_or(if quick { 5 } else { 20 }),
        },
        idle_entries: args
            .idle_entries
            .unwrap_or(if quick { 10_000 } else { 100_000 })
            .max(1),
        idle_seconds: args
            .idle_seconds
            .unwrap_or(if quick { 2.0 } else { 10.0 })
            .max(0.1),
        timeout: args.watch_timeout,
        backends: if args.backends.is_empty() {
            vec!["embedded".into(), "osmem".into()]
        } else {
            args.backends.clone()
        },
        embedded: args.embedded,
    };
    let costs = watch_costs::watch_costs(plan).await?;
    let stamp = watch_costs::stamp().await;
    let section = watch_costs::render(&costs, &command_line(), &stamp, &report::machine());
    println!("{section}");
    if args.out != "-" {
        let md = watch_costs::write_into(std::path::Path::new(&args.out), &section)?;
        eprintln!("wrote {}", md.display());
    }
    Ok(())
}

/// `--scale`: measures, prints the section, and puts it in `benchmarks.md` under --out.
async fn scale(args: &Args) -> anyhow::Result<()> {
    let plan = scale::Plan {
        sizes: if !args.scale_sizes.is_empty() {
            args.scale_sizes.clone()
        } else if args.quick {
            vec![10_000]
        } else {
            vec![100_000, 1_000_000]
        },
        stores: if args.backends.is_empty() {
            vec!["embedded".into()]
        } else {
            args.backends.clone()
        },
        shards: if args.scale_shards.is_empty() {
            vec![1, 3]
        } else {
            args.scale_shards.clone()
        },
        dir: args.scale_dir.clone(),
        steps: if args.scale_steps.is_empty() {
            scale::STEPS.iter().map(|s| (*s).to_owned()).collect()
        } else {
            args.scale_steps.clone()
        },
    };
    let rows = scale::run(&plan).await?;
    let stamp = watch_costs::stamp().await;
    let section = scale::render(&rows, &command_line(), &stamp, &report::machine());
    println!("{section}");
    if args.out != "-" {
        let md = scale::write_into(std::path::Path::new(&args.out), &section)?;
        eprintln!("wrote {}", md.display());
    }
    Ok(())
}

/// `embedded`, `osmem`, `remote` or `es=URL` (an http or https URL).
fn parse_backend(text: &str) -> Result<String, String> {
    match text {
        "embedded" | "osmem" | "remote" => Ok(text.to_owned()),
        _ => match text.strip_prefix("es=") {
            Some(url) if url.starts_with("http://") || url.starts_with("https://") => {
                Ok(text.to_owned())
            }
            Some(url) => Err(format!(
                "`{url}` is not a server URL: expected es=http://HOST:PORT"
            )),
            None => Err(format!(
                "unknown backend `{text}`: expected embedded, osmem, remote or es=URL"
            )),
        },
    }
}

fn command_line() -> String {
    let args: Vec<String> = std::env::args().skip(1).collect();
    format!("cargo run --release -p fs-bench -- {}", args.join(" "))
        .trim_end()
        .to_owned()
}
