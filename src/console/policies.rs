//! `GET /console/policies`: the active set (files, policy ids, hash), the
//! hash every live instance on the database runs, the last reload and the
//! last rejected one, the last proof of a reload (`[lifecycle] prove`: its
//! outcome, the environments that are not equivalent, each counterexample
//! with its entities and both sets' decisions, and a link that opens it in
//! the what-if form against the proof's candidate), the policy tests of the
//! policy directory run against the active set, and shadow mode (its
//! counters and newest divergences); then the decision applications, as
//! `GET /admin/pdp/apps` lists them (each linking to its decisions and to a
//! replay of a candidate of it, with its shadow candidate's counters and
//! newest divergences while one runs).
//! `POST /console/policies/reload` (admin only) runs the same reload as
//! `POST /admin/policies/reload` and records it in the trail.

use std::sync::Arc;

use axum::extract::State;
use axum::http::header::LOCATION;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use serde_json::json;

use super::auth::{AdminPosted, Empty, Viewer};
use super::error::ConsoleError;
use super::overview::viewer_ctx;
use crate::gateway::Gateway;

/// Shadow divergences listed.
const DIVERGENCES: usize = 50;

/// `GET /console/policies`.
pub async fn page(
    State(gw): State<Arc<Gateway>>,
    viewer: Viewer,
    headers: HeaderMap,
) -> Result<Html<String>, ConsoleError> {
    let bundle = gw.pep.current();
    let base = crate::mcp::public_url::base_url(&gw, &headers);
    let mut apps = Vec::new();
    for app in gw.pdp.apps() {
        let mut entry = crate::pdp::admin::described(&gw, &app, &base);
        entry["divergences"] = json!(app_divergences(&gw, &app).await?);
        apps.push(entry);
    }
    let instances = crate::cluster::membership::live_instances(&gw).await?;
    let (b, dir) = (Arc::clone(&bundle), gw.config.policies_dir.clone());
    let tests = tokio::task::spawn_blocking(move || crate::policy::tests_runner::run_dir(&b, &dir))
        .await
        .map_err(|_| ConsoleError::Render)?;
    let (tests, tests_error) = match tests {
        Ok(report) => (report.outcomes, None),
        Err(e) => (Vec::new(), Some(e.to_string())),
    };
    let shadow = gw.lifecycle.shadow.status();
    let hash = shadow.as_ref().map(|s| s.candidate_hash.clone());
    gw.store.writer().flush().await?;
    let divergences = gw
        .store
        .read(move |c| {
            crate::store::shadow::recent(
                c,
                crate::store::shadow::Of::Gateway,
                hash.as_deref(),
                DIVERGENCES,
            )
        })
        .await?;
    let proof = gw.lifecycle.last_proof();
    let counterexamples = counterexamples(proof.as_deref());
    let files: Vec<_> = bundle
        .files
        .iter()
        .map(|f| minijinja::context! { path => f.path, text => f.text })
        .collect();
    super::templates::render(
        "policies.html",
        minijinja::context! {
            viewer => viewer_ctx(&viewer),
            hash => bundle.hash,
            loaded_at => bundle.loaded_at,
            schema => bundle.schema_path,
            ids => bundle.policy_ids,
            warnings => bundle.warnings,
            files,
            instance_id => gw.cluster.instance_id,
            instances,
            status => gw.lifecycle.status(),
            tests_passed => tests.iter().filter(|t| t.passed).count(),
            tests,
            tests_error,
            shadow,
            divergences,
            prove => gw.config.lifecycle.prove,
            proof => proof.as_deref(),
            counterexamples,
            apps,
        },
    )
}

/// The newest divergences of `app`'s shadow candidate (none when it has
/// none running).
async fn app_divergences(
    gw: &Gateway,
    app: &crate::pdp::App,
) -> Result<Vec<crate::store::shadow::Divergence>, ConsoleError> {
    let Some(status) = app.shadow.status() else {
        return Ok(Vec::new());
    };
    let name = app.name.clone();
    gw.store.writer().flush().await?;
    Ok(gw
        .store
        .read(move |c| {
            let of = crate::store::shadow::Of::Application(&name);
            crate::store::shadow::recent(c, of, Some(&status.candidate_hash), DIVERGENCES)
        })
        .await?)
}

/// The last proof's counterexamples, their context and entities as
/// indented JSON.
fn counterexamples(proof: Option<&crate::lifecycle::gate::GateProof>) -> Vec<minijinja::Value> {
    let pretty = |v: &serde_json::Value| serde_json::to_string_pretty(v).unwrap_or_default();
    proof
        .map(|p| p.counterexamples.as_slice())
        .unwrap_or_default()
        .iter()
        .map(|c| {
            minijinja::context! {
                env => c.env,
                direction => c.direction,
                principal => c.witness.principal,
                action => c.witness.action,
                resource => c.witness.resource,
                context => pretty(&c.witness.context),
                entities => pretty(&c.witness.entities),
                decisions => c.witness.decisions,
            }
        })
        .collect()
}

/// `POST /console/policies/reload` (admin): reloads, records the attempt
/// in the trail, and shows the page again (its "last reload" tells the
/// result).
pub async fn reload(
    State(gw): State<Arc<Gateway>>,
    AdminPosted(posted): AdminPosted<Empty>,
) -> Result<Response, ConsoleError> {
    let before = gw.pep.current().hash.clone();
    let attempt = match crate::lifecycle::reload::reload(&gw, "console").await {
        Ok(a) | Err(a) => a,
    };
    super::trail::record(
        &gw,
        super::trail::Action {
            by: &posted.viewer,
            verb: "reload_policies",
            org: None,
            resource: format!("Gateway::PolicySet::\"{before}\""),
            context: json!({}),
            outcome: json!({
                "status": attempt.result,
                "hash": attempt.hash,
                "message": attempt.message,
            }),
        },
    )
    .await?;
    Ok((
        StatusCode::SEE_OTHER,
        [(LOCATION, format!("{}/policies", super::PATH))],
    )
        .into_response())
}
