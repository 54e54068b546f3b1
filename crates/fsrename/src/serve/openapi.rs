//! `GET /openapi.json`: the OpenAPI 3.1 description of every route the service serves.
//!
//! The router and the description come from one list of handlers (`utoipa_axum::routes!`,
//! in `api.rs`, `page.rs` and `mod.rs`), each handler carrying its `#[utoipa::path]` with the
//! types it reads and answers (`bodies.rs`, `job.rs`, `error.rs`). What no handler says is added here, in
//! one place, from the guards in front of them (`middleware.rs`): which routes need the token
//! (asked of [`middleware::is_public`], the function the guard itself asks), the 401 and 429
//! of the token's guard, and the 403 of the same-origin and loopback `Host` guards.
//!
//! The description is written out once, when the service starts, and served as is.

use std::sync::{Arc, OnceLock};

use axum::extract::State;
use axum::http::{header, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use utoipa::openapi::path::{HttpMethod, Operation};
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{
    ContentBuilder, HeaderBuilder, InfoBuilder, OpenApi, Ref, RefOr, ResponseBuilder,
    SecurityRequirement,
};
use utoipa::{PartialSchema, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::ErrorBody;
use super::middleware;

/// The security schemes' names in the description.
const BEARER: &str = "bearer";
const SESSION: &str = "session";

/// The description, once written out. Cheap to clone.
#[derive(Clone, Default)]
pub struct Description {
    text: Arc<OnceLock<String>>,
}

impl Description {
    /// Finishes `api` (as the router collected it from the handlers) and keeps it to serve.
    pub fn publish(&self, api: OpenApi) {
        let text = finish(api)
            .to_json()
            .unwrap_or_else(|e| format!(r#"{{"error": "the description failed: {e}"}}"#));
        let _ = self.text.set(text);
    }
}

/// The route of the description itself.
pub fn routes(description: Description) -> OpenApiRouter {
    OpenApiRouter::new()
        .routes(routes!(openapi))
        .with_state(description)
}

/// `GET /openapi.json`.
#[utoipa::path(get, path = "/openapi.json", tag = "service",
    description = "This description (OpenAPI 3.1). Needs no token.",
    responses(
        (status = 200, description = "The description", content_type = "application/json", body = Object),
    ))]
async fn openapi(State(description): State<Description>) -> Response {
    match description.text.get() {
        Some(text) => ([(header::CONTENT_TYPE, "application/json")], text.clone()).into_response(),
        // Published before the service listens: never seen.
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(ErrorBody::new("the description is not written yet")),
        )
            .into_response(),
    }
}

/// Adds to `api` what the guards in front of the handlers do, the security schemes, and the
/// service's name and version.
pub fn finish(mut api: OpenApi) -> OpenApi {
    api.info = InfoBuilder::new()
        .title("fsrename serve")
        .version(env!("CARGO_PKG_VERSION"))
        .description(Some(
            "Rename, copy and delete jobs on a tree kept in a document store, run under tree \
             locks; the tree, the locks and the jobs as they run. When the service has tokens \
             (`FSRENAME_TOKEN`, or a token file: `serve --tokens`), every route but the live \
             page, `POST /session` and this description needs one: `Authorization: Bearer \
             <token>`, or the session cookie that `POST /session` sets. Each operation says \
             what its token must be granted (`x-fsrename-needs`): deny unless granted, 403 for \
             what is not, checked before anything is looked up; what a token may not read is \
             absent from every answer. Without tokens, nothing needs one (the service then \
             listens on loopback only). See docs/service.md.",
        ))
        .build();
    let components = api.components.get_or_insert_with(Default::default);
    components.add_security_scheme(
        BEARER,
        SecurityScheme::Http(
            HttpBuilder::new()
                .scheme(HttpAuthScheme::Bearer)
                .description(Some("`Authorization: Bearer <FSRENAME_TOKEN>`"))
                .build(),
        ),
    );
    components.add_security_scheme(
        SESSION,
        SecurityScheme::ApiKey(ApiKey::Cookie(ApiKeyValue::with_description(
            middleware::SESSION_COOKIE,
            "The cookie `POST /session` sets: the token, hex-encoded",
        ))),
    );
    components
        .schemas
        .entry(ErrorBody::name().into_owned())
        .or_insert_with(ErrorBody::schema);
    for (path, item) in api.paths.paths.iter_mut() {
        let operations = [
            (HttpMethod::Get, Method::GET, &mut item.get),
            (HttpMethod::Post, Method::POST, &mut item.post),
            (HttpMethod::Put, Method::PUT, &mut item.put),
            (HttpMethod::Delete, Method::DELETE, &mut item.delete),
            (HttpMethod::Patch, Method::PATCH, &mut item.patch),
            (HttpMethod::Head, Method::HEAD, &mut item.head),
            (HttpMethod::Options, Method::OPTIONS, &mut item.options),
            (HttpMethod::Trace, Method::TRACE, &mut item.trace),
        ];
        for (kind, method, operation) in operations {
            if let Some(operation) = operation.as_mut() {
                guard(operation, kind, &method, path);
            }
        }
    }
    api
}

/// What a token must be granted for `method` on `path` (see `grants.rs`), in words.
pub fn needs(method: &Method, path: &str) -> &'static str {
    match (method.as_str(), path) {
        ("POST", "/renames") => "`rename` on `from` and on the parent of `to`",
        ("POST", "/copies") => "`read` on `from`, `copy` on the parent of `to`",
        ("POST", "/deletes") => "`delete` on `path` (the whole subtree under it)",
        ("GET", "/tree") => {
            "`read` on `path`; on a directory above a grant, it lists the way down to what the \
             token may read, and nothing else"
        }
        ("GET", "/metrics") => "`admin` on `/`",
        ("GET", "/locks") => {
            "none: it lists the locks on paths the token may `read`, and those naming no path \
             with `admin` on `/`"
        }
        ("GET", "/events") => "none: it sends what `GET /locks` and `GET /jobs` show the token",
        ("GET", p)
            if ["/jobs", "/renames", "/copies", "/deletes"]
                .iter()
                .any(|list| p.starts_with(list)) =>
        {
            "none: it shows the token's own jobs, and others' under its `admin` grants (any \
             other is absent, 404)"
        }
        _ => "none",
    }
}

