//! The decisions of one admitted AuthZEN request, in named steps: spend
//! the key's and its org's rate limits, one token per evaluation (429,
//! before any work) → map every evaluation onto the application's schema
//! (any ill-typed one: 400, nothing decided) → check the trail's disk
//! (507) → decide in order, stopping where the batch's semantic says →
//! record every decision in one group commit → answer (only after the
//! commit).

use serde_json::{Map, Value, json};

use super::admission::Admitted;
use super::error::PdpError;
use super::input::Semantic;
use crate::audit::Decided;
use crate::audit::application::{self, Asker};
use crate::gateway::Gateway;
use crate::policy::application::{AppSet, Prepared, RequestInput};
use crate::rate_limits::Subjects;
use crate::store::WriteOp;

/// Decides `inputs` for an admitted request; the answers, one per
/// evaluation decided, in request order.
pub async fn decide(
    gw: &Gateway,
    admitted: &Admitted,
    inputs: &[RequestInput<'_>],
    semantic: Semantic,
    batch: bool,
) -> Result<Vec<Value>, PdpError> {
    let set = &admitted.set;
    spend(gw, admitted, inputs.len()).await?;
    let prepared = inputs
        .iter()
        .map(|input| set.prepare(input))
        .collect::<Result<Vec<_>, _>>()?;
    gw.store
        .space()
        .check()
        .map_err(|_| PdpError::InsufficientStorage)?;
    let asker = Asker {
        org_id: &admitted.key.org_id,
        key_id: &admitted.key.id,
        request_id: admitted.request_id.as_deref(),
    };
    let decided = in_order(set, &prepared, &asker, semantic, batch);
    let answers = decided.iter().map(answer).collect();
    record(gw, decided).await?;
    Ok(answers)
}

/// One token per evaluation from the key's and its org's buckets.
pub(super) async fn spend(
    gw: &Gateway,
    admitted: &Admitted,
    evaluations: usize,
) -> Result<(), PdpError> {
    let who = Subjects {
        org: &admitted.key.org_id,
        agent: None,
        key: &admitted.key.id,
    };
    let cost = u32::try_from(evaluations).unwrap_or(u32::MAX);
    gw.rate_limits
        .spend(who, cost)
        .await
        .map_err(|limited| PdpError::RateLimited {
            what: limited.level.name(),
            subject: limited.subject,
            retry_after_secs: limited.retry_after_secs,
        })
}

/// Decides each prepared evaluation in order, up to the one the semantic
/// stops at.
fn in_order(
    set: &AppSet,
    prepared: &[Prepared<'_>],
    asker: &Asker<'_>,
    semantic: Semantic,
    batch: bool,
) -> Vec<Decided> {
    let time = crate::ids::now_rfc3339();
    let mut decided = Vec::with_capacity(prepared.len());
    for (i, one) in prepared.iter().enumerate() {
        let d = application::decide(set, one, asker, batch.then_some(i), &time);
        let stop = semantic.stops_after(d.allowed());
        decided.push(d);
        if stop {
            break;
        }
    }
    decided
}

/// Commits the records; an answer is sent only once they are.
async fn record(gw: &Gateway, decided: Vec<Decided>) -> Result<(), PdpError> {
    let ops = decided
        .into_iter()
        .map(|d| WriteOp::Decision(Box::new(d.finish_default())))
        .collect();
    gw.store.writer().submit(ops).await.map_err(|e| {
        tracing::error!(error = %e, "cannot record decision-point decisions; nothing answered");
        PdpError::Unavailable
    })
}

/// An AuthZEN decision: `decision`, and in `context` the record's id, the
/// determining policies and, when they advise, `reason_user`.
fn answer(d: &Decided) -> Value {
    let mut context = Map::new();
    context.insert("decision_id".into(), json!(d.id()));
    context.insert("policies".into(), json!(d.verdict.reasons));
    if !d.verdict.advice.is_empty() {
        let status = if d.allowed() { "200" } else { "403" };
        context.insert(
            "reason_user".into(),
            json!({ status: d.verdict.advice.join("; ") }),
        );
    }
    json!({ "decision": d.allowed(), "context": context })
}
