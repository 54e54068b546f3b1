//! Where the store lives, as given on the command line.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;

use fs_store::{ElasticConfig, ElasticStore, SharedStore, SqliteStore};

/// How long a command tries to reach a server that has not answered yet: one that refuses
/// every connection from the first is not there (a wrong port, a server not started), said
/// within a second or two, where a busy one gets the whole retry deadline.
const FIRST_CONTACT: std::time::Duration = std::time::Duration::from_millis(1_500);

/// A store location: `file:PATH` or a bare path, `mem`, or an `http(s)://` URL (or several,
/// separated by commas: the nodes of a cluster).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreLocation {
    /// An embedded database file.
    File(PathBuf),
    /// An in-memory embedded database.
    Memory,
    /// An Elasticsearch or OpenSearch server, or the nodes of a cluster (URLs separated by
    /// commas).
    Http(String),
}

impl FromStr for StoreLocation {
    type Err = String;

    fn from_str(s: &str) -> Result<StoreLocation, String> {
        if s.is_empty() {
            return Err("the store location is empty: give a file path, `mem` or a URL".to_owned());
        }
        if s == "mem" {
            return Ok(StoreLocation::Memory);
        }
        if let Some((scheme, _)) = s.split_once("://") {
            let known = ["http", "https"];
            if known.iter().any(|k| k.eq_ignore_ascii_case(scheme)) {
                return Ok(StoreLocation::Http(s.to_owned()));
            }
            if is_scheme(scheme) {
                return Err(format!(
                    "unknown scheme `{scheme}://` in `{}`: give `http://HOST:PORT` or `https://HOST:PORT` for a server, `file:PATH` for a database file",
                    fs_store::redact_url(s)
                ));
            }
        }
        match s.strip_prefix("file:") {
            Some("") => Err("`file:` needs a path after it".to_owned()),
            Some(path) => Ok(StoreLocation::File(PathBuf::from(path))),
            None if looks_like_an_address(s) => Err(format!(
                "`{s}` looks like a server's address, not a file: write `http://{s}` (or `https://{s}`) for a server, `file:{s}` for a database file of that name"
            )),
            None => Ok(StoreLocation::File(PathBuf::from(s))),
        }
    }
}

/// Why a database file could not be opened, if it is a permission: SQLite's own words
/// ("attempt to write a readonly database") name neither the file nor the directory, and it
/// needs to write both (its write-ahead log lives beside the database), even to read.
fn permission_hint(path: &std::path::Path) -> String {
    let denied = |r: std::io::Result<()>| matches!(r, Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied);
    let file_denied =
        path.exists() && denied(std::fs::OpenOptions::new().write(true).open(path).map(drop));
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    // `.` says nothing in a message: the directory by its full name.
    let dir = std::path::absolute(&dir).unwrap_or(dir);
    // A probe, removed at once: the only portable way to ask whether this user may create
    // files there (permission bits alone say nothing of ACLs, read-only mounts or root).
    let probe = dir.join(format!(".fsrename-probe-{}", std::process::id()));
    let dir_denied = denied(
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&probe)
            .map(drop),
    );
    if !dir_denied {
        let _ = std::fs::remove_file(&probe);
    }
    match (file_denied, dir_denied) {
        (false, false) => String::new(),
        (true, false) => format!(
            " (`{}` is not writable by this user: fsrename writes the database even to read it, as SQLite records readers there)",
            path.display()
        ),
        (file, true) => format!(
            " ({} not writable by this user, and SQLite keeps its write-ahead log beside the database, even to read: run as the owner, or copy the database somewhere writable)",
            if file {
                format!("`{}` and its directory `{}` are", path.display(), dir.display())
            } else {
                format!("the directory `{}` is", dir.display())
            }
        ),
    }
}

/// Whether `s` is a URL scheme (a letter, then letters, digits, `+`, `-` or `.`).
fn is_scheme(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

/// Whether a bare store location reads as `HOST:PORT` or an IP address rather than a file
/// name: such a location given without `http://` is a forgotten scheme far more often than a
/// database file named so (which `file:` still allows).
fn looks_like_an_address(s: &str) -> bool {
    if s.parse::<std::net::IpAddr>().is_ok() || s.parse::<std::net::SocketAddr>().is_ok() {
        return true;
    }
    match s.rsplit_once(':') {
        Some((host, port)) => {
            !host.is_empty()
                && !port.is_empty()
                && port.chars().all(|c| c.is_ascii_digit())
                && host
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-'))
        }
        None => false,
    }
}

impl fmt::Display for StoreLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreLocation::File(path) => write!(f, "file:{}", path.display()),
            StoreLocation::Memory => f.write_str("mem"),
            StoreLocation::Http(url) => f.write_str(&fs_store::redact_url(url)),
        }
    }
}

