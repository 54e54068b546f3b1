//! The command-line arguments.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};
use fs_locks::LockProtocol;
use fs_model::FsPath;
use fs_rename::Strategy;

use crate::store_location::StoreLocation;
use crate::verbs::ProgressMode;

/// Keeps a directory tree in a document store (an embedded database file, or Elasticsearch)
/// and renames files and directories in it safely while other jobs do the same.
#[derive(Debug, Parser)]
#[command(name = "fsrename", version, about, long_about = None)]
pub struct Cli {
    /// Where the tree lives: `file:PATH` or a bare path (an embedded database file), `mem`
    /// (in memory, gone when the command ends), or `http(s)://HOST:PORT` (Elasticsearch 7.x/8.x
    /// or OpenSearch; credentials in the URL or in FSRENAME_ES_USER/FSRENAME_ES_PASSWORD or
    /// FSRENAME_ES_API_KEY; a CA file in FSRENAME_ES_CA).
    #[arg(
        long,
        global = true,
        env = "FSRENAME_STORE",
        default_value = "fsrename.db"
    )]
    pub store: StoreLocation,

    /// The tree index; its locks live in `<INDEX>-lock`.
    #[arg(long, global = true, default_value = fs_model::DEFAULT_TREE_INDEX)]
    pub index: String,

    /// How long a lock lives unless its holder renews it (it renews every third of this while
    /// it works). A job that dies leaves locks that expire after this long.
    #[arg(long, global = true, default_value = "30s", value_parser = parse_duration)]
    pub lease: Duration,

    /// How lock documents are written: `auto` (the book's scripts where the server runs them,
    /// compare-and-set otherwise), `cas` or `scripted`.
    #[arg(long, global = true, default_value = "auto")]
    pub lock_protocol: LockProtocol,

    /// On Elasticsearch: `number_of_replicas` of the indices fsrename creates (0 suits a
    /// single node). Default: the server's default.
    #[arg(long, global = true, env = "FSRENAME_ES_REPLICAS")]
    pub replicas: Option<u32>,

    /// What to do.
    #[command(subcommand)]
    pub verb: Verb,
}

