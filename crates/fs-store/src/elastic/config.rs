//! [`ElasticConfig`]: where the server is and how to talk to it.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;

use crate::error::{Result, StoreError};

/// How to authenticate.
#[derive(Clone, PartialEq, Eq)]
pub enum Auth {
    /// HTTP basic authentication.
    Basic {
        /// The user name.
        user: String,
        /// The password.
        password: String,
    },
    /// An API key, base64 of `id:secret` as Elasticsearch hands it out.
    ApiKey(String),
}

impl Auth {
    /// An API key as given: the `encoded` form (base64 of `id:key`) as it is, or `id:key`,
    /// which is encoded here.
    pub fn api_key(key: &str) -> Auth {
        let key = key.trim();
        if key.contains(':') {
            Auth::ApiKey(STANDARD.encode(key))
        } else {
            Auth::ApiKey(key.to_owned())
        }
    }

    /// Says which credentials these are, without their secret: for a refusal's message.
    pub(crate) fn describe(&self) -> String {
        match self {
            Auth::Basic { user, .. } => format!("user `{user}` with a password"),
            Auth::ApiKey(encoded) => match api_key_id(encoded) {
                Some(id) => format!("the API key with id `{id}`"),
                None => "an API key".to_owned(),
            },
        }
    }
}

/// The id of an encoded API key (base64 of `id:key`), if it decodes.
fn api_key_id(encoded: &str) -> Option<String> {
    let decoded = STANDARD.decode(encoded.trim()).ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (id, _) = text.split_once(':')?;
    Some(id.to_owned())
}

impl fmt::Debug for Auth {
    // Secrets never reach a log line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Auth::Basic { user, .. } => write!(f, "Basic({user}, <redacted>)"),
            Auth::ApiKey(_) => f.write_str("ApiKey(<redacted>)"),
        }
    }
}

/// How search results are paged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Paging {
    /// Chosen from the server's version: point in time where it exists, scroll otherwise.
    #[default]
    Auto,
    /// Point in time, tie-broken by `_shard_doc` (Elasticsearch 7.12+, OpenSearch 3.3+).
    PitShardDoc,
    /// Point in time, tie-broken by `_id` (OpenSearch 2.4 to 3.2).
    PitId,
    /// Scroll (Elasticsearch 7.0 to 7.11, older OpenSearch).
    Scroll,
}

impl std::str::FromStr for Paging {
    type Err = StoreError;

    fn from_str(text: &str) -> Result<Paging> {
        match text {
            "auto" => Ok(Paging::Auto),
            "scroll" => Ok(Paging::Scroll),
            "pit" => Ok(Paging::PitShardDoc),
            "pit-id" => Ok(Paging::PitId),
            other => Err(StoreError::rejected(
                "reading FSRENAME_ES_PAGING",
                format!("`{other}` is not a paging: auto, scroll, pit (point in time, `_shard_doc`: Elasticsearch 7.12+) or pit-id (point in time, `_id`: Elasticsearch 7.10+, OpenSearch 2.4+)"),
            )),
        }
    }
}

/// Where an Elasticsearch or OpenSearch server is and how to talk to it.
#[derive(Debug, Clone)]
pub struct ElasticConfig {
    /// The nodes' URLs joined by commas, for messages.
    pub(crate) url: String,
    /// The nodes' URLs, without credentials.
    pub(crate) nodes: Vec<String>,
    pub(crate) auth: Option<Auth>,
    pub(crate) ca_cert: Option<PathBuf>,
    /// The SHA-256 of a CA certificate the server presents, 64 lowercase hex digits.
    pub(crate) ca_fingerprint: Option<String>,
    pub(crate) replicas: Option<u32>,
    pub(crate) request_timeout: Duration,
    pub(crate) retry_deadline: Duration,
    /// How long connections that fail are retried before any node has answered at all;
    /// `None`: as long as [`ElasticConfig::retry_deadline`].
    pub(crate) first_contact: Option<Duration>,
    pub(crate) paging: Paging,
    pub(crate) keep_alive: Duration,
}

