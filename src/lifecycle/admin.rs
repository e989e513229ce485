//! Operator API of the policy lifecycle and auditor access, nested under
//! `/admin` behind the admin token:
//! `GET /admin/policies`, `POST /admin/policies/reload`,
//! `POST /admin/policies/accept`,
//! `GET|PUT|DELETE /admin/shadow`, `GET /admin/decisions`.

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::json;

use super::shadow::ShadowStatus;
use crate::error::AppError;
use crate::gateway::Gateway;
use crate::store::audit_query::{self, DecisionFilter, Order};
use crate::store::policy_candidates;
use crate::store::shadow::Of;

/// Most decisions one page returns.
pub const MAX_PAGE: usize = 1000;

/// The lifecycle routes (merged into the admin router).
pub fn routes() -> Router<Arc<Gateway>> {
    Router::new()
        .route("/policies", get(active_policies))
        .route("/policies/reload", post(reload))
        .route("/policies/accept", post(accept))
        .route(
            "/shadow",
            get(shadow_status).put(shadow_start).delete(shadow_stop),
        )
        .route("/decisions", get(list_decisions))
}

async fn active_policies(State(gw): State<Arc<Gateway>>) -> impl IntoResponse {
    let b = gw.pep.current();
    let status = gw.lifecycle.status();
    let mut typed: Vec<&String> = b.typed.keys().collect();
    typed.sort();
    // Every live instance on this database, each with the hash it runs
    // (each instance reloads from its own files).
    let instances = match crate::cluster::membership::live_instances(&gw).await {
        Ok(list) => json!(list),
        Err(e) => {
            tracing::warn!(error = %e, "cannot list instances");
            serde_json::Value::Null
        }
    };
    Json(json!({
        "instanceId": gw.cluster.instance_id,
        "instances": instances,
        "hash": b.hash,
        "loadedAt": b.loaded_at,
        "policyIds": b.policy_ids,
        "files": b.files.iter().map(|f| f.path.clone()).collect::<Vec<_>>(),
        "schema": b.schema_path,
        "typedTools": typed,
        "warnings": b.warnings,
        "lastReload": status.last_attempt,
        "lastError": status.last_error,
        "prove": gw.config.lifecycle.prove,
        "lastProof": gw.lifecycle.last_proof().as_deref(),
        "acceptedHash": last_accepted(&gw).await,
    }))
}

fn rejected(gw: &Gateway, attempt: crate::lifecycle::Attempt) -> Response {
    let refused = attempt.result == "refused";
    let mut body = json!({
        "error": {
            "code": if refused { "policy_set_refused" } else { "policy_set_rejected" },
            "message": attempt.message.clone().unwrap_or_default(),
        },
        "attempt": attempt,
        "activeHash": gw.pep.current().hash,
    });
    if refused {
        body["proof"] = json!(gw.lifecycle.last_proof().as_deref());
    }
    (StatusCode::UNPROCESSABLE_ENTITY, Json(body)).into_response()
}

async fn reload(State(gw): State<Arc<Gateway>>) -> Response {
    reload_as(&gw, "admin").await
}

/// `POST /admin/policies/accept` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Accept {
    hash: String,
}