/// The verbs.
#[derive(Debug, Subcommand)]
pub enum Verb {
    /// Indexes a local directory tree: one document per file and directory. Symbolic links
    /// are not followed (they are counted and skipped), nor are entries that cannot be read or
    /// whose names are not UTF-8 (each is reported). Indexing again updates what changed.
    Index {
        /// The local directory.
        dir: PathBuf,
        /// Where in the tree to put it. Default: `/` followed by the directory's name.
        #[arg(long = "as", value_name = "PATH", value_parser = parse_path)]
        at: Option<FsPath>,
        /// Documents per bulk request.
        #[arg(long, default_value_t = 1_000)]
        batch_size: usize,
        /// Deletes documents under the target that are no longer on disk. Without it they are
        /// reported and kept (they may be the result of renames made in the tree).
        #[arg(long)]
        prune: bool,
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
        #[arg(value_parser = parse_path)]
        path: FsPath,
    },
    /// Creates an empty file, or updates the modification time of an existing one.
    Touch {
        /// The file.
        #[arg(value_parser = parse_path)]
        path: FsPath,
    },
    /// Renames a file or directory (and everything under it) under locks.
    Mv {
        /// What to rename.
        #[arg(value_parser = parse_path)]
        from: FsPath,
        /// Its new path; its parent must be an existing directory.
        #[arg(value_parser = parse_path)]
        to: FsPath,
        /// The locking scheme: `tree` (source, destination and their ancestors), `global`
        /// (one rename at a time) or `document` (one lock per affected document).
        #[arg(long, default_value = "tree", value_parser = parse_strategy)]
        strategy: Strategy,
        /// How long to wait for the locks; `0s` makes one attempt. Exit code 3 if they are not
        /// granted in time.
        #[arg(long, default_value = "30s", value_parser = parse_duration)]
        wait: Duration,
        /// Documents read and rewritten per round trip.
        #[arg(long, default_value_t = 1_000, value_parser = parse_page_size)]
        page_size: usize,
        /// How to show progress on stderr: `auto` (a bar on a terminal, otherwise `lines`),
        /// `lines` (when waiting for a lock, and every 2 s of rewriting), `json` (every event
        /// as a JSON line, at once) or `none`.
        #[arg(long, value_enum, default_value = "auto")]
        progress: ProgressMode,
        /// Prints the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Finishes the renames of jobs that died half-way and clears the locks they left.
    ///
    /// A rename journals itself before its first rewrite; if it dies, its locks stay until
    /// their lease (--lease of the job that took them) runs out, and nobody can touch the
    /// half-renamed tree. Then this takes the locks over, moves what is still under the source,
    /// and releases them. Expired locks that no journaled rename needs are deleted, and
    /// expired shares removed (valid locks and shares are never touched). It acts on what has
    /// expired when it runs: run it again later for the rest. `fsrename serve` does this at
    /// start and every --recover-every. Exits 1 if a journaled rename could not be finished.
    Recover {
        /// Only reports what would be done.
        #[arg(long)]
        dry_run: bool,
        /// How long to wait for a journaled rename's locks (held by a live job, or contended).
        #[arg(long, default_value = "10s", value_parser = parse_duration)]
        wait: Duration,
        /// Prints the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Lists a directory.
    Ls {
        /// The directory (or file) to list.
        #[arg(default_value = "/", value_parser = parse_path)]
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
    },
    /// Lists the lock documents: what is locked, how, by whom, until when.
    Locks {
        /// Prints the locks as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Checks the tree: every document's parent exists and is a directory, parent/name/depth
    /// agree with the path, no path is stored twice. Reports lock documents left behind.
    /// Exits 1 if the tree is broken.
    Fsck {
        /// The subtree to check.
        #[arg(default_value = "/", value_parser = parse_path)]
        path: FsPath,
        /// Prints the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Serves rename jobs over HTTP: POST /renames {"from", "to", "strategy"?} → 202 with a job
    /// id; GET /renames/{id}; GET /renames; GET /locks; GET /tree?path=&depth=; GET /healthz;
    /// GET /metrics. Stops on SIGINT/SIGTERM after letting running jobs finish.
    Serve {
        /// Where to listen. A non-loopback address requires FSRENAME_TOKEN, which clients then
        /// send as `Authorization: Bearer <token>` (if set, it is required on loopback too).
        #[arg(long, default_value = "127.0.0.1:7070")]
        listen: std::net::SocketAddr,
        /// Rename jobs running at once.
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
        /// How often to finish the renames of jobs that died (as `fsrename recover`, which
        /// also runs at start); `0s` runs it at start only.
        #[arg(long, default_value = "30s", value_parser = parse_duration)]
        recover_every: Duration,
    },
    /// Runs the book's /clinton scenario four ways on an in-memory store and shows, with a
    /// timeline, why renames need tree locks. Exits 0 only if every run shows what it should.
    Demo {
        /// Files to create under /clinton.
        #[arg(long, default_value_t = 20_000)]
        files: usize,
    },
}

/// Parses a path argument, so a bad one is a usage error (exit 2) naming the rule it breaks.
fn parse_path(s: &str) -> Result<FsPath, String> {
    FsPath::parse(s).map_err(|e| e.to_string())
}

/// Parses `30s`, `500ms`, `2m`, `1h 30m`.
fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s)
        .map_err(|e| format!("`{s}` is not a duration like 30s, 500ms or 2m: {e}"))
}

fn parse_page_size(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!(
            "`{s}` is not a page size (a whole number of at least 1)"
        )),
    }
}

fn parse_strategy(s: &str) -> Result<Strategy, String> {
    match s.parse::<Strategy>()? {
        Strategy::None => Err("`none` exists only for the demonstration".to_owned()),
        strategy => Ok(strategy),
    }
}
