//! The proxy's client of the server behind it.

use axum::body::Bytes;
use axum::http::Method;
use serde_json::Value;

use super::encode;

/// The server behind the proxy.
pub(crate) struct Upstream {
    base: String,
    http: reqwest::Client,
}

impl Upstream {
    pub(crate) fn new(base: &str) -> Upstream {
        Upstream {
            base: base.trim_end_matches('/').to_owned(),
            http: reqwest::Client::builder()
                .no_proxy()
                .build()
                .unwrap_or_default(),
        }
    }

    /// Sends a request as it came (path with its query, body, content type); returns the
    /// status and the body.
    pub(crate) async fn send(
        &self,
        method: Method,
        path_and_query: &str,
        content_type: Option<&str>,
        body: Bytes,
    ) -> Result<(u16, Bytes), String> {
        let method = reqwest::Method::from_bytes(method.as_str().as_bytes())
            .map_err(|e| format!("method: {e}"))?;
        let mut request = self
            .http
            .request(method, format!("{}{path_and_query}", self.base));
        if let Some(ct) = content_type {
            request = request.header("content-type", ct);
        }
        if !body.is_empty() {
            request = request.body(body);
        }
        let response = request
            .send()
            .await
            .map_err(|e| format!("upstream {path_and_query}: {e}"))?;
        let status = response.status().as_u16();
        let bytes = response
            .bytes()
            .await
            .map_err(|e| format!("upstream answer to {path_and_query}: {e}"))?;
        Ok((status, bytes))
    }

    /// Sends a JSON body; returns the status and the parsed answer (null if not JSON).
    pub(crate) async fn json(
        &self,
        method: Method,
        path_and_query: &str,
        body: Option<&Value>,
    ) -> Result<(u16, Value), String> {
        let bytes = body.map(|b| Bytes::from(b.to_string())).unwrap_or_default();
        let (status, answer) = self
            .send(method, path_and_query, Some("application/json"), bytes)
            .await?;
        Ok((
            status,
            serde_json::from_slice(&answer).unwrap_or(Value::Null),
        ))
    }

    /// Sends `_bulk` lines (NDJSON) to `index`; returns the status and the answer.
    pub(crate) async fn bulk(
        &self,
        index: Option<&str>,
        lines: &[Value],
        require_alias: bool,
    ) -> Result<(u16, Value), String> {
        let mut body = String::new();
        for line in lines {
            body.push_str(&line.to_string());
            body.push('\n');
        }
        let mut path = match index {
            Some(index) => format!("/{}/_bulk", encode(index)),
            None => "/_bulk".to_owned(),
        };
        // A write through an alias that must be one (a write gate): refused once it is gone.
        if require_alias {
            path.push_str("?require_alias=true");
        }
        let (status, answer) = self
            .send(
                Method::POST,
                &path,
                Some("application/x-ndjson"),
                Bytes::from(body),
            )
            .await?;
        Ok((
            status,
            serde_json::from_slice(&answer).unwrap_or(Value::Null),
        ))
    }
}
