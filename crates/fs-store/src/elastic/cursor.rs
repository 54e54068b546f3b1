//! What a paged search keeps open on the server, a point in time or a scroll: opening it,
//! carrying it in the opaque [`Cursor`], counting it, closing it.
//!
//! Each is a search context the server holds until it is closed or its keep-alive runs out,
//! and a server holds only so many (`search.max_open_scroll_context`, 500 by default): past
//! that, every search fails. So a context is closed, and the close waited for, as soon as its
//! search is over: after the last page, after a failed page, or when the caller stops early
//! ([`HeldCursors::close_cursor`](crate::HeldCursors::close_cursor)). A close spawned and not waited
//! for never runs in a process that exits next, which is how a CLI run used to leave its
//! scrolls behind.
//!
//! Every context this handle opens gets a key, kept in [`OpenContexts`] until it is closed:
//! closing twice sends one request, and [`ElasticStore::open_cursors`] can count them.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use elasticsearch::http::headers::HeaderMap;
use elasticsearch::http::request::JsonBody;
use elasticsearch::http::Method;
use elasticsearch::{ClearScrollParts, OpenPointInTimeParts};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::config::Paging;
use super::request::Retry;
use super::response::{error_of, shorten};
use super::ElasticStore;
use crate::error::{Result, StoreError};
use crate::types::Cursor;

/// Where a paged search stands; serialised into the opaque [`Cursor`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct PageCursor {
    /// The key of the context in the register of the handle that opened it.
    pub(super) key: ContextKey,
    /// The context on the server.
    pub(super) context: Context,
    /// The sort values of the last hit, for `search_after` (points in time only).
    pub(super) after: Option<Value>,
}

/// A search context on the server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub(super) enum Context {
    /// A point in time; OpenSearch opens and closes them at its own paths.
    Pit { id: String, opensearch: bool },
    /// A scroll.
    Scroll { id: String },
}

impl Context {
    fn describe(&self) -> &'static str {
        match self {
            Context::Pit { .. } => "point in time",
            Context::Scroll { .. } => "scroll",
        }
    }
}

/// Names one context opened by one handle (and its clones) of this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub(super) struct ContextKey {
    handle: u64,
    serial: u64,
}

/// The contexts a handle opened and has not closed.
#[derive(Debug)]
pub(super) struct OpenContexts {
    /// This handle among the handles of this process (the process id in the high half).
    handle: u64,
    next: AtomicU64,
    /// A std mutex: held for a set operation, never across an await.
    open: Mutex<HashSet<u64>>,
}

impl OpenContexts {
    pub(super) fn new() -> OpenContexts {
        static HANDLES: AtomicU64 = AtomicU64::new(0);
        let handle = HANDLES.fetch_add(1, Ordering::Relaxed);
        OpenContexts {
            handle: (u64::from(std::process::id()) << 32) | (handle & 0xffff_ffff),
            next: AtomicU64::new(0),
            open: Mutex::default(),
        }
    }

    fn set(&self) -> std::sync::MutexGuard<'_, HashSet<u64>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a context just opened.
    fn opened(&self) -> ContextKey {
        let serial = self.next.fetch_add(1, Ordering::Relaxed);
        self.set().insert(serial);
        ContextKey {
            handle: self.handle,
            serial,
        }
    }

    /// Takes `key` out of the register before its close; false if this handle already closed
    /// it. A context of another handle is always closed: this one cannot know.
    fn take(&self, key: ContextKey) -> bool {
        key.handle != self.handle || self.set().remove(&key.serial)
    }

    /// Puts `key` back: its close failed, so it stays open until its keep-alive runs out.
    fn restore(&self, key: ContextKey) {
        if key.handle == self.handle {
            self.set().insert(key.serial);
        }
    }

    pub(super) fn len(&self) -> usize {
        self.set().len()
    }
}

impl PageCursor {
    /// Reads the cursor of a page this store returned.
    pub(super) fn from_cursor(context: &str, cursor: &Cursor) -> Result<PageCursor> {
        serde_json::from_value(cursor.0.clone()).map_err(|_| {
            StoreError::rejected(context, format!("invalid cursor {}", shorten(&cursor.0)))
        })
    }

    /// Returns the opaque cursor for the next page.
    pub(super) fn to_cursor(&self, context: &str) -> Result<Cursor> {
        serde_json::to_value(self)
            .map(Cursor)
            .map_err(|e| StoreError::Backend {
                context: context.to_owned(),
                message: e.to_string(),
            })
    }
}

impl ElasticStore {
    /// Returns how many points in time and scrolls this handle (with its clones) opened and
    /// has not closed yet.
    ///
    /// A paged search holds one from its first page to its last, or until its caller closes
    /// it ([`HeldCursors::close_cursor`](crate::HeldCursors::close_cursor)); one-page searches open
    /// none. Anything counted once every search is over is a context left on the server until
    /// its keep-alive runs out. A context whose close failed still counts.
    pub fn open_cursors(&self) -> usize {
        self.inner.contexts.len()
    }

