//! Error answers: every one is `{"error": "...", "field": "..."}` ([`ErrorBody`]), from the
//! handlers ([`ApiError`]) and from the guards in front of them alike, and the framework's
//! own refusals (a body over the limit, a path or query that cannot be read, a route that
//! does not exist, a method a route does not take) are turned into it rather than answered in
//! plain text or with an empty body.

use axum::extract::rejection::{BytesRejection, PathRejection, QueryRejection};
use axum::http::{Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;

/// An error answer: what is wrong and, for a bad request, the field that is.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    /// What went wrong, in words.
    error: String,
    /// The request's field that is wrong (`body`, `from`, `to`, `path`, `strategy`,
    /// `recursive`, `limit`, `depth`, `after`, `id`, `query`, `token`), for a 400, a wrong
    /// token, or a `path` with nothing there (`GET /tree`'s 404).
    #[serde(skip_serializing_if = "Option::is_none")]
    field: Option<String>,
}

impl ErrorBody {
    /// An error that names no field.
    pub fn new(error: impl Into<String>) -> ErrorBody {
        ErrorBody {
            error: error.into(),
            field: None,
        }
    }

    /// An error in the request's `field`.
    pub fn naming(field: &str, error: impl Into<String>) -> ErrorBody {
        ErrorBody {
            error: error.into(),
            field: Some(field.to_owned()),
        }
    }
}

/// An error answer: `{"error": "...", "field": "..."}`.
pub struct ApiError {
    status: StatusCode,
    message: String,
    field: Option<&'static str>,
}

impl ApiError {
    pub fn bad(field: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            field: Some(field),
        }
    }

    pub fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
            field: None,
        }
    }

    /// The same error, blaming the request's `field`.
    pub fn naming(self, field: &'static str) -> ApiError {
        ApiError {
            field: Some(field),
            ..self
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: self.message,
            field: self.field.map(str::to_owned),
        };
        refusal(self.status, body)
    }
}

impl From<super::grants::NotGranted> for ApiError {
    fn from(refused: super::grants::NotGranted) -> ApiError {
        ApiError::new(StatusCode::FORBIDDEN, refused.to_string())
    }
}

impl ApiError {
    /// The answer's status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// What it says.
    pub fn message(&self) -> &str {
        &self.message
    }
}

/// An error answer of `status` with `body`, carrying its reason for the audit trail
/// ([`super::audit::Reason`]).
pub fn refusal(status: StatusCode, body: ErrorBody) -> Response {
    let reason = super::audit::Reason(body.error.clone());
    let mut response = (status, Json(body)).into_response();
    response.extensions_mut().insert(reason);
    response
}

/// A job id in the URL that could not be read (not UTF-8 once decoded, say): 400 naming
/// `id`, in JSON like every other error (axum's own answer is plain text).
impl From<PathRejection> for ApiError {
    fn from(e: PathRejection) -> ApiError {
        ApiError::bad("id", e.body_text())
    }
}

/// A query string that could not be read (not UTF-8 once decoded, say): 400 naming `query`,
/// in JSON like every other error (axum's own answer is plain text).
impl From<QueryRejection> for ApiError {
    fn from(e: QueryRejection) -> ApiError {
        ApiError::bad("query", e.body_text())
    }
}

/// A body that could not be read: over `--body-limit` (413), or cut off (400).
pub fn unreadable(e: BytesRejection) -> ApiError {
    ApiError::new(
        e.status(),
        format!("cannot read the request body: {}", e.body_text()),
    )
}

/// Any path no route serves: 404 naming it (the framework's own answer has an empty body).
pub async fn no_route(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        format!(
            "no route `{method} {}`: GET /openapi.json lists them",
            uri.path()
        ),
    )
}

/// A route asked with a method it does not take: 405 naming both (the framework adds the
/// `Allow` header, listing the methods it takes, but answers with an empty body).
pub async fn wrong_method(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        format!(
            "`{}` does not take {method}: the `Allow` header lists what it takes",
            uri.path()
        ),
    )
}
