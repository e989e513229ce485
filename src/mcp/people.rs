//! A person's MCP endpoint: `/mcp/{org}/{project}`.
//!
//! A person adds this URL to their MCP client and nothing else: the client
//! finds the identity provider through the 401 challenge and the
//! protected-resource metadata, signs the person in, and comes back with an
//! access token issued for this URL. The gateway then finds the person's
//! session in that project, or opens it (decided by `create_session`, the
//! person as principal, and recorded), and serves the request as the
//! session's own endpoint would: the same admission, `access_session`,
//! methods, decisions and trail. The session's own URL,
//! `/api/mcp/{sessionId}`, keeps working for the person's tokens too.
//!
//! Traces: the person is authenticated before the body is read, so before
//! the request's server span exists; the identity provider calls that
//! takes (discovery, key set, introspection) are client spans continuing
//! the trace context of the HTTP headers (a trace of their own when there
//! is none). On the session's URL they are children of the server span.
//!
//! Refusals: a daemon key here is 403 (keys name their session's URL); a
//! token whose org is not `{org}` is 403 and recorded as a denied
//! `access_session` in the person's org; an unknown project is 404.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use serde_json::json;

use super::admission::{Admitted, AdmittedPost};
use super::call::{Refusal, Target, record_refusal};
use super::credential::{self, Caller};
use super::error::McpError;
use super::{step_up, streamable};
use crate::audit::{self, Scope};
use crate::gateway::{Gateway, stand_in_key};
use crate::identity::person::Person;
use crate::policy::entities::{self, AgentFacts, OrgFacts, ProjectFacts};
use crate::policy::{Action, Kind};
use crate::store::people::{self, PEOPLE_AGENT, PEOPLE_AGENT_NAME};
use crate::store::{WriteOp, tenants};

