//! The operator API under `/admin`, guarded by the admin bearer token
//! (`CEDARGATE_ADMIN_TOKEN`). Without a token configured these routes are
//! not served at all. Every change invalidates the gateway's caches so it
//! takes effect on the next request. Wrong tokens are throttled per client
//! address and in total (`crate::guesses`): 429 with `Retry-After`.

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get};
use serde_json::json;

use crate::error::AppError;
use crate::gateway::Gateway;
use crate::guesses::throttle::Class;
use crate::guesses::{self, Entry};
use crate::operator::{self, CreateAgent, CreateKey, CreateOrg, CreateProject};
use crate::store::decisions;
use crate::store::tenants;

/// The `/admin` routes (to be nested by the server when a token is set).
pub fn routes(gw: Arc<Gateway>) -> Router<Arc<Gateway>> {
    Router::new()
        .route("/orgs", get(list_orgs).post(create_org))
        .route("/orgs/{org}", delete(delete_org).get(get_org))
        .route(
            "/orgs/{org}/projects",
            get(list_projects).post(create_project),
        )
        .route("/orgs/{org}/projects/{id}", delete(delete_project))
        .route("/orgs/{org}/agents", get(list_agents).post(create_agent))
        .route("/orgs/{org}/agents/{id}", delete(delete_agent))
        .route("/orgs/{org}/keys", get(list_keys).post(create_key))
        .route("/orgs/{org}/keys/{id}", delete(delete_key))
        .route("/orgs/{org}/sessions", get(list_sessions))
        .route("/orgs/{org}/sessions/{id}", delete(delete_session))
        .route("/decisions/{id}", get(get_decision))
        .merge(crate::lifecycle::admin::routes())
        .merge(crate::a2a::admin::routes())
        .merge(crate::upstream::admin::routes())
        .merge(crate::rate_limits::admin::routes())
        .merge(crate::pdp::admin::routes())
        .route_layer(middleware::from_fn_with_state(gw, require_admin))
}

async fn require_admin(State(gw): State<Arc<Gateway>>, req: Request, next: Next) -> Response {
    let Some(expected) = gw.config.admin_token.as_deref() else {
        return AppError::NotFound("the admin API is disabled".into()).into_response();
    };
    let client = guesses::client_of(req.extensions());
    if let Err(t) = guesses::admit(&gw, Class::Operator, client, Entry::Admin).await {
        return throttled(&t);
    }
    match crate::auth::bearer_token(req.headers()) {
        Some(token) if crate::auth::tokens_equal(token, expected) => {
            guesses::succeeded(&gw, Class::Operator, client);
            next.run(req).await
        }
        Some(_) => match guesses::failed(&gw, Class::Operator, client, Entry::Admin).await {
            Err(t) => throttled(&t),
            Ok(()) => AppError::Unauthorized("wrong admin token".into()).into_response(),
        },
        None => {
            AppError::Unauthorized("missing `Authorization: Bearer <admin token>` header".into())
                .into_response()
        }
    }
}

fn throttled(t: &guesses::throttle::Throttled) -> Response {
    AppError::TooManyRequests {
        message: guesses::message(t, "tokens"),
        retry_after_secs: t.retry_after_secs,
    }
    .into_response()
}

async fn create_org(
    State(gw): State<Arc<Gateway>>,
    payload: Result<Json<CreateOrg>, JsonRejection>,
) -> Result<impl IntoResponse, AppError> {
    let Json(req) = payload?;
    let org = gw.store.read(move |c| operator::create_org(c, req)).await?;
    crate::cluster::coherence::changed(&gw, &org.id).await;
    Ok((StatusCode::CREATED, Json(org)))
}

async fn list_orgs(State(gw): State<Arc<Gateway>>) -> Result<impl IntoResponse, AppError> {
    Ok(Json(
        json!({ "orgs": gw.store.read(tenants::list_orgs).await? }),
    ))
}

async fn get_org(
    State(gw): State<Arc<Gateway>>,
    Path(org): Path<String>,
) -> Result<impl IntoResponse, AppError> {
    let id = org.clone();
    match gw.store.read(move |c| tenants::get_org(c, &id)).await? {
        Some(o) => Ok(Json(o)),
        None => Err(AppError::NotFound(format!("org `{org}` not found"))),
    }
}

async fn delete_org(
    State(gw): State<Arc<Gateway>>,
    Path(org): Path<String>,
) -> Result<StatusCode, AppError> {
    let changed_org = org.clone();
    gw.store.read(move |c| tenants::delete_org(c, &org)).await?;
    crate::cluster::coherence::changed(&gw, &changed_org).await;
    Ok(StatusCode::NO_CONTENT)
}

