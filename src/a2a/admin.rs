//! Operator API for A2A peers (nested under `/admin`, behind the admin
//! token):
//!
//! - `POST /orgs/{org}/a2a-agents {url, name?, auth?, protocolVersion?}`
//!   fetches and validates the card, then stores the registration with its
//!   health (an unreachable peer is stored as `unreachable`, without tools;
//!   an invalid card is refused and nothing is stored);
//! - `GET /orgs/{org}/a2a-agents`, `GET|DELETE /orgs/{org}/a2a-agents/{id}`;
//! - `POST /orgs/{org}/a2a-agents/{id}/refresh` refetches the card;
//! - `GET|PUT /orgs/{org}/a2a-settings {timeoutMs}`.
//!
//! Every change invalidates the org's tool set and the session views, so it
//! shows on the next request.

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Value, json};

use super::card::{self, ProtocolVersion};
use super::refresh::{self, RefreshError};
use super::registry::{self, CardRow, Fetched, PeerAuth};
use crate::cluster::coherence;
use crate::error::AppError;
use crate::gateway::Gateway;

/// The routes (merged into `/admin`, which adds the token check).
pub fn routes() -> Router<Arc<Gateway>> {
    Router::new()
        .route("/orgs/{org}/a2a-agents", get(list).post(register))
        .route(
            "/orgs/{org}/a2a-agents/{id}",
            get(get_one).delete(deregister),
        )
        .route("/orgs/{org}/a2a-agents/{id}/refresh", post(refresh))
        .route(
            "/orgs/{org}/a2a-settings",
            get(get_settings).put(put_settings),
        )
}

/// `POST /admin/orgs/{org}/a2a-agents`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RegisterAgent {
    /// Base URL of the peer (its card is under `/.well-known/`).
    pub url: String,
    /// Name (default: the card's); its slug names the tools.
    pub name: Option<String>,
    /// Where the bearer credential for the peer is found.
    pub auth: Option<PeerAuth>,
    /// Pin a protocol generation the card declares (`0.3` or `1.0`);
    /// default: the newest the card declares.
    pub protocol_version: Option<String>,
}

/// `PUT /admin/orgs/{org}/a2a-settings`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct A2aSettings {
    /// Wall-clock budget of one outbound call, in milliseconds.
    pub timeout_ms: u64,
}

impl From<RefreshError> for AppError {
    /// A peer deregistered while its card was refetched is gone (404);
    /// store failures map as everywhere in the operator API.
    fn from(e: RefreshError) -> Self {
        match e {
            RefreshError::Deregistered(_) => AppError::NotFound(e.to_string()),
            RefreshError::Store(e) => AppError::from(e),
        }
    }
}

/// Validates the registration input; nothing is fetched or stored yet.
fn check_input(req: &RegisterAgent) -> Result<(reqwest::Url, Option<ProtocolVersion>), AppError> {
    let url = reqwest::Url::parse(req.url.trim())
        .map_err(|e| AppError::BadRequest(format!("`url` is not a URL: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(AppError::BadRequest(
            "`url` must be an http(s) URL with a host".into(),
        ));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(AppError::BadRequest(
            "`url` must not carry credentials; use `auth`".into(),
        ));
    }
    if let Some(name) = &req.name
        && (name.trim().is_empty() || name.chars().count() > 200)
    {
        return Err(AppError::BadRequest(
            "`name` must be 1 to 200 characters".into(),
        ));
    }
    if let Some(auth) = &req.auth {
        auth.validate()
            .map_err(|e| AppError::BadRequest(e.to_string()))?;
    }
    let pinned = match &req.protocol_version {
        None => None,
        Some(v) => match ProtocolVersion::parse(v) {
            Some(p) if v == p.as_str() => Some(p),
            _ => {
                return Err(AppError::BadRequest(format!(
                    "`protocolVersion` must be `0.3` or `1.0`, not `{v}`"
                )));
            }
        },
    };
    Ok((url, pinned))
}

fn slug_for(name: &str) -> Result<String, AppError> {
    let slug = card::slugify(name);
    if slug.is_empty() {
        return Err(AppError::BadRequest(format!(
            "name `{name}` has no letters or digits to make a tool namespace from"
        )));
    }
    if slug.len() > card::MAX_SLUG {
        return Err(AppError::BadRequest(format!(
            "name `{name}` makes a namespace longer than {} characters",
            card::MAX_SLUG
        )));
    }
    Ok(slug)
}