impl ElasticConfig {
    /// How long a point in time or a scroll stays open between two pages, unless set otherwise.
    ///
    /// A paged caller works between two pages for as long as one bulk request of a page's
    /// documents takes (a rename rewrites ~1000 documents at a time): a few seconds at worst.
    /// A minute is plenty, and what a caller that dies without closing leaves behind is gone
    /// within a minute, well before it can add up to `search.max_open_scroll_context` (500).
    pub const DEFAULT_KEEP_ALIVE: Duration = Duration::from_secs(60);

    /// Starts a configuration for the server at `url` (`http(s)://host:port`), or for the nodes
    /// of a cluster, as a comma-separated list of such URLs: requests then go round the nodes,
    /// and a node that does not serve is skipped for a while (`docs/elasticsearch.md`, "Running
    /// on a cluster"). Credentials in a URL (`https://user:password@host`) become basic
    /// authentication and are removed from the URL, so they never show in messages; several
    /// URLs may carry them only if they are the same.
    ///
    /// # Errors
    /// [`StoreError::Rejected`] if a URL of the list is not an `http` or `https` URL, is empty,
    /// or carries other credentials than another.
    pub fn new(url: &str) -> Result<ElasticConfig> {
        let mut nodes = Vec::new();
        let mut auth: Option<Auth> = None;
        for one in url.split(',').map(str::trim) {
            let (node, node_auth) = parse_node(one, url)?;
            match (&auth, node_auth) {
                (Some(a), Some(b)) if *a != b => {
                    return Err(StoreError::rejected(
                        format!("store URL `{}`", redact(url)),
                        "the nodes carry different credentials",
                    ))
                }
                (None, Some(b)) => auth = Some(b),
                _ => {}
            }
            nodes.push(node);
        }
        Ok(ElasticConfig {
            url: nodes.join(","),
            nodes,
            auth,
            ca_cert: None,
            ca_fingerprint: None,
            replicas: None,
            request_timeout: Duration::from_secs(30),
            retry_deadline: Duration::from_secs(30),
            first_contact: None,
            paging: Paging::Auto,
            keep_alive: ElasticConfig::DEFAULT_KEEP_ALIVE,
        })
    }

