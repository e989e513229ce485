//! `POST /console/whatif`: one request decided now against the active set
//! or a candidate, on the entity data of a recorded decision (its
//! template): principal, action, resource and context as the form gives
//! them, so an auditor can ask "and if the argument were this?". Decided
//! by the same facade replay uses; nothing is recorded (it is a question,
//! not a request to a tool).
//!
//! A template that is a decision application's record is asked of that
//! application: its active set or a candidate of it, on the record's
//! entity data with what its request added, the action named as in the
//! application (`write`, or as recorded, `authzen:records:write`) and the
//! context as the Cedar context its schema declares.
//!
//! Without a template, the form may carry the entities themselves (Cedar
//! JSON) and the request in Cedar's terms (uids, the context as Cedar
//! JSON): a proof's counterexample, which the Policy set page opens here
//! prefilled (`GET /console/replay?counterexample=N`) against the proof's
//! candidate. Asked against any set but the active one, the page also
//! shows what the active set decides, so the flip is one page.

use std::sync::Arc;

use axum::extract::State;
use axum::response::Html;
use serde::{Deserialize, Serialize};

use super::auth::Posted;
use super::candidates::{self, CandidateForm};
use super::error::ConsoleError;
use super::overview::viewer_ctx;
use crate::gateway::Gateway;
use crate::policy::PolicyBundle;
use crate::policy::application::load::with_data;
use crate::policy::application::recorded::RecordedEvaluation;
use crate::policy::cedar_request::CedarAsk;
use crate::policy::recorded::RecordedRequest;
use crate::store::decisions::{self, AUTHZEN_ACTION_PREFIX, StoredDecision};

/// A recorded decision the what-if form starts from.
#[derive(Debug, Clone, Serialize)]
pub struct Template {
    pub id: String,
    pub seq: i64,
    pub principal: String,
    pub action: String,
    pub resource: String,
    pub context: String,
    pub decision: String,
    pub entities_hash: String,
    /// The decision application whose record it is.
    pub application: Option<String>,
    /// What the record's request added to the application's data.
    pub added: Vec<serde_json::Value>,
}

async fn stored(gw: &Gateway, id: &str) -> Result<Option<StoredDecision>, ConsoleError> {
    let id = id.to_string();
    Ok(gw.store.read(move |c| decisions::get(c, &id)).await?)
}

/// The template decision `id` (none for an empty id).
pub async fn template(gw: &Gateway, id: &str) -> Result<Option<Template>, ConsoleError> {
    if id.is_empty() {
        return Ok(None);
    }
    let d = stored(gw, id)
        .await?
        .ok_or_else(|| ConsoleError::NotFound(format!("no decision `{id}` to start from")))?;
    let r = d.record;
    let application = crate::replay::application_of(&r.action).map(str::to_string);
    let added = serde_json::from_str::<serde_json::Value>(&r.notes)
        .ok()
        .and_then(|n| n["authzen"]["entities"].as_array().cloned())
        .unwrap_or_default();
    Ok(Some(Template {
        application,
        added,
        id: r.id,
        seq: d.seq,
        context: serde_json::from_str::<serde_json::Value>(&r.context)
            .and_then(|v| serde_json::to_string_pretty(&v))
            .unwrap_or(r.context),
        principal: r.principal,
        action: r.action,
        resource: r.resource,
        decision: r.decision,
        entities_hash: r.entities_hash,
    }))
}

/// The what-if form.
#[derive(Debug, Deserialize)]
pub struct WhatIfForm {
    #[serde(flatten)]
    candidate: CandidateForm,
    #[serde(default)]
    template: String,
    #[serde(default)]
    principal: String,
    #[serde(default)]
    action: String,
    #[serde(default)]
    resource: String,
    #[serde(default)]
    context: String,
    /// The entities as Cedar JSON, when no template gives them.
    #[serde(default)]
    entities: String,
}

/// `POST /console/whatif`.
pub async fn run(
    State(gw): State<Arc<Gateway>>,
    posted: Posted<WhatIfForm>,
) -> Result<Html<String>, ConsoleError> {
    let form = posted.form;
    if form.template.trim().is_empty() && !form.entities.trim().is_empty() {
        return run_cedar(&gw, &posted.viewer, form).await;
    }
    let template = template(&gw, form.template.trim()).await?.ok_or_else(|| {
        ConsoleError::BadRequest(
            "pick a recorded decision to take entity data from, or give the entities".into(),
        )
    })?;
    if let Some(app) = template.application.clone() {
        return run_app(&gw, &posted.viewer, form, template, app).await;
    }
    let (bundle, against) = candidates::load(&gw, &form.candidate).await?;
    let snapshot = snapshot(&gw, &template).await?;
    let entities = bundle.parse_recorded_entities(&snapshot).map_err(|e| {
        ConsoleError::BadRequest(format!("the entity data does not load under this set: {e}"))
    })?;
    let request = RecordedRequest::parse(
        form.principal.trim(),
        form.action.trim(),
        form.resource.trim(),
        &form.context,
    )
    .map_err(|e| ConsoleError::BadRequest(e.to_string()))?;
    let verdict = bundle.decide_recorded(&request, entities.entities());
    let deciding = deciding(&bundle, &verdict.reasons);
    super::templates::render(
        "whatif.html",
        minijinja::context! {
            viewer => viewer_ctx(&posted.viewer),
            template,
            against,
            hash => bundle.hash,
            asked => minijinja::context! { principal => form.principal, action => form.action, resource => form.resource, context => form.context },
            decision => if verdict.allowed { "allow" } else { "deny" },
            deciding,
            errors => verdict.errors,
        },
    )
}