/// `POST /mcp/{org}/{project}`.
pub async fn post_endpoint(
    State(gw): State<Arc<Gateway>>,
    Path((org, project)): Path<(String, String)>,
    admitted: AdmittedPost,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, McpError> {
    // The caller is authenticated before the body names the request, so
    // before its server span: the provider calls this makes continue the
    // trace context of the HTTP headers.
    let trace = super::era::header_trace(&headers);
    let door = gw.telemetry.door(
        trace
            .as_ref()
            .map(super::call::TraceContext::parent)
            .as_ref(),
    );
    let target =
        crate::telemetry::scoped(door.as_ref(), person_target(&gw, &headers, &org, &project))
            .await?;
    streamable::post_at(gw, target, admitted, headers, body).await
}

/// `DELETE /mcp/{org}/{project}`: ends the person's MCP session there.
pub async fn delete_endpoint(
    State(gw): State<Arc<Gateway>>,
    Path((org, project)): Path<(String, String)>,
    admitted: Admitted,
    headers: HeaderMap,
) -> Result<Response, McpError> {
    let target = person_target(&gw, &headers, &org, &project).await?;
    streamable::delete_at(gw, target, admitted, headers).await
}

/// The person's session in the project, found or opened.
async fn person_target(
    gw: &Arc<Gateway>,
    headers: &HeaderMap,
    org: &str,
    project: &str,
) -> Result<Target, McpError> {
    let path = format!("/mcp/{org}/{project}");
    let identity = match credential::caller(gw, headers, &path).await? {
        Caller::Person(identity) => identity,
        Caller::Key(_) => {
            return Err(McpError::Forbidden(
                "daemon keys use their session's URL, /api/mcp/{sessionId}".into(),
            ));
        }
    };
    let person = credential::person(gw, &identity)?;
    if person.org() != org {
        return Err(refuse_other_org(gw, &person, &path).await);
    }
    gw.store
        .space()
        .check()
        .map_err(|low| McpError::InsufficientStorage(low.0))?;
    let cache_key = (
        org.to_string(),
        project.to_string(),
        person.user.id().to_string(),
    );
    let session_id = match gw.person_sessions.get(&cache_key) {
        Some(id) => id,
        None => {
            let (o, p, u) = cache_key.clone();
            let found = gw
                .store
                .read(move |c| people::find_session(c, &o, &p, &u))
                .await
                .map_err(|_| McpError::StorageUnavailable)?;
            let id = match found {
                Some(id) => id,
                None => {
                    let metadata = super::resource_metadata::url_for(gw, headers, &path);
                    open_session(gw, &person, (org, project), &metadata).await?
                }
            };
            gw.person_sessions.insert(cache_key, id.clone());
            id
        }
    };
    Ok(Target {
        session_id,
        path,
        person: Some(person),
    })
}

/// A token of another org at this org's URL: 403, recorded in the
/// person's own org as a denied `access_session` of what they asked for.
async fn refuse_other_org(gw: &Gateway, person: &Person, path: &str) -> McpError {
    let bundle = gw.pep.current();
    let key = stand_in_key(person);
    let refusal = Refusal {
        session_id: path,
        in_session: false,
        refused_by: "tenant_isolation",
        notes: json!({ "reason": "the person's organization is not the one this URL names" }),
        outcome: None,
        trace: None,
        person: Some(person),
    };
    match record_refusal(gw, &bundle, &key, refusal).await {
        Ok(decision_id) => McpError::Forbidden(format!(
            "your organization may not use this URL (decision `{decision_id}`)"
        )),
        Err(e) => e,
    }
}

/// Opens the person's session in the project when Cedar's
/// `create_session` allows it; the decision is recorded either way. A
/// deny that a scope named by `@requires_scope` would turn into an allow
/// is answered with the step-up challenge (`metadata_url` names the
/// endpoint's metadata), as any other decision of a person's.
async fn open_session(
    gw: &Gateway,
    person: &Person,
    (org, project): (&str, &str),
    metadata_url: &str,
) -> Result<String, McpError> {
    let (o, p) = (org.to_string(), project.to_string());
    let (org_row, project_row) = gw
        .store
        .read(move |c| Ok((tenants::get_org(c, &o)?, tenants::get_project(c, &o, &p)?)))
        .await
        .map_err(|_| McpError::StorageUnavailable)?;
    let (Some(org_row), Some(project_row)) = (org_row, project_row) else {
        return Err(McpError::SessionNotFound(format!(
            "project `{project}` not found in organization `{org}`"
        )));
    };
    let bundle = gw.pep.current();
    let roles = Vec::new();
    let slice = entities::create_session_slice_for(
        &bundle,
        &OrgFacts {
            id: &org_row.id,
            plan: &org_row.plan,
            entitlements: &org_row.entitlements,
        },
        &ProjectFacts {
            org_id: &project_row.org_id,
            id: &project_row.id,
            memory_enabled: project_row.memory_enabled,
            graph_enabled: project_row.graph_enabled,
        },
        &AgentFacts {
            org_id: &org_row.id,
            id: PEOPLE_AGENT,
            name: PEOPLE_AGENT_NAME,
            roles: &roles,
        },
        &entities::Caller::User(&person.user),
    )
    .map_err(|e| McpError::Forbidden(format!("session creation is not authorized: {e}")))?;
    let time = crate::ids::now_rfc3339();
    let context = bundle.prepare_context(
        Action::CreateSession,
        entities::create_session_context(PEOPLE_AGENT, &time, Some(&person.token)),
    );
    let (principal, resource) = (person.user.uid(), Kind::Project.uid(project));
    let mut decided = audit::decide(
        &bundle,
        &slice,
        &principal,
        Action::CreateSession,
        &resource,
        &context,
        Scope {
            org_id: Some(org),
            session_id: None,
        },
        &time,
    );
    if !decided.allowed() {
        let denied = step_up::Denied {
            bundle: &bundle,
            slice: &slice,
            person: Some(person),
            identities: &gw.identities,
            principal: &principal,
            action: Action::CreateSession,
            resource: &resource,
        };
        let step_up = step_up::find(&denied, |token| {
            let context = entities::create_session_context(PEOPLE_AGENT, &time, Some(token));
            bundle.prepare_context(Action::CreateSession, context)
        })
        .map(|s| step_up::refusal(Some(metadata_url), &mut decided, None, s));
        let (decision_id, advice) = (decided.id().to_string(), decided.verdict.advice.clone());
        commit(gw, person, decided.finish_default()).await?;
        if let Some(refusal) = step_up {
            return Err(McpError::StepUp(Box::new(refusal)));
        }
        return Err(McpError::AccessDenied {
            decision_id,
            advice,
        });
    }
    let (o, p, u) = (
        org.to_string(),
        project.to_string(),
        person.user.id().to_string(),
    );
    let opened = gw
        .store
        .read(move |c| people::open_session(c, &o, &p, &u))
        .await;
    let outcome = match &opened {
        Ok(id) => json!({ "status": "completed", "sessionId": id }),
        Err(e) => json!({ "status": "failed", "error": e.to_string() }),
    };
    commit(gw, person, decided.finish(outcome)).await?;
    opened.map_err(|_| McpError::StorageUnavailable)
}

async fn commit(
    gw: &Gateway,
    person: &Person,
    record: crate::store::decisions::NewDecision,
) -> Result<(), McpError> {
    let mut ops = vec![WriteOp::Decision(Box::new(record))];
    if let Some(jti) = &person.jti {
        super::call::stamp_jti(jti, &mut ops);
    }
    gw.store.writer().submit(ops).await.map_err(|e| {
        tracing::error!(error = %e, "cannot record a person's session decision");
        McpError::TrailUnavailable
    })
}
