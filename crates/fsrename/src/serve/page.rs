//! The live page at `/`: HTML, CSS and JavaScript built into the binary (no CDN, nothing to
//! install), reading `GET /tree`, `GET /events` and posting to `POST /renames`.

use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

const HTML: &str = include_str!("page/index.html");
const CSS: &str = include_str!("page/page.css");
const JS: &str = include_str!("page/page.js");

/// No script but the page's own, no style from elsewhere, nothing framed.
const POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

fn asset(kind: &'static str, body: &'static str) -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::CACHE_CONTROL, "no-cache"),
            (header::CONTENT_SECURITY_POLICY, POLICY),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        body,
    )
}

/// The page's routes.
pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route(
            "/",
            get(|| async { asset("text/html; charset=utf-8", HTML) }),
        )
        .route(
            "/page.css",
            get(|| async { asset("text/css; charset=utf-8", CSS) }),
        )
        .route(
            "/page.js",
            get(|| async { asset("text/javascript; charset=utf-8", JS) }),
        )
}
