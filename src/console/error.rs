//! Why a console request failed, rendered as a page with its status.
//! Store internals never reach the page: they are logged.

use axum::http::StatusCode;
use axum::http::header::LOCATION;
use axum::response::{IntoResponse, Response};

use crate::store::StoreError;

/// A console failure.
#[derive(Debug, thiserror::Error)]
pub enum ConsoleError {
    /// Not signed in (a page): redirected to the sign-in form.
    #[error("sign in first")]
    SignIn,
    /// Signed in without the right to do this, or a missing or wrong CSRF
    /// token.
    #[error("{0}")]
    Forbidden(String),
    /// No such decision, job or server.
    #[error("{0}")]
    NotFound(String),
    /// A form value that cannot be used.
    #[error("{0}")]
    BadRequest(String),
    /// A bound was crossed (replay window, record count, running replays).
    #[error("{0}")]
    TooMuch(String),
    /// Too many wrong tokens from this address or from all (429 with
    /// `Retry-After`): the token was not checked.
    #[error("{message}")]
    Throttled {
        /// Why.
        message: String,
        /// Whole seconds until a sign-in is checked again.
        retry_after_secs: u64,
    },
    /// The identity provider could not be reached or answered something
    /// unusable (502).
    #[error("{0}")]
    Provider(String),
    /// The store failed.
    #[error("the store failed")]
    Store(#[from] StoreError),
    /// A page could not be rendered.
    #[error("the page could not be rendered")]
    Render,
    /// A change could not be recorded in the trail (logged where it failed).
    #[error("the change could not be recorded")]
    Internal,
}

impl ConsoleError {
    fn status(&self) -> StatusCode {
        match self {
            ConsoleError::SignIn => StatusCode::SEE_OTHER,
            ConsoleError::Forbidden(_) => StatusCode::FORBIDDEN,
            ConsoleError::NotFound(_) => StatusCode::NOT_FOUND,
            ConsoleError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ConsoleError::TooMuch(_) => StatusCode::UNPROCESSABLE_ENTITY,
            ConsoleError::Throttled { .. } => StatusCode::TOO_MANY_REQUESTS,
            ConsoleError::Provider(_) => StatusCode::BAD_GATEWAY,
            ConsoleError::Store(e) if e.is_unavailable() => StatusCode::SERVICE_UNAVAILABLE,
            ConsoleError::Store(_) | ConsoleError::Render | ConsoleError::Internal => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
        }
    }
}

impl From<super::templates::RenderError> for ConsoleError {
    fn from(_: super::templates::RenderError) -> Self {
        ConsoleError::Render
    }
}

/// An operation shared with the admin API, as a page answers it: a
/// conflict is a form to send again (400), a store failure 503 (logged
/// where it happened).
impl From<crate::error::AppError> for ConsoleError {
    fn from(e: crate::error::AppError) -> Self {
        use crate::error::AppError;
        match e {
            AppError::NotFound(m) => ConsoleError::NotFound(m),
            AppError::Conflict(m) | AppError::BadRequest(m) => ConsoleError::BadRequest(m),
            AppError::Forbidden(m) => ConsoleError::Forbidden(m),
            AppError::Unavailable => {
                ConsoleError::Store(StoreError::Unavailable("the store failed".into()))
            }
            _ => ConsoleError::Internal,
        }
    }
}

impl IntoResponse for ConsoleError {
    fn into_response(self) -> Response {
        if let ConsoleError::SignIn = self {
            return (
                StatusCode::SEE_OTHER,
                [(LOCATION, format!("{}/login", super::PATH))],
            )
                .into_response();
        }
        if let ConsoleError::Store(e) = &self {
            tracing::error!(error = %e, "console: store failed");
        }
        let status = self.status();
        let mut resp = super::templates::error_page(status, &self.to_string());
        if let ConsoleError::Throttled {
            retry_after_secs, ..
        } = self
        {
            resp.headers_mut()
                .insert(axum::http::header::RETRY_AFTER, retry_after_secs.into());
        }
        resp
    }
}