async fn register(
    State(gw): State<Arc<Gateway>>,
    Path(org): Path<String>,
    payload: Result<Json<RegisterAgent>, JsonRejection>,
) -> Result<impl IntoResponse, AppError> {
    let Json(req) = payload?;
    let (url, pinned) = check_input(&req)?;
    gw.store.require_org(&org).await?;
    let bearer = match &req.auth {
        Some(a) => Some(
            a.resolve()
                .map_err(|e| AppError::BadRequest(e.to_string()))?,
        ),
        None => None,
    };
    let base = url.as_str().trim_end_matches('/').to_string();
    let a2a = &gw.a2a;
    let fetched = registry::fetch(
        &a2a.client,
        &base,
        bearer.as_deref(),
        pinned,
        a2a.card_timeout(),
        a2a.config.max_card_bytes,
    )
    .await;
    let name = match (&req.name, &fetched) {
        (Some(n), _) => n.trim().to_string(),
        (None, Fetched::Valid { parsed, .. }) => parsed.name.clone(),
        (None, Fetched::Invalid(e)) => {
            return Err(AppError::BadRequest(format!(
                "the agent card is not usable: {e}"
            )));
        }
        // Without a card the host names the peer until an operator renames it.
        (None, Fetched::Unreachable(_)) => url
            .host_str()
            .map(|h| match url.port() {
                Some(p) => format!("{h}-{p}"),
                None => h.to_string(),
            })
            .unwrap_or_default(),
    };
    if let Fetched::Invalid(e) = &fetched {
        return Err(AppError::BadRequest(format!(
            "the agent card is not usable: {e}"
        )));
    }
    let slug = slug_for(&name)?;
    let now = crate::ids::now_rfc3339();
    let mut row = CardRow {
        id: uuid::Uuid::now_v7().to_string(),
        org_id: org.clone(),
        slug,
        name,
        url: base,
        pinned_version: pinned,
        auth: req.auth.clone(),
        card: None,
        card_url: None,
        health: registry::health::UNREACHABLE.into(),
        last_error: None,
        checked_at: now.clone(),
        created_at: now,
    };
    match &fetched {
        Fetched::Valid { card, card_url, .. } => {
            row.card = Some(card.to_string());
            row.card_url = Some(card_url.clone());
            row.health = registry::health::HEALTHY.into();
        }
        Fetched::Unreachable(e) | Fetched::Invalid(e) => row.last_error = Some(e.clone()),
    }
    let stored = row.clone();
    gw.store.read(move |c| registry::insert(c, &stored)).await?;
    coherence::changed(&gw, &org).await;
    Ok((StatusCode::CREATED, Json(row.to_api())))
}

async fn list(
    State(gw): State<Arc<Gateway>>,
    Path(org): Path<String>,
) -> Result<impl IntoResponse, AppError> {
    gw.store.require_org(&org).await?;
    let rows = gw.store.read(move |c| registry::list(c, &org)).await?;
    Ok(Json(
        json!({ "agents": rows.iter().map(CardRow::to_api).collect::<Vec<Value>>() }),
    ))
}

async fn find(gw: &Gateway, org: &str, id: &str) -> Result<CardRow, AppError> {
    let (o, i) = (org.to_string(), id.to_string());
    gw.store
        .read(move |c| registry::get(c, &o, &i))
        .await?
        .ok_or_else(|| AppError::NotFound(format!("org `{org}` has no A2A agent `{id}`")))
}

async fn get_one(
    State(gw): State<Arc<Gateway>>,
    Path((org, id)): Path<(String, String)>,
) -> Result<impl IntoResponse, AppError> {
    Ok(Json(find(&gw, &org, &id).await?.to_api()))
}

async fn deregister(
    State(gw): State<Arc<Gateway>>,
    Path((org, id)): Path<(String, String)>,
) -> Result<StatusCode, AppError> {
    let o = org.clone();
    gw.store.read(move |c| registry::delete(c, &o, &id)).await?;
    coherence::changed(&gw, &org).await;
    Ok(StatusCode::NO_CONTENT)
}

async fn refresh(
    State(gw): State<Arc<Gateway>>,
    Path((org, id)): Path<(String, String)>,
) -> Result<impl IntoResponse, AppError> {
    let row = find(&gw, &org, &id).await?;
    let updated = refresh::refresh_row(&gw, &row).await?;
    // An explicit refresh always takes effect at once.
    coherence::changed(&gw, &org).await;
    Ok(Json(updated.to_api()))
}

async fn get_settings(
    State(gw): State<Arc<Gateway>>,
    Path(org): Path<String>,
) -> Result<impl IntoResponse, AppError> {
    gw.store.require_org(&org).await?;
    let o = org.clone();
    let set = gw.store.read(move |c| registry::timeout_ms(c, &o)).await?;
    Ok(Json(json!({
        "orgId": org,
        "timeoutMs": set.unwrap_or(gw.a2a.config.default_timeout_ms),
        "default": set.is_none(),
    })))
}

async fn put_settings(
    State(gw): State<Arc<Gateway>>,
    Path(org): Path<String>,
    payload: Result<Json<A2aSettings>, JsonRejection>,
) -> Result<impl IntoResponse, AppError> {
    let Json(req) = payload?;
    if req.timeout_ms == 0 || req.timeout_ms > registry::MAX_TIMEOUT_MS {
        return Err(AppError::BadRequest(format!(
            "`timeoutMs` must be 1 to {}",
            registry::MAX_TIMEOUT_MS
        )));
    }
    gw.store.require_org(&org).await?;
    let (o, ms) = (org.clone(), req.timeout_ms);
    gw.store
        .read(move |c| registry::set_timeout_ms(c, &o, ms))
        .await?;
    coherence::changed(&gw, &org).await;
    Ok(Json(
        json!({ "orgId": org, "timeoutMs": req.timeout_ms, "default": false }),
    ))
}