/// How to reach a secured Elasticsearch: the CA to trust and the credentials, each from a flag
/// or its environment variable. Secrets come from files only, never from the command line
/// itself, where `ps` shows them to every user of the machine.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct Access {
    /// On https://: trust the CA certificate in this PEM file (besides the usual roots).
    #[arg(
        long,
        global = true,
        help_heading = "Store options",
        env = "FSRENAME_ES_CA",
        value_name = "FILE"
    )]
    pub ca_cert: Option<PathBuf>,

    /// On https://: trust the CA whose certificate has this SHA-256 (hex, colons allowed),
    /// found among those the server presents.
    ///
    /// Elasticsearch 8 prints it at first start ("HTTP CA certificate SHA-256 fingerprint").
    #[arg(
        long,
        global = true,
        help_heading = "Store options",
        env = "FSRENAME_ES_CA_FINGERPRINT",
        value_name = "SHA256",
        conflicts_with = "ca_cert"
    )]
    pub ca_fingerprint: Option<String>,

    /// Basic authentication as this user, with --password-file (or FSRENAME_ES_PASSWORD).
    #[arg(
        long,
        global = true,
        help_heading = "Store options",
        env = "FSRENAME_ES_USER",
        value_name = "NAME"
    )]
    pub user: Option<String>,

    /// The password of --user, on the first line of this file.
    #[arg(
        long,
        global = true,
        help_heading = "Store options",
        env = "FSRENAME_ES_PASSWORD_FILE",
        value_name = "FILE"
    )]
    pub password_file: Option<PathBuf>,

    /// Authenticate with the API key in this file: Elasticsearch's `encoded` value, or
    /// `id:key`.
    #[arg(
        long,
        global = true,
        help_heading = "Store options",
        env = "FSRENAME_ES_API_KEY_FILE",
        value_name = "FILE",
        conflicts_with = "password_file"
    )]
    pub api_key_file: Option<PathBuf>,
}

impl Access {
    /// Applies these settings to `config`: credentials in the URL win, then these, then the
    /// other `FSRENAME_ES_*` variables.
    fn apply(&self, mut config: ElasticConfig) -> anyhow::Result<ElasticConfig> {
        if !config.has_auth() {
            if let Some(path) = &self.api_key_file {
                config = config.api_key_file(path)?;
            } else if let Some(user) = &self.user {
                config = match &self.password_file {
                    Some(path) => config.password_file(user, path)?,
                    None => {
                        let password = std::env::var("FSRENAME_ES_PASSWORD").unwrap_or_default();
                        config.auth(fs_store::Auth::Basic {
                            user: user.clone(),
                            password,
                        })
                    }
                };
            } else if self.password_file.is_some() {
                anyhow::bail!(
                    "--password-file needs --user (or FSRENAME_ES_USER): whose password is it?"
                );
            }
        }
        if let Some(path) = &self.ca_cert {
            config = config.ca_cert(path);
        } else if let Some(fingerprint) = &self.ca_fingerprint {
            config = config.ca_fingerprint(fingerprint)?;
        }
        Ok(config.with_env()?)
    }
}

/// What opening a store takes besides its location: replicas and access.
#[derive(Debug, Clone, Default)]
pub struct StoreOptions {
    /// `number_of_replicas` of the indices fsrename creates on Elasticsearch.
    pub replicas: Option<u32>,
    /// The CA and credentials.
    pub access: Access,
}

impl StoreLocation {
    /// Opens the store. For Elasticsearch, credentials and a CA come from the URL, the flags
    /// of [`Access`], or the environment (`FSRENAME_ES_USER`/`FSRENAME_ES_PASSWORD`,
    /// `FSRENAME_ES_API_KEY`, `FSRENAME_ES_CA`), and `replicas` sets `number_of_replicas` of
    /// the indices it creates.
    ///
    /// # Errors
    /// Names the location when it cannot be opened.
    pub fn open(&self, options: &StoreOptions) -> anyhow::Result<SharedStore> {
        self.open_with(options, Some(FIRST_CONTACT))
    }

