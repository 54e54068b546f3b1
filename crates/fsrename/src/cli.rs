//! The command-line arguments.

use std::path::PathBuf;
use std::time::Duration;

use clap::parser::ValueSource;
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use fs_locks::LockProtocol;
use fs_model::{FsPath, IndexLayout, NameGlob};
use fs_rename::Strategy;

use crate::store_location::StoreLocation;

/// Keeps a directory tree in a document store (an embedded database file, or Elasticsearch)
/// and renames files and directories in it safely while other jobs do the same.
#[derive(Debug, Parser)]
#[command(name = "fsrename", version, about, long_about = None)]
pub struct Cli {
    /// Where the tree lives: a database file (`file:PATH`), `mem`, or `http(s)://HOST:PORT`.
    ///
    /// `file:PATH` or a bare path is an embedded database file; `mem` is in memory, gone when
    /// the command ends; `http(s)://HOST:PORT` is Elasticsearch (tested on 7.10; 8.x and
    /// OpenSearch speak the same API but have not been run, see docs/elasticsearch.md) (for a
    /// cluster, its nodes' URLs separated by commas: requests go round them and a node that
    /// does not answer is skipped for a while; credentials in the URL or in
    /// --user with --password-file, or --api-key-file; a CA with --ca-cert or
    /// --ca-fingerprint).
    #[arg(
        long,
        global = true,
        help_heading = "Store options",
        env = "FSRENAME_STORE",
        default_value = "fsrename.db"
    )]
    pub store: StoreLocation,

    /// The tree index; its locks live in `<INDEX>-lock`.
    #[arg(long, global = true, help_heading = "Store options", default_value = fs_model::DEFAULT_TREE_INDEX)]
    pub index: String,

    /// How long a lock lives unless renewed (verbs that take locks). At least 100ms.
    ///
    /// Its holder renews it every third of this while it works; a job that dies leaves locks
    /// that expire after this long.
    #[arg(long, global = true, help_heading = "Lock options", default_value = "30s", value_parser = parse_lease)]
    pub lease: Duration,

    /// How lock documents are written (verbs that take locks): `auto`, `cas` or `scripted`.
    ///
    /// `auto` uses the book's scripts where the server runs them and compare-and-set
    /// otherwise.
    #[arg(
        long,
        global = true,
        help_heading = "Lock options",
        default_value = "auto"
    )]
    pub lock_protocol: LockProtocol,

    /// Where `mv` rewrites its documents: `auto`, `server` or `client`.
    ///
    /// `auto` has the server do it, in one task, where it runs painless and the rename moves
    /// more than a page of documents, and this process otherwise. The locks, check and journal
    /// are the same.
    #[arg(
        long,
        global = true,
        help_heading = "Lock options",
        default_value = "auto"
    )]
    pub rewrite: fs_rename::Rewrite,

    /// On Elasticsearch: `number_of_shards` of the tree index fsrename creates, 1 to 1024.
    /// Default: the server's default (1).
    ///
    /// Applies when fsrename creates the indices, on the first run on a store: an index that
    /// exists keeps the shards it was created with. The lock index stays on one shard (its bulk
    /// requests are applied in order only within one shard), and so do the small journal and
    /// jobs indices. The embedded store has no shards and ignores this.
    #[arg(
        long,
        global = true,
        help_heading = "Store options",
        env = "FSRENAME_ES_SHARDS",
        value_name = "N",
        value_parser = parse_shards
    )]
    pub shards: Option<u32>,

    /// On Elasticsearch: `number_of_replicas` of the indices fsrename creates, 0 to 64 (0
    /// suits a single node). Default: the server's default (1).
    ///
    /// Applies when fsrename creates the indices, on the first run on a store: an index that
    /// exists keeps its replicas. Every index (tree, lock, journal, jobs) takes it. The
    /// embedded store has no replicas and ignores this.
    #[arg(
        long,
        global = true,
        help_heading = "Store options",
        env = "FSRENAME_ES_REPLICAS",
        value_name = "N",
        value_parser = parse_replicas
    )]
    pub replicas: Option<u32>,

    /// The CA and credentials of a secured Elasticsearch.
    #[command(flatten)]
    pub access: crate::store_location::Access,

    /// What to do.
    #[command(subcommand)]
    pub verb: Verb,
}

