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

/// Where an Elasticsearch or OpenSearch server is and how to talk to it.
#[derive(Debug, Clone)]
pub struct ElasticConfig {
    pub(crate) url: String,
    pub(crate) auth: Option<Auth>,
    pub(crate) ca_cert: Option<PathBuf>,
    pub(crate) replicas: Option<u32>,
    pub(crate) request_timeout: Duration,
    pub(crate) retry_deadline: Duration,
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

    /// Starts a configuration for the server at `url` (`http(s)://host:port`). Credentials in
    /// the URL (`https://user:password@host`) become basic authentication and are removed from
    /// the URL, so they never show in messages.
    ///
    /// # Errors
    /// [`StoreError::Rejected`] if `url` is not an `http` or `https` URL.
    pub fn new(url: &str) -> Result<ElasticConfig> {
        let (scheme, rest) = url
            .split_once("://")
            .filter(|(scheme, _)| *scheme == "http" || *scheme == "https")
            .ok_or_else(|| {
                StoreError::rejected(
                    format!("store URL `{}`", redact(url)),
                    "expected http:// or https://",
                )
            })?;
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
            return Err(StoreError::rejected(
                format!("store URL `{}`", redact(url)),
                "no host",
            ));
        }
        Ok(ElasticConfig {
            url: format!("{scheme}://{host}{}", path.trim_end_matches('/')),
            auth,
            ca_cert: None,
            replicas: None,
            request_timeout: Duration::from_secs(30),
            retry_deadline: Duration::from_secs(30),
            paging: Paging::Auto,
            keep_alive: ElasticConfig::DEFAULT_KEEP_ALIVE,
        })
    }

    /// Reads settings from the environment: credentials (`FSRENAME_ES_USER` and
    /// `FSRENAME_ES_PASSWORD`, or `FSRENAME_ES_API_KEY`), a CA (`FSRENAME_ES_CA`, a PEM file),
    /// and the retry deadline in milliseconds (`FSRENAME_ES_RETRY_DEADLINE_MS`). Credentials
    /// and a CA already set win.
    pub fn with_env(mut self) -> ElasticConfig {
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

    /// Returns the URL without credentials.
    pub fn url(&self) -> &str {
        &self.url
    }
}

/// Returns `url` with any password replaced, for messages.
pub(crate) fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(start), Some(at)) if at > start => {
            format!("{}<credentials>{}", &url[..start + 3], &url[at..])
        }
        _ => url.to_owned(),
    }
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
    fn bad_urls_are_named() {
        let err = ElasticConfig::new("ftp://x").expect_err("scheme");
        assert!(err.to_string().contains("ftp://x"), "{err}");
        assert!(ElasticConfig::new("http://").is_err());
    }
}