/// The template's entity snapshot, as the trail stores it.
async fn snapshot(gw: &Gateway, template: &Template) -> Result<String, ConsoleError> {
    let hash = template.entities_hash.clone();
    gw.store
        .read(move |c| decisions::entity_snapshot(c, &hash))
        .await?
        .ok_or_else(|| ConsoleError::BadRequest("the template's entity snapshot is missing".into()))
}

/// The question asked of the decision application `app` whose record the
/// template is (rules in the module doc).
async fn run_app(
    gw: &Arc<Gateway>,
    viewer: &super::auth::Viewer,
    mut form: WhatIfForm,
    template: Template,
    app: String,
) -> Result<Html<String>, ConsoleError> {
    form.candidate.application.clone_from(&app);
    let (bundle, against) = candidates::load(gw, &form.candidate).await?;
    let text = snapshot(gw, &template).await?;
    let origin = format!("the entity data of decision {}", template.id);
    let set = with_data(&app, Arc::clone(&bundle), &text, &origin).map_err(|e| {
        ConsoleError::BadRequest(format!("the entity data does not load under this set: {e}"))
    })?;
    let prefix = format!("{AUTHZEN_ACTION_PREFIX}{app}:");
    let action = form.action.trim();
    let asked = RecordedEvaluation {
        principal: form.principal.trim(),
        action: action.strip_prefix(&prefix).unwrap_or(action),
        resource: form.resource.trim(),
        context: &form.context,
        added: &template.added,
    };
    let verdict = set
        .decide_recorded(&asked)
        .map_err(|e| ConsoleError::BadRequest(e.to_string()))?;
    let deciding = deciding(&bundle, &verdict.reasons);
    super::templates::render(
        "whatif.html",
        minijinja::context! {
            viewer => viewer_ctx(viewer),
            template,
            against,
            hash => bundle.hash,
            asked => minijinja::context! { principal => form.principal, action => form.action, resource => form.resource, context => form.context },
            decision => if verdict.allowed { "allow" } else { "deny" },
            deciding,
            errors => verdict.errors,
        },
    )
}

/// The determining policies of a verdict, each with its text in `bundle`.
fn deciding(bundle: &PolicyBundle, reasons: &[String]) -> Vec<minijinja::Value> {
    reasons
        .iter()
        .map(|id| minijinja::context! { id, policy => bundle.describe_policy(id) })
        .collect()
}

/// A question in Cedar's terms with its own entities (rules in the module
/// doc): decided by the set the form names and by the active set.
async fn run_cedar(
    gw: &Arc<Gateway>,
    viewer: &super::auth::Viewer,
    form: WhatIfForm,
) -> Result<Html<String>, ConsoleError> {
    let json = |what: &str, text: &str| {
        let text = if text.trim().is_empty() { "{}" } else { text };
        serde_json::from_str::<serde_json::Value>(text)
            .map_err(|e| ConsoleError::BadRequest(format!("the {what} is not JSON: {e}")))
    };
    let (context, entities) = (
        json("context", &form.context)?,
        json("entities", &form.entities)?,
    );
    let ask = CedarAsk {
        principal: form.principal.trim(),
        action: form.action.trim(),
        resource: form.resource.trim(),
        context: &context,
        entities: &entities,
    };
    let (bundle, against) = candidates::load(gw, &form.candidate).await?;
    let verdict = bundle
        .decide_cedar(&ask)
        .map_err(|e| ConsoleError::BadRequest(e.to_string()))?;
    let live = gw.pep.current();
    let live_decision = (live.hash != bundle.hash).then(|| match live.decide_cedar(&ask) {
        Ok(v) => minijinja::context! { decision => if v.allowed { "allow" } else { "deny" }, reasons => v.reasons, errors => v.errors },
        Err(e) => minijinja::context! { decision => "not decided", errors => vec![e.to_string()] },
    });
    let deciding = deciding(&bundle, &verdict.reasons);
    super::templates::render(
        "whatif.html",
        minijinja::context! {
            viewer => viewer_ctx(viewer),
            against,
            hash => bundle.hash,
            asked => minijinja::context! { principal => form.principal, action => form.action, resource => form.resource, context => form.context, entities => form.entities },
            decision => if verdict.allowed { "allow" } else { "deny" },
            live_decision,
            live_hash => live.hash,
            deciding,
            errors => verdict.errors,
        },
    )
}
