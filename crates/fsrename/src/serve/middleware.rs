//! Request ids, structured request logs, who a request's token makes it (`tokens.rs`; and how
//! fast a token may be guessed, `guesses.rs`), and the refusal of requests that change
//! something from another site.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::rejection::BytesRejection;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::audit::Requester;
use super::bodies::{SessionAnswer, SessionRequest};
use super::error::{refusal, unreadable, ErrorBody};
use super::guesses::Guesses;
use super::tokens::Keys;

/// Gives every request an id (`x-request-id`, kept if the client sent one) and logs it with
/// its method, path, status and duration.
pub async fn request_log(mut request: Request, next: Next) -> Response {
    let id = request
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= 128)
        .map(str::to_owned)
        .unwrap_or_else(fs_model::FsDoc::new_id);
    let (method, path) = (request.method().clone(), request.uri().path().to_owned());
    if let Ok(value) = HeaderValue::from_str(&id) {
        request.headers_mut().insert("x-request-id", value);
    }
    let started = Instant::now();
    let mut response = next.run(request).await;
    tracing::info!(request_id = %id, %method, %path, status = response.status().as_u16(),
        micros = started.elapsed().as_micros() as u64, "request");
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert("x-request-id", value);
    }
    response
}

/// The cookie a browser keeps once its page was given the token (`POST /session`).
pub const SESSION_COOKIE: &str = "fsrename_token";

/// What needs no token: the live page itself (it holds no secret, and asks for the token
/// when the service wants one), the request that hands the token over, and the API's
/// description (`/openapi.json`): it holds no secret either, is the same for every instance,
/// and a client or a tool needs it to learn how to send the token in the first place. The
/// description marks these routes as needing no token (`openapi.rs` asks this function).
pub fn is_public(method: &Method, path: &str) -> bool {
    match *method {
        Method::GET | Method::HEAD => {
            matches!(path, "/" | "/page.css" | "/page.js" | "/openapi.json")
        }
        Method::POST => path == "/session",
        _ => false,
    }
}

/// What checks the token: the tokens in force, and the wrong guesses so far.
#[derive(Clone)]
pub struct Auth {
    pub keys: Keys,
    pub guesses: Arc<Guesses>,
}

/// Makes every request its caller's: finds the token it carries among those in force
/// (`Authorization: Bearer <token>`, or the session cookie a browser got from `POST /session
/// {"token": ...}`, since an `EventSource` cannot send headers), and puts the caller (a
/// [`Requester`]) in the request's extensions for the handlers, and in the answer's for the
/// audit trail. Refuses a request with no token, or one of no token in force (a revoked one),
/// when the service has tokens; a service without tokens makes everyone a caller who may do
/// everything. The cookie is `HttpOnly` (the page's script never sees the token) and
/// `SameSite=Strict`; it holds the token hex-encoded. A client that sent too many wrong tokens
/// gets 429 instead, whatever it sends (`guesses.rs`).
pub async fn authenticate(State(auth): State<Auth>, mut request: Request, next: Next) -> Response {
    let client = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map_or(SocketAddr::from(([0, 0, 0, 0], 0)), |c| c.0);
    if is_public(request.method(), request.uri().path()) {
        return next.run(request).await;
    }
    let headers = request.headers();
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_owned);
    let secret = bearer.or_else(|| session_cookie(headers).and_then(|hex| unhex(&hex)));
    let caller = if auth.keys.required() {
        let Some(secret) = secret else {
            return unauthorized("missing bearer token");
        };
        if let Err(wait) = auth.guesses.guess(client.ip()) {
            return too_many_guesses(wait);
        }
        match auth.keys.caller(Some(&secret)) {
            Some(caller) => {
                auth.guesses.right(client.ip());
                caller
            }
            None => return unauthorized("wrong bearer token"),
        }
    } else {
        match auth.keys.caller(None) {
            Some(caller) => caller,
            None => return unauthorized("no caller"),
        }
    };
    let requester = Requester::of(&request, caller, auth.keys.required());
    request.extensions_mut().insert(requester.clone());
    let mut response = next.run(request).await;
    response.extensions_mut().insert(requester);
    response
}

fn unauthorized(message: &str) -> Response {
    let mut response = refusal(StatusCode::UNAUTHORIZED, ErrorBody::new(message));
    response
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

/// 429, with the seconds to wait in `Retry-After`.
fn too_many_guesses(wait: Duration) -> Response {
    let seconds = wait.as_secs_f64().ceil().max(1.0) as u64;
    let mut response = refusal(
        StatusCode::TOO_MANY_REQUESTS,
        ErrorBody::new(format!(
            "too many wrong tokens from this address: try again in {seconds} s"
        )),
    );
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    response
}

/// `POST /session {"token": "..."}`: the right token sets the session cookie. Without a
/// configured token it answers `{"token_required": false}`. Wrong tokens count against the
/// client's budget, as the header's do.
#[utoipa::path(post, path = "/session", tag = "service",
    description = "Trades the token for a session cookie (`fsrename_token`, `HttpOnly`, \
        `SameSite=Strict`), which the service then takes in place of the `Authorization` header \
        (a browser's `EventSource` cannot send one). Needs no token itself.",
    request_body = SessionRequest,
    responses(
        (status = 200, description = "The right token (the cookie is set), or none is needed",
            body = SessionAnswer,
            headers(("set-cookie" = String, description = "The session cookie, when a token is required"))),
        (status = 400, description = "No `token` in a JSON object", body = ErrorBody),
        (status = 401, description = "A wrong token (`field`: `token`)", body = ErrorBody),
        (status = 413, description = "A body over `--body-limit`", body = ErrorBody),
        (status = 429, description = "Too many wrong tokens from this address", body = ErrorBody,
            headers(("retry-after" = u64, description = "Seconds to wait"))),
    ))]
