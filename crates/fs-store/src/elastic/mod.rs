//! [`ElasticStore`]: the document store on Elasticsearch or OpenSearch, over HTTP, through the
//! official `elasticsearch` client.
//!
//! Every trait call is one HTTP request, except that a paged search opens a point in time (or
//! a scroll) with its first page and closes it after its last.
//!
//! Retries: 429 and 503 mean the request was not carried out, and a refused connection means
//! it never arrived, so those are retried for every call, with jittered backoff, until the
//! retry deadline. 502, 504, timeouts and dropped connections leave the outcome unknown: reads
//! are retried, writes come back as [`StoreError::Transient`] for the caller to resolve (the
//! lock engine reads what landed; the rename job compares what it meant to write).

mod config;
mod response;
mod server;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use elasticsearch::auth::Credentials;
use elasticsearch::cert::{Certificate, CertificateValidation};
use elasticsearch::http::headers::HeaderMap;
use elasticsearch::http::request::JsonBody;
use elasticsearch::http::response::Response;
use elasticsearch::http::transport::{SingleNodeConnectionPool, TransportBuilder};
use elasticsearch::http::{Method, Url};
use elasticsearch::indices::{IndicesCreateParts, IndicesDeleteParts, IndicesRefreshParts};
use elasticsearch::{
    BulkParts, ClearScrollParts, CountParts, CreateParts, DeleteParts, Elasticsearch, GetParts,
    IndexParts, MgetParts, OpenPointInTimeParts, PutScriptParts, ScrollParts, SearchParts,
};
use serde_json::{json, Value};
use tokio::sync::OnceCell;

pub use config::{Auth, ElasticConfig, Paging};
use response::{doc_of, error_of, shorten, version_of};
use server::ServerInfo;

use crate::error::{Result, StoreError};
use crate::scripted::{
    ScriptedUpdate, ScriptedUpdates, UpdateItemResult, UpdateOutcome, UpdateResult,
};
use crate::store::DocStore;
use crate::types::{
    BulkItemResult, BulkOp, Cursor, Page, Scope, SearchRequest, StoredDoc, Version,
};

/// How long a point in time or scroll stays open between two pages.
const KEEP_ALIVE: &str = "2m";

/// How often the server itself re-runs a scripted update that lost a race (`retry_on_conflict`).
const RETRY_ON_CONFLICT: u32 = 3;

/// Whether a request may be sent again when its outcome is unknown.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Retry {
    /// Reads, refreshes, index creation: sending again changes nothing.
    Always,
    /// Writes: sent again only when they certainly were not carried out.
    IfNotCarriedOut,
}

/// The document store on an Elasticsearch or OpenSearch server. Cheap to clone.
#[derive(Clone)]
pub struct ElasticStore {
    inner: Arc<Inner>,
}

