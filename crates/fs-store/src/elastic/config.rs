//! [`ElasticConfig`]: where the server is and how to talk to it.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

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
            replicas: None,
            request_timeout: Duration::from_secs(30),
            retry_deadline: Duration::from_secs(30),
            first_contact: None,
            paging: Paging::Auto,
            keep_alive: ElasticConfig::DEFAULT_KEEP_ALIVE,
        })
    }

    /// Reads settings from the environment: credentials (`FSRENAME_ES_USER` and
    /// `FSRENAME_ES_PASSWORD`, or `FSRENAME_ES_API_KEY`), a CA (`FSRENAME_ES_CA`, a PEM file),
    /// the retry deadline in milliseconds (`FSRENAME_ES_RETRY_DEADLINE_MS`) and the paging
    /// (`FSRENAME_ES_PAGING`: `auto`, `scroll`, `pit` or `pit-id`, see [`Paging`]; how the
    /// real-server tests run both ways on one server). Credentials and a CA already set win.
    ///
    /// # Errors
    /// [`StoreError::Rejected`] for a paging that is none of those, naming it.
    pub fn with_env(mut self) -> Result<ElasticConfig> {
        if let Some(paging) = std::env::var("FSRENAME_ES_PAGING")
            .ok()
            .filter(|v| !v.is_empty())
        {
            self.paging = paging.parse()?;
        }
        Ok(self.with_env_settings())
    }

    fn with_env_settings(mut self) -> ElasticConfig {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        if self.auth.is_none() {
            if let Some(key) = var("FSRENAME_ES_API_KEY") {
                self.auth = Some(Auth::ApiKey(key));
            } else if let Some(user) = var("FSRENAME_ES_USER") {
                let password = var("FSRENAME_ES_PASSWORD").unwrap_or_default();
                self.auth = Some(Auth::Basic { user, password });
            }
        }
        if self.ca_cert.is_none() {
            self.ca_cert = var("FSRENAME_ES_CA").map(PathBuf::from);
        }
        if let Some(ms) = var("FSRENAME_ES_RETRY_DEADLINE_MS").and_then(|v| v.parse().ok()) {
            self.retry_deadline = Duration::from_millis(ms);
        }
        self
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

    /// Returns the URL without credentials (the nodes' URLs, joined by commas).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Returns the nodes' URLs, without credentials.
    pub fn nodes(&self) -> &[String] {
        &self.nodes
    }
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
    fn bad_urls_are_named() {
        let err = ElasticConfig::new("ftp://x").expect_err("scheme");
        assert!(err.to_string().contains("ftp://x"), "{err}");
        assert!(ElasticConfig::new("http://").is_err());
    }
}