pub async fn session(
    State(auth): State<Auth>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    body: Result<axum::body::Bytes, BytesRejection>,
) -> Response {
    if !auth.keys.required() {
        return Json(SessionAnswer {
            token_required: false,
        })
        .into_response();
    }
    // Over `--body-limit`: 413 in JSON, as the API's other routes answer.
    let body = match body {
        Ok(body) => body,
        Err(e) => return unreadable(e).into_response(),
    };
    let given = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v.get("token").and_then(|t| t.as_str()).map(str::to_owned));
    let Some(given) = given else {
        return refusal(
            StatusCode::BAD_REQUEST,
            ErrorBody::naming("token", "expected a JSON object with `token`"),
        );
    };
    if let Err(wait) = auth.guesses.guess(peer.ip()) {
        return too_many_guesses(wait);
    }
    if auth.keys.caller(Some(&given)).is_none() {
        return refusal(
            StatusCode::UNAUTHORIZED,
            ErrorBody::naming("token", "wrong token"),
        );
    }
    auth.guesses.right(peer.ip());
    let cookie = format!(
        "{SESSION_COOKIE}={}; HttpOnly; SameSite=Strict; Path=/",
        hex(&given)
    );
    let mut answer = Json(SessionAnswer {
        token_required: true,
    })
    .into_response();
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        answer.headers_mut().insert(header::SET_COOKIE, value);
    }
    answer
}

/// The session cookie's value, if the request carries one.
fn session_cookie(headers: &axum::http::HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|pair| {
            let (name, value) = pair.trim().split_once('=')?;
            (name == SESSION_COOKIE).then(|| value.to_owned())
        })
}

/// `text`'s bytes in hexadecimal (a cookie value may not hold every character a token may).
fn hex(text: &str) -> String {
    use std::fmt::Write as _;
    text.bytes().fold(String::new(), |mut out, b| {
        let _ = write!(out, "{b:02x}");
        out
    })
}

/// The text `hex` spells in hexadecimal (the session cookie's value), if it spells one.
fn unhex(hex: &str) -> Option<String> {
    if hex.len() % 2 != 0 {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect();
    String::from_utf8(bytes?).ok()
}

/// Refuses a request that changes something (any method but GET, HEAD and OPTIONS) sent by a
/// browser from another site: one whose `Origin` is not this service's own address (the
/// request's `Host`), or `null`, or that the browser marks `Sec-Fetch-Site: cross-site`.
/// Without this, any page the user opens could make their browser post a rename to a service
/// on their loopback: the API reads a JSON body whatever its content type, and a `text/plain`
/// post needs no CORS preflight. Clients that are not browsers send no `Origin` and pass.
pub async fn same_origin(request: Request, next: Next) -> Response {
    match cross_site(&request) {
        None => next.run(request).await,
        Some(why) => refusal(
            StatusCode::FORBIDDEN,
            ErrorBody::new(format!("cross-site request refused: {why}")),
        ),
    }
}

/// Why `request` is a cross-site change, if it is one.
fn cross_site(request: &Request) -> Option<String> {
    if matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    ) {
        return None;
    }
    let headers = request.headers();
    if headers
        .get("sec-fetch-site")
        .is_some_and(|v| v.as_bytes() == b"cross-site")
    {
        return Some("the browser says it comes from another site".to_owned());
    }
    let origin = headers.get(header::ORIGIN)?;
    let origin = origin.to_str().unwrap_or("(not text)");
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    // `scheme://host[:port]`: its authority must be this service's.
    let authority = origin.split_once("://").map(|(_, a)| a);
    if authority.is_some_and(|a| !host.is_empty() && a.eq_ignore_ascii_case(host)) {
        None
    } else {
        Some(format!("Origin `{origin}` is not this service (`{host}`)"))
    }
}

/// Refuses, on a service that listens on a loopback address, a request whose `Host` is not a
/// loopback name (`localhost`, `127.0.0.1`, `[::1]`, with any port). A page of another site
/// can point its own domain name at 127.0.0.1 (DNS rebinding): its requests are then
/// same-origin to the browser, carry that name as `Host`, and would read and change the tree
/// of a service that needs no token on loopback.
pub async fn loopback_host(State(loopback): State<bool>, request: Request, next: Next) -> Response {
    if !loopback {
        return next.run(request).await;
    }
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if is_loopback_name(host) {
        next.run(request).await
    } else {
        refusal(
            StatusCode::FORBIDDEN,
            ErrorBody::new(format!(
                "Host `{host}` is not a loopback name: this service listens on loopback only (open it as http://127.0.0.1:PORT/ or http://localhost:PORT/)"
            )),
        )
    }
}

/// Whether `host` (a `Host` header: a name or address, and maybe a port) names this machine's
/// loopback.
fn is_loopback_name(host: &str) -> bool {
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split_once(']').map_or(rest, |(inside, _)| inside)
    } else {
        host.rsplit_once(':').map_or(host, |(name, _)| name)
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::is_loopback_name;

    #[test]
    fn loopback_names() {
        for yes in [
            "127.0.0.1:7070",
            "localhost:7070",
            "LOCALHOST",
            "[::1]:7070",
            "127.0.0.2",
        ] {
            assert!(is_loopback_name(yes), "{yes}");
        }
        for no in [
            "evil.example:7070",
            "10.0.0.1:7070",
            "",
            "[::2]:1",
            "localhost.evil.example",
        ] {
            assert!(!is_loopback_name(no), "{no}");
        }
    }
}