/// `POST /admin/policies/accept {"hash":…}`: accepts the candidate of that
/// exact hash despite its proof, in the store (so it holds for every
/// instance on the database and across restarts) with its trail record,
/// then reloads; the candidate activates when the policy files still hash
/// to it. Only a candidate a proof refused can be accepted: any other hash
/// is a 409 that changes nothing.
async fn accept(
    State(gw): State<Arc<Gateway>>,
    payload: Result<Json<Accept>, JsonRejection>,
) -> Result<Response, AppError> {
    let Json(req) = payload.map_err(|e| AppError::BadRequest(e.body_text()))?;
    if req.hash.len() != 64 || !req.hash.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(AppError::BadRequest(
            "`hash` must be a policy set hash (64 hex digits)".into(),
        ));
    }
    let hash = req.hash.to_ascii_lowercase();
    let h = hash.clone();
    let refused = gw
        .store
        .read(move |c| policy_candidates::get(c, &h))
        .await?;
    if refused.is_none() {
        return Err(AppError::Conflict(format!(
            "no reload proof refused a candidate `{hash}`: only a refused candidate can be accepted (its hash is in the refusal: `POST /admin/policies/reload`'s 422, `lastProof.candidateHash`)"
        )));
    }
    let live = gw.pep.current().hash.clone();
    let event = crate::audit::events::policy_set_event(
        crate::audit::events::POLICY_SET_ACCEPTED,
        (&hash, &live),
        &json!({ "candidateHash": hash, "liveHash": live, "by": "admin" }),
    );
    let at = crate::ids::now_rfc3339();
    gw.store
        .writer()
        .submit(vec![
            policy_candidates::accepted_op(&hash, &at, "admin"),
            crate::store::WriteOp::Decision(Box::new(event)),
        ])
        .await?;
    tracing::warn!(candidate = %hash, "policy candidate accepted despite its proof");
    Ok(reload_as(&gw, "accept").await)
}

/// The candidate accepted last (any instance's), for `GET /admin/policies`.
async fn last_accepted(gw: &Gateway) -> Option<String> {
    match gw.store.read(policy_candidates::last_accepted).await {
        Ok(hash) => hash,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the accepted candidate");
            None
        }
    }
}

async fn reload_as(gw: &Arc<Gateway>, trigger: &str) -> Response {
    match crate::lifecycle::reload::reload(gw, trigger).await {
        Ok(attempt) => Json(json!({
            "result": attempt.result,
            "hash": attempt.hash,
            "testsRun": attempt.tests_run,
            "policyIds": gw.pep.current().policy_ids,
            "warnings": attempt.warnings,
        }))
        .into_response(),
        Err(attempt) => rejected(gw, attempt),
    }
}

/// `PUT /admin/shadow` body (and a decision application's).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct ShadowStart {
    /// The candidate directory.
    pub policies_dir: String,
}

/// `GET /admin/shadow` query (and a decision application's).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ShadowQuery {
    limit: Option<usize>,
}

async fn shadow_status(
    State(gw): State<Arc<Gateway>>,
    query: Result<Query<ShadowQuery>, QueryRejection>,
) -> Result<Json<serde_json::Value>, AppError> {
    let status = gw.lifecycle.shadow.status();
    shadow_listing(&gw, Of::Gateway, status, query).await
}

/// A shadow's counters and its newest divergences (those against its
/// candidate while one runs): `{"active", "candidate", "divergences"}`.
pub(crate) async fn shadow_listing(
    gw: &Gateway,
    of: Of<'_>,
    status: Option<ShadowStatus>,
    query: Result<Query<ShadowQuery>, QueryRejection>,
) -> Result<Json<serde_json::Value>, AppError> {
    let Query(q) = query.map_err(|e| AppError::BadRequest(e.body_text()))?;
    let limit = q.limit.unwrap_or(100).min(MAX_PAGE);
    let hash = status.as_ref().map(|s| s.candidate_hash.clone());
    let app = match of {
        Of::Gateway => None,
        Of::Application(name) => Some(name.to_string()),
    };
    gw.store.writer().flush().await?;
    let recent = gw
        .store
        .read(move |c| {
            let of = app.as_deref().map_or(Of::Gateway, Of::Application);
            crate::store::shadow::recent(c, of, hash.as_deref(), limit)
        })
        .await?;
    Ok(Json(json!({
        "active": status.is_some(),
        "candidate": status,
        "divergences": recent,
    })))
}

/// A shadow candidate that does not load: 422 with its diagnostics.
pub(crate) fn shadow_rejected(e: &crate::policy::PolicyLoadError) -> Response {
    (
        StatusCode::UNPROCESSABLE_ENTITY,
        Json(json!({
            "error": { "code": "policy_set_rejected", "message": e.to_string() },
            "diagnostics": e.diagnostics.iter().map(ToString::to_string).collect::<Vec<_>>(),
        })),
    )
        .into_response()
}