struct Inner {
    client: Elasticsearch,
    config: ElasticConfig,
    server: OnceCell<ServerInfo>,
    /// Scripts stored by this handle, by id, with their source: stored once, not per job.
    scripts: std::sync::Mutex<std::collections::HashMap<String, String>>,
    /// Set once the server refused to store a script: it is not asked again.
    scripts_refused: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for ElasticStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ElasticStore")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl ElasticStore {
    /// Builds a store for the server in `config`. Nothing is sent until the first call.
    ///
    /// # Errors
    /// [`StoreError::Rejected`] for an unusable URL or CA file.
    pub fn connect(config: ElasticConfig) -> Result<ElasticStore> {
        let context = format!("connecting to {}", config.url);
        let url =
            Url::parse(&config.url).map_err(|e| StoreError::rejected(&context, e.to_string()))?;
        let mut builder = TransportBuilder::new(SingleNodeConnectionPool::new(url))
            .timeout(config.request_timeout)
            .disable_proxy();
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
        }
        let transport = builder
            .build()
            .map_err(|e| StoreError::rejected(&context, e.to_string()))?;
        Ok(ElasticStore {
            inner: Arc::new(Inner {
                client: Elasticsearch::new(transport),
                config,
                server: OnceCell::new(),
                scripts: std::sync::Mutex::default(),
                scripts_refused: std::sync::atomic::AtomicBool::new(false),
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

    async fn server(&self) -> Result<&ServerInfo> {
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

    async fn paging(&self) -> Result<Paging> {
        match self.inner.config.paging {
            Paging::Auto => Ok(self.server().await?.paging()),
            chosen => Ok(chosen),
        }
    }

    /// Sends the request `make` builds (again, if it may be retried); returns the status and
    /// the body. Statuses are not judged here, except the retryable ones.
    async fn send<F, Fut>(&self, context: &str, retry: Retry, make: F) -> Result<(u16, Value)>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = std::result::Result<Response, elasticsearch::Error>>,
    {
        let deadline = tokio::time::Instant::now() + self.inner.config.retry_deadline;
        let mut pause = Duration::from_millis(50);
        loop {
            let failure = match make().await {
                Ok(response) => {
                    let status = response.status_code().as_u16();
                    let again = matches!(status, 429 | 503)
                        || (retry == Retry::Always && matches!(status, 502 | 504));
                    match response.text().await {
                        Ok(text) if !again => {
                            let body = if text.trim().is_empty() {
                                Value::Null
                            } else {
                                serde_json::from_str(&text).map_err(|e| StoreError::Backend {
                                    context: context.to_owned(),
                                    message: format!(
                                        "HTTP {status} with a body that is not JSON ({e}): {}",
                                        cut(&text)
                                    ),
                                })?
                            };
                            return Ok((status, body));
                        }
                        Ok(text) => (true, format!("HTTP {status}: {}", cut(&text))),
                        Err(e) => (
                            retry == Retry::Always,
                            format!("reading the answer failed: {e}"),
                        ),
                    }
                }
                Err(e) => (retry == Retry::Always || never_arrived(&e), e.to_string()),
            };
            let (may_retry, message) = failure;
            let now = tokio::time::Instant::now();
            if !may_retry || now + pause > deadline {
                return Err(StoreError::Transient {
                    context: context.to_owned(),
                    message,
                });
            }
            tracing::debug!(%context, %message, "transient failure; retrying");
            let half = u64::try_from((pause / 2).as_micros()).unwrap_or(u64::MAX);
            let jittered = pause / 2 + Duration::from_micros(fs_model::entropy::up_to(half));
            tokio::time::sleep(jittered).await;
            pause = (pause * 2).min(Duration::from_secs(2));
        }
    }

    /// Sends and returns the body of a 2xx answer; anything else becomes its error.
    async fn ok<F, Fut>(
        &self,
        context: &str,
        index: &str,
        id: &str,
        retry: Retry,
        make: F,
    ) -> Result<Value>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = std::result::Result<Response, elasticsearch::Error>>,
    {
        let (status, body) = self.send(context, retry, make).await?;
        if (200..300).contains(&status) {
            Ok(body)
        } else {
            Err(error_of(context, index, id, status, &body))
        }
    }

    /// Closes a point in time or scroll in the background: nothing waits for it, and if it
    /// fails the server drops the context when its keep-alive runs out.
    fn close_cursor(&self, cursor: PageCursor) {
        let store = self.clone();
        tokio::spawn(async move {
            let client = &store.inner.client;
            let result = match &cursor {
                PageCursor::Pit {
                    id,
                    opensearch: false,
                    ..
                } => {
                    client
                        .close_point_in_time()
                        .body(json!({ "id": id }))
                        .send()
                        .await
                }
                PageCursor::Pit {
                    id,
                    opensearch: true,
                    ..
                } => {
                    let body = Some(JsonBody::new(json!({ "pit_id": [id] })));
                    client
                        .transport()
                        .send(
                            Method::Delete,
                            "/_search/point_in_time",
                            HeaderMap::new(),
                            None::<&()>,
                            body,
                            None,
                        )
                        .await
                }
                PageCursor::Scroll { id } => {
                    client
                        .clear_scroll(ClearScrollParts::None)
                        .body(json!({ "scroll_id": id }))
                        .send()
                        .await
                }
            };
            if let Err(e) = result {
                tracing::debug!(error = %e, "closing a search cursor failed; it will expire");
            }
        });
    }

    async fn open_pit(&self, index: &str) -> Result<PageCursor> {
        let context = format!("opening a point in time on `{index}`");
        let opensearch = self.server().await.map(|s| s.opensearch).unwrap_or(false)
            && self.inner.config.paging != Paging::Scroll;
        let client = &self.inner.client;
        let body = if opensearch {
            let path = format!("/{index}/_search/point_in_time");
            let query = [("keep_alive", KEEP_ALIVE)];
            self.ok(&context, index, "", Retry::Always, || {
                client.transport().send(
                    Method::Post,
                    &path,
                    HeaderMap::new(),
                    Some(&query),
                    None::<JsonBody<Value>>,
                    None,
                )
            })
            .await?
        } else {
            let indices = [index];
            self.ok(&context, index, "", Retry::Always, || {
                client
                    .open_point_in_time(OpenPointInTimeParts::Index(&indices))
                    .keep_alive(KEEP_ALIVE)
                    .send()
            })
            .await?
        };
        let id = body["pit_id"]
            .as_str()
            .or(body["id"].as_str())
            .ok_or_else(|| StoreError::Backend {
                context: context.clone(),
                message: format!("no point-in-time id in {}", shorten(&body)),
            })?;
        Ok(PageCursor::Pit {
            id: id.to_owned(),
            after: None,
            opensearch,
        })
    }
}

/// Where a paged search stands; serialised into the opaque [`Cursor`].
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
enum PageCursor {
    Pit {
        id: String,
        after: Option<Value>,
        opensearch: bool,
    },
    Scroll {
        id: String,
    },
}

fn cut(text: &str) -> String {
    shorten(&Value::String(text.to_owned()))
}

/// Returns true if the error shows the request never reached the server (a refused
/// connection), so sending it again cannot apply it twice.
fn never_arrived(error: &elasticsearch::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return io.kind() == std::io::ErrorKind::ConnectionRefused;
        }
        source = e.source();
    }
    false
}

/// Returns the version a successful write answer reports.
fn written_version(context: String, body: &Value) -> Result<Version> {
    version_of(body).ok_or_else(|| StoreError::Backend {
        context,
        message: format!("the answer has no version: {}", shorten(body)),
    })
}

/// The query selecting a scope.
fn scope_query(scope: &Scope) -> Value {
    match scope {
        Scope::All => json!({ "match_all": {} }),
        Scope::Exact(p) => json!({ "term": { "path": p.as_str() } }),
        Scope::Subtree(p) if p.is_root() => json!({ "prefix": { "path": "/" } }),
        Scope::Subtree(p) => json!({ "bool": {
            "should": [ { "term": { "path": p.as_str() } }, { "prefix": { "path": format!("{p}/") } } ],
            "minimum_should_match": 1
        } }),
        Scope::Children(p) => json!({ "term": { "parent": p.as_str() } }),
    }
}

/// The sort of a scope under a paging method: by path for path scopes, then a tiebreaker.
fn scope_sort(scope: &Scope, paging: Paging) -> Value {
    let mut sort = Vec::new();
    if !matches!(scope, Scope::All) {
        sort.push(json!({ "path": "asc" }));
    }
    match paging {
        Paging::PitShardDoc | Paging::Auto => sort.push(json!({ "_shard_doc": "asc" })),
        Paging::PitId => sort.push(json!({ "_id": "asc" })),
        Paging::Scroll if sort.is_empty() => sort.push(json!("_doc")),
        Paging::Scroll => {}
    }
    Value::Array(sort)
}

fn hits_of(context: &str, body: &Value) -> Result<Vec<Value>> {
    body["hits"]["hits"]
        .as_array()
        .cloned()
        .ok_or_else(|| StoreError::Backend {
            context: context.to_owned(),
            message: format!("no hits in {}", shorten(body)),
        })
}

fn bulk_lines(ops: &[BulkOp]) -> Vec<Value> {
    let mut lines = Vec::with_capacity(ops.len() * 2);
    for op in ops {
        let condition = |meta: &mut Value, if_version: &Option<Version>| {
            if let Some(v) = if_version {
                meta["if_seq_no"] = json!(v.seq_no);
                meta["if_primary_term"] = json!(v.primary_term);
            }
        };
        match op {
            BulkOp::Create { id, source } => {
                lines.push(json!({ "create": { "_id": id } }));
                lines.push(source.clone());
            }
            BulkOp::Index {
                id,
                source,
                if_version,
            } => {
                let mut meta = json!({ "_id": id });
                condition(&mut meta, if_version);
                lines.push(json!({ "index": meta }));
                lines.push(source.clone());
            }
            BulkOp::Delete { id, if_version } => {
                let mut meta = json!({ "_id": id });
                condition(&mut meta, if_version);
                lines.push(json!({ "delete": meta }));
            }
        }
    }
    lines
}

#[async_trait]
impl DocStore for ElasticStore {
    fn describe(&self) -> String {
        self.inner.config.url.clone()
    }

    async fn create_index(&self, index: &str, body: &Value) -> Result<bool> {
        let mut body = body.clone();
        if let (Some(replicas), Value::Object(fields)) = (self.inner.config.replicas, &mut body) {
            let settings = fields.entry("settings").or_insert_with(|| json!({}));
            settings["number_of_replicas"] = json!(replicas);
        }
        let context = format!("creating index `{index}`");
        let indices_api = self.inner.client.indices();
        let (status, answer) = self
            .send(&context, Retry::Always, || {
                indices_api
                    .create(IndicesCreateParts::Index(index))
                    .body(body.clone())
                    .send()
            })
            .await?;
        match status {
            200..=299 => Ok(true),
            _ if answer["error"]["type"] == "resource_already_exists_exception" => Ok(false),
            _ => Err(error_of(&context, index, "", status, &answer)),
        }
    }

    async fn delete_index(&self, index: &str) -> Result<bool> {
        let context = format!("deleting index `{index}`");
        let indices = [index];
        let indices_api = self.inner.client.indices();
        let (status, answer) = self
            .send(&context, Retry::Always, || {
                indices_api
                    .delete(IndicesDeleteParts::Index(&indices))
                    .send()
            })
            .await?;
        match status {
            200..=299 => Ok(true),
            404 => Ok(false),
            _ => Err(error_of(&context, index, "", status, &answer)),
        }
    }

    async fn get(&self, index: &str, id: &str) -> Result<Option<StoredDoc>> {
        let context = format!("getting `{index}/{id}`");
        let client = &self.inner.client;
        let (status, body) = self
            .send(&context, Retry::Always, || {
                client.get(GetParts::IndexId(index, id)).send()
            })
            .await?;
        match status {
            200 => doc_of(&context, &body).map(Some),
            404 if body["found"] == json!(false) => Ok(None),
            _ => Err(error_of(&context, index, id, status, &body)),
        }
    }

    async fn mget(&self, index: &str, ids: &[String]) -> Result<Vec<Option<StoredDoc>>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let context = format!("getting {} documents from `{index}`", ids.len());
        let client = &self.inner.client;
        let body = self
            .ok(&context, index, "", Retry::Always, || {
                client
                    .mget(MgetParts::Index(index))
                    .body(json!({ "ids": ids }))
                    .send()
            })
            .await?;
        let docs = body["docs"]
            .as_array()
            .filter(|d| d.len() == ids.len())
            .ok_or_else(|| StoreError::Backend {
                context: context.clone(),
                message: format!("expected {} docs in {}", ids.len(), shorten(&body)),
            })?;
        docs.iter()
            .zip(ids)
            .map(|(doc, id)| {
                if doc["found"] == json!(true) {
                    doc_of(&context, doc).map(Some)
                } else if doc.get("error").is_some() {
                    Err(error_of(&context, index, id, 404, doc))
                } else {
                    Ok(None)
                }
            })
            .collect()
    }

    async fn create(&self, index: &str, id: &str, source: Value) -> Result<Version> {
        let context = format!("creating `{index}/{id}`");
        let client = &self.inner.client;
        let body = self
            .ok(&context, index, id, Retry::IfNotCarriedOut, || {
                client
                    .create(CreateParts::IndexId(index, id))
                    .body(source.clone())
                    .send()
            })
            .await?;
        written_version(context, &body)
    }

    async fn index(
        &self,
        index: &str,
        id: &str,
        source: Value,
        if_version: Option<Version>,
    ) -> Result<Version> {
        let context = format!("writing `{index}/{id}`");
        let client = &self.inner.client;
        let body = self
            .ok(&context, index, id, Retry::IfNotCarriedOut, || {
                let request = client
                    .index(IndexParts::IndexId(index, id))
                    .body(source.clone());
                match if_version {
                    Some(v) => request
                        .if_seq_no(v.seq_no)
                        .if_primary_term(v.primary_term)
                        .send(),
                    None => request.send(),
                }
            })
            .await?;
        written_version(context, &body)
    }

    async fn delete(&self, index: &str, id: &str, if_version: Option<Version>) -> Result<Version> {
        let context = format!("deleting `{index}/{id}`");
        let client = &self.inner.client;
        let (status, body) = self
            .send(&context, Retry::IfNotCarriedOut, || {
                let request = client.delete(DeleteParts::IndexId(index, id));
                match if_version {
                    Some(v) => request
                        .if_seq_no(v.seq_no)
                        .if_primary_term(v.primary_term)
                        .send(),
                    None => request.send(),
                }
            })
            .await?;
        match status {
            200..=299 => written_version(context, &body),
            _ => Err(error_of(&context, index, id, status, &body)),
        }
    }

    async fn bulk(&self, index: &str, ops: Vec<BulkOp>) -> Result<Vec<BulkItemResult>> {
        if ops.is_empty() {
            return Ok(Vec::new());
        }
        let context = format!("bulk request of {} items to `{index}`", ops.len());
        let answers = self
            .send_bulk(&context, index, bulk_lines(&ops), ops.len())
            .await?;
        Ok(answers
            .into_iter()
            .zip(&ops)
            .map(|((status, result), op)| {
                if (200..300).contains(&status) {
                    version_of(&result).ok_or_else(|| StoreError::Backend {
                        context: context.clone(),
                        message: format!("item without a version: {}", shorten(&result)),
                    })
                } else {
                    let context = format!("writing `{index}/{}`", op.id());
                    Err(error_of(&context, index, op.id(), status, &result))
                }
            })
            .collect())
    }

    async fn search(&self, index: &str, request: SearchRequest) -> Result<Page> {
        let context = format!("searching `{index}`");
        let client = &self.inner.client;
        let query = scope_query(&request.scope);
        let size = request.size;
        if request.single_page || matches!(request.scope, Scope::Exact(_)) {
            // One page, nothing to keep open.
            let indices = [index];
            let sort = if matches!(request.scope, Scope::All) {
                json!(["_doc"])
            } else {
                json!([{ "path": "asc" }])
            };
            let body = json!({ "size": size, "query": query, "sort": sort,
                               "seq_no_primary_term": true, "track_total_hits": false });
            let answer = self
                .ok(&context, index, "", Retry::Always, || {
                    client
                        .search(SearchParts::Index(&indices))
                        .body(body.clone())
                        .send()
                })
                .await?;
            let docs = hits_of(&context, &answer)?
                .iter()
                .map(|h| doc_of(&context, h))
                .collect::<Result<_>>()?;
            return Ok(Page { docs, next: None });
        }
        let paging = self.paging().await?;
        let cursor = match &request.after {
            Some(Cursor(value)) => serde_json::from_value::<PageCursor>(value.clone())
                .map_err(|_| StoreError::rejected(&context, format!("invalid cursor {value}")))?,
            None if paging == Paging::Scroll => {
                let indices = [index];
                let body = json!({ "size": size, "query": query, "sort": scope_sort(&request.scope, paging),
                                   "seq_no_primary_term": true });
                let answer = self
                    .ok(&context, index, "", Retry::Always, || {
                        client
                            .search(SearchParts::Index(&indices))
                            .scroll(KEEP_ALIVE)
                            .body(body.clone())
                            .send()
                    })
                    .await?;
                return self.page_of(&context, &answer, size, |_| {
                    answer["_scroll_id"]
                        .as_str()
                        .map(|id| PageCursor::Scroll { id: id.to_owned() })
                });
            }
            None => self.open_pit(index).await?,
        };
        match cursor {
            PageCursor::Scroll { id } => {
                let answer = self
                    .ok(&context, index, "", Retry::Always, || {
                        client
                            .scroll(ScrollParts::None)
                            .body(json!({ "scroll": KEEP_ALIVE, "scroll_id": id }))
                            .send()
                    })
                    .await?;
                let next_id = answer["_scroll_id"].as_str().unwrap_or(&id).to_owned();
                self.page_of(&context, &answer, size, |_| {
                    Some(PageCursor::Scroll {
                        id: next_id.clone(),
                    })
                })
            }
            PageCursor::Pit {
                id,
                after,
                opensearch,
            } => {
                let mut body = json!({ "size": size, "query": query, "sort": scope_sort(&request.scope, paging),
                                       "pit": { "id": id, "keep_alive": KEEP_ALIVE },
                                       "seq_no_primary_term": true, "track_total_hits": false });
                if let Some(after) = &after {
                    body["search_after"] = after.clone();
                }
                let answer = self
                    .ok(&context, index, "", Retry::Always, || {
                        client.search(SearchParts::None).body(body.clone()).send()
                    })
                    .await?;
                let next_id = answer["pit_id"].as_str().unwrap_or(&id).to_owned();
                self.page_of(&context, &answer, size, |last| {
                    Some(PageCursor::Pit {
                        id: next_id.clone(),
                        after: last.get("sort").cloned(),
                        opensearch,
                    })
                })
            }
        }
    }

    async fn count(&self, index: &str, scope: &Scope) -> Result<u64> {
        let context = format!("counting `{index}`");
        let indices = [index];
        let client = &self.inner.client;
        let body = json!({ "query": scope_query(scope) });
        let answer = self
            .ok(&context, index, "", Retry::Always, || {
                client
                    .count(CountParts::Index(&indices))
                    .body(body.clone())
                    .send()
            })
            .await?;
        answer["count"].as_u64().ok_or_else(|| StoreError::Backend {
            context,
            message: shorten(&answer),
        })
    }

    fn scripted(&self) -> Option<&dyn ScriptedUpdates> {
        Some(self)
    }

    async fn refresh(&self, index: &str) -> Result<()> {
        let context = format!("refreshing `{index}`");
        let indices = [index];
        let indices_api = self.inner.client.indices();
        self.ok(&context, index, "", Retry::Always, || {
            indices_api
                .refresh(IndicesRefreshParts::Index(&indices))
                .send()
        })
        .await
        .map(|_| ())
    }
}

impl ElasticStore {
    /// Sends a `_bulk` request of `lines` (action and source lines) and returns each item's
    /// status and answer. A 200 answer says nothing about the items: callers judge each one.
    async fn send_bulk(
        &self,
        context: &str,
        index: &str,
        lines: Vec<Value>,
        expected: usize,
    ) -> Result<Vec<(u16, Value)>> {
        let client = &self.inner.client;
        let body = self
            .ok(context, index, "", Retry::IfNotCarriedOut, || {
                let lines: Vec<JsonBody<Value>> =
                    lines.iter().cloned().map(JsonBody::new).collect();
                client.bulk(BulkParts::Index(index)).body(lines).send()
            })
            .await?;
        let items = body["items"]
            .as_array()
            .filter(|items| items.len() == expected)
            .ok_or_else(|| StoreError::Backend {
                context: context.to_owned(),
                message: format!("expected {expected} items in {}", shorten(&body)),
            })?;
        Ok(items
            .iter()
            .map(|item| {
                // Each item is `{"<action>": {...}}`.
                let result = item
                    .as_object()
                    .and_then(|o| o.values().next())
                    .cloned()
                    .unwrap_or(Value::Null);
                (
                    result["status"]
                        .as_u64()
                        .and_then(|s| u16::try_from(s).ok())
                        .unwrap_or(0),
                    result,
                )
            })
            .collect())
    }

    /// Turns a search answer into a page; `next` makes the cursor from the last hit. A short
    /// page is the last one: its cursor is closed instead of returned.
    fn page_of<F>(&self, context: &str, answer: &Value, size: usize, next: F) -> Result<Page>
    where
        F: FnOnce(&Value) -> Option<PageCursor>,
    {
        let hits = hits_of(context, answer)?;
        let docs = hits
            .iter()
            .map(|h| doc_of(context, h))
            .collect::<Result<Vec<_>>>()?;
        let cursor = hits.last().and_then(next).or_else(|| {
            // An empty page: still close what the answer names.
            answer["_scroll_id"]
                .as_str()
                .map(|id| PageCursor::Scroll { id: id.to_owned() })
        });
        match cursor {
            Some(cursor) if docs.len() == size && size > 0 => {
                let value = serde_json::to_value(&cursor).map_err(|e| StoreError::Backend {
                    context: context.to_owned(),
                    message: e.to_string(),
                })?;
                Ok(Page {
                    docs,
                    next: Some(Cursor(value)),
                })
            }
            Some(cursor) => {
                self.close_cursor(cursor);
                Ok(Page { docs, next: None })
            }
            None => Ok(Page { docs, next: None }),
        }
    }
}

#[async_trait]
impl ScriptedUpdates for ElasticStore {
    async fn put_script(&self, id: &str, source: &str) -> Result<bool> {
        let stored = |scripts: &std::collections::HashMap<String, String>| {
            scripts.get(id).is_some_and(|s| s == source)
        };
        if stored(&self.inner.scripts.lock().unwrap_or_else(|p| p.into_inner())) {
            return Ok(true);
        }
        if self
            .inner
            .scripts_refused
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            return Ok(false);
        }
        let context = format!("storing script `{id}`");
        let client = &self.inner.client;
        let body = json!({ "script": { "lang": "painless", "source": source } });
        let (status, answer) = self
            .send(&context, Retry::Always, || {
                client
                    .put_script(PutScriptParts::Id(id))
                    .body(body.clone())
                    .send()
            })
            .await?;
        if (200..300).contains(&status) {
            let mut scripts = self.inner.scripts.lock().unwrap_or_else(|p| p.into_inner());
            scripts.insert(id.to_owned(), source.to_owned());
            return Ok(true);
        }
        tracing::debug!(%status, answer = %shorten(&answer), "the server refused to store a script");
        self.inner
            .scripts_refused
            .store(true, std::sync::atomic::Ordering::Relaxed);
        Ok(false)
    }

    async fn bulk_update(
        &self,
        index: &str,
        items: Vec<ScriptedUpdate>,
    ) -> Result<Vec<UpdateItemResult>> {
        if items.is_empty() {
            return Ok(Vec::new());
        }
        let context = format!("scripted bulk update of {} items in `{index}`", items.len());
        let mut lines = Vec::with_capacity(items.len() * 2);
        for item in &items {
            // The server retries a script that lost a race with another update of the same
            // document; a 409 that still comes back is a race, never a refusal.
            lines.push(
                json!({ "update": { "_id": item.id, "retry_on_conflict": RETRY_ON_CONFLICT } }),
            );
            let mut body = json!({ "script": { "id": item.script, "params": item.params } });
            if let Some(upsert) = &item.upsert {
                body["upsert"] = upsert.clone();
            }
            lines.push(body);
        }
        let answers = self.send_bulk(&context, index, lines, items.len()).await?;
        Ok(answers
            .into_iter()
            .zip(&items)
            .map(|((status, result), item)| {
                if !(200..300).contains(&status) {
                    let context = format!("updating `{index}/{}`", item.id);
                    return Err(error_of(&context, index, &item.id, status, &result));
                }
                let kind = match result["result"].as_str() {
                    Some("created") => UpdateResult::Created,
                    Some("noop") => UpdateResult::Noop,
                    Some("deleted") => UpdateResult::Deleted,
                    _ => UpdateResult::Updated,
                };
                Ok(UpdateOutcome {
                    result: kind,
                    version: version_of(&result),
                })
            })
            .collect())
    }
}