/// The global options that say where and how the tree is stored, which `demo` (on its own
/// in-memory store) does not take: `(argument id, flag)`.
const STORE_OPTIONS: [(&str, &str); 12] = [
    ("store", "--store"),
    ("index", "--index"),
    ("lease", "--lease"),
    ("lock_protocol", "--lock-protocol"),
    ("rewrite", "--rewrite"),
    ("shards", "--shards"),
    ("replicas", "--replicas"),
    ("ca_cert", "--ca-cert"),
    ("ca_fingerprint", "--ca-fingerprint"),
    ("user", "--user"),
    ("password_file", "--password-file"),
    ("api_key_file", "--api-key-file"),
];

impl Cli {
    /// Returns what opening the store takes besides its location.
    pub fn store_options(&self) -> crate::store_location::StoreOptions {
        crate::store_location::StoreOptions {
            replicas: self.replicas,
            access: self.access.clone(),
        }
    }

    /// Returns the shards and replicas of the indices a verb creates (`--shards`,
    /// `--replicas`).
    ///
    /// # Errors
    /// A number out of range, named (the parser refuses those first).
    pub fn layout(&self) -> anyhow::Result<IndexLayout> {
        Ok(IndexLayout::of(self.shards, self.replicas)?)
    }

    /// Parses the command line as [`Parser::parse`] does (exiting with 2 and clap's message on
    /// bad usage), and also refuses, the same way, store options given on the command line to
    /// `demo`, which runs on a store of its own: silently ignoring them let a user believe the
    /// demo had run on their server. (From the environment, as `FSRENAME_STORE`, they are
    /// settings of the shell, not a request, and are left alone.)
    pub fn parse_args() -> Cli {
        let matches = Cli::command().get_matches();
        let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
        if matches!(cli.verb, Verb::Demo { .. }) {
            let given: Vec<&str> = STORE_OPTIONS
                .iter()
                .filter(|(id, _)| matches.value_source(id) == Some(ValueSource::CommandLine))
                .map(|(_, flag)| *flag)
                .collect();
            if !given.is_empty() {
                Cli::command()
                    .error(
                        clap::error::ErrorKind::ArgumentConflict,
                        format!(
                            "`demo` runs on an in-memory store of its own, so {} cannot be given to it",
                            given.join(", ")
                        ),
                    )
                    .exit();
            }
        }
        cli
    }
}

