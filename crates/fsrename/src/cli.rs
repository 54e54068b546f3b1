//! The command-line arguments.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use fs_model::FsPath;

use crate::store_location::StoreLocation;

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

    /// On Elasticsearch: `number_of_replicas` of the indices fsrename creates (0 suits a
    /// single node). Default: the server's default.
    #[arg(long, global = true, env = "FSRENAME_ES_REPLICAS")]
    pub replicas: Option<u32>,

    /// The tree index; its locks live in `<INDEX>-lock`.
    #[arg(long, global = true, default_value = fs_model::DEFAULT_TREE_INDEX)]
    pub index: String,

    /// What to do.
    #[command(subcommand)]
    pub verb: Verb,
}

/// The verbs.
#[derive(Debug, Subcommand)]
pub enum Verb {
    /// Runs the book's /clinton scenario four ways on an in-memory store and shows, with a
    /// timeline, why renames need tree locks. Exits 0 only if every run shows what it should.
    Demo {
        /// Files to create under /clinton.
        #[arg(long, default_value_t = 20_000)]
        files: usize,
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
}

impl Cli {
    /// Returns the database file, if the store is one.
    pub fn database_file(&self) -> Option<&PathBuf> {
        match &self.store {
            StoreLocation::File(path) => Some(path),
            _ => None,
        }
    }
}

/// Parses a path argument, so a bad one is a usage error (exit 2) naming the rule it breaks.
fn parse_path(s: &str) -> Result<FsPath, String> {
    FsPath::parse(s).map_err(|e| e.to_string())
}
