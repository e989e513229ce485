//! The AuthZEN PDP metadata documents (`GET /.well-known/authzen-
//! configuration`): public, one per application. An application's PDP
//! identifier is `{base}/pdp/<app>`, so its document is at
//! `/.well-known/authzen-configuration/pdp/<app>` (the well-known string
//! inserted after the host); the default application's identifier is
//! `{base}` and its document the bare well-known path. `{base}` is
//! `public_url` when set, else the `Host` the client used when allowed
//! (`crate::mcp::public_url`). Every endpoint is named, the three search
//! APIs included.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::error::PdpError;
use crate::gateway::Gateway;

/// The well-known path.
pub const PATH: &str = "/.well-known/authzen-configuration";

/// Seconds a client may cache a document.
const MAX_AGE_SECS: u32 = 300;

/// The document of the PDP whose identifier is `pdp`.
pub fn document(pdp: &str) -> Value {
    json!({
        "policy_decision_point": pdp,
        "access_evaluation_endpoint": format!("{pdp}/access/v1/evaluation"),
        "access_evaluations_endpoint": format!("{pdp}/access/v1/evaluations"),
        "search_subject_endpoint": format!("{pdp}/access/v1/search/subject"),
        "search_resource_endpoint": format!("{pdp}/access/v1/search/resource"),
        "search_action_endpoint": format!("{pdp}/access/v1/search/action"),
    })
}

/// `GET /.well-known/authzen-configuration`: the default application's.
pub async fn default_document(State(gw): State<Arc<Gateway>>, headers: HeaderMap) -> Response {
    let Some(name) = gw.config.pdp.default_app.as_deref() else {
        return PdpError::NoDefault.into_response();
    };
    if gw.pdp.app(name).is_none() {
        return PdpError::UnknownApp(name.to_string()).into_response();
    }
    served(document(&crate::mcp::public_url::base_url(&gw, &headers)))
}

/// `GET /.well-known/authzen-configuration/pdp/{app}`.
pub async fn app_document(
    State(gw): State<Arc<Gateway>>,
    Path(app): Path<String>,
    headers: HeaderMap,
) -> Response {
    if gw.pdp.app(&app).is_none() {
        return PdpError::UnknownApp(app).into_response();
    }
    let base = crate::mcp::public_url::base_url(&gw, &headers);
    served(document(&format!("{base}/pdp/{app}")))
}

fn served(doc: Value) -> Response {
    let mut resp = Json(doc).into_response();
    if let Ok(v) = HeaderValue::from_str(&format!("max-age={MAX_AGE_SECS}")) {
        resp.headers_mut().insert(header::CACHE_CONTROL, v);
    }
    resp
}
