//! The decisions of one admitted AuthZEN request, in named steps: spend
//! the key's and its org's rate limits, one token per evaluation (429,
//! before any work) → map every evaluation onto the application's schema
//! → check the trail's disk (507) → decide in order, stopping where the
//! batch's semantic says → decide them under the application's shadow
//! candidate, if it has one (`shadow.rs`) → record every decision in one
//! group commit → count them (`cedargate_application_decisions`) and queue
//! the shadow's divergences → answer (only after the commit). A commit
//! that fails answers 503 and leaves nothing: no record, no count, no
//! divergence.
//!
//! An ill-typed request of one evaluation is a 400, nothing decided. In a
//! batch, an evaluation that cannot be decided (a member missing or of the
//! wrong type, or ill-typed for the schema) is an error of that evaluation
//! alone, as the specification's evaluation-level errors are: it answers
//! `{"decision": false, "context": {"error": {"status": 400, "message"}}}`
//! naming the field, counts as a deny for the short-circuit semantics and
//! is not recorded (nothing was decided); the others are decided.

use serde_json::{Map, Value, json};

use super::admission::Admitted;
use super::error::{PdpError, bounded};
use super::input::{Item, Semantic};
use crate::audit::Decided;
use crate::audit::application::{self, Asker};
use crate::gateway::Gateway;
use crate::policy::application::{AppSet, Prepared};
use crate::rate_limits::Subjects;
use crate::store::WriteOp;

/// Decides `inputs` for an admitted request; the answers, one per
/// evaluation decided (or failed, in a batch), in request order.
pub async fn decide(
    gw: &Gateway,
    admitted: &Admitted,
    inputs: &[Item<'_>],
    semantic: Semantic,
    batch: bool,
) -> Result<Vec<Value>, PdpError> {
    let set = &admitted.set;
    spend(gw, admitted, inputs.len()).await?;
    let prepared = prepare(set, inputs, batch)?;
    gw.store
        .space()
        .check()
        .map_err(|_| PdpError::InsufficientStorage)?;
    let asker = Asker {
        org_id: &admitted.caller.org_id,
        key_id: admitted.caller.key_id(),
        token: admitted.caller.token.as_ref(),
        request_id: admitted.request_id.as_deref(),
    };
    let decided = in_order(set, &prepared, &asker, semantic, batch);
    let answers = decided.iter().map(answer).collect();
    let pending = super::shadow::compare(&admitted.app, set, decided_pairs(&prepared, &decided));
    let (allowed, denied) = tally(&decided);
    record(gw, decided).await?;
    gw.pdp
        .metrics
        .application_decisions(&set.name, allowed, denied);
    super::shadow::store(&admitted.app, pending);
    Ok(answers)
}

/// Each decided evaluation with the request it decided.
fn decided_pairs<'a, 's>(
    prepared: &'a [Result<Prepared<'s>, String>],
    decided: &'a [Outcome],
) -> impl Iterator<Item = (&'a Prepared<'s>, &'a Decided)> {
    prepared.iter().zip(decided).filter_map(|pair| match pair {
        (Ok(p), Outcome::Decided(d)) => Some((p, &**d)),
        _ => None,
    })
}

/// The allows and the denies among the decided evaluations.
fn tally(decided: &[Outcome]) -> (u64, u64) {
    decided.iter().fold((0, 0), |(a, d), o| match o {
        Outcome::Decided(x) if x.allowed() => (a + 1, d),
        Outcome::Decided(_) => (a, d + 1),
        Outcome::Failed(_) => (a, d),
    })
}

/// Maps each evaluation onto the schema: an error refuses a lone
/// evaluation (400) and is the answer of a batch's.
fn prepare<'s>(
    set: &'s AppSet,
    inputs: &[Item<'_>],
    batch: bool,
) -> Result<Vec<Result<Prepared<'s>, String>>, PdpError> {
    let mut prepared = Vec::with_capacity(inputs.len());
    for item in inputs {
        prepared.push(match item {
            Ok(input) => match set.prepare(input) {
                Ok(p) => Ok(p),
                Err(e) if !batch => return Err(e.into()),
                Err(e) => Err(bounded(e.to_string())),
            },
            Err(e) if !batch => return Err(e.clone().into()),
            Err(e) => Err(bounded(e.to_string())),
        });
    }
    Ok(prepared)
}

/// One evaluation of a request: decided, or failed (a batch's).
enum Outcome {
    Decided(Box<Decided>),
    Failed(String),
}

/// One token per evaluation from the key's and its org's buckets.
pub(super) async fn spend(
    gw: &Gateway,
    admitted: &Admitted,
    evaluations: usize,
) -> Result<(), PdpError> {
    let who = Subjects {
        org: &admitted.caller.org_id,
        agent: None,
        key: &admitted.caller.id,
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
    prepared: &[Result<Prepared<'_>, String>],
    asker: &Asker<'_>,
    semantic: Semantic,
    batch: bool,
) -> Vec<Outcome> {
    let time = crate::ids::now_rfc3339();
    let mut decided = Vec::with_capacity(prepared.len());
    for (i, one) in prepared.iter().enumerate() {
        let outcome = match one {
            Ok(one) => Outcome::Decided(Box::new(application::decide(
                set,
                one,
                asker,
                batch.then_some(i),
                &time,
            ))),
            Err(message) => Outcome::Failed(message.clone()),
        };
        let allowed = matches!(&outcome, Outcome::Decided(d) if d.allowed());
        decided.push(outcome);
        if semantic.stops_after(allowed) {
            break;
        }
    }
    decided
}

/// Commits the records; an answer is sent only once they are.
async fn record(gw: &Gateway, decided: Vec<Outcome>) -> Result<(), PdpError> {
    let ops = decided
        .into_iter()
        .filter_map(|o| match o {
            Outcome::Decided(d) => Some(WriteOp::Decision(Box::new(d.finish_default()))),
            Outcome::Failed(_) => None,
        })
        .collect();
    gw.store.writer().submit(ops).await.map_err(|e| {
        tracing::error!(error = %e, "cannot record decision-point decisions; nothing answered");
        PdpError::Unavailable
    })
}

/// An AuthZEN decision: `decision`, and in `context` the record's id, the
/// determining policies and, when they advise, `reason_user`; a failed
/// evaluation's `context.error`.
fn answer(outcome: &Outcome) -> Value {
    let d = match outcome {
        Outcome::Decided(d) => d,
        Outcome::Failed(message) => {
            return json!({
                "decision": false,
                "context": { "error": { "status": 400, "message": message } },
            });
        }
    };
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