/// The verbs.
#[derive(Debug, Subcommand)]
pub enum Verb {
    /// Indexes a local directory tree into the store, or brings it in step with the disk.
    ///
    /// One document per file and directory. Symbolic links are not followed (they are counted and skipped), nor are entries that cannot be read or
    /// whose names are not UTF-8 (each is reported). Indexing again updates what changed, and
    /// what moved on disk (the same file, by device and inode, at a new path, its old path
    /// gone) is renamed in the store, ids kept, instead of deleted and created again.
    Index {
        /// The local directory.
        dir: PathBuf,
        /// Where in the tree to put it. Default: `/` followed by the directory's name.
        #[arg(long = "as", value_name = "PATH")]
        at: Option<FsPath>,
        /// Documents per bulk request.
        #[arg(long, default_value_t = 1_000)]
        batch_size: usize,
        /// Deletes documents under the target that are no longer on disk (under the tree lock
        /// on the target, deepest first, so that a run cut short leaves no orphan; a subtree
        /// of more than 20 000 documents is a journaled rm -r of its own). Without it they are
        /// reported and kept (they may be the result of renames made in the tree).
        #[arg(long)]
        prune: bool,
        /// After indexing, keeps following the directory (inotify) until Ctrl-C: renames
        /// become renames in the store, new and changed entries are indexed, what disappears is
        /// removed; a lost event (queue overflow) means a rescan of the whole tree. Every
        /// change takes tree locks like any other job. Implies --prune for what it sees go.
        #[arg(long)]
        watch: bool,
        /// With --watch: how long the directory must be quiet before changes are applied.
        #[arg(long, default_value = "250ms", value_parser = parse_duration, requires = "watch")]
        debounce: Duration,
        /// Stores the text of UTF-8 files of at most --content-max bytes in their documents
        /// (`content`), for `fsrename find --text`. A file is read when it is new or changed,
        /// or has no text stored yet; renames never rewrite the text.
        #[arg(long)]
        content: bool,
        /// With --content: the largest file whose text is stored (a number of bytes, or with
        /// K, KiB, M, MiB, G or GiB: powers of 1024).
        #[arg(long, default_value = "1MiB", value_parser = parse_bytes, requires = "content")]
        content_max: u64,
        /// Prints the summary as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Creates a directory (its parent must exist, unless -p).
    Mkdir {
        /// Creates missing parents too; an existing directory is not an error.
        #[arg(short = 'p', long)]
        parents: bool,
        /// The directory to create.
        path: FsPath,
    },
    /// Creates an empty file, or updates the modification time of an existing one.
    Touch {
        /// The file.
        path: FsPath,
    },
    /// Renames a file or directory (and everything under it) under locks.
    ///
    /// With tree locks (the default) it takes an exclusive lock on FROM and on TO, and
    /// intention locks on their ancestors. It journals itself before its first write: if it
    /// dies half-way, `fsrename recover` finishes the rename once its locks' lease runs out.
    ///
    /// Unlike Unix `mv`, TO is always the new path itself, never a directory to move into:
    /// `fsrename mv /a /dir` with `/dir` existing is refused; `fsrename mv /a /dir/a` moves
    /// `/a` into `/dir`. Nothing existing is ever replaced.
    Mv {
        /// What to rename.
        from: FsPath,
        /// Its new path (not a directory to move into); it must not exist, and its parent
        /// must be an existing directory.
        to: FsPath,
        /// The options of a job (clap shows the fields' own help, not this).
        #[command(flatten)]
        job: JobArgs,
    },
    /// Copies a file, or with -r a directory and everything under it, under locks.
    ///
    /// With tree locks (the default) it takes a shared lock on SRC, so nothing under it is
    /// renamed, copied over or deleted while it is read, and an exclusive lock on DST, with
    /// intention locks on their ancestors. DST must not exist and its parent must be an
    /// existing directory. Every copy gets a new id and keeps the kind, size and modification
    /// time of its original. It journals itself before its first write: if it dies half-way,
    /// `fsrename recover` finishes the copy once its locks' lease runs out (a copy is never
    /// left half-done).
    Cp {
        /// Copies a directory and everything under it (without it, a directory is refused, as
        /// by cp).
        #[arg(short = 'r', short_alias = 'R', long)]
        recursive: bool,
        /// What to copy.
        from: FsPath,
        /// Where the copy goes: the copy's own path, not a directory to copy into (unlike Unix
        /// `cp`); it must not exist, and its parent must be an existing directory.
        to: FsPath,
        /// The options of a job (clap shows the fields' own help, not this).
        #[command(flatten)]
        job: JobArgs,
    },
    /// Removes a file or an empty directory, or with -r a directory and everything under it,
    /// under locks.
    ///
    /// With tree locks (the default) it takes an exclusive lock on PATH and intention locks on
    /// its ancestors. It deletes deepest first, so a directory goes only after everything in
    /// it: at no moment is a document left whose parent is gone. It journals itself before its
    /// first delete: if it dies half-way, `fsrename recover` finishes the delete once its
    /// locks' lease runs out. The root cannot be removed.
    Rm {
        /// Removes a directory and everything under it (without it, a directory with entries
        /// is refused).
        #[arg(short = 'r', short_alias = 'R', long)]
        recursive: bool,
        /// What to remove.
        path: FsPath,
        /// The options of a job (clap shows the fields' own help, not this).
        #[command(flatten)]
        job: JobArgs,
    },
    /// Finishes the renames, copies and deletes of jobs that died half-way and clears the
    /// locks they left.
    ///
    /// A job journals itself before its first write; if it dies, its locks stay until their
    /// lease (--lease of the job that took them) runs out, and nobody can touch the half-done
    /// tree. Then this takes the locks over, finishes the job (moves what is still under a
    /// rename's source, creates the copies a copy has not made yet, deletes what a delete left),
    /// and releases them. Expired locks that no journaled rename needs are deleted, and
    /// expired shares removed (valid locks and shares are never touched). It acts on what has
    /// expired when it runs: run it again later for the rest. `fsrename serve` does this at
    /// start and every --recover-every. Exits 1 if a journaled job could not be finished.
    Recover {
        /// Only reports what would be done.
        #[arg(long)]
        dry_run: bool,
        /// Waits for the leases of journaled jobs that are still locked (a job that died a
        /// moment ago, or one that stopped on an error), then finishes them: alone, for as
        /// long as their leases run (a job whose owner is alive and renews them is left
        /// running); with a duration, for leases that run out within it. Without --wait such
        /// a job is reported with the time its lease runs out, and left for a later run.
        /// The duration (or 10s) is also how long taking over a job's locks may wait.
        #[arg(long, num_args = 0..=1, value_name = "DURATION", value_parser = parse_duration)]
        wait: Option<Option<Duration>>,
        /// How long foreign shares (a client of the book's scripts: `lock_count++`, no owner,
        /// no lease) must stand unchanged before they are removed as left behind: the book's
        /// retried increment counted twice, or a client that died holding its share. Each run
        /// notes the count it sees and when; a count that moved starts the wait again.
        #[arg(long, default_value = "1h", value_parser = parse_duration)]
        foreign_lease: Duration,
        /// Prints the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Lists a directory.
    ///
    /// Without --consistent it takes no lock: a listing made while jobs change the tree may
    /// show part of it before a change and part after. With --consistent it holds a shared
    /// lock on PATH (and intention locks on its ancestors) from before the first entry to
    /// after the last, so nothing under PATH is renamed, copied over or deleted meanwhile.
    Ls {
        /// The directory (or file) to list.
        #[arg(default_value = "/")]
        path: FsPath,
        /// Lists everything under it, with full paths.
        #[arg(short = 'R', long)]
        recursive: bool,
        /// Shows kind, size and modification time.
        #[arg(short, long)]
        long: bool,
        /// Prints the entries as JSON lines.
        #[arg(long)]
        json: bool,
        /// `--consistent` and its `--wait` (clap shows the fields' own help, not this).
        #[command(flatten)]
        consistent: ConsistentArgs,
    },
    /// Finds entries under PATH by name and by the words of their text.
    ///
    /// Like `find PATH -name GLOB` and `grep -lw`, from the store (the text is what `index
    /// --content` stored).
    ///
    /// With --text, every word must be in the text (any case, whole words: letters and
    /// digits; anything else separates words), and the best matches come first; without it,
    /// the entries come in path order. Takes no lock: it sees what the store has made
    /// searchable.
    Find {
        /// Where to look: this path and everything under it.
        #[arg(default_value = "/")]
        path: FsPath,
        /// A shell pattern the name must match: `*`, `?`, `[a-z]`, `[!a-z]`, `\` before a
        /// character meant as itself. Case-sensitive; quote it from the shell.
        #[arg(long, value_name = "GLOB")]
        name: Option<NameGlob>,
        /// Words the text must hold, all of them.
        #[arg(long, value_name = "WORDS")]
        text: Option<String>,
        /// Prints at most this many entries, 1 to 10000 (and says when there are more).
        #[arg(long, default_value_t = 100, value_parser = parse_limit)]
        limit: usize,
        /// Shows kind, size and modification time.
        #[arg(short, long)]
        long: bool,
        /// Prints the entries as JSON lines.
        #[arg(long)]
        json: bool,
    },
    /// Lists the lock documents: what is locked, how, by whom, until when.
    Locks {
        /// Prints the locks as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Checks the tree, and reports locks left behind and unfinished jobs.
    ///
    /// Every document's parent exists and is a directory, parent/name/depth agree with the
    /// path, no path is stored twice. Reports lock documents left behind and unfinished jobs
    /// in the journal. Exits 1 if the tree is broken.
    ///
    /// Without --consistent it takes no lock, so a job at work may show as a broken tree
    /// (half-renamed, half-copied). With --consistent it holds a shared lock on PATH while it
    /// reads, so the report describes one state of the subtree.
    Fsck {
        /// The subtree to check.
        #[arg(default_value = "/")]
        path: FsPath,
        /// Prints the report as JSON.
        #[arg(long)]
        json: bool,
        /// `--consistent` and its `--wait` (clap shows the fields' own help, not this).
        #[command(flatten)]
        consistent: ConsistentArgs,
    },
    /// Serves rename, copy and delete jobs over HTTP, with a live page at `/`.
    ///
    /// POST /renames {"from", "to",
    /// "strategy"?}, POST /copies {"from", "to", "strategy"?}, POST /deletes {"path",
    /// "recursive"?, "strategy"?} → 202 with a job id; GET /jobs/{id} (any kind), GET
    /// /renames/{id}, /copies/{id}, /deletes/{id}; GET /jobs, /renames, /copies, /deletes;
    /// GET /locks; GET /tree?path=&depth=; GET /healthz; GET /metrics; GET /openapi.json
    /// (every route described, OpenAPI 3.1). Stops on SIGINT/SIGTERM after letting running
    /// jobs finish, and exits 130 then, as every verb so stopped.
    Serve {
        /// Where to listen. A non-loopback address requires FSRENAME_TOKEN, which clients then
        /// send as `Authorization: Bearer <token>` (if set, it is required on loopback too).
        ///
        /// HOST:PORT or HOST alone (port 7070); a name such as `localhost` is resolved, an
        /// IPv4 address preferred.
        #[arg(long, default_value = "127.0.0.1:7070", value_parser = parse_listen_serve)]
        listen: std::net::SocketAddr,
        /// Jobs (renames, copies, deletes) running at once.
        #[arg(long, default_value_t = 8)]
        max_jobs: usize,
        /// Jobs accepted but not finished, at most; more get 429.
        #[arg(long, default_value_t = 1_024)]
        queue: usize,
        /// Finished jobs remembered for GET /renames.
        #[arg(long, default_value_t = 1_000)]
        history: usize,
        /// The largest request body in bytes; larger get 413.
        #[arg(long, default_value_t = 65_536)]
        body_limit: usize,
        /// At shutdown, how long running jobs may take before they are cancelled (they then
        /// release their locks).
        #[arg(long, default_value = "30s", value_parser = parse_duration)]
        grace: Duration,
        /// How long a job waits for its locks before it fails.
        #[arg(long, default_value = "30s", value_parser = parse_duration)]
        wait: Duration,
        /// The strategy of requests that name none.
        #[arg(long, default_value = "tree", value_parser = parse_strategy)]
        strategy: Strategy,
        /// How often to finish the jobs that died (as `fsrename recover`, which also runs at
        /// start); `0s` runs it at start only.
        #[arg(long, default_value = "30s", value_parser = parse_duration)]
        recover_every: Duration,
        /// This instance's name, shown in its jobs and metrics. Several instances may serve one
        /// store (behind a load balancer): each answers for every job, and takes over the
        /// jobs of an instance that stopped beating (for two leases). Names must differ.
        /// Default: `fsrename-` and 8 random hex digits.
        #[arg(long, env = "FSRENAME_INSTANCE")]
        instance: Option<String>,
        /// Holds the intention locks on the jobs' ancestors once for the whole instance and
        /// lends them to its jobs, instead of each job taking its own: a directory many jobs
        /// run under has its lock document written once per instance, not twice per job.
        /// Kept 250 ms after the last job that needed it, for the next one; given back at
        /// once to a request that conflicts, and when the service stops. Only where every
        /// `fsrename recover` (and every service) on this tree is of this version or later: an
        /// older recovery would clear an expired hold without fencing the jobs that borrowed
        /// it.
        #[arg(long)]
        share_intentions: bool,
    },
    /// Shows, with the book's /clinton scenario run four ways, why renames need tree locks.
    ///
    /// Runs on an in-memory store of its own, with a timeline of each run. Exits 0 only if
    /// every run shows what it should.
    ///
    /// With --serve it also serves the live page and tells the story there: open the address
    /// it prints, and watch job A wait for B's shares, the locks come root first and go
    /// deepest first, then the runs without locks lose a rename or leave a half-moved tree.
    Demo {
        /// Files to create under /clinton. Default: 20 000, or 2 000 with --serve.
        #[arg(long)]
        files: Option<usize>,
        /// Serves the live page on --listen and runs the scenarios once a page is open; the
        /// page stays up afterwards until Ctrl-C.
        #[arg(long)]
        serve: bool,
        /// Where the page is served (with --serve). A non-loopback address requires
        /// FSRENAME_TOKEN, as for `serve`.
        /// HOST:PORT or HOST alone (port 8080).
        #[arg(long, default_value = "127.0.0.1:8080", requires = "serve", value_parser = parse_listen_demo)]
        listen: std::net::SocketAddr,
        /// How slowly the jobs go: 1 is a pace to watch (each job holds its new locks 2.5 s,
        /// and writes a page of 250 documents every 0.4 s), 2 twice as slow, 0 full speed.
        /// Default: 1 with --serve, 0 without.
        #[arg(long, value_name = "FACTOR", value_parser = parse_slow)]
        slow: Option<f64>,
    },
}

/// The options of the verbs that run a job on a subtree: `mv`, `cp` and `rm`.
#[derive(Debug, Clone, Args)]
pub struct JobArgs {
    /// The locking scheme: `tree` (the paths and their ancestors), `global` (one job at a
    /// time) or `document` (one lock per affected document).
    #[arg(long, default_value = "tree", value_parser = parse_strategy)]
    pub strategy: Strategy,
    /// How long to wait for the locks; `0s` makes one attempt. Exit code 3 if they are not
    /// granted in time.
    ///
    /// Twice the default lease: the locks of a job that died on another machine run out
    /// within it, and this job then finishes what that one left and goes on (one that died
    /// on this machine is finished at once).
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub wait: Duration,
    /// Documents read and written per round trip.
    #[arg(long, default_value_t = 1_000, value_parser = parse_page_size)]
    pub page_size: usize,
    /// How many bulk requests of a rename may be under way at once (the next page is read
    /// meanwhile). More helps a store that serves requests in parallel, as an Elasticsearch
    /// cluster does; 1 writes one page at a time.
    #[arg(long, default_value_t = fs_rename::DEFAULT_IN_FLIGHT, value_parser = parse_in_flight)]
    pub in_flight: usize,
    /// How to show progress on stderr: `auto` (a bar on a terminal, otherwise `lines`),
    /// `lines` (when waiting for a lock, and every 2 s of writing), `json` (every event as a
    /// JSON line, at once) or `none`.
    #[arg(long, value_enum, default_value = "auto")]
    pub progress: ProgressMode,
    /// Prints the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// The options of the verbs that can read under a shared lock: `ls` and `fsck`.
#[derive(Debug, Clone, Copy, Args)]
pub struct ConsistentArgs {
    /// Reads under a shared lock on PATH, released at the end (a lock not granted within
    /// --wait exits 3). Not for `/`: writers lock only below the root, so no lock there
    /// would keep them out.
    #[arg(long)]
    pub consistent: bool,
    /// How long --consistent waits for its lock; `0s` makes one attempt. Twice the default
    /// lease, as for `mv`.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub wait: Duration,
}

/// How `fsrename mv`, `cp` and `rm` show their progress (`--progress`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ProgressMode {
    /// A bar when stderr is a terminal, otherwise `lines`.
    Auto,
    /// A line on stderr when the job starts waiting for a lock and every 2 s of writing;
    /// a quick rename prints nothing.
    Lines,
    /// Every event as one JSON object per line on stderr, at once (`{"event":"locked",...}`):
    /// waiting, locked, checked, journaled, progress, retrying, closed, released.
    Json,
    /// Nothing.
    None,
}

/// A limit on how many results are shown: 1 to 10 000.
fn parse_limit(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (1..=10_000).contains(&n) => Ok(n),
        _ => Err(format!("`{s}` is not a number from 1 to 10000")),
    }
}

/// A number of bytes, with an optional binary unit: `4096`, `64K`, `64KiB`, `1MiB`, `2G`.
fn parse_bytes(s: &str) -> Result<u64, String> {
    let bad = || format!("`{s}` is not a size: a number of bytes, or with K, KiB, M, MiB, G, GiB");
    let digits = s.trim().trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit = &s.trim()[digits.len()..];
    let n: u64 = digits.parse().map_err(|_| bad())?;
    let scale: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        _ => return Err(bad()),
    };
    n.checked_mul(scale).ok_or_else(bad)
}

/// Parses `30s`, `500ms`, `2m`, `1h 30m`.
fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s)
        .map_err(|e| format!("`{s}` is not a duration like 30s, 500ms or 2m: {e}"))
}

