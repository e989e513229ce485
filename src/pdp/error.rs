//! `PdpError`: every refusal of the AuthZEN endpoints, and the one place
//! that maps each to its HTTP status. It renders like the operator API's
//! errors, `{"error": {"code", "message"}}`, and never leaks internals
//! (store failures are logged, answered with a generic message).

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::input::ShapeError;
use crate::policy::application::InputError;

/// Longest message an answer carries: a message quoting a large input
/// (Cedar's type errors quote the value) is shortened, with `…`.
const MAX_MESSAGE_CHARS: usize = 2_000;

/// `message`, shortened to [`MAX_MESSAGE_CHARS`] (with `…`) when longer.
pub fn bounded(message: String) -> String {
    if message.chars().count() > MAX_MESSAGE_CHARS {
        message.chars().take(MAX_MESSAGE_CHARS).collect::<String>() + "…"
    } else {
        message
    }
}

/// A request the decision point refuses.
#[derive(Debug, thiserror::Error)]
pub enum PdpError {
    /// The body is not declared `application/json` (400).
    #[error("the request must have `Content-Type: application/json`")]
    ContentType,
    /// The body is empty (400).
    #[error("the request body is empty")]
    EmptyBody,
    /// The body is not JSON (400).
    #[error("the request body is not JSON: {0}")]
    Json(String),
    /// The body nests deeper than `limits.max_json_depth` (400).
    #[error("the request body nests JSON deeper than {0} levels")]
    TooDeep(usize),
    /// The body is larger than `pdp.max_body_bytes` (413).
    #[error("the request body is larger than {0} bytes")]
    TooLarge(usize),
    /// The body could not be read (400).
    #[error("the request body could not be read: {0}")]
    Body(String),
    /// `X-Request-ID` not visible ASCII, or longer than its bound (400).
    #[error("{0}")]
    RequestId(String),
    /// The body lacks a member or has one of the wrong JSON type (400).
    #[error(transparent)]
    Shape(#[from] ShapeError),
    /// A search's `page.token` is not one for this query, or expired (400).
    #[error(transparent)]
    PageToken(#[from] super::page_token::TokenError),
    /// The request does not fit the application's schema (400).
    #[error(transparent)]
    Input(#[from] InputError),
    /// No credential, or a wrong one (401).
    #[error("{0}")]
    Unauthenticated(String),
    /// The key may not ask this application (403).
    #[error("this key may not ask the application `{0}`")]
    Forbidden(String),
    /// The token may not ask this application: no org, claims over a
    /// bound, or not the application's scope (403).
    #[error("{0}")]
    TokenForbidden(String),
    /// No application by that name (404).
    #[error("no decision application `{0}`")]
    UnknownApp(String),
    /// No default application is configured (404).
    #[error(
        "no default decision application: ask one at `/pdp/<app>/access/v1/…` (or set `pdp.default_app`)"
    )]
    NoDefault,
    /// The application has no valid set (503).
    #[error("the decision application `{0}` has no valid policy set (see `GET /admin/pdp/apps`)")]
    NotLoaded(String),
    /// A rate limit refused the request (429).
    #[error("rate limit of {what} `{subject}` reached; retry after {retry_after_secs} s")]
    RateLimited {
        /// `key` or `org`.
        what: &'static str,
        /// Its id.
        subject: String,
        /// Seconds until a retry may pass.
        retry_after_secs: u64,
    },
    /// The trail's disk is below its minimum (507): nothing decided.
    #[error(
        "insufficient storage: the decision trail cannot record this request until disk space is freed"
    )]
    InsufficientStorage,
    /// The store failed (503): nothing answered as decided.
    #[error("the decision trail is unavailable: nothing was decided or recorded; try again later")]
    Unavailable,
}

impl PdpError {
    /// The status and code of each refusal.
    fn parts(&self) -> (StatusCode, &'static str) {
        match self {
            PdpError::ContentType
            | PdpError::EmptyBody
            | PdpError::Json(_)
            | PdpError::TooDeep(_)
            | PdpError::Body(_)
            | PdpError::RequestId(_) => (StatusCode::BAD_REQUEST, "bad_request"),
            PdpError::Shape(ShapeError::TooMany { .. }) => {
                (StatusCode::BAD_REQUEST, "too_many_evaluations")
            }
            PdpError::Shape(_) => (StatusCode::BAD_REQUEST, "bad_request"),
            PdpError::PageToken(_) => (StatusCode::BAD_REQUEST, "invalid_page_token"),
            PdpError::Input(_) => (StatusCode::BAD_REQUEST, "invalid_request"),
            PdpError::TooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"),
            PdpError::Unauthenticated(_) => (StatusCode::UNAUTHORIZED, "unauthorized"),
            PdpError::Forbidden(_) | PdpError::TokenForbidden(_) => {
                (StatusCode::FORBIDDEN, "forbidden")
            }
            PdpError::UnknownApp(_) | PdpError::NoDefault => (StatusCode::NOT_FOUND, "not_found"),
            PdpError::NotLoaded(_) | PdpError::Unavailable => {
                (StatusCode::SERVICE_UNAVAILABLE, "unavailable")
            }
            PdpError::RateLimited { .. } => (StatusCode::TOO_MANY_REQUESTS, "too_many_requests"),
            PdpError::InsufficientStorage => {
                (StatusCode::INSUFFICIENT_STORAGE, "insufficient_storage")
            }
        }
    }
}

impl IntoResponse for PdpError {
    fn into_response(self) -> Response {
        let (status, code) = self.parts();
        let message = bounded(self.to_string());
        let mut resp = (
            status,
            Json(json!({ "error": { "code": code, "message": message } })),
        )
            .into_response();
        if status == StatusCode::UNAUTHORIZED {
            resp.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if let PdpError::RateLimited {
            retry_after_secs, ..
        } = self
        {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, retry_after_secs.into());
        }
        resp
    }
}