async fn create_project(
    State(gw): State<Arc<Gateway>>,
    Path(org): Path<String>,
    payload: Result<Json<CreateProject>, JsonRejection>,
) -> Result<impl IntoResponse, AppError> {
    let changed_org = org.clone();
    let Json(req) = payload?;
    let p = gw
        .store
        .read(move |c| operator::create_project(c, &org, req))
        .await?;
    crate::cluster::coherence::changed(&gw, &changed_org).await;
    Ok((StatusCode::CREATED, Json(p)))
}

async fn list_projects(
    State(gw): State<Arc<Gateway>>,
    Path(org): Path<String>,
) -> Result<impl IntoResponse, AppError> {
    Ok(Json(
        json!({ "projects": gw.store.read(move |c| tenants::list_projects(c, &org)).await? }),
    ))
}

async fn delete_project(
    State(gw): State<Arc<Gateway>>,
    Path((org, id)): Path<(String, String)>,
) -> Result<StatusCode, AppError> {
    let changed_org = org.clone();
    gw.store
        .read(move |c| tenants::delete_project(c, &org, &id))
        .await?;
    crate::cluster::coherence::changed(&gw, &changed_org).await;
    Ok(StatusCode::NO_CONTENT)
}

async fn create_agent(
    State(gw): State<Arc<Gateway>>,
    Path(org): Path<String>,
    payload: Result<Json<CreateAgent>, JsonRejection>,
) -> Result<impl IntoResponse, AppError> {
    let changed_org = org.clone();
    let Json(req) = payload?;
    let a = gw
        .store
        .read(move |c| operator::create_agent(c, &org, req))
        .await?;
    crate::cluster::coherence::changed(&gw, &changed_org).await;
    Ok((StatusCode::CREATED, Json(a)))
}

async fn list_agents(
    State(gw): State<Arc<Gateway>>,
    Path(org): Path<String>,
) -> Result<impl IntoResponse, AppError> {
    Ok(Json(
        json!({ "agents": gw.store.read(move |c| tenants::list_agents(c, &org)).await? }),
    ))
}

async fn delete_agent(
    State(gw): State<Arc<Gateway>>,
    Path((org, id)): Path<(String, String)>,
) -> Result<StatusCode, AppError> {
    let changed_org = org.clone();
    gw.store
        .read(move |c| tenants::delete_agent(c, &org, &id))
        .await?;
    crate::cluster::coherence::changed(&gw, &changed_org).await;
    Ok(StatusCode::NO_CONTENT)
}

async fn create_key(
    State(gw): State<Arc<Gateway>>,
    Path(org): Path<String>,
    payload: Result<Json<CreateKey>, JsonRejection>,
) -> Result<impl IntoResponse, AppError> {
    let changed_org = org.clone();
    let Json(req) = payload?;
    let (key, secret) = gw
        .store
        .read(move |c| operator::create_key(c, &org, req))
        .await?;
    crate::cluster::coherence::changed(&gw, &changed_org).await;
    let mut created = json!({
        "id": key.id,
        "orgId": key.org_id,
        "label": key.label,
        "createdAt": key.created_at,
        "key": secret,
    });
    if !key.pdp_apps.is_empty() {
        created["pdpApps"] = json!(key.pdp_apps);
    }
    Ok((StatusCode::CREATED, Json(created)))
}

async fn list_keys(
    State(gw): State<Arc<Gateway>>,
    Path(org): Path<String>,
) -> Result<impl IntoResponse, AppError> {
    Ok(Json(
        json!({ "keys": gw.store.read(move |c| tenants::list_keys(c, &org)).await? }),
    ))
}

async fn delete_key(
    State(gw): State<Arc<Gateway>>,
    Path((org, id)): Path<(String, String)>,
) -> Result<StatusCode, AppError> {
    let changed_org = org.clone();
    gw.store
        .read(move |c| tenants::delete_key(c, &org, &id))
        .await?;
    crate::cluster::coherence::changed(&gw, &changed_org).await;
    Ok(StatusCode::NO_CONTENT)
}

async fn list_sessions(
    State(gw): State<Arc<Gateway>>,
    Path(org): Path<String>,
) -> Result<impl IntoResponse, AppError> {
    Ok(Json(
        json!({ "sessions": gw.store.read(move |c| tenants::list_sessions(c, &org)).await? }),
    ))
}

async fn delete_session(
    State(gw): State<Arc<Gateway>>,
    Path((org, id)): Path<(String, String)>,
) -> Result<StatusCode, AppError> {
    let changed_org = org.clone();
    gw.store
        .read(move |c| tenants::delete_session(c, &org, &id))
        .await?;
    crate::cluster::coherence::changed(&gw, &changed_org).await;
    Ok(StatusCode::NO_CONTENT)
}

async fn get_decision(
    State(gw): State<Arc<Gateway>>,
    Path(id): Path<String>,
) -> Result<impl IntoResponse, AppError> {
    let wanted = id.clone();
    match gw.store.read(move |c| decisions::get(c, &wanted)).await? {
        Some(d) => Ok(Json(d)),
        None => Err(AppError::NotFound(format!("decision `{id}` not found"))),
    }
}