async fn shadow_start(
    State(gw): State<Arc<Gateway>>,
    payload: Result<Json<ShadowStart>, JsonRejection>,
) -> Result<Response, AppError> {
    let Json(req) = payload.map_err(|e| AppError::BadRequest(e.body_text()))?;
    let (gw2, dir) = (Arc::clone(&gw), std::path::PathBuf::from(&req.policies_dir));
    let started = tokio::task::spawn_blocking(move || {
        gw2.lifecycle
            .shadow
            .start(&gw2.config.schema_file, &dir, &gw2.lifecycle.tools())
    })
    .await
    .map_err(|_| AppError::Internal)?;
    Ok(match started {
        Ok(status) => Json(json!({ "active": true, "candidate": status })).into_response(),
        Err(e) => shadow_rejected(&e),
    })
}

async fn shadow_stop(State(gw): State<Arc<Gateway>>) -> Result<impl IntoResponse, AppError> {
    match gw.lifecycle.shadow.stop() {
        Some(status) => Ok(Json(json!({ "active": false, "candidate": status }))),
        None => Err(AppError::NotFound("no shadow candidate is running".into())),
    }
}

/// `GET /admin/decisions` query: the filters plus paging.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct DecisionsQuery {
    org: Option<String>,
    session: Option<String>,
    principal: Option<String>,
    action: Option<String>,
    resource: Option<String>,
    decision: Option<String>,
    since: Option<String>,
    until: Option<String>,
    /// A W3C trace id: the decisions of that trace.
    trace: Option<String>,
    /// A decision application: its decisions only.
    application: Option<String>,
    /// `nextCursor` of the previous page.
    cursor: Option<String>,
    limit: Option<usize>,
    /// `asc` (oldest first, default) or `desc`.
    order: Option<String>,
}

async fn list_decisions(
    State(gw): State<Arc<Gateway>>,
    query: Result<Query<DecisionsQuery>, QueryRejection>,
) -> Result<impl IntoResponse, AppError> {
    let Query(q) = query.map_err(|e| AppError::BadRequest(e.body_text()))?;
    let filter = DecisionFilter {
        org: q.org,
        session: q.session,
        principal: q.principal,
        action: q.action,
        resource: q.resource,
        decision: q.decision,
        since: q.since,
        until: q.until,
        trace: q.trace,
        application: q.application,
    }
    .normalized()
    .map_err(|e| AppError::BadRequest(e.to_string()))?;
    let order = match q.order.as_deref() {
        None | Some("asc") => Order::Asc,
        Some("desc") => Order::Desc,
        Some(o) => {
            return Err(AppError::BadRequest(format!(
                "`order` must be `asc` or `desc`, not `{o}`"
            )));
        }
    };
    let cursor = match q.cursor.as_deref() {
        None => None,
        Some(c) => Some(
            c.parse::<i64>()
                .ok()
                .filter(|n| *n >= 0)
                .ok_or_else(|| AppError::BadRequest(format!("invalid `cursor` `{c}`")))?,
        ),
    };
    let limit = match q.limit {
        None => 100,
        Some(0) => return Err(AppError::BadRequest("`limit` must be at least 1".into())),
        Some(n) if n > MAX_PAGE => {
            return Err(AppError::BadRequest(format!(
                "`limit` must be at most {MAX_PAGE}"
            )));
        }
        Some(n) => n,
    };
    gw.store.writer().flush().await?;
    // One extra row tells whether another page exists.
    let mut rows = gw
        .store
        .read(move |c| audit_query::page_filtered(c, &filter, cursor, order, limit + 1))
        .await?;
    let more = rows.len() > limit;
    rows.truncate(limit);
    let next = if more {
        rows.last().map(|d| d.seq.to_string())
    } else {
        None
    };
    Ok(Json(json!({ "decisions": rows, "nextCursor": next })))
}
