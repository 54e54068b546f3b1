//! Sending one request: retries of what may be sent again, and reading the answer.
//!
//! 429 and 503 mean the request was not carried out, and a refused connection means it never
//! arrived, so those are retried for every call, with jittered exponential backoff, until the
//! retry deadline. 502, 504, timeouts and dropped connections leave the outcome unknown: only
//! requests marked [`Retry::Always`] are sent again.

use std::future::Future;
use std::time::Duration;

use elasticsearch::http::response::Response;
use serde_json::Value;

use super::access;
use super::response::{error_of, shorten};
use super::ElasticStore;
use crate::error::{Result, StoreError};
use crate::retry::{Jitter, RetryPolicy};

/// Whether a request may be sent again when its outcome is unknown.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Retry {
    /// Reads, refreshes, index creation, closing a search context: sending again changes
    /// nothing.
    Always,
    /// Writes: sent again only when they certainly were not carried out.
    IfNotCarriedOut,
}

impl ElasticStore {
    /// Sends the request `make` builds (again, if it may be retried); returns the status and
    /// the body. Statuses are not judged here, except the retryable ones.
    pub(super) async fn send<F, Fut>(
        &self,
        context: &str,
        retry: Retry,
        make: F,
    ) -> Result<(u16, Value)>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = std::result::Result<Response, elasticsearch::Error>>,
    {
        let mut backoff = resend_policy(self.inner.config.retry_deadline).start();
        let started = std::time::Instant::now();
        loop {
            // A read after a write waits for a node shown current (`verified.rs`).
            let checked = if retry == Retry::Always {
                self.verify_reads().await
            } else {
                Ok(())
            };
            let sent = match checked {
                Err(message) => Err(message),
                Ok(()) if retry == Retry::Always => {
                    Ok(super::nodes::NodePool::reading(make()).await)
                }
                Ok(()) => Ok(make().await),
            };
            let sent = match sent {
                Ok(sent) => sent,
                Err(message) => {
                    let Some(pause) = backoff.next() else {
                        return Err(StoreError::Transient {
                            context: context.to_owned(),
                            message,
                        });
                    };
                    tracing::debug!(%context, %message, "no node shown current; retrying");
                    tokio::time::sleep(pause).await;
                    continue;
                }
            };
            let failure = match sent {
                Ok(response) => {
                    let status = response.status_code().as_u16();
                    // A node that cannot serve is skipped for a while; one that answers is up.
                    if matches!(status, 502..=504) {
                        self.inner.nodes.mark_down(response.url());
                    } else {
                        self.inner.nodes.mark_up(response.url());
                    }
                    // A write carried out (or refused by a document's version, which only a
                    // primary in the cluster tells): its node is where reads go next.
                    if retry == Retry::IfNotCarriedOut
                        && ((200..300).contains(&status) || status == 409)
                    {
                        self.inner.nodes.mark_wrote(response.url());
                    }
                    let again = matches!(status, 429 | 503)
                        || (retry == Retry::Always && matches!(status, 502 | 504));
                    let node = response.url().origin().ascii_serialization();
                    match response.bytes().await {
                        Ok(bytes) if !again => {
                            let parsed = parse_answer(&bytes);
                            let config = &self.inner.config;
                            let mut refused =
                                access::refusal(status, parsed.as_ref().ok(), &node, config);
                            if status == 400 && !matches!(parsed, Ok(Value::Object(_))) {
                                refused = access::plain_to_tls(&node).await;
                            }
                            if let Some(message) = refused {
                                return Err(StoreError::Rejected {
                                    context: context.to_owned(),
                                    status: Some(status),
                                    message,
                                });
                            }
                            let body = parsed.map_err(|e| StoreError::Backend {
                                context: context.to_owned(),
                                message: format!(
                                    "HTTP {status} with a body that is not JSON ({e}): {}",
                                    cut(&String::from_utf8_lossy(&bytes))
                                ),
                            })?;
                            match failed_shards(&body) {
                                // A search or count some shards did not answer (a node died
                                // holding their copies) is a short answer, not the answer.
                                Some(failed) => (retry == Retry::Always, failed),
                                None => return Ok((status, body)),
                            }
                        }
                        Ok(bytes) => (
                            true,
                            format!("HTTP {status}: {}", cut(&String::from_utf8_lossy(&bytes))),
                        ),
                        Err(e) => (
                            retry == Retry::Always,
                            format!("reading the answer failed: {e}"),
                        ),
                    }
                }
                Err(e) => {
                    // A certificate that cannot be trusted stays so: said at once.
                    let node = url_of(&e).map(|url| url.origin().ascii_serialization());
                    let config = &self.inner.config;
                    let node = node.as_deref().unwrap_or(&config.url);
                    let mut fatal = access::tls_failure(&e, node, config);
                    // A connection taken and closed unanswered, before any answer at all.
                    if fatal.is_none()
                        && !self.inner.nodes.has_answered()
                        && connect_failure(&e).is_none()
                    {
                        fatal = access::plain_to_tls(node).await;
                    }
                    if let Some(message) = fatal {
                        return Err(StoreError::Backend {
                            context: context.to_owned(),
                            message,
                        });
                    }
                    // A refused or dropped connection, a timeout: the node is skipped for a
                    // while, and a retry goes to the next one.
                    if let Some(url) = url_of(&e) {
                        self.inner.nodes.mark_down(url);
                    }
                    if let Some(cause) = connect_failure(&e) {
                        self.first_contact(context, &cause, started.elapsed())?;
                    }
                    (retry == Retry::Always || never_arrived(&e), e.to_string())
                }
            };
            let (may_retry, message) = failure;
            let pause = if may_retry { backoff.next() } else { None };
            let Some(pause) = pause else {
                return Err(StoreError::Transient {
                    context: context.to_owned(),
                    message,
                });
            };
            tracing::debug!(%context, %message, "transient failure; retrying");
            // Before a first answer, the last try comes at the first-contact deadline, not a
            // long pause after it.
            let pause = match self.inner.config.first_contact {
                Some(deadline) if !self.inner.nodes.has_answered() => {
                    pause.min(deadline.saturating_sub(started.elapsed()))
                }
                _ => pause,
            };
            tokio::time::sleep(pause).await;
        }
    }

