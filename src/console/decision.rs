//! `GET /console/decisions/{id}`: everything the trail holds about one
//! decision: the request, its context (the tool's typed arguments
//! included), the entity data it was decided on, the deciding policies
//! with their text and `@advice` (from the set that decided, found by its
//! hash), errors, outcome, notes, the policy-set hash, and whether its
//! chain link verifies (its own hash, its link to the record before it
//! and the next record's link to it), and the trace its request belongs
//! to (the `traceId` its notes hold, else the caller's `traceparent`),
//! linked to the operator's tracing UI through `[telemetry] trace_link`
//! (`{trace_id}` replaced; only an `http(s)` template is used) and to the
//! trail filtered by it.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::response::Html;
use serde::Serialize;
use serde_json::Value;

use super::auth::Viewer;
use super::error::ConsoleError;
use crate::gateway::Gateway;
use crate::policy::PolicyBundle;
use crate::policy::describe::PolicyText;
use crate::store::StoreError;
use crate::store::db::Conn;
use crate::store::decisions::{self, StoredDecision};

/// A deciding policy as the page shows it.
#[derive(Debug, Serialize)]
struct Deciding {
    id: String,
    /// Absent when the deciding set is not recorded or no longer loads.
    policy: Option<PolicyText>,
}

/// What the store gives the page.
struct Found {
    decision: StoredDecision,
    entities: Option<String>,
    link: decisions::VerifyReport,
    set: Result<Arc<PolicyBundle>, String>,
}

/// Pretty JSON of a stored column (the text itself when it is not JSON).
fn pretty(text: &str) -> String {
    serde_json::from_str::<Value>(text)
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or_else(|| text.to_string())
}

fn strings(text: &str) -> Vec<String> {
    serde_json::from_str(text).unwrap_or_default()
}

/// The set that made the decision: the active one when the hash matches,
/// else the recorded one loaded again.
fn deciding_set(
    conn: &mut Conn,
    live: Arc<PolicyBundle>,
    hash: &str,
) -> Result<Result<Arc<PolicyBundle>, String>, StoreError> {
    if live.hash == hash {
        return Ok(Ok(live));
    }
    Ok(crate::replay::recorded_bundle(conn, hash)?
        .map(Arc::new)
        .map_err(|e| e.to_string()))
}

async fn find(gw: &Gateway, id: String) -> Result<Found, ConsoleError> {
    let live = gw.pep.current();
    gw.store.writer().flush().await?;
    let found = gw
        .store
        .read(move |c| {
            let Some(decision) = decisions::get(c, &id)? else {
                return Ok(None);
            };
            let entities = decisions::entity_snapshot(c, &decision.record.entities_hash)?;
            let link = decisions::verify_range(c, decision.seq, decision.seq + 1)?;
            let set = deciding_set(c, live, &decision.record.policy_hash)?;
            Ok(Some(Found {
                decision,
                entities,
                link,
                set,
            }))
        })
        .await?;
    found.ok_or_else(|| ConsoleError::NotFound("no decision with this id".into()))
}

/// The decisions that let the record's request through, recorded in its
/// prelude (`audit::prelude`); an unreadable prelude shows as one row
/// saying so.
fn prelude_rows(d: &decisions::StoredDecision) -> Vec<minijinja::Value> {
    match crate::audit::prelude::preludes(&d.record) {
        Ok(all) => all
            .into_iter()
            .map(|p| {
                minijinja::context! {
                    id => p.id,
                    action => p.action,
                    principal => p.principal,
                    resource => p.resource,
                    decision => if p.allowed { "allow" } else { "deny" },
                    reasons => p.reasons,
                    errors => p.errors,
                }
            })
            .collect(),
        Err(e) => vec![minijinja::context! { unreadable => e.to_string() }],
    }
}

/// The W3C trace id a record's notes name: the trace the gateway started
/// or continued (`traceId`), else the caller's (`traceparent`).
pub fn trace_of(notes: &str) -> Option<String> {
    let notes: Value = serde_json::from_str(notes).ok()?;
    if let Some(id) = notes.get("traceId").and_then(Value::as_str) {
        return Some(id.to_string());
    }
    let parent = notes.get("traceparent").and_then(Value::as_str)?;
    parent.split('-').nth(1).map(str::to_string)
}

/// The operator's link to `trace` (`trace_link` with `{trace_id}`
/// replaced), when the template is an `http(s)` URL.
fn trace_link(template: Option<&str>, trace: &str) -> Option<String> {
    let template = template?;
    let web = template.starts_with("https://") || template.starts_with("http://");
    web.then(|| template.replace("{trace_id}", trace))
}

/// `GET /console/decisions/{id}`.
pub async fn page(
    State(gw): State<Arc<Gateway>>,
    viewer: Viewer,
    Path(id): Path<String>,
) -> Result<Html<String>, ConsoleError> {
    let Found {
        decision,
        entities,
        link,
        set,
    } = find(&gw, id).await?;
    let r = &decision.record;
    let deciding: Vec<Deciding> = strings(&r.reasons)
        .into_iter()
        .map(|id| Deciding {
            policy: set.as_ref().ok().and_then(|b| b.describe_policy(&id)),
            id,
        })
        .collect();
    super::templates::render(
        "decision.html",
        minijinja::context! {
            viewer => super::overview::viewer_ctx(&viewer),
            d => &decision,
            context => pretty(&r.context),
            entities => entities.as_deref().map(pretty),
            outcome => pretty(&r.outcome),
            notes => pretty(&r.notes),
            errors => strings(&r.errors),
            preludes => prelude_rows(&decision),
            deciding,
            set_error => set.err(),
            link_ok => link.problems.is_empty(),
            link_problems => link.problems,
            operator => r.action.starts_with(decisions::OPERATOR_ACTION_PREFIX),
            trace => trace_of(&r.notes),
            trace_link => trace_of(&r.notes)
                .and_then(|t| trace_link(gw.config.telemetry.trace_link.as_deref(), &t)),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trace_is_the_noted_one_else_the_callers() {
        let both = r#"{"traceparent":"00-aaaa0000000000000000000000000001-00f067aa0ba902b7-01","traceId":"bbbb0000000000000000000000000002"}"#;
        assert_eq!(
            trace_of(both).as_deref(),
            Some("bbbb0000000000000000000000000002")
        );
        let caller = r#"{"traceparent":"00-aaaa0000000000000000000000000001-00f067aa0ba902b7-01"}"#;
        assert_eq!(
            trace_of(caller).as_deref(),
            Some("aaaa0000000000000000000000000001")
        );
        assert_eq!(trace_of("null"), None);
        let link = trace_link(Some("http://jaeger:16686/trace/{trace_id}"), "ab");
        assert_eq!(link.as_deref(), Some("http://jaeger:16686/trace/ab"));
        assert_eq!(
            trace_link(Some("javascript:alert(1)//{trace_id}"), "ab"),
            None
        );
    }
}
