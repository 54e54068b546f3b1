//! The audit trail: one JSON line for every request that changes something (any method but
//! `GET`, `HEAD` and `OPTIONS`) or is refused (401, 403, 429), with when, which token (its
//! name, never its secret), from where, what, on which paths, and how it ended.
//!
//! A job's line is written, and synced to disk, before the job is stored (and so before any
//! instance can run it): a job that started is in the trail, even after `kill -9` of the
//! service. If storing it then fails, a second line says so. Other lines are written as their
//! answer goes out (`layer`). To a file (`serve --audit FILE`: appended, reopened on SIGHUP
//! for log rotation), or to standard error.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use anyhow::Context;
use axum::extract::{ConnectInfo, Request};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use serde::Serialize;

use crate::contract::job::now_ms;
use crate::contract::Work;
use crate::output::to_stderr;

/// Where the audit trail goes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum AuditTo {
    /// Nowhere (`demo --serve`, tests).
    #[default]
    Off,
    /// Standard error, a line each.
    Stderr,
    /// This file, appended, each line synced to disk.
    File(PathBuf),
}

/// One line of the trail.
#[derive(Debug, Serialize)]
pub struct AuditLine<'a> {
    /// When, RFC 3339, UTC.
    pub at: String,
    /// When, epoch milliseconds.
    pub at_ms: i64,
    /// The token's name; empty when the request carried none that the service knows.
    pub token: &'a str,
    /// The client's address.
    pub client: String,
    /// The request's id (`x-request-id`).
    pub request_id: &'a str,
    /// The method, the path and the query: `POST /renames`, `GET /tree?path=/home/bob`.
    pub request: String,
    /// The paths it named: `from` and `to`, or `path` (as the service read them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paths: Option<Paths>,
    /// The answer's status.
    pub status: u16,
    /// `accepted`, `done`, or `refused: ...` with the reason the answer gave.
    pub outcome: String,
    /// The job's id, for a job accepted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
}

/// The paths a request named.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum Paths {
    /// A rename's or a copy's.
    Moved {
        /// The source.
        from: String,
        /// The destination.
        to: String,
    },
    /// A delete's.
    One {
        /// The path.
        path: String,
    },
}

impl Paths {
    /// The paths of `work`.
    pub fn of(work: &Work) -> Paths {
        match work {
            Work::Rename { from, to } | Work::Copy { from, to } => Paths::Moved {
                from: from.to_string(),
                to: to.to_string(),
            },
            Work::Delete { path, .. } => Paths::One {
                path: path.to_string(),
            },
        }
    }
}

/// Who made a request, for its line: the token's name, the client, the request's id, what it
/// asked. The authentication guard puts it in the request's extensions.
#[derive(Debug, Clone)]
pub struct Requester {
    /// The caller.
    pub caller: super::grants::Caller,
    /// Whether the service has tokens: a job then records who submitted it.
    pub named: bool,
    /// Where from.
    pub client: SocketAddr,
    /// `x-request-id`.
    pub request_id: String,
    /// `POST /renames`, `GET /tree?path=/home/bob`: the method, the path and the query.
    pub request: String,
}

impl Requester {
    /// `caller`, who sent `request`: its client address, its `x-request-id` and what it asks.
    /// The query is kept (`GET /tree?path=/home/bob` says what was refused); no secret
    /// travels in a query, the token comes in a header or the cookie.
    pub fn of(request: &Request, caller: super::grants::Caller, named: bool) -> Requester {
        let client = request
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map_or(SocketAddr::from(([0, 0, 0, 0], 0)), |c| c.0);
        let request_id = request
            .headers()
            .get("x-request-id")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let uri = request.uri();
        let asked = uri
            .path_and_query()
            .map_or_else(|| uri.path(), |p| p.as_str());
        Requester {
            caller,
            named,
            client,
            request_id,
            request: format!("{} {asked}", request.method()),
        }
    }
}

/// The trail. Cheap to clone.
#[derive(Clone)]
pub struct Audit {
    to: AuditTo,
    file: Arc<Mutex<Option<std::fs::File>>>,
}

impl std::fmt::Debug for Audit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Audit").field("to", &self.to).finish()
    }
}

/// The marker an answer carries once its line is written (by its handler).
#[derive(Debug, Clone, Copy)]
pub struct Written;

/// The reason an error answer gives, for its line (`error.rs` puts it on every error answer).
#[derive(Debug, Clone)]
pub struct Reason(pub String);