    /// A connection failed with `cause` `waited` into a call: before any node has ever
    /// answered, fails the call once the first-contact deadline has passed
    /// ([`super::ElasticConfig::first_contact`]), and says once that it is still trying.
    fn first_contact(&self, context: &str, cause: &str, waited: Duration) -> Result<()> {
        let nodes = &self.inner.nodes;
        if nodes.has_answered() {
            return Ok(());
        }
        let config = &self.inner.config;
        if waited >= config.first_contact.unwrap_or(config.retry_deadline) {
            return Err(StoreError::Backend {
                context: context.to_owned(),
                message: format!(
                    "cannot connect to {}: {cause} (no node has answered; is the server running there?)",
                    nodes.origins()
                ),
            });
        }
        // A command that set a short deadline says why it failed soon enough; a service
        // that waits says that it does.
        if config.first_contact.is_none() && nodes.first_waited() {
            tracing::warn!(
                nodes = %nodes.origins(),
                %cause,
                deadline = ?config.retry_deadline,
                "cannot connect to the store yet; retrying"
            );
        }
        Ok(())
    }

    /// Sends and returns the body of a 2xx answer; anything else becomes its error.
    pub(super) async fn ok<F, Fut>(
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
}

/// An answer's body as JSON (`null` if empty), parsed from its bytes as they came: a copy of
/// it as text first was one more pass over, and one more allocation of, every page of a scan.
/// A body that is not UTF-8 is read as its text would be, each bad sequence replaced.
fn parse_answer(bytes: &[u8]) -> serde_json::Result<Value> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(Value::Null);
    }
    serde_json::from_slice(bytes).or_else(|e| match std::str::from_utf8(bytes) {
        Ok(_) => Err(e),
        Err(_) => serde_json::from_str(&String::from_utf8_lossy(bytes)),
    })
}

/// For a search or count answer that some shards did not give, what is missing: its hits or
/// count are partial, and a page taken as whole would skip documents. Two shapes: shards that
/// failed (`_shards.failed`, with `failures` saying why: a node lost between the query and the
/// answer), and shards with no active copy at all (the node holding the only one died, or its
/// other copy was marked stale). Elasticsearch does not count the second kind as failed: it
/// leaves them out of `successful` only (`SearchResponse::getFailedShards`), so an answer with
/// `failed` 0 can still lack a shard. Anomaly 10 of `docs/reliability.md`: a rename's check
/// took such an answer, missed the destination, and moved onto it.
fn failed_shards(body: &Value) -> Option<String> {
    if !body["hits"].is_object() && body.get("count").is_none() {
        return None;
    }
    let shards = &body["_shards"];
    let total = shards["total"].as_u64().unwrap_or(0);
    let failed = shards["failed"].as_u64().unwrap_or(0);
    // Skipped shards (left out because they cannot match) are counted in `successful` too.
    let successful = shards["successful"].as_u64().unwrap_or(total);
    if failed > 0 {
        let reason = shards["failures"][0]["reason"]["reason"]
            .as_str()
            .or(shards["failures"][0]["reason"]["type"].as_str())
            .unwrap_or("no reason given");
        return Some(format!(
            "{failed} of {total} shards failed ({reason}): a partial answer"
        ));
    }
    (successful < total).then(|| {
        format!(
            "{} of {total} shards did not answer (no active copy): a partial answer",
            total - successful
        )
    })
}

