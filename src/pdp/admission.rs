//! HTTP admission of an AuthZEN evaluation request, in order: the
//! `X-Request-ID` (400 over its bound) → the application asked (the
//! default one at `/access/v1/…`: 404 without one) → the caller, a key or
//! a token (401), who may ask it (403, whether it exists or not; rules in
//! `caller.rs`) → it has a set (404 unknown, 503 never loaded) →
//! `Content-Type: application/json` (400) → the body: its size (413),
//! empty (400), its nesting (400), JSON (400). Nothing is decided or
//! written before all passed.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderMap, header};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use serde_json::Value;

use super::caller::{Caller, caller};
use super::error::PdpError;
use crate::gateway::Gateway;
use crate::policy::application::AppSet;

/// The header a PEP names its request with, echoed on the answer.
pub const REQUEST_ID: &str = "x-request-id";

/// Longest `X-Request-ID` recorded.
pub const MAX_REQUEST_ID_BYTES: usize = 256;

/// A request past admission.
#[derive(Debug)]
pub struct Admitted {
    /// Who asks (a key of the PDP role for this application, or a token
    /// granting its scope).
    pub caller: Caller,
    /// The application asked.
    pub app: Arc<super::App>,
    /// The application's active set.
    pub set: Arc<AppSet>,
    /// The body.
    pub body: Value,
    /// The `X-Request-ID`, if sent.
    pub request_id: Option<String>,
}

/// Admits a request for `app` (`None`: the default application).
pub async fn admit(
    gw: &Gateway,
    app: Option<&str>,
    headers: &HeaderMap,
    body: Body,
) -> Result<Admitted, PdpError> {
    let request_id = request_id(headers)?;
    let name = match app {
        Some(name) => name,
        None => gw
            .config
            .pdp
            .default_app
            .as_deref()
            .ok_or(PdpError::NoDefault)?,
    };
    let caller = caller(gw, headers, name, app.is_none()).await?;
    let app = gw
        .pdp
        .app(name)
        .ok_or_else(|| PdpError::UnknownApp(name.to_string()))?;
    let set = app
        .active()
        .ok_or_else(|| PdpError::NotLoaded(name.to_string()))?;
    json_content(headers)?;
    let body = read_json(gw, headers, body).await?;
    Ok(Admitted {
        caller,
        app,
        set,
        body,
        request_id,
    })
}

/// The `X-Request-ID`, when sent: visible ASCII of at most
/// [`MAX_REQUEST_ID_BYTES`].
fn request_id(headers: &HeaderMap) -> Result<Option<String>, PdpError> {
    let Some(value) = headers.get(REQUEST_ID) else {
        return Ok(None);
    };
    let text = value
        .to_str()
        .map_err(|_| PdpError::RequestId("`X-Request-ID` must be visible ASCII".into()))?;
    if text.len() > MAX_REQUEST_ID_BYTES {
        return Err(PdpError::RequestId(format!(
            "`X-Request-ID` is longer than {MAX_REQUEST_ID_BYTES} bytes"
        )));
    }
    Ok(Some(text.to_string()))
}

/// `Content-Type: application/json` (parameters such as `charset` allowed).
fn json_content(headers: &HeaderMap) -> Result<(), PdpError> {
    let declared = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(str::trim);
    match declared {
        Some(t) if t.eq_ignore_ascii_case("application/json") => Ok(()),
        _ => Err(PdpError::ContentType),
    }
}

/// The body as JSON, within `pdp.max_body_bytes` and
/// `limits.max_json_depth` (checked before any parser runs).
async fn read_json(gw: &Gateway, headers: &HeaderMap, body: Body) -> Result<Value, PdpError> {
    let max = gw.config.pdp.max_body_bytes;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return Err(PdpError::TooLarge(max));
    }
    let bytes = match Limited::new(body, max).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => {
            return Err(PdpError::TooLarge(max));
        }
        Err(e) => return Err(PdpError::Body(e.to_string())),
    };
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(PdpError::EmptyBody);
    }
    let depth = gw.config.limits.max_json_depth;
    if crate::mcp::jsonrpc::depth_exceeds(&bytes, depth) {
        return Err(PdpError::TooDeep(depth));
    }
    serde_json::from_slice(&bytes).map_err(|e| PdpError::Json(e.to_string()))
}