    /// Reads settings from the environment: credentials (`FSRENAME_ES_USER` and
    /// `FSRENAME_ES_PASSWORD` or `FSRENAME_ES_PASSWORD_FILE`, or `FSRENAME_ES_API_KEY` or
    /// `FSRENAME_ES_API_KEY_FILE`), a CA (`FSRENAME_ES_CA`, a PEM file, or
    /// `FSRENAME_ES_CA_FINGERPRINT`, its SHA-256), the retry deadline in milliseconds (`FSRENAME_ES_RETRY_DEADLINE_MS`) and the paging
    /// (`FSRENAME_ES_PAGING`: `auto`, `scroll`, `pit` or `pit-id`, see [`Paging`]; how the
    /// real-server tests run both ways on one server). Credentials and a CA already set win.
    ///
    /// # Errors
    /// [`StoreError::Rejected`] for a paging that is none of those, a fingerprint that is not
    /// one, or a key or password file that cannot be read, naming it.
    pub fn with_env(mut self) -> Result<ElasticConfig> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        if let Some(paging) = var("FSRENAME_ES_PAGING") {
            self.paging = paging.parse()?;
        }
        if self.auth.is_none() {
            if let Some(key) = var("FSRENAME_ES_API_KEY") {
                self.auth = Some(Auth::api_key(&key));
            } else if let Some(path) = var("FSRENAME_ES_API_KEY_FILE") {
                self = self.api_key_file(path)?;
            } else if let Some(user) = var("FSRENAME_ES_USER") {
                match var("FSRENAME_ES_PASSWORD_FILE") {
                    Some(path) => self = self.password_file(&user, path)?,
                    None => {
                        let password = var("FSRENAME_ES_PASSWORD").unwrap_or_default();
                        self.auth = Some(Auth::Basic { user, password });
                    }
                }
            }
        }
        if self.ca_cert.is_none() && self.ca_fingerprint.is_none() {
            if let Some(path) = var("FSRENAME_ES_CA") {
                self.ca_cert = Some(PathBuf::from(path));
            } else if let Some(fingerprint) = var("FSRENAME_ES_CA_FINGERPRINT") {
                self = self.ca_fingerprint(&fingerprint)?;
            }
        }
        if let Some(ms) = var("FSRENAME_ES_RETRY_DEADLINE_MS").and_then(|v| v.parse().ok()) {
            self.retry_deadline = Duration::from_millis(ms);
        }
        Ok(self)
    }

    /// Sets the authentication. Default: none (or from the URL).
    pub fn auth(mut self, auth: Auth) -> ElasticConfig {
        self.auth = Some(auth);
        self
    }

    /// Trusts the CA certificate in this PEM file. Default: the system's roots.
    pub fn ca_cert(mut self, path: impl Into<PathBuf>) -> ElasticConfig {
        self.ca_cert = Some(path.into());
        self
    }

    /// Trusts the CA certificate whose SHA-256 is `fingerprint` (hex, colons allowed, as
    /// Elasticsearch 8 prints it at first start: "HTTP CA certificate SHA-256 fingerprint"),
    /// found among the certificates the server presents when the store connects. Default:
    /// none (the CA file, else the system's roots).
    ///
    /// # Errors
    /// [`StoreError::Rejected`] if it is not 32 bytes in hex.
    pub fn ca_fingerprint(mut self, fingerprint: &str) -> Result<ElasticConfig> {
        let hex: String = fingerprint
            .trim()
            .chars()
            .filter(|c| *c != ':')
            .map(|c| c.to_ascii_lowercase())
            .collect();
        if hex.len() != 64 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(StoreError::rejected(
                "reading the CA fingerprint",
                format!(
                    "`{fingerprint}` is not a SHA-256 fingerprint (64 hex digits, colons allowed)"
                ),
            ));
        }
        self.ca_fingerprint = Some(hex);
        Ok(self)
    }

    /// Authenticates with the API key in this file: the `encoded` value Elasticsearch returns
    /// (base64 of `id:key`), or `id:key` itself. Kept in a file, a key never shows on a
    /// command line (where `ps` shows it).
    ///
    /// # Errors
    /// [`StoreError::Rejected`] if the file cannot be read or is empty, naming it.
    pub fn api_key_file(mut self, path: impl Into<PathBuf>) -> Result<ElasticConfig> {
        let key = read_secret(&path.into(), "API key")?;
        self.auth = Some(Auth::api_key(&key));
        Ok(self)
    }

    /// Authenticates as `user` with the password in this file (its first line). Kept in a
    /// file, a password never shows on a command line.
    ///
    /// # Errors
    /// [`StoreError::Rejected`] if the file cannot be read or is empty, naming it.
    pub fn password_file(mut self, user: &str, path: impl Into<PathBuf>) -> Result<ElasticConfig> {
        let password = read_secret(&path.into(), "password")?;
        self.auth = Some(Auth::Basic {
            user: user.to_owned(),
            password,
        });
        Ok(self)
    }

    /// Sets `number_of_replicas` for the indices fsrename creates; 0 suits a single node.
    /// Default: the server's default.
    pub fn replicas(mut self, replicas: u32) -> ElasticConfig {
        self.replicas = Some(replicas);
        self
    }

    /// Sets the timeout of one HTTP request. Default: 30 s.
    pub fn request_timeout(mut self, timeout: Duration) -> ElasticConfig {
        self.request_timeout = timeout;
        self
    }

    /// Sets how long transient failures (429, 502, 503, 504, connection errors) are retried
    /// before a call fails with [`StoreError::Transient`]. Default: 30 s.
    pub fn retry_deadline(mut self, deadline: Duration) -> ElasticConfig {
        self.retry_deadline = deadline;
        self
    }

    /// Sets how long failed connections are retried while no node has answered any request
    /// yet; then a call fails with [`StoreError::Backend`] saying it cannot connect. Default:
    /// as long as the retry deadline. A command run by hand sets it short: a server that
    /// refuses every connection from the first is not there (a wrong port, a server not
    /// started), and waiting 30 s to say so helps no one; a service keeps its patience and
    /// says once that it is waiting.
    pub fn first_contact(mut self, deadline: Duration) -> ElasticConfig {
        self.first_contact = Some(deadline);
        self
    }

    /// Sets how searches are paged. Default: [`Paging::Auto`].
    pub fn paging(mut self, paging: Paging) -> ElasticConfig {
        self.paging = paging;
        self
    }

    /// Sets how long the server keeps a paged search's point in time or scroll open between
    /// two pages (each page renews it). Every paged search closes what it opened after its
    /// last page, or when its caller stops early; the keep-alive only bounds what a caller
    /// that dies leaves behind. At least one second. Default: [`ElasticConfig::DEFAULT_KEEP_ALIVE`] (1 min).
    pub fn keep_alive(mut self, keep_alive: Duration) -> ElasticConfig {
        self.keep_alive = keep_alive.max(Duration::from_secs(1));
        self
    }

    /// Returns the keep-alive as Elasticsearch's time unit: `1m`, `90s`, `1500ms`.
    pub(crate) fn keep_alive_param(&self) -> String {
        let ms = self.keep_alive.as_millis();
        if ms % 60_000 == 0 {
            format!("{}m", ms / 60_000)
        } else if ms % 1_000 == 0 {
            format!("{}s", ms / 1_000)
        } else {
            format!("{ms}ms")
        }
    }

    /// Returns true if credentials are set (from the URL, or by a setter).
    pub fn has_auth(&self) -> bool {
        self.auth.is_some()
    }

    /// Returns the URL without credentials (the nodes' URLs, joined by commas).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Returns the nodes' URLs, without credentials.
    pub fn nodes(&self) -> &[String] {
        &self.nodes
    }
}

