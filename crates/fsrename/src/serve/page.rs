//! The live page at `/`: HTML, CSS and JavaScript built into the binary (no CDN, nothing to
//! install), reading `GET /tree`, `GET /events` and posting to `POST /renames`.

use axum::http::header;
use axum::response::IntoResponse;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

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

/// `GET /`: the page.
#[utoipa::path(get, path = "/", tag = "page",
    description = "The live page (needs no token: it holds no secret, and asks for the token).",
    responses((status = 200, description = "The page", content_type = "text/html; charset=utf-8", body = String)))]
async fn page() -> impl IntoResponse {
    asset("text/html; charset=utf-8", HTML)
}

/// `GET /page.css`: the page's style.
#[utoipa::path(get, path = "/page.css", tag = "page",
    description = "The live page's style sheet (needs no token).",
    responses((status = 200, description = "The style sheet", content_type = "text/css; charset=utf-8", body = String)))]
async fn style() -> impl IntoResponse {
    asset("text/css; charset=utf-8", CSS)
}

/// `GET /page.js`: the page's script.
#[utoipa::path(get, path = "/page.js", tag = "page",
    description = "The live page's script (needs no token).",
    responses((status = 200, description = "The script", content_type = "text/javascript; charset=utf-8", body = String)))]
async fn script() -> impl IntoResponse {
    asset("text/javascript; charset=utf-8", JS)
}

/// The page's routes.
pub fn routes() -> OpenApiRouter {
    OpenApiRouter::new()
        .routes(routes!(page))
        .routes(routes!(style))
        .routes(routes!(script))
}