    /// Opens a point in time on `index`.
    pub(super) async fn open_pit(&self, index: &str) -> Result<PageCursor> {
        let context = format!("opening a point in time on `{index}`");
        let opensearch = self.server().await.map(|s| s.opensearch).unwrap_or(false)
            && self.inner.config.paging != Paging::Scroll;
        let keep_alive = self.inner.config.keep_alive_param();
        let client = &self.inner.client;
        let body = if opensearch {
            let path = format!("/{index}/_search/point_in_time");
            let query = [("keep_alive", keep_alive.as_str())];
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
                    .keep_alive(&keep_alive)
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
        Ok(self.opened(
            index,
            Context::Pit {
                id: id.to_owned(),
                opensearch,
            },
        ))
    }

    /// Registers a context the server just opened (a point in time, or a scroll opened by the
    /// first page of its search).
    pub(super) fn opened(&self, index: &str, context: Context) -> PageCursor {
        let key = self.inner.contexts.opened();
        tracing::debug!(%index, kind = context.describe(), open = self.open_cursors(), "opened a search context");
        PageCursor {
            key,
            context,
            after: None,
        }
    }

    /// Closes the context of `cursor` and waits for the server's answer; does nothing if this
    /// handle closed it already. A context the server no longer knows (404) is closed.
    ///
    /// # Errors
    /// Transient and backend failures; the context then stays counted, and expires.
    pub(super) async fn close_context(&self, index: &str, cursor: &PageCursor) -> Result<()> {
        if !self.inner.contexts.take(cursor.key) {
            return Ok(());
        }
        let result = self.send_close(index, &cursor.context).await;
        match &result {
            Ok(()) => {
                tracing::debug!(%index, kind = cursor.context.describe(), open = self.open_cursors(), "closed a search context");
            }
            Err(_) => self.inner.contexts.restore(cursor.key),
        }
        result
    }

    /// Closes as [`ElasticStore::close_context`] does, where a failure must not hide what the
    /// caller is about to return (a page, or another error): it is logged, and the context
    /// expires with its keep-alive.
    pub(super) async fn close_quietly(&self, index: &str, cursor: &PageCursor) {
        if let Err(e) = self.close_context(index, cursor).await {
            tracing::debug!(%index, error = %e, "closing a search context failed; it expires with its keep-alive");
        }
    }

    async fn send_close(&self, index: &str, context: &Context) -> Result<()> {
        let what = format!("closing a {} on `{index}`", context.describe());
        let client = &self.inner.client;
        // Closing twice is harmless, so a close whose answer was lost is sent again.
        let (status, answer) = match context {
            Context::Pit {
                id,
                opensearch: false,
            } => {
                self.send(&what, Retry::Always, || {
                    client
                        .close_point_in_time()
                        .body(json!({ "id": id }))
                        .send()
                })
                .await?
            }
            Context::Pit {
                id,
                opensearch: true,
            } => {
                self.send(&what, Retry::Always, || {
                    client.transport().send(
                        Method::Delete,
                        "/_search/point_in_time",
                        HeaderMap::new(),
                        None::<&()>,
                        Some(JsonBody::new(json!({ "pit_id": [id] }))),
                        None,
                    )
                })
                .await?
            }
            Context::Scroll { id } => {
                self.send(&what, Retry::Always, || {
                    client
                        .clear_scroll(ClearScrollParts::None)
                        .body(json!({ "scroll_id": id }))
                        .send()
                })
                .await?
            }
        };
        match status {
            // 404: expired or closed already; either way it is gone.
            200..=299 | 404 => Ok(()),
            _ => Err(error_of(&what, index, "", status, &answer)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_context_is_closed_once_and_counted_until_then() {
        let contexts = OpenContexts::new();
        let a = contexts.opened();
        let b = contexts.opened();
        assert_eq!(contexts.len(), 2);
        assert!(contexts.take(a));
        assert!(!contexts.take(a), "closed already: nothing to send");
        assert!(contexts.take(b));
        contexts.restore(b);
        assert_eq!(contexts.len(), 1, "a failed close leaves it open");
        let other = OpenContexts::new();
        assert!(
            contexts.take(other.opened()),
            "another handle's context is closed: this one cannot know"
        );
        assert!(contexts.take(b));
        assert_eq!(contexts.len(), 0);
    }

    #[test]
    fn cursors_round_trip_and_foreign_ones_are_refused() {
        let cursor = PageCursor {
            key: OpenContexts::new().opened(),
            context: Context::Scroll { id: "s".into() },
            after: None,
        };
        let opaque = cursor.to_cursor("c").expect("serialisable");
        assert_eq!(PageCursor::from_cursor("c", &opaque).expect("ours"), cursor);
        let foreign = Cursor(json!(["/clinton", 3]));
        assert!(matches!(
            PageCursor::from_cursor("c", &foreign),
            Err(StoreError::Rejected { .. })
        ));
    }
}
