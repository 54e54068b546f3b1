//! The verbs ([`Verb`]) and the options some of them share ([`JobArgs`], [`ConsistentArgs`]).

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use fs_model::NameGlob;
use fs_rename::Strategy;

use super::values::{
    parse_bytes, parse_duration, parse_in_flight, parse_limit, parse_listen_demo,
    parse_listen_serve, parse_page_size, parse_slow, parse_strategy, parse_type_name, PathArg,
};

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
        at: Option<PathArg>,
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
        /// Prints JSON Lines (`fsrename schema` describes them): the report as `index_report`;
        /// with --watch, the first run's report, each batch (`watch_batch`), and the totals
        /// (`watch_report`) last.
        #[arg(long)]
        json: bool,
    },
    /// Creates a directory (its parent must exist, unless -p).
    Mkdir {
        /// Creates missing parents too; an existing directory is not an error.
        #[arg(short = 'p', long)]
        parents: bool,
        /// The directory to create.
        path: PathArg,
        /// Prints the report as a line of JSON (`mkdir_report`).
        #[arg(long)]
        json: bool,
    },
    /// Creates an empty file, or updates the modification time of an existing one.
    Touch {
        /// The file.
        path: PathArg,
        /// Prints the report as a line of JSON (`touch_report`).
        #[arg(long)]
        json: bool,
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
        from: PathArg,
        /// Its new path (not a directory to move into); it must not exist, and its parent
        /// must be an existing directory.
        to: PathArg,
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
        from: PathArg,
        /// Where the copy goes: the copy's own path, not a directory to copy into (unlike Unix
        /// `cp`); it must not exist, and its parent must be an existing directory.
        to: PathArg,
        /// The options of a job (clap shows the fields' own help, not this).
        #[command(flatten)]
        job: JobArgs,
    },
    /// Removes a file or an empty directory, or with -r a whole subtree, under locks.
    ///
    /// With tree locks (the default) it takes an exclusive lock on PATH and intention locks on
    /// its ancestors. It deletes deepest first, so a directory goes only after everything in
    /// it: at no moment is a document left whose parent is gone. On Elasticsearch and
    /// OpenSearch a subtree of more than a page has its files deleted by the server, in one
    /// task (`--rewrite`), and then its directories, deepest first. It journals itself before its
    /// first delete: if it dies half-way, `fsrename recover` finishes the delete once its
    /// locks' lease runs out. The root cannot be removed.
    Rm {
        /// Removes a directory and everything under it (without it, a directory with entries
        /// is refused).
        #[arg(short = 'r', short_alias = 'R', long)]
        recursive: bool,
        /// What to remove.
        path: PathArg,
        /// The options of a job (clap shows the fields' own help, not this).
        #[command(flatten)]
        job: JobArgs,
    },
    /// Finishes the renames, copies and deletes that died half-way, and clears their locks.
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
        /// Prints the report as a line of JSON (`recover_report`; `fsrename schema` describes
        /// it).
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
        path: PathArg,
        /// Lists everything under it, with full paths.
        #[arg(short = 'R', long)]
        recursive: bool,
        /// Shows kind, size and modification time.
        #[arg(short, long)]
        long: bool,
        /// Prints JSON Lines: each entry (`entry`), then `ls_report` (`fsrename schema`
        /// describes them).
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
        path: PathArg,
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
        /// Prints JSON Lines: each entry (`entry`), then `find_report` (`fsrename schema`
        /// describes them).
        #[arg(long)]
        json: bool,
    },
    /// Lists the lock documents: what is locked, how, by whom, until when.
    Locks {
        /// Prints JSON Lines: each lock document (`lock`), then `locks_report` (`fsrename
        /// schema` describes them).
        #[arg(long)]
        json: bool,
    },
    /// Checks the tree, and tells a job half-way from a broken tree.
    ///
    /// Every document's parent exists and is a directory, parent/name/depth agree with the
    /// path, no path is stored twice. A problem under a job journaled and not finished (a
    /// rename, copy or delete at work, or left by a job that died or was stopped) is that
    /// job's, reported under it with the command that finishes it, not a broken tree. Lock
    /// documents are reported as held by jobs at work, held by a process that is gone (it ran
    /// on this machine), or expired.
    ///
    /// Exits 0 for a clean tree; 4 for a tree that is not broken but unfinished (jobs at work
    /// or left for `fsrename recover`, or locks of jobs that died: `recover` finishes and
    /// clears them, after which fsck exits 0); 1 for a broken tree (problems no job explains).
    ///
    /// Without --consistent it takes no lock, so it sees jobs at work half-way. With
    /// --consistent it holds a shared lock on PATH while it reads, so the report describes one
    /// state of the subtree.
    Fsck {
        /// The subtree to check.
        #[arg(default_value = "/")]
        path: PathArg,
        /// Prints the report as a line of JSON (`fsck_report`; `fsrename schema` describes
        /// it).
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
    /// (every route described, OpenAPI 3.1). Stops on SIGINT or SIGTERM after letting running
    /// jobs finish (within --grace): exits 0 on SIGTERM (systemd, docker stop, Kubernetes), 130
    /// on SIGINT (Ctrl-C).
    Serve {
        /// Where to listen. A non-loopback address requires FSRENAME_TOKEN, which clients then
        /// send as `Authorization: Bearer <token>` (if set, it is required on loopback too).
        ///
        /// HOST:PORT, HOST alone (port 7070), or PORT alone (on 127.0.0.1: `--listen 7074`); a
        /// name such as `localhost` is resolved, an IPv4 address preferred.
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
        /// once to a request that conflicts, and when the service stops. The default: the
        /// flag is kept for scripts that pass it. Before its first job the service writes a
        /// protocol marker in the journal index that an fsrename older than 0.2.0 cannot
        /// read, so an older `recover`, `fsck` or service stops, naming the version it needs,
        /// instead of clearing a hold without fencing the jobs that borrowed it.
        #[arg(long, overrides_with = "no_share_intentions")]
        share_intentions: bool,
        /// Each job takes its own intention locks, as before 0.2.0 (no marker is written).
        #[arg(long, overrides_with = "share_intentions")]
        no_share_intentions: bool,
        /// A token file (TOML): tokens by name, each with the SHA-256 of its secret (the file
        /// holds no secret) and its grants, a path and what may be done over it and under it
        /// (`read`, `rename`, `copy`, `delete`, `admin`). Deny unless granted. Read at start
        /// (a file refused stops the service, naming the line) and again on SIGHUP (a file
        /// refused then leaves the tokens in force). Not with FSRENAME_TOKEN, which alone is
        /// one token that may do everything. See docs/service.md, "Tokens and grants".
        #[arg(long, value_name = "FILE")]
        tokens: Option<PathBuf>,
        /// Appends the audit trail to FILE (created if missing, reopened on SIGHUP for
        /// rotation): a JSON line for every request that changes something or is refused,
        /// each synced to disk, a job's before it starts. Default: standard error.
        #[arg(long, value_name = "FILE")]
        audit: Option<PathBuf>,
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
        /// FSRENAME_TOKEN, as for `serve`. HOST:PORT, HOST alone (port 8080), or PORT alone
        /// (on 127.0.0.1).
        #[arg(long, default_value = "127.0.0.1:8080", requires = "serve", value_parser = parse_listen_demo)]
        listen: std::net::SocketAddr,
        /// How slowly the jobs go: 1 is a pace to watch (each job holds its new locks 2.5 s,
        /// and writes a page of 250 documents every 0.4 s), 2 twice as slow, 0 full speed.
        /// Default: 1 with --serve, 0 without.
        #[arg(long, value_name = "FACTOR", value_parser = parse_slow)]
        slow: Option<f64>,
        /// Prints JSON Lines: each run (`demo_run`), then `demo_report` (`fsrename schema`
        /// describes them).
        #[arg(long, conflicts_with = "serve")]
        json: bool,
    },
    /// Prints the JSON Schema of the lines every verb prints with --json.
    ///
    /// Every line is one JSON object with a `type`; a verb's report is its last line (an
    /// `error` line if it could not give one). Without NAME, one schema for any line (each
    /// type under `$defs`); with NAME, the schema of that type alone. The contract is
    /// versioned: docs/json.md says what a new version means.
    Schema {
        /// The type: entry, ls_report, find_report, lock, locks_report, job, job_event,
        /// index_report, watch_batch, watch_caught_up, watch_report, mkdir_report,
        /// touch_report, fsck_report, recover_report, demo_run, demo_report, error.
        #[arg(value_name = "NAME", value_parser = parse_type_name)]
        name: Option<String>,
    },
    /// Prints a shell's completion script for fsrename.
    ///
    /// bash: `fsrename completions bash > ~/.local/share/bash-completion/completions/fsrename`;
    /// zsh: `fsrename completions zsh > ~/.zfunc/_fsrename` (with `~/.zfunc` in `fpath`);
    /// fish: `fsrename completions fish > ~/.config/fish/completions/fsrename.fish`.
    Completions {
        /// The shell: bash, zsh, fish, elvish or powershell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Prints the manual page (roff), or writes one per verb into a directory.
    ///
    /// `fsrename man | man -l -` reads it now; `fsrename man --dir ~/.local/share/man/man1`
    /// installs fsrename.1 and fsrename-VERB.1 for `man fsrename`.
    Man {
        /// Writes fsrename.1 and a page per verb (fsrename-mv.1, ...) into this directory,
        /// which must exist, instead of printing fsrename.1.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

impl Verb {
    /// Returns the verb's name, as typed: `mv`, `ls`...
    pub fn name(&self) -> &'static str {
        match self {
            Verb::Index { .. } => "index",
            Verb::Mkdir { .. } => "mkdir",
            Verb::Touch { .. } => "touch",
            Verb::Mv { .. } => "mv",
            Verb::Cp { .. } => "cp",
            Verb::Rm { .. } => "rm",
            Verb::Recover { .. } => "recover",
            Verb::Ls { .. } => "ls",
            Verb::Find { .. } => "find",
            Verb::Locks { .. } => "locks",
            Verb::Fsck { .. } => "fsck",
            Verb::Serve { .. } => "serve",
            Verb::Demo { .. } => "demo",
            Verb::Schema { .. } => "schema",
            Verb::Completions { .. } => "completions",
            Verb::Man { .. } => "man",
        }
    }

    /// Returns true if the verb was asked for JSON (`--json`).
    pub fn json(&self) -> bool {
        match self {
            Verb::Index { json, .. }
            | Verb::Mkdir { json, .. }
            | Verb::Touch { json, .. }
            | Verb::Recover { json, .. }
            | Verb::Ls { json, .. }
            | Verb::Find { json, .. }
            | Verb::Locks { json }
            | Verb::Fsck { json, .. }
            | Verb::Demo { json, .. } => *json,
            Verb::Mv { job, .. } | Verb::Cp { job, .. } | Verb::Rm { job, .. } => job.json,
            Verb::Serve { .. }
            | Verb::Schema { .. }
            | Verb::Completions { .. }
            | Verb::Man { .. } => false,
        }
    }

    /// Returns true for the verbs that run until they are told to stop: `serve`, `demo
    /// --serve` and `index --watch`. Stopped by SIGTERM, they exit 0.
    pub fn is_service(&self) -> bool {
        matches!(
            self,
            Verb::Serve { .. } | Verb::Demo { serve: true, .. } | Verb::Index { watch: true, .. }
        )
    }
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
    /// How many bulk requests of a rename, or pages of a copy through a write gate, may be
    /// under way at once (the next page is read meanwhile). More helps a store that serves
    /// requests in parallel, as an Elasticsearch node with more than one core does; 1 writes
    /// one page at a time.
    #[arg(long, default_value_t = fs_rename::DEFAULT_IN_FLIGHT, value_parser = parse_in_flight)]
    pub in_flight: usize,
    /// How to show progress on stderr: `auto` (a bar on a terminal, otherwise `lines`),
    /// `lines` (when waiting for a lock, and every 2 s of writing), `json` (every event as a
    /// line of JSON, `job_event`, at once) or `none`.
    #[arg(long, value_enum, default_value = "auto")]
    pub progress: ProgressMode,
    /// Prints the job as a line of JSON (`job`, as the service's `GET /jobs/{id}` shows
    /// it), also when it fails; `fsrename schema` describes it.
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
    /// Every event as one JSON object per line on stderr, at once
    /// (`{"type":"job_event","event":"locked",...}`): waiting, locked, checked, journaled,
    /// progress, retrying, closed, released.
    Json,
    /// Nothing.
    None,
}
