//! Operator API of the decision applications, nested under `/admin`
//! behind the admin token: `GET /admin/pdp/apps` (every application, its
//! active set, its URLs and its reloads), `POST /admin/pdp/apps/reload`
//! (every application), `POST /admin/pdp/apps/{app}/reload` (one), and
//! an application's shadow mode, as the gateway's `/admin/shadow`:
//! `GET|PUT|DELETE /admin/pdp/apps/{app}/shadow` (rules in `shadow.rs`).

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

use super::App;
use super::lifecycle::{reload_all, reload_app};
use crate::error::AppError;
use crate::gateway::Gateway;
use crate::lifecycle::Attempt;
use crate::lifecycle::admin::{ShadowQuery, ShadowStart, shadow_listing, shadow_rejected};
use crate::store::shadow::Of;

/// The routes (merged into the admin router).
pub fn routes() -> Router<Arc<Gateway>> {
    Router::new()
        .route("/pdp/apps", get(list))
        .route("/pdp/apps/reload", post(reload_every))
        .route("/pdp/apps/{app}/reload", post(reload_one))
        .route(
            "/pdp/apps/{app}/shadow",
            get(shadow_status).put(shadow_start).delete(shadow_stop),
        )
}

async fn list(State(gw): State<Arc<Gateway>>, headers: HeaderMap) -> impl IntoResponse {
    let base = crate::mcp::public_url::base_url(&gw, &headers);
    let apps: Vec<Value> = gw
        .pdp
        .apps()
        .iter()
        .map(|app| described(&gw, app, &base))
        .collect();
    Json(json!({
        "dir": gw.pdp.dir().display().to_string(),
        "defaultApp": gw.config.pdp.default_app,
        "apps": apps,
    }))
}

/// One application as the listing shows it (and the console's Policy set
/// page).
pub fn described(gw: &Gateway, app: &App, base: &str) -> Value {
    let status = app.status();
    let is_default = gw.config.pdp.default_app.as_deref() == Some(app.name.as_str());
    let mut entry = json!({
        "name": app.name,
        "state": "unavailable",
        "default": is_default,
        "baseUrl": format!("{base}/pdp/{}", app.name),
        "metadataUrl": format!("{base}{}/pdp/{}", super::metadata::PATH, app.name),
        "lastReload": status.last_attempt,
        "lastError": status.last_error,
    });
    if let Some(set) = app.active() {
        let b = &set.bundle;
        entry["state"] = "active".into();
        entry["namespace"] = json!(set.vocabulary.namespace);
        entry["hash"] = json!(b.hash);
        entry["loadedAt"] = json!(b.loaded_at);
        entry["schema"] = json!(b.schema_path);
        entry["files"] = json!(b.files.iter().map(|f| &f.path).collect::<Vec<_>>());
        entry["policyIds"] = json!(b.policy_ids);
        entry["warnings"] = json!(b.warnings);
        entry["entityTypes"] = json!(set.entity_type_names());
        entry["actions"] = json!(set.action_names());
        entry["data"] =
            json!({ "path": set.data.path, "hash": set.data.hash, "entities": set.data.count });
    }
    entry["shadow"] = json!(app.shadow.status());
    entry
}

async fn reload_every(State(gw): State<Arc<Gateway>>) -> impl IntoResponse {
    let attempts: Vec<Value> = reload_all(&gw, "admin")
        .await
        .into_iter()
        .map(|(name, attempt)| {
            let (Ok(a) | Err(a)) = attempt;
            json!({ "app": name, "attempt": a })
        })
        .collect();
    Json(json!({ "apps": attempts }))
}

async fn reload_one(State(gw): State<Arc<Gateway>>, Path(app): Path<String>) -> Response {
    if !crate::ids::valid_app_name(&app) {
        return AppError::BadRequest(format!(
            "`{app}` is not an application name ({})",
            crate::ids::APP_NAME_RULE
        ))
        .into_response();
    }
    match reload_app(&gw, &app, "admin").await {
        Ok(a) if a.result == "removed" => {
            AppError::NotFound(format!("no application folder `{app}`")).into_response()
        }
        Ok(a) => Json(json!({ "app": app, "attempt": a })).into_response(),
        Err(a) => rejected(&app, a),
    }
}

fn rejected(app: &str, attempt: Attempt) -> Response {
    (
        StatusCode::UNPROCESSABLE_ENTITY,
        Json(json!({
            "error": {
                "code": "policy_set_rejected",
                "message": attempt.message.clone().unwrap_or_default(),
            },
            "app": app,
            "attempt": attempt,
        })),
    )
        .into_response()
}

/// The application `name`, if it is one.
fn known(gw: &Gateway, name: &str) -> Result<Arc<App>, AppError> {
    gw.pdp
        .app(name)
        .ok_or_else(|| AppError::NotFound(format!("no decision application `{name}`")))
}

/// `GET /admin/pdp/apps/{app}/shadow`: its candidate's counters and the
/// newest divergences (`?limit=`).
async fn shadow_status(
    State(gw): State<Arc<Gateway>>,
    Path(name): Path<String>,
    query: Result<Query<ShadowQuery>, QueryRejection>,
) -> Result<Json<Value>, AppError> {
    let app = known(&gw, &name)?;
    shadow_listing(&gw, Of::Application(&app.name), app.shadow.status(), query).await
}

/// `PUT /admin/pdp/apps/{app}/shadow {"policiesDir"}`: loads the candidate
/// folder and shadows it (422 with its diagnostics when it does not load).
async fn shadow_start(
    State(gw): State<Arc<Gateway>>,
    Path(name): Path<String>,
    payload: Result<Json<ShadowStart>, JsonRejection>,
) -> Result<Response, AppError> {
    let Json(req) = payload.map_err(|e| AppError::BadRequest(e.body_text()))?;
    let app = known(&gw, &name)?;
    let dir = std::path::PathBuf::from(&req.policies_dir);
    Ok(match super::shadow::start(&app, dir).await {
        Ok(status) => Json(json!({ "active": true, "candidate": status })).into_response(),
        Err(e) => shadow_rejected(&e),
    })
}

/// `DELETE /admin/pdp/apps/{app}/shadow`: stops it; its final counters.
async fn shadow_stop(
    State(gw): State<Arc<Gateway>>,
    Path(name): Path<String>,
) -> Result<Json<Value>, AppError> {
    let app = known(&gw, &name)?;
    match app.shadow.stop() {
        Some(status) => Ok(Json(json!({ "active": false, "candidate": status }))),
        None => Err(AppError::NotFound(format!(
            "no shadow candidate is running for `{name}`"
        ))),
    }
}
