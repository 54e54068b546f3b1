//! The command-line arguments: [`Cli`] and its verbs ([`Verb`], `verb.rs`), and how the
//! values given are read and checked (`values.rs`: paths, durations, sizes, addresses).

mod values;
mod verb;

use std::sync::LazyLock;
use std::time::Duration;

use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches, Parser};
use fs_locks::LockProtocol;
use fs_model::IndexLayout;

use crate::store_location::StoreLocation;
pub use values::PathArg;
use values::{parse_lease, parse_replicas, parse_shards};
pub use verb::{ConsistentArgs, JobArgs, ProgressMode, Verb};

/// Keeps a directory tree in a document store (an embedded database file, or Elasticsearch)
/// and renames files and directories in it safely while other jobs do the same.
#[derive(Debug, Parser)]
#[command(
    name = "fsrename",
    version = VERSION.as_str(),
    about,
    long_about = None,
    after_long_help = AFTER_HELP
)]
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

    /// Where `mv` rewrites its documents and `rm -r` deletes them: `auto`, `server` or
    /// `client`.
    ///
    /// `auto` has the server do it, in one task (`_update_by_query`; for `rm -r`,
    /// `_delete_by_query` of the files, then the directories deepest first), where it runs
    /// painless and the job touches more than a page of documents, and this process otherwise.
    /// The locks, check and journal are the same.
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

/// What `fsrename --help` (and the manual page) says after the options.
const AFTER_HELP: &str = "\
Exit status:
  0    done (for fsck: a clean tree; a service stopped by SIGTERM)
  1    failed (for fsck: a broken tree)
  2    bad usage, or a request for what cannot be had
  3    a lock was not granted within --wait
  4    fsck: not broken, but jobs are unfinished (`fsrename recover` finishes them)
  130  stopped by SIGINT (Ctrl-C)
  143  stopped by SIGTERM before it was done

With --json, every verb prints JSON Lines: one object a line, each with a `type`; its report
is the last line (an `error` line if it has none). `fsrename schema` prints their JSON Schema.

Completions: `fsrename completions bash|zsh|fish`; the manual: `fsrename man`.";

/// The version `--version` prints: the package's, and the commit it was built from (`git
/// describe`; `-modified` if the checkout had changes), so that a report names the exact code.
static VERSION: LazyLock<String> = LazyLock::new(|| {
    let commit = git_version::git_version!(
        args = [
            "--always",
            "--abbrev=12",
            "--dirty=-modified",
            "--exclude=*"
        ],
        fallback = "unknown"
    );
    format!("{} (commit {commit})", env!("CARGO_PKG_VERSION"))
});

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
    ///
    /// With `--json` among the arguments, a usage error also ends standard output with the
    /// contract's error line, as every other failure of a verb asked for JSON does.
    pub fn parse_args() -> Cli {
        let matches = Cli::command()
            .try_get_matches()
            .unwrap_or_else(|e| exit_on(e));
        let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| exit_on(e));
        if matches!(cli.verb, Verb::Demo { .. }) {
            let given: Vec<&str> = STORE_OPTIONS
                .iter()
                .filter(|(id, _)| matches.value_source(id) == Some(ValueSource::CommandLine))
                .map(|(_, flag)| *flag)
                .collect();
            if !given.is_empty() {
                exit_on(Cli::command().error(
                    clap::error::ErrorKind::ArgumentConflict,
                    format!(
                        "`demo` runs on an in-memory store of its own, so {} cannot be given to it",
                        given.join(", ")
                    ),
                ));
            }
        }
        cli
    }
}

/// Exits as clap does on `e` (its message, exit code 2; 0 for `--help` and `--version`),
/// and first, for a usage error of a command asked for JSON, prints the contract's error line
/// on standard output.
fn exit_on(e: clap::Error) -> ! {
    let json = std::env::args_os().any(|a| a == "--json");
    if json && e.use_stderr() {
        let verb = std::env::args_os()
            .skip(1)
            .filter_map(|a| a.into_string().ok())
            .find(|a| Cli::command().find_subcommand(a).is_some())
            .unwrap_or_default();
        // clap's first line says it; the rest is usage and a pointer to --help.
        let text = e.to_string();
        let message = text
            .lines()
            .next()
            .unwrap_or("bad usage")
            .trim_start_matches("error: ")
            .to_owned();
        let line = crate::contract::ErrorLine {
            verb,
            error: message,
            exit_code: crate::EXIT_USAGE,
            journal: None,
        };
        if let Ok(text) = crate::contract::Contract::to_line(&line) {
            use std::io::Write;
            let _ = writeln!(std::io::stdout(), "{text}");
        }
    }
    e.exit()
}