/// Reads a secret's first line from `path`, trimmed of surrounding white space.
fn read_secret(path: &std::path::Path, what: &str) -> Result<String> {
    let context = format!("reading the {what} file `{}`", path.display());
    let text =
        std::fs::read_to_string(path).map_err(|e| StoreError::rejected(&context, e.to_string()))?;
    let secret = text.lines().next().unwrap_or("").trim();
    if secret.is_empty() {
        return Err(StoreError::rejected(&context, "the file is empty"));
    }
    Ok(secret.to_owned())
}

/// Parses one node's URL of `list`; returns it without credentials, and the credentials.
fn parse_node(url: &str, list: &str) -> Result<(String, Option<Auth>)> {
    let rejected = |reason: &str| {
        let what = if url == list {
            format!("store URL `{}`", redact(url))
        } else {
            format!("node `{}` of store URL `{}`", redact(url), redact(list))
        };
        StoreError::rejected(what, reason)
    };
    if url.is_empty() {
        return Err(rejected(
            "an empty node URL (two commas, or one at an end?)",
        ));
    }
    let (scheme, rest) = url
        .split_once("://")
        .filter(|(scheme, _)| *scheme == "http" || *scheme == "https")
        .ok_or_else(|| rejected("expected http:// or https://"))?;
    let (authority, path) = match rest.split_once('/') {
        Some((authority, path)) => (authority, format!("/{path}")),
        None => (rest, String::new()),
    };
    let (auth, host) = match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            let (user, password) = userinfo.split_once(':').unwrap_or((userinfo, ""));
            let auth = Auth::Basic {
                user: user.to_owned(),
                password: password.to_owned(),
            };
            (Some(auth), host)
        }
        None => (None, authority),
    };
    if host.is_empty() {
        return Err(rejected("no host"));
    }
    Ok((
        format!("{scheme}://{host}{}", path.trim_end_matches('/')),
        auth,
    ))
}

