//! How the service runs.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use fs_locks::LockProtocol;
use fs_rename::Strategy;

use super::audit::AuditTo;
use super::tokens::Source;

/// The service's settings.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Where to listen. Default: `127.0.0.1:7070`.
    pub listen: SocketAddr,
    /// The tree index.
    pub index: String,
    /// This instance's name, in its jobs, its heartbeat and its metrics: unique among the
    /// instances serving one store. Default: `fsrename-` and 8 random hex digits.
    pub instance: String,
    /// Required as `Authorization: Bearer <token>` when set, a token that may do everything;
    /// this or `tokens` must be set to listen on a non-loopback address.
    pub token: Option<String>,
    /// A token file: tokens by name, each with the SHA-256 of its secret and its grants
    /// (`tokens.rs`), read at start and again on SIGHUP. Not with `token`. Default: none.
    pub tokens: Option<PathBuf>,
    /// Where the audit trail goes: one line for each request that changes something or is
    /// refused (`audit.rs`). Default: nowhere.
    pub audit: AuditTo,
    /// Rename jobs running at once. Default: 8.
    pub max_jobs: usize,
    /// Jobs accepted but not finished, at most; more get 429. Default: 1 024.
    pub queue: usize,
    /// Finished jobs remembered for `GET /renames`. Default: 1 000.
    pub history: usize,
    /// The largest request body, in bytes; larger get 413. Default: 64 KiB.
    pub body_limit: usize,
    /// How long running jobs may take to finish at shutdown before they are cancelled.
    /// Default: 30 s.
    pub grace: Duration,
    /// The strategy of requests that name none. Default: tree.
    pub strategy: Strategy,
    /// The lease of the jobs' locks. Default: 30 s.
    pub lease: Duration,
    /// How long a job waits for its locks. Default: 30 s.
    pub wait: Duration,
    /// How lock documents are written.
    pub protocol: LockProtocol,
    /// Where renames' documents are rewritten. Default: auto.
    pub rewrite: fs_rename::Rewrite,
    /// How often recovery runs (it also runs at start); `None`: at start only. Default: 30 s.
    pub recover_every: Option<Duration>,
    /// The shards and replicas of the indices the service creates (the tree index takes
    /// both; the lock, journal and jobs indices one shard and the replicas). Default: the
    /// server's defaults.
    pub layout: fs_model::IndexLayout,
    /// Whether the jobs' tree locks borrow the intention locks on their ancestors from the
    /// instance, which holds each once (`fs_locks::SharedIntentions`), instead of each job
    /// taking its own. Every recoverer of the tree must know these holds: the service writes
    /// the protocol marker that stops an older one (`fs_rename::Journal::declare_protocol`)
    /// before its first job. Default: on.
    pub share_intentions: bool,
}

impl ServeConfig {
    /// Returns the defaults for `index`.
    pub fn new(index: impl Into<String>) -> ServeConfig {
        ServeConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 7070)),
            index: index.into(),
            instance: format!(
                "fsrename-{}",
                fs_model::entropy::uuid()
                    .chars()
                    .take(8)
                    .collect::<String>()
            ),
            token: None,
            tokens: None,
            audit: AuditTo::Off,
            max_jobs: 8,
            queue: 1_024,
            history: 1_000,
            body_limit: 64 * 1024,
            grace: Duration::from_secs(30),
            strategy: Strategy::Tree,
            lease: Duration::from_secs(30),
            wait: Duration::from_secs(30),
            protocol: LockProtocol::Auto,
            rewrite: fs_rename::Rewrite::Auto,
            recover_every: Some(Duration::from_secs(30)),
            layout: fs_model::IndexLayout::default(),
            share_intentions: true,
        }
    }

    /// Where the tokens come from: the file, `FSRENAME_TOKEN`, or nowhere.
    pub fn token_source(&self) -> Source {
        match (
            &self.tokens,
            self.token.as_deref().filter(|t| !t.is_empty()),
        ) {
            (Some(file), _) => Source::File(file.clone()),
            (None, Some(token)) => Source::Env(token.to_owned()),
            (None, None) => Source::None,
        }
    }

    /// Returns the token the environment gives (`FSRENAME_TOKEN`; empty means none).
    pub fn token_from_env() -> Option<String> {
        std::env::var("FSRENAME_TOKEN")
            .ok()
            .filter(|t| !t.is_empty())
    }

    /// Checks the settings: a non-loopback address needs a token.
    ///
    /// # Errors
    /// Says what is missing.
    pub fn validate(&self) -> anyhow::Result<()> {
        let token = self.token.as_deref().filter(|t| !t.is_empty());
        if let (Some(_), Some(file)) = (token, &self.tokens) {
            anyhow::bail!(
                "FSRENAME_TOKEN and --tokens {} both give tokens: give one (a token that may do everything is an entry of the file with `admin` and every other capability on `/`)",
                file.display()
            );
        }
        if !self.listen.ip().is_loopback() && token.is_none() && self.tokens.is_none() {
            anyhow::bail!(
                "listening on {} (not a loopback address) requires tokens: set FSRENAME_TOKEN, or give --tokens FILE",
                self.listen
            );
        }
        anyhow::ensure!(self.max_jobs > 0, "--max-jobs must be at least 1");
        anyhow::ensure!(self.queue > 0, "--queue must be at least 1");
        anyhow::ensure!(
            !self.instance.trim().is_empty(),
            "--instance must name the instance"
        );
        Ok(())
    }
}