/// Adds to `operation` (`method` on `path`) what the guards answer before its handler runs.
fn guard(operation: &mut Operation, kind: HttpMethod, method: &Method, path: &str) {
    if middleware::is_public(method, path) {
        // An empty list: no security for this operation, whatever the document says.
        operation.security = Some(Vec::new());
    } else {
        operation.security = Some(vec![
            SecurityRequirement::new(BEARER, Vec::<String>::new()),
            SecurityRequirement::new(SESSION, Vec::<String>::new()),
        ]);
        add(
            operation,
            StatusCode::UNAUTHORIZED,
            "The service has a token and the request sent none, or a wrong one",
            None,
        );
        add(
            operation,
            StatusCode::TOO_MANY_REQUESTS,
            "Too many wrong tokens from this address: refused before its token is compared",
            Some(("retry-after", "Seconds to wait")),
        );
        let needs = needs(method, path);
        operation.description = Some(format!(
            "{} Needs (with tokens): {needs}.",
            operation.description.as_deref().unwrap_or_default()
        ));
        operation
            .extensions
            .get_or_insert_with(Default::default)
            .insert(
                "x-fsrename-needs".to_owned(),
                serde_json::Value::from(needs),
            );
        if needs != "none" && !needs.starts_with("none:") {
            add(
                operation,
                StatusCode::FORBIDDEN,
                "The token is not granted what the operation needs (`x-fsrename-needs`), \
                 whatever exists",
                None,
            );
        }
    }
    let forbidden = if kind == HttpMethod::Get {
        "A `Host` that is not a loopback name, on a service that listens on loopback"
    } else {
        "A request from another site (`Origin`, `Sec-Fetch-Site`), or a `Host` that is not a \
         loopback name on a service that listens on loopback"
    };
    add(operation, StatusCode::FORBIDDEN, forbidden, None);
}

/// Adds the answer `status` with an [`ErrorBody`] to `operation`; if the handler answers
/// `status` too, adds the guard's reason to its description.
fn add(
    operation: &mut Operation,
    status: StatusCode,
    description: &str,
    header: Option<(&str, &str)>,
) {
    let mut response = ResponseBuilder::new().description(description).content(
        "application/json",
        ContentBuilder::new()
            .schema(Some(Ref::from_schema_name(ErrorBody::name())))
            .build(),
    );
    if let Some((name, about)) = header {
        response = response.header(
            name,
            HeaderBuilder::new()
                .schema(u64::schema())
                .description(Some(about))
                .build(),
        );
    }
    match operation.responses.responses.get_mut(status.as_str()) {
        Some(RefOr::T(own)) => own.description = format!("{} Or: {description}", own.description),
        Some(RefOr::Ref(_)) => {}
        None => {
            let response = RefOr::T(response.build());
            operation
                .responses
                .responses
                .insert(status.as_str().to_owned(), response);
        }
    }
}
