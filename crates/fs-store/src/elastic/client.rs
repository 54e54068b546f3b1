//! Building a handle: the HTTP client (TLS, credentials, the nodes), and what the server is.

use std::sync::Arc;

use elasticsearch::auth::Credentials;
use elasticsearch::cert::{Certificate, CertificateValidation};
use elasticsearch::http::transport::TransportBuilder;
use elasticsearch::http::Url;
use elasticsearch::Elasticsearch;
use tokio::sync::OnceCell;

use super::config::{Auth, ElasticConfig, Paging};
use super::cursor::OpenContexts;
use super::nodes::NodePool;
use super::request::Retry;
use super::server::ServerInfo;
use super::{ElasticStore, Inner};
use crate::error::{Result, StoreError};

impl ElasticStore {
    /// Builds a store for the server in `config`. Nothing is sent until the first call.
    ///
    /// With a CA fingerprint ([`ElasticConfig::ca_fingerprint`]) and no CA file, it shakes
    /// hands with the first node to find that CA, so the server must answer then.
    ///
    /// # Errors
    /// [`StoreError::Rejected`] for an unusable URL or CA file, or a fingerprint no
    /// certificate of the server has; [`StoreError::Backend`] if, for a fingerprint, the first
    /// node cannot be reached.
    pub fn connect(config: ElasticConfig) -> Result<ElasticStore> {
        let context = format!("connecting to {}", config.url);
        let mut urls = config
            .nodes
            .iter()
            .map(|node| {
                Url::parse(node)
                    .map_err(|e| StoreError::rejected(&context, format!("`{node}`: {e}")))
            })
            .collect::<Result<Vec<Url>>>()?
            .into_iter();
        let first = urls
            .next()
            .ok_or_else(|| StoreError::rejected(&context, "no node URL"))?;
        // A fingerprint is looked up now, at the first node: the client needs its CA before
        // it is built.
        let fingerprinted = match (&config.ca_cert, &config.ca_fingerprint) {
            (None, Some(fingerprint)) => Some(super::fingerprint::find_ca(&first, fingerprint)?),
            _ => None,
        };
        let nodes = NodePool::new(first, urls.collect());
        let mut builder = TransportBuilder::new(nodes.clone())
            .timeout(config.request_timeout)
            .disable_proxy()
            // Answers uncompressed, as Elasticsearch's own clients ask by default: the HTTP
            // library would otherwise ask for gzip, and a node spends as much compressing a
            // page of a thousand hits as finding it (a read of a million documents took 40 %
            // longer, both cores busy). A copy, a rename or a check reads and writes pages
            // back to back; the bytes saved matter only across a slow network.
            .header(
                elasticsearch::http::headers::ACCEPT_ENCODING,
                elasticsearch::http::headers::HeaderValue::from_static("identity"),
            );
        match &config.auth {
            Some(Auth::Basic { user, password }) => {
                builder = builder.auth(Credentials::Basic(user.clone(), password.clone()))
            }
            Some(Auth::ApiKey(key)) => {
                builder = builder.auth(Credentials::EncodedApiKey(key.clone()))
            }
            None => {}
        }
        if let Some(path) = &config.ca_cert {
            let pem = std::fs::read(path).map_err(|e| {
                StoreError::rejected(
                    &context,
                    format!("cannot read CA file `{}`: {e}", path.display()),
                )
            })?;
            let cert = Certificate::from_pem(&pem).map_err(|e| {
                StoreError::rejected(
                    &context,
                    format!("CA file `{}` is not PEM: {e}", path.display()),
                )
            })?;
            builder = builder.cert_validation(CertificateValidation::Full(cert));
        } else if let Some(der) = fingerprinted {
            let cert = Certificate::from_der(&der)
                .map_err(|e| StoreError::rejected(&context, format!("the CA certificate: {e}")))?;
            builder = builder.cert_validation(CertificateValidation::Full(cert));
        }
        let transport = builder
            .build()
            .map_err(|e| StoreError::rejected(&context, e.to_string()))?;
        Ok(ElasticStore {
            inner: Arc::new(Inner {
                client: Elasticsearch::new(transport),
                nodes,
                config,
                server: OnceCell::new(),
                contexts: OpenContexts::new(),
                scripts: std::sync::Mutex::default(),
                scripts_refused: std::sync::atomic::AtomicBool::new(false),
                lanes: std::sync::Arc::default(),
                items_resent: std::sync::atomic::AtomicU64::new(0),
            }),
        })
    }

    /// Returns the official client, for requests the trait does not cover.
    pub fn client(&self) -> &Elasticsearch {
        &self.inner.client
    }

    /// Returns the server's flavour and version, e.g. `OpenSearch 3.8`, asking once.
    ///
    /// # Errors
    /// As any call when the server cannot be reached.
    pub async fn server_description(&self) -> Result<String> {
        Ok(self.server().await?.describe())
    }

    pub(super) async fn server(&self) -> Result<&ServerInfo> {
        self.inner
            .server
            .get_or_try_init(|| async {
                let (_, body) = self
                    .send("asking the server's version", Retry::Always, || {
                        self.inner.client.info().send()
                    })
                    .await?;
                let info = ServerInfo::from_root(&body);
                tracing::info!(server = %info.describe(), paging = ?info.paging(), "connected");
                Ok(info)
            })
            .await
    }

    /// Returns the paging configured, or the best the server supports.
    pub(super) async fn paging(&self) -> Result<Paging> {
        match self.inner.config.paging {
            Paging::Auto => Ok(self.server().await?.paging()),
            chosen => Ok(chosen),
        }
    }
}
