//! The AuthZEN routes: the evaluation and search endpoints of each
//! application at its own base path and of the default one at the root,
//! their metadata documents, and the `X-Request-ID` echo around all of
//! them.

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

use super::admission::{self, REQUEST_ID};
use super::error::PdpError;
use super::input::{self, Bounds, SearchKind, Semantic};
use super::metadata;
use crate::gateway::Gateway;

/// The routes (merged into the gateway's router).
pub fn routes() -> Router<Arc<Gateway>> {
    Router::new()
        .route("/access/v1/evaluation", post(default_evaluation))
        .route("/access/v1/evaluations", post(default_evaluations))
        .route("/pdp/{app}/access/v1/evaluation", post(app_evaluation))
        .route("/pdp/{app}/access/v1/evaluations", post(app_evaluations))
        .route("/access/v1/search/{kind}", post(default_search))
        .route("/pdp/{app}/access/v1/search/{kind}", post(app_search))
        .route(metadata::PATH, get(metadata::default_document))
        .route(
            &format!("{}/pdp/{{app}}", metadata::PATH),
            get(metadata::app_document),
        )
}

/// Echoes the request's `X-Request-ID` on its answer, whatever it is.
pub async fn echo_request_id(req: Request, next: Next) -> Response {
    let id = req.headers().get(REQUEST_ID).cloned();
    let mut resp = next.run(req).await;
    if let Some(id) = id {
        resp.headers_mut().insert(REQUEST_ID, id);
    }
    resp
}

async fn default_evaluation(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    answered(evaluation(&gw, None, &headers, body).await)
}

async fn app_evaluation(
    State(gw): State<Arc<Gateway>>,
    Path(app): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    answered(evaluation(&gw, Some(&app), &headers, body).await)
}

async fn default_evaluations(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    answered(evaluations(&gw, None, &headers, body).await)
}

async fn app_evaluations(
    State(gw): State<Arc<Gateway>>,
    Path(app): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    answered(evaluations(&gw, Some(&app), &headers, body).await)
}

async fn default_search(
    State(gw): State<Arc<Gateway>>,
    Path(kind): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    match search_kind(&kind) {
        Some(kind) => answered(super::search::search(&gw, kind, None, &headers, body).await),
        None => not_found(),
    }
}

async fn app_search(
    State(gw): State<Arc<Gateway>>,
    Path((app, kind)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    match search_kind(&kind) {
        Some(kind) => answered(super::search::search(&gw, kind, Some(&app), &headers, body).await),
        None => not_found(),
    }
}

/// `search/{kind}`: `subject`, `resource` or `action`.
fn search_kind(kind: &str) -> Option<SearchKind> {
    match kind {
        "subject" => Some(SearchKind::Subject),
        "resource" => Some(SearchKind::Resource),
        "action" => Some(SearchKind::Action),
        _ => None,
    }
}

fn not_found() -> Response {
    axum::http::StatusCode::NOT_FOUND.into_response()
}

fn answered(result: Result<Value, PdpError>) -> Response {
    match result {
        Ok(body) => Json(body).into_response(),
        Err(e) => e.into_response(),
    }
}

/// `POST …/access/v1/evaluation`: one decision.
async fn evaluation(
    gw: &Gateway,
    app: Option<&str>,
    headers: &HeaderMap,
    body: Body,
) -> Result<Value, PdpError> {
    let admitted = admission::admit(gw, app, headers, body).await?;
    let one = input::evaluation(&admitted.body, &Bounds::of(&gw.config.pdp))?;
    let answers =
        super::evaluate::decide(gw, &admitted, &[Ok(one)], Semantic::ExecuteAll, false).await?;
    answers.into_iter().next().ok_or(PdpError::Unavailable)
}

/// `POST …/access/v1/evaluations`: decisions in request order; without
/// `evaluations`, the one decision also as `/evaluation` answers it.
async fn evaluations(
    gw: &Gateway,
    app: Option<&str>,
    headers: &HeaderMap,
    body: Body,
) -> Result<Value, PdpError> {
    let admitted = admission::admit(gw, app, headers, body).await?;
    let batch = input::evaluations(&admitted.body, &Bounds::of(&gw.config.pdp))?;
    let answers = super::evaluate::decide(
        gw,
        &admitted,
        &batch.evaluations,
        batch.semantic,
        !batch.single,
    )
    .await?;
    // Without `evaluations`, the one decision is also answered as
    // `/evaluation` answers it.
    let single = batch.single.then(|| answers.first().cloned()).flatten();
    let mut body = json!({ "evaluations": answers });
    if let (Some(Value::Object(one)), Value::Object(top)) = (single, &mut body) {
        top.extend(one);
    }
    Ok(body)
}