/// The shortest lease taken: a holder renews every third of its lease, with a request to the
/// store each time, so a shorter one is lost before a renewal can land (and `0s` at once).
const SHORTEST_LEASE: Duration = Duration::from_millis(100);

/// A lease: a duration of at least [`SHORTEST_LEASE`].
fn parse_lease(s: &str) -> Result<Duration, String> {
    let lease = parse_duration(s)?;
    if lease < SHORTEST_LEASE {
        return Err(format!(
            "a lease of `{s}` would be lost before its holder could renew it (every third of the lease): give at least 100ms"
        ));
    }
    Ok(lease)
}

/// A number of shards of the tree index: 1 to [`fs_model::MAX_SHARDS`].
fn parse_shards(s: &str) -> Result<u32, String> {
    let shards = s.parse::<u32>().map_err(|_| {
        format!(
            "`{s}` is not a number of shards (a whole number from 1 to {})",
            fs_model::MAX_SHARDS
        )
    })?;
    IndexLayout::default()
        .with_shards(shards)
        .map_err(|e| e.to_string())?;
    Ok(shards)
}

/// A number of replicas: 0 to [`fs_model::MAX_REPLICAS`].
fn parse_replicas(s: &str) -> Result<u32, String> {
    let replicas = s.parse::<u32>().map_err(|_| {
        format!(
            "`{s}` is not a number of replicas (a whole number from 0 to {})",
            fs_model::MAX_REPLICAS
        )
    })?;
    IndexLayout::default()
        .with_replicas(replicas)
        .map_err(|e| e.to_string())?;
    Ok(replicas)
}