impl Audit {
    /// The trail to `to`; a file is opened (created if missing) now.
    ///
    /// # Errors
    /// The file cannot be opened for appending.
    pub fn open(to: AuditTo) -> anyhow::Result<Audit> {
        let file = match &to {
            AuditTo::File(path) => Some(append(path)?),
            AuditTo::Off | AuditTo::Stderr => None,
        };
        Ok(Audit {
            to,
            file: Arc::new(Mutex::new(file)),
        })
    }

    /// Whether lines go anywhere.
    pub fn is_on(&self) -> bool {
        self.to != AuditTo::Off
    }

    /// Opens the file again (SIGHUP, after a rotation moved it away): lines go to a new file
    /// at the path from now on.
    ///
    /// # Errors
    /// The file cannot be opened: lines go on to the old one.
    pub fn reopen(&self) -> anyhow::Result<()> {
        if let AuditTo::File(path) = &self.to {
            let file = append(path)?;
            *self.file.lock().unwrap_or_else(|p| p.into_inner()) = Some(file);
        }
        Ok(())
    }

    /// Writes `line` and, to a file, syncs it to disk before returning.
    ///
    /// # Errors
    /// The line could not be written or synced.
    pub async fn write(&self, line: &AuditLine<'_>) -> anyhow::Result<()> {
        let text = serde_json::to_string(line)?;
        match &self.to {
            AuditTo::Off => Ok(()),
            AuditTo::Stderr => {
                to_stderr(text);
                Ok(())
            }
            AuditTo::File(path) => {
                let (file, path) = (Arc::clone(&self.file), path.clone());
                tokio::task::spawn_blocking(move || {
                    let mut file = file.lock().unwrap_or_else(|p| p.into_inner());
                    let file = file.as_mut().context("the audit file is not open")?;
                    writeln!(file, "{text}")
                        .and_then(|()| file.sync_data())
                        .with_context(|| format!("writing the audit file `{}`", path.display()))
                })
                .await
                .context("the audit writer")?
            }
        }
    }

    /// A line for `requester`'s request, now.
    pub fn line<'a>(
        requester: &'a Requester,
        paths: Option<Paths>,
        status: StatusCode,
        outcome: String,
        job: Option<String>,
    ) -> AuditLine<'a> {
        let at_ms = now_ms();
        AuditLine {
            at: rfc3339(at_ms),
            at_ms,
            token: requester.caller.name(),
            client: requester.client.to_string(),
            request_id: &requester.request_id,
            request: requester.request.clone(),
            paths,
            status: status.as_u16(),
            outcome,
            job,
        }
    }
}

/// Opens `path` for appending, creating it.
fn append(path: &std::path::Path) -> anyhow::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("opening the audit file `{}`", path.display()))
}

/// Epoch milliseconds as RFC 3339, UTC, to the millisecond.
fn rfc3339(ms: i64) -> String {
    let at =
        std::time::UNIX_EPOCH + std::time::Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    humantime::format_rfc3339_millis(at).to_string()
}

/// Whether a request of `method` answered `status` goes into the trail: it changes something,
/// or it was refused.
pub fn audited(method: &Method, status: StatusCode) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
        || matches!(
            status,
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN | StatusCode::TOO_MANY_REQUESTS
        )
}

/// Writes the line of every request that goes into the trail and whose handler did not write
/// it: refusals by the guards (a wrong token, another site), and every other change.
pub async fn layer(
    axum::extract::State(audit): axum::extract::State<Audit>,
    request: Request,
    next: Next,
) -> Response {
    if !audit.is_on() {
        return next.run(request).await;
    }
    let method = request.method().clone();
    // Who asked, before the request is known: a request refused before `authenticate` knew
    // its caller (a wrong token) is recorded as from no token.
    let unknown = Requester::of(&request, super::grants::Caller::new("", Vec::new()), true);
    let response = next.run(request).await;
    let status = response.status();
    if !audited(&method, status) || response.extensions().get::<Written>().is_some() {
        return response;
    }
    let requester = response
        .extensions()
        .get::<Requester>()
        .cloned()
        .unwrap_or(unknown);
    let outcome = match response.extensions().get::<Reason>() {
        Some(Reason(reason)) if status.is_client_error() || status.is_server_error() => {
            format!("refused: {reason}")
        }
        _ if status.is_success() => "done".to_owned(),
        _ => format!("refused: {status}"),
    };
    let line = Audit::line(&requester, None, status, outcome, None);
    if let Err(e) = audit.write(&line).await {
        tracing::error!(error = %e, "the audit trail could not be written");
    }
    response
}