/// Returns `url` (one URL, or a comma-separated list of nodes) with any credentials
/// replaced, for messages.
pub fn redact(url: &str) -> String {
    // Each node of a list on its own, so that no node's credentials show.
    url.split(',')
        .map(|node| match (node.find("://"), node.rfind('@')) {
            (Some(start), Some(at)) if at > start => {
                format!("{}<credentials>{}", &node[..start + 3], &node[at..])
            }
            _ => node.to_owned(),
        })
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_leave_the_url() {
        let config = ElasticConfig::new("https://elastic:s3cret@127.0.0.1:9200/").expect("url");
        assert_eq!(config.url(), "https://127.0.0.1:9200");
        assert_eq!(
            config.auth,
            Some(Auth::Basic {
                user: "elastic".into(),
                password: "s3cret".into()
            })
        );
        assert!(!format!("{config:?}").contains("s3cret"));
        assert_eq!(redact("http://u:p@h:1"), "http://<credentials>@h:1");
        assert_eq!(
            redact("http://h:1,https://u:p@g:2"),
            "http://h:1,https://<credentials>@g:2"
        );
    }

    #[test]
    fn keep_alive_is_written_in_elasticsearch_units() {
        let config = ElasticConfig::new("http://h:1").expect("url");
        assert_eq!(config.keep_alive_param(), "1m");
        assert_eq!(
            config
                .clone()
                .keep_alive(Duration::from_secs(90))
                .keep_alive_param(),
            "90s"
        );
        assert_eq!(
            config
                .clone()
                .keep_alive(Duration::from_millis(1_500))
                .keep_alive_param(),
            "1500ms"
        );
        assert_eq!(
            config.keep_alive(Duration::ZERO).keep_alive_param(),
            "1s",
            "a context must outlive the request that opens it"
        );
    }

    #[test]
    fn a_list_of_nodes_is_a_cluster() {
        let config =
            ElasticConfig::new("http://u:p@127.0.0.1:9200, http://127.0.0.1:9201/").expect("list");
        assert_eq!(
            config.nodes(),
            ["http://127.0.0.1:9200", "http://127.0.0.1:9201"]
        );
        assert_eq!(config.url(), "http://127.0.0.1:9200,http://127.0.0.1:9201");
        assert!(config.auth.is_some(), "credentials of one node serve all");

        let err = ElasticConfig::new("http://a:1,,http://b:2").expect_err("empty node");
        assert!(err.to_string().contains("empty node URL"), "{err}");
        let err = ElasticConfig::new("http://a:1,ftp://b:2").expect_err("scheme");
        assert!(err.to_string().contains("node `ftp://b:2`"), "{err}");
        let err =
            ElasticConfig::new("http://u:p@a:1,http://v:q@b:2").expect_err("other credentials");
        assert!(err.to_string().contains("different credentials"), "{err}");
        assert!(!err.to_string().contains(":p@"), "{err}");
    }

    #[test]
    fn fingerprints_and_keys_are_read_as_elasticsearch_prints_them() {
        let printed = "3F:A9:".to_owned() + &"0b:".repeat(29) + "7C";
        let config = ElasticConfig::new("https://h:1")
            .expect("url")
            .ca_fingerprint(&printed)
            .expect("a fingerprint");
        assert_eq!(
            config.ca_fingerprint.as_deref(),
            Some(&*("3fa9".to_owned() + &"0b".repeat(29) + "7c"))
        );
        let err = ElasticConfig::new("https://h:1")
            .expect("url")
            .ca_fingerprint("3F:A9")
            .expect_err("too short");
        assert!(
            err.to_string().contains("`3F:A9` is not a SHA-256"),
            "{err}"
        );

        // `id:key` is encoded; the encoded form is kept as it is.
        assert_eq!(
            Auth::api_key("id:secret"),
            Auth::ApiKey("aWQ6c2VjcmV0".into())
        );
        assert_eq!(
            Auth::api_key("aWQ6c2VjcmV0"),
            Auth::ApiKey("aWQ6c2VjcmV0".into())
        );
        assert_eq!(
            Auth::api_key("aWQ6c2VjcmV0").describe(),
            "the API key with id `id`"
        );
        let dir = tempfile::tempdir().expect("tempdir");
        let empty = dir.path().join("empty");
        std::fs::write(&empty, "\n").expect("write");
        let err = ElasticConfig::new("https://h:1")
            .expect("url")
            .api_key_file(&empty)
            .expect_err("empty");
        assert!(err.to_string().contains("is empty"), "{err}");
        let err = ElasticConfig::new("https://h:1")
            .expect("url")
            .password_file("u", dir.path().join("missing"))
            .expect_err("missing");
        assert!(err.to_string().contains("password file"), "{err}");
    }

    #[test]
    fn bad_urls_are_named() {
        let err = ElasticConfig::new("ftp://x").expect_err("scheme");
        assert!(err.to_string().contains("ftp://x"), "{err}");
        assert!(ElasticConfig::new("http://").is_err());
    }
}