/// A page size: at least 1.
fn parse_page_size(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!(
            "`{s}` is not a page size (a whole number of at least 1)"
        )),
    }
}

fn parse_in_flight(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (1..=64).contains(&n) => Ok(n),
        _ => Err(format!(
            "`{s}` is not a number of bulk requests in flight (a whole number from 1 to 64)"
        )),
    }
}

fn parse_slow(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(f) if (0.0..=100.0).contains(&f) => Ok(f),
        _ => Err(format!(
            "`{s}` is not a slow-down factor (a number from 0 to 100: 1 is a pace to watch)"
        )),
    }
}

/// A locking scheme a job may take: `none` exists only for the demonstration, so it is
/// neither accepted nor offered.
fn parse_listen_serve(s: &str) -> Result<std::net::SocketAddr, String> {
    parse_listen(s, 7070)
}

fn parse_listen_demo(s: &str) -> Result<std::net::SocketAddr, String> {
    parse_listen(s, 8080)
}

/// An address to listen on: `HOST:PORT`, `[IPV6]:PORT`, or a host alone on `default_port`;
/// a host name (`localhost`) is resolved, its first IPv4 address preferred, as a user who
/// types `localhost` and then opens `http://localhost:PORT` expects either to work.
fn parse_listen(s: &str, default_port: u16) -> Result<std::net::SocketAddr, String> {
    use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
    if let Ok(addr) = s.parse::<SocketAddr>() {
        return Ok(addr);
    }
    if let Ok(ip) = s.trim_matches(['[', ']']).parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, default_port));
    }
    let with_port = if s.rsplit_once(':').is_some_and(|(host, port)| {
        !host.is_empty() && !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit())
    }) {
        s.to_owned()
    } else if s.contains(':') {
        return Err(format!(
            "`{s}` is not an address to listen on: expected HOST:PORT or HOST (port {default_port}), e.g. 127.0.0.1:{default_port} or localhost"
        ));
    } else {
        format!("{s}:{default_port}")
    };
    let found: Vec<SocketAddr> = with_port
        .to_socket_addrs()
        .map_err(|e| format!("`{s}` is not an address to listen on: {e}"))?
        .collect();
    found
        .iter()
        .find(|a| a.is_ipv4())
        .or(found.first())
        .copied()
        .ok_or_else(|| format!("`{s}` names no address to listen on"))
}

