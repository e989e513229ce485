//! Step-up authorization decided by policy: when Cedar denies a person's
//! `call_tool` (typed tool actions included), `a2a_invoke`,
//! `access_session` or `create_session` (opening their session at
//! `/mcp/{org}/{project}`), and a scope named by `@requires_scope` on the
//! action's policies would allow it, the answer is not a plain refusal
//! but an OAuth `insufficient_scope` challenge, so the client signs the
//! person in again with those scopes and retries.
//!
//! **Decision:** whether scopes would help is decided by Cedar, never
//! guessed from the annotation. The candidates are the `@requires_scope`
//! scopes of the policies that can apply to the deciding action
//! (`PolicyBundle::required_scopes`) that the token does not hold yet,
//! `auth.scope_implies` applied (a token holding `mcp:admin`, which
//! implies `mcp:tools`, holds `mcp:tools`). The same request (same
//! principal, action, resource, entity slice and context but for
//! `context.token.scopes`) is decided again with every candidate added
//! and expanded through `scope_implies`; if that allows, candidates are
//! dropped one at a time while it still allows, so the challenge asks
//! for what the request needs and no more (a broader scope that implies
//! a narrower one leaves the narrower one out). If it still denies, the
//! request is answered as any deny (-32003 or 403), with no challenge.
//! A deny costs at most one decision per candidate and one more; only a
//! person's deny on an action whose policies name a scope they lack pays
//! anything.
//!
//! The hypothetical decision authorizes nothing and is no decision of the
//! trail (it is not recorded, not observed by metrics or shadow mode); the
//! real deny is, as always before the answer, with
//! `notes.stepUp = {"scopes": [<the missing scopes>]}`.
//!
//! The challenge (`WWW-Authenticate: Bearer error="insufficient_scope",
//! resource_metadata="…", scope="…", error_description="…"`) names every
//! scope the client should ask for in one list, as MCP 2026-07-28 asks:
//! the token's granted scopes followed by the missing ones
//! (`offline_access` is never advertised). A key-authenticated request
//! never steps up: keys have no scopes.

use serde_json::{Value, json};

use super::error::StepUpRefusal;
use crate::audit::Decided;
use crate::identity::Identities;
use crate::identity::person::Person;
use crate::policy::entities::EntitySlice;
use crate::policy::identity::CheckedToken;
use crate::policy::{Action, PolicyBundle, PreparedContext, Uid};

/// The scopes a denied request would need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepUp {
    /// Not held by the token, and enough (with it) to allow the request.
    pub missing: Vec<String>,
    /// Every scope to ask for: the granted ones, then the missing.
    pub scopes: Vec<String>,
}

/// One denied request, as it was decided.
pub struct Denied<'a> {
    /// The policy set it was decided under.
    pub bundle: &'a PolicyBundle,
    /// The entity slice it was decided on.
    pub slice: &'a EntitySlice,
    /// The person whose request it was (`None` for a key).
    pub person: Option<&'a Person>,
    /// The accepted issuers (`scope_implies`).
    pub identities: &'a Identities,
    /// The principal.
    pub principal: &'a Uid,
    /// The (group) action.
    pub action: Action,
    /// The resource.
    pub resource: &'a Uid,
}

/// The step-up that would turn a person's denied request into an allow:
/// `context_with` rebuilds the request's context around another token.
/// `None` for a key, or when no scope would change the answer.
pub fn find(
    denied: &Denied<'_>,
    context_with: impl Fn(&CheckedToken) -> PreparedContext,
) -> Option<StepUp> {
    let person = denied.person?;
    let held = &person.token.facts().scopes;
    let candidates: Vec<String> = denied
        .bundle
        .required_scopes(denied.action, denied.resource)
        .iter()
        .filter(|s| !held.contains(s))
        .cloned()
        .collect();
    if candidates.is_empty() {
        return None;
    }
    let allows = |extra: &[String]| {
        with_scopes(denied, extra).is_some_and(|token| {
            let context = context_with(&token);
            denied
                .bundle
                .decide(
                    denied.principal,
                    denied.action,
                    denied.resource,
                    &context,
                    &denied.slice.entities,
                )
                .allowed
        })
    };
    if !allows(&candidates) {
        return None;
    }
    let mut missing = candidates;
    let mut i = 0;
    while i < missing.len() {
        let mut fewer = missing.clone();
        fewer.remove(i);
        if allows(&fewer) {
            missing = fewer;
        } else {
            i += 1;
        }
    }
    let mut scopes = person.granted.clone();
    for scope in &missing {
        if !scopes.contains(scope) {
            scopes.push(scope.clone());
        }
    }
    Some(StepUp { missing, scopes })
}

/// The person's token as it would be granted `extra` too (with every scope
/// those imply); `None` if that token would exceed the vocabulary's bounds.
fn with_scopes(denied: &Denied<'_>, extra: &[String]) -> Option<CheckedToken> {
    let person = denied.person?;
    let mut granted = person.granted.clone();
    granted.extend(extra.iter().cloned());
    let mut facts = person.token.facts().clone();
    facts.scopes = denied
        .identities
        .expand_scopes(&granted)
        .into_iter()
        .collect();
    facts.checked().ok()
}

/// Notes `step_up` in the deny's record (`notes.stepUp`) and makes its
/// answer, whose challenge names `metadata_url`.
pub fn refusal(
    metadata_url: Option<&str>,
    decided: &mut Decided,
    tool: Option<&str>,
    step_up: StepUp,
) -> StepUpRefusal {
    let mut notes = match serde_json::from_str(&decided.record.notes) {
        Ok(Value::Object(map)) => map,
        _ => serde_json::Map::new(),
    };
    notes.insert("stepUp".into(), json!({ "scopes": step_up.missing }));
    decided.record.notes = Value::Object(notes).to_string();
    StepUpRefusal {
        tool: tool.map(str::to_string),
        decision_id: decided.id().to_string(),
        reasons: decided.verdict.reasons.clone(),
        advice: decided.verdict.advice.clone(),
        missing: step_up.missing,
        scopes: step_up.scopes,
        metadata_url: metadata_url.unwrap_or_default().to_string(),
    }
}
