//! Operator API for an org's rate limits (nested under `/admin`, behind
//! the admin token):
//!
//! - `GET /orgs/{org}/rate-limits`: the buckets in force and the override;
//! - `PUT /orgs/{org}/rate-limits {key?, agent?, org?}` (each
//!   `{perSecond, burst}`): replaces the override; a bucket left out keeps
//!   the configured one;
//! - `DELETE /orgs/{org}/rate-limits`: back to the configured buckets.
//!
//! A change is stored before it is answered and invalidates the org's
//! cached override on every instance of the database.

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::response::IntoResponse;
use axum::routing::get;
use serde_json::Value;

use super::Override;
use crate::cluster::coherence;
use crate::error::AppError;
use crate::gateway::Gateway;
use crate::store::rate_limits as rows;

/// The routes (merged into `/admin`, which adds the token check).
pub fn routes() -> Router<Arc<Gateway>> {
    Router::new().route(
        "/orgs/{org}/rate-limits",
        get(get_limits).put(put_limits).delete(delete_limits),
    )
}

/// The answer of all three.
fn view(gw: &Gateway, org: &str, override_: Option<Override>) -> Value {
    super::describe(org, &gw.config.rate_limits, override_)
}

async fn get_limits(
    State(gw): State<Arc<Gateway>>,
    Path(org): Path<String>,
) -> Result<impl IntoResponse, AppError> {
    gw.store.require_org(&org).await?;
    let o = gw.rate_limits.load_override(&org).await?;
    Ok(Json(view(&gw, &org, o)))
}

async fn put_limits(
    State(gw): State<Arc<Gateway>>,
    Path(org): Path<String>,
    payload: Result<Json<Override>, JsonRejection>,
) -> Result<impl IntoResponse, AppError> {
    let Json(req) = payload?;
    req.validate()
        .map_err(|e| AppError::BadRequest(e.to_string()))?;
    gw.store.require_org(&org).await?;
    let text = serde_json::to_string(&req).map_err(|e| AppError::BadRequest(e.to_string()))?;
    let o = org.clone();
    gw.store.read(move |c| rows::set(c, &o, &text)).await?;
    coherence::changed(&gw, &org).await;
    Ok(Json(view(&gw, &org, Some(req))))
}

async fn delete_limits(
    State(gw): State<Arc<Gateway>>,
    Path(org): Path<String>,
) -> Result<impl IntoResponse, AppError> {
    gw.store.require_org(&org).await?;
    let o = org.clone();
    gw.store.read(move |c| rows::clear(c, &o)).await?;
    coherence::changed(&gw, &org).await;
    Ok(Json(view(&gw, &org, None)))
}