fn parse_strategy(s: &str) -> Result<Strategy, String> {
    match s.parse::<Strategy>() {
        Ok(Strategy::None) => Err(
            "`none` exists only for the demonstration (`fsrename demo`): expected tree, global or document"
                .to_owned(),
        ),
        Ok(strategy) => Ok(strategy),
        Err(_) => Err(format!(
            "unknown strategy `{s}`: expected tree, global or document"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::{parse_listen, parse_replicas, parse_shards};

    #[test]
    fn shards_and_replicas_out_of_range_are_named() {
        assert_eq!(parse_shards("3"), Ok(3));
        assert_eq!(parse_shards("1024"), Ok(1024));
        for bad in ["0", "1025"] {
            let e = parse_shards(bad).expect_err(bad);
            assert!(
                e.contains(&format!("`{bad}`")) && e.contains("1 to 1024"),
                "{e}"
            );
        }
        let e = parse_shards("-1").expect_err("negative");
        assert!(e.contains("`-1`"), "{e}");
        assert_eq!(parse_replicas("0"), Ok(0));
        let e = parse_replicas("65").expect_err("65");
        assert!(e.contains("`65`") && e.contains("0 to 64"), "{e}");
    }

    #[test]
    fn listen_takes_a_host_alone_a_name_or_host_and_port() {
        let at = |s: &str| parse_listen(s, 7070).map(|a| a.to_string());
        assert_eq!(at("127.0.0.1:9000"), Ok("127.0.0.1:9000".to_owned()));
        assert_eq!(at("127.0.0.1"), Ok("127.0.0.1:7070".to_owned()));
        assert_eq!(at("[::1]:9000"), Ok("[::1]:9000".to_owned()));
        assert_eq!(at("::1"), Ok("[::1]:7070".to_owned()));
        // A name is resolved (here from the hosts file), IPv4 first.
        assert_eq!(at("localhost"), Ok("127.0.0.1:7070".to_owned()));
        assert_eq!(at("localhost:9000"), Ok("127.0.0.1:9000".to_owned()));
        let bad = at("localhost:http:x").expect_err("two colons and no address");
        assert!(
            bad.contains("expected HOST:PORT or HOST (port 7070)"),
            "{bad}"
        );
    }
}
