//! The daemon API: `POST /api/sessions {projectId, agentId}` opens a session
//! with the daemon's own `rsk_live_` key, authorized by Cedar
//! `create_session` (principal: the key, resource: the project).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use serde_json::json;

use crate::audit::{self, Scope};
use crate::error::AppError;
use crate::gateway::{Gateway, ResolveError};
use crate::operator::{self, OpenSession};
use crate::policy::entities::{self, datetime_value, entity_ref};
use crate::policy::{Action, Kind};
use crate::store::{WriteOp, tenants};

/// `POST /api/sessions`.
pub async fn open_session(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    payload: Result<Json<OpenSession>, JsonRejection>,
) -> Result<impl IntoResponse, AppError> {
    let presented =
        crate::auth::bearer_key(&headers).map_err(|e| AppError::Unauthorized(e.to_string()))?;
    let key = gw
        .authenticate_daemon(&presented)
        .await
        .map_err(|e| match e {
            ResolveError::Store(s) => AppError::from(s),
            ResolveError::PdpKey => AppError::Forbidden(e.to_string()),
            other => AppError::Unauthorized(other.to_string()),
        })?;
    // Opening a session records a decision: refused first when the
    // trail's disk is low (nothing decided, nothing written).
    gw.store
        .space()
        .check()
        .map_err(|_| AppError::InsufficientStorage)?;
    let Json(req) = payload?;

    let (org_id, project_id, agent_id) = (
        key.org_id.clone(),
        req.project_id.clone(),
        req.agent_id.clone(),
    );
    let (org, project, agent) = gw
        .store
        .read(move |c| {
            Ok((
                tenants::get_org(c, &org_id)?,
                tenants::get_project(c, &org_id, &project_id)?,
                tenants::get_agent(c, &org_id, &agent_id)?,
            ))
        })
        .await?;
    let org = org.ok_or_else(|| AppError::NotFound(format!("org `{}` not found", key.org_id)))?;
    let project = project
        .ok_or_else(|| AppError::NotFound(format!("project `{}` not found", req.project_id)))?;
    let agent =
        agent.ok_or_else(|| AppError::NotFound(format!("agent `{}` not found", req.agent_id)))?;

    let bundle = gw.pep.current();
    let slice = entities::create_session_slice(
        &bundle,
        &entities::OrgFacts {
            id: &org.id,
            plan: &org.plan,
            entitlements: &org.entitlements,
        },
        &entities::ProjectFacts {
            org_id: &project.org_id,
            id: &project.id,
            memory_enabled: project.memory_enabled,
            graph_enabled: project.graph_enabled,
        },
        &entities::AgentFacts {
            org_id: &agent.org_id,
            id: &agent.id,
            name: &agent.name,
            roles: &agent.roles,
        },
        &entities::KeyFacts {
            org_id: &key.org_id,
            id: &key.id,
            label: &key.label,
        },
    )
    .map_err(|e| {
        tracing::error!(error = %e, "cannot build create_session entities");
        AppError::Forbidden(
            "session creation is not authorized (policy entities unavailable)".into(),
        )
    })?;
    let time = crate::ids::now_rfc3339();
    let context = bundle.prepare_context(
        Action::CreateSession,
        json!({ "agent": entity_ref(Kind::Agent, &agent.id), "time": datetime_value(&time) }),
    );
    let decided = audit::decide(
        &bundle,
        &slice,
        &Kind::ApiKey.uid(&key.id),
        Action::CreateSession,
        &Kind::Project.uid(&project.id),
        &context,
        Scope {
            org_id: Some(&key.org_id),
            session_id: None,
        },
        &time,
    );
    if !decided.allowed() {
        let id = decided.id().to_string();
        gw.store
            .writer()
            .submit(vec![WriteOp::Decision(Box::new(decided.finish_default()))])
            .await?;
        return Err(AppError::Forbidden(format!(
            "session creation is not authorized (decision `{id}`)"
        )));
    }
    let org_id = key.org_id.clone();
    let key_id = key.id.clone();
    let created = gw
        .store
        .read(move |c| operator::open_session(c, &org_id, req, Some(&key_id)))
        .await;
    let outcome = match &created {
        Ok(s) => json!({ "status": "completed", "sessionId": s.id }),
        Err(e) => json!({ "status": "failed", "error": e.to_string() }),
    };
    gw.store
        .writer()
        .submit(vec![WriteOp::Decision(Box::new(decided.finish(outcome)))])
        .await?;
    let session = created?;
    let mcp_url = operator::mcp_url(&gw.config.base_url(), &session.id);
    Ok((
        StatusCode::CREATED,
        Json(json!({ "sessionId": session.id, "mcpUrl": mcp_url })),
    ))
}