    /// Opens the store for `serve`: as [`StoreLocation::open`], but a server that has not
    /// answered yet is given the whole retry deadline of each call (a service started before
    /// its store, as a container set often is), with a line saying that it is retrying.
    ///
    /// # Errors
    /// As [`StoreLocation::open`].
    pub fn open_for_service(&self, options: &StoreOptions) -> anyhow::Result<SharedStore> {
        self.open_with(options, None)
    }

    fn open_with(
        &self,
        options: &StoreOptions,
        first_contact: Option<std::time::Duration>,
    ) -> anyhow::Result<SharedStore> {
        match self {
            StoreLocation::File(path) => {
                let store = SqliteStore::open(path).map_err(|e| {
                    anyhow::anyhow!("cannot open store `{self}`: {e}{}", permission_hint(path))
                })?;
                Ok(Arc::new(store))
            }
            StoreLocation::Memory => Ok(Arc::new(SqliteStore::in_memory()?)),
            StoreLocation::Http(url) => {
                let mut config = options.access.apply(ElasticConfig::new(url)?)?;
                if let Some(deadline) = first_contact {
                    config = config.first_contact(deadline);
                }
                if let Some(replicas) = options.replicas {
                    config = config.replicas(replicas);
                }
                Ok(Arc::new(ElasticStore::connect(config)?))
            }
        }
    }
}

impl StoreLocation {
    /// Opens the store only if it is there: a database file that does not exist is an error
    /// naming it, not a new empty file. For the verbs that read a tree or change one that must
    /// exist; only `index`, `mkdir`, `touch` and `serve` make a new one.
    ///
    /// # Errors
    /// As [`StoreLocation::open`], and when the database file does not exist.
    pub fn open_existing(&self, options: &StoreOptions) -> anyhow::Result<SharedStore> {
        if let StoreLocation::File(path) = self {
            // An error here (a directory that cannot be read) is left to `open` to name.
            if let Ok(false) = path.try_exists() {
                anyhow::bail!(
                    "there is no tree at `{self}`: `{}` does not exist (make one with `fsrename index DIR` or `fsrename mkdir PATH`, or name another store with --store or FSRENAME_STORE)",
                    path.display()
                );
            }
        }
        self.open(options)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_parse() {
        assert_eq!("mem".parse(), Ok(StoreLocation::Memory));
        assert_eq!("file:a.db".parse(), Ok(StoreLocation::File("a.db".into())));
        assert_eq!("b.db".parse(), Ok(StoreLocation::File("b.db".into())));
        assert_eq!(
            "http://127.0.0.1:9200".parse(),
            Ok(StoreLocation::Http("http://127.0.0.1:9200".into()))
        );
        assert!("".parse::<StoreLocation>().is_err());
        let secret: StoreLocation = "https://u:pw@h:9200".parse().expect("url");
        assert_eq!(secret.to_string(), "https://<credentials>@h:9200");
        assert!("file:".parse::<StoreLocation>().is_err());
        assert_eq!(
            "HTTPS://h:9200".parse(),
            Ok(StoreLocation::Http("HTTPS://h:9200".into()))
        );
    }

    #[test]
    fn addresses_and_unknown_schemes_are_refused_with_a_hint() {
        for address in [
            "127.0.0.1:1",
            "localhost:9200",
            "es-1.example.org:9200",
            "::1",
            "[::1]:9200",
            "10.0.0.7",
        ] {
            let e = address.parse::<StoreLocation>().expect_err(address);
            assert!(e.contains(&format!("http://{address}")), "{address}: {e}");
            assert!(e.contains(&format!("file:{address}")), "{address}: {e}");
        }
        let e = "garbage://x".parse::<StoreLocation>().expect_err("scheme");
        assert!(e.contains("unknown scheme `garbage://`"), "{e}");
        let e = "ftp://u:secret@h"
            .parse::<StoreLocation>()
            .expect_err("scheme");
        assert!(!e.contains("secret"), "{e}");
        // What a file may still be called.
        for file in [
            "fs.db",
            "dir/fs.db",
            "./x:1",
            "a:b",
            "c:\\tree.db",
            "file:127.0.0.1:1",
        ] {
            assert!(file.parse::<StoreLocation>().is_ok(), "{file}");
        }
    }
}