/// How the client sends again what the server did not carry out: pauses from 50 ms doubling
/// to 2 s, each between half of its ceiling and all of it (jittered, so that clients that
/// failed together do not retry together), until `deadline` (the configured retry deadline).
pub(super) fn resend_policy(deadline: Duration) -> RetryPolicy {
    RetryPolicy::new(FIRST_PAUSE, Duration::from_secs(2))
        .jitter(Jitter::Equal)
        .deadline(deadline)
}

/// The first pause before a retry.
pub(super) const FIRST_PAUSE: Duration = Duration::from_millis(50);

/// Sleeps the pause of [`resend_policy`] whose ceiling is `pause`; returns the next ceiling,
/// twice as long, at most 2 s. For a loop that keeps its own deadline.
pub(super) async fn back_off(pause: Duration) -> Duration {
    let mut backoff = RetryPolicy::new(pause, pause).jitter(Jitter::Equal).start();
    tokio::time::sleep(backoff.next_pause()).await;
    (pause * 2).min(Duration::from_secs(2))
}

fn cut(text: &str) -> String {
    shorten(&Value::String(text.to_owned()))
}

/// Returns the URL of the request that failed with `error`, if the error says.
fn url_of(error: &elasticsearch::Error) -> Option<&elasticsearch::http::Url> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = source {
        if let Some(http) = e.downcast_ref::<reqwest::Error>() {
            return http.url();
        }
        source = e.source();
    }
    None
}

/// What failed, if `error` is a failure to connect (refused, no such host, no route): the
/// innermost cause, which says more than "error sending request".
fn connect_failure(error: &elasticsearch::Error) -> Option<String> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    let mut connect = false;
    let mut innermost = None;
    while let Some(e) = source {
        if let Some(http) = e.downcast_ref::<reqwest::Error>() {
            connect |= http.is_connect();
        }
        innermost = Some(e);
        source = e.source();
    }
    let cause = innermost?.to_string();
    // `Connection refused (os error 111)` reads better without its number, lowercased.
    let cause = match cause.split_once(" (os error") {
        Some((text, _)) => text.to_lowercase(),
        None => cause,
    };
    connect.then_some(cause)
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

#[cfg(test)]
mod tests {
    use super::{failed_shards, parse_answer};
    use serde_json::json;

    #[test]
    fn answers_parse_from_their_bytes_empty_as_null_and_bad_utf8_as_its_text() {
        assert_eq!(parse_answer(b"").ok(), Some(json!(null)));
        assert_eq!(parse_answer(b" \n").ok(), Some(json!(null)));
        assert_eq!(
            parse_answer(br#"{"a":"\u00e9"}"#).ok(),
            Some(json!({"a": "\u{e9}"}))
        );
        assert_eq!(
            parse_answer(b"{\"a\":\"x\xffy\"}").ok(),
            Some(json!({"a": "x\u{fffd}y"}))
        );
        assert!(parse_answer(b"<html>").is_err());
    }

    #[test]
    fn a_whole_answer_is_not_partial() {
        let whole = json!({"_shards": {"total": 3, "successful": 3, "skipped": 1, "failed": 0},
            "hits": {"hits": []}});
        assert_eq!(failed_shards(&whole), None);
        let count = json!({"count": 4, "_shards": {"total": 1, "successful": 1, "failed": 0}});
        assert_eq!(failed_shards(&count), None);
        // Not a search: a write's `_shards` counts copies, not shards of an answer.
        let write =
            json!({"_shards": {"total": 2, "successful": 1, "failed": 0}, "result": "created"});
        assert_eq!(failed_shards(&write), None);
        // An index pattern that matched nothing: no shard to miss.
        let none =
            json!({"_shards": {"total": 0, "successful": 0, "failed": 0}, "hits": {"hits": []}});
        assert_eq!(failed_shards(&none), None);
    }

    #[test]
    fn a_failed_shard_makes_an_answer_partial() {
        let body = json!({"_shards": {"total": 3, "successful": 2, "failed": 1,
            "failures": [{"reason": {"type": "node_disconnected_exception", "reason": "gone"}}]},
            "hits": {"hits": []}});
        let said = failed_shards(&body).expect("partial");
        assert!(said.contains("1 of 3 shards failed (gone)"), "{said}");
    }

    /// What Elasticsearch answers while a shard has no active copy: 200, `failed` 0, the
    /// shard missing from `successful` only.
    #[test]
    fn a_shard_with_no_active_copy_makes_an_answer_partial() {
        let body = json!({"_shards": {"total": 3, "successful": 2, "skipped": 0, "failed": 0},
            "hits": {"total": {"value": 0, "relation": "eq"}, "hits": []}});
        let said = failed_shards(&body).expect("partial");
        assert!(said.contains("1 of 3 shards did not answer"), "{said}");
        let count = json!({"count": 7, "_shards": {"total": 3, "successful": 1, "failed": 0}});
        let said = failed_shards(&count).expect("partial");
        assert!(said.contains("2 of 3 shards did not answer"), "{said}");
    }
}
