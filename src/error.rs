//! `AppError`: the one error type of the JSON operator API
//! (`/admin/*`, `/api/sessions`). It renders as
//! `{"error":{"code":…,"message":…}}` and never leaks internals: store
//! failures are logged and answered with a generic message.

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::store::StoreError;

/// An operator API failure.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// Malformed or invalid input (400).
    #[error("{0}")]
    BadRequest(String),
    /// Missing or wrong credential (401).
    #[error("{0}")]
    Unauthorized(String),
    /// Authenticated but not allowed (403).
    #[error("{0}")]
    Forbidden(String),
    /// No such thing (404).
    #[error("{0}")]
    NotFound(String),
    /// Already exists (409).
    #[error("{0}")]
    Conflict(String),
    /// Too many wrong credentials from this client address, or from all
    /// addresses (429 with `Retry-After`): nothing was checked.
    #[error("{message}")]
    TooManyRequests {
        /// Why.
        message: String,
        /// Whole seconds until an attempt is checked again.
        retry_after_secs: u64,
    },
    /// Storage unavailable (503).
    #[error("storage unavailable")]
    Unavailable,
    /// The disk holding the decision trail is below its free-space minimum
    /// (507): nothing was decided or written.
    #[error(
        "insufficient storage: the decision trail cannot record this request until disk space is freed"
    )]
    InsufficientStorage,
    /// Anything else (500).
    #[error("internal error")]
    Internal,
}

impl AppError {
    fn parts(&self) -> (StatusCode, &'static str) {
        match self {
            AppError::BadRequest(_) => (StatusCode::BAD_REQUEST, "bad_request"),
            AppError::Unauthorized(_) => (StatusCode::UNAUTHORIZED, "unauthorized"),
            AppError::Forbidden(_) => (StatusCode::FORBIDDEN, "forbidden"),
            AppError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            AppError::Conflict(_) => (StatusCode::CONFLICT, "conflict"),
            AppError::TooManyRequests { .. } => {
                (StatusCode::TOO_MANY_REQUESTS, "too_many_requests")
            }
            AppError::Unavailable => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
            AppError::InsufficientStorage => {
                (StatusCode::INSUFFICIENT_STORAGE, "insufficient_storage")
            }
            AppError::Internal => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        }
    }
}

impl From<StoreError> for AppError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound(m) => AppError::NotFound(m),
            StoreError::Conflict(m) => AppError::Conflict(m),
            StoreError::Invalid(m) => AppError::BadRequest(m),
            other => {
                tracing::error!(error = %other, "store failure in operator API");
                AppError::Unavailable
            }
        }
    }
}

/// A JSON body that does not parse is a 400 with the parser's reason.
impl From<JsonRejection> for AppError {
    fn from(e: JsonRejection) -> Self {
        AppError::BadRequest(e.body_text())
    }
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        let (status, code) = self.parts();
        let mut resp = (
            status,
            Json(json!({ "error": { "code": code, "message": self.to_string() } })),
        )
            .into_response();
        if status == StatusCode::UNAUTHORIZED
            && let Ok(v) = "Bearer".parse()
        {
            resp.headers_mut()
                .insert(axum::http::header::WWW_AUTHENTICATE, v);
        }
        if let AppError::TooManyRequests {
            retry_after_secs, ..
        } = self
        {
            resp.headers_mut()
                .insert(axum::http::header::RETRY_AFTER, retry_after_secs.into());
        }
        resp
    }
}
