//! The three AuthZEN search APIs (`search/subject`, `search/resource`,
//! `search/action`), answered from the application's own data.
//!
//! - **Candidates**: the stored entities of the searched type
//!   (`entities.json`), or every action of the schema, in sorted order.
//!   Each is decided exactly as the evaluation API decides it (the same
//!   mapping, the same set): **every result, evaluated, is allowed**.
//!   Membership is followed by Cedar itself (`principal in team`), so a
//!   search is transitive as the specification recommends.
//! - **No match, not an error**: a searched type or an input type the
//!   application does not declare, an unknown action, or an input entity
//!   the data lacks and the request gives no properties for, answer an
//!   empty `results` (the certification scenario's rule). A candidate a
//!   searched entity's properties contradict, or that the action does not
//!   apply to, is not a result; an action whose context type the `context`
//!   does not fit is not a result of an action search. Any other ill-typed
//!   input is a 400, as for an evaluation.
//! - **Pages**: `page.limit` results at most (1 to `pdp.max_search_page`;
//!   `pdp.search_page` without one), and a page stops early after
//!   `pdp.max_search_examined` candidates or `pdp.search_budget_ms`, so a
//!   page costs bounded time whatever the data's size. A page that stopped
//!   before the end answers `page.next_token` ([`super::page_token`]), one
//!   that reached it an empty one; `page.count` is the page's results.
//!   Pages are not a snapshot: a reload between two pages answers from
//!   the new set.
//! - **Trail**: each page is one decision record
//!   ([`crate::audit::application::search_record`]) naming its results.
//! - **Cost**: one rate-limit token per page, before any work; the
//!   deciding runs off the async threads.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::HeaderMap;
use serde_json::{Value, json};

use super::admission::{self, Admitted};
use super::error::PdpError;
use super::input::{self, Bounds, Search, SearchKind};
use super::page_token;
use crate::audit::application::{self as record, Asker, SearchPage};
use crate::gateway::Gateway;
use crate::policy::application::recorded::search_request_json;
use crate::policy::application::{AppSet, InputError, RequestInput};
use crate::store::WriteOp;
use crate::store::decisions::NewDecision;

/// The bounds of one search page (`[pdp]`).
#[derive(Debug, Clone, Copy)]
struct Limits {
    bounds: Bounds,
    max_examined: usize,
    budget: Duration,
    token_ttl_secs: i64,
}

impl Limits {
    fn of(config: &crate::config::PdpConfig) -> Limits {
        Limits {
            bounds: Bounds::of(config),
            max_examined: config.max_search_examined.max(1),
            budget: Duration::from_millis(config.search_budget_ms),
            token_ttl_secs: i64::try_from(config.page_token_ttl_secs).unwrap_or(i64::MAX),
        }
    }
}

/// One search request: admitted, one token spent, the page found off the
/// async threads, recorded, answered.
pub async fn search(
    gw: &Gateway,
    kind: SearchKind,
    app: Option<&str>,
    headers: &HeaderMap,
    body: Body,
) -> Result<Value, PdpError> {
    let admitted = admission::admit(gw, app, headers, body).await?;
    super::evaluate::spend(gw, &admitted, 1).await?;
    gw.store
        .space()
        .check()
        .map_err(|_| PdpError::InsufficientStorage)?;
    let limits = Limits::of(&gw.config.pdp);
    let name = admitted.set.name.clone();
    let (answer, decision) = tokio::task::spawn_blocking(move || page(&admitted, kind, &limits))
        .await
        .map_err(|e| {
            tracing::error!(error = %e, "a search task failed");
            PdpError::Unavailable
        })??;
    gw.store
        .writer()
        .submit(vec![WriteOp::Decision(Box::new(decision))])
        .await
        .map_err(|e| {
            tracing::error!(error = %e, "cannot record a search; nothing answered");
            PdpError::Unavailable
        })?;
    gw.pdp.metrics.application_search(&name, kind.name());
    Ok(answer)
}

/// The page a request asks for, its answer and its record.
fn page(
    admitted: &Admitted,
    kind: SearchKind,
    limits: &Limits,
) -> Result<(Value, NewDecision), PdpError> {
    let set = &admitted.set;
    let mut search = input::search(&admitted.body, kind, &limits.bounds)?;
    let query = page_token::fingerprint(&set.name, kind, &admitted.body);
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    let after = match search.token {
        Some(t) => Some(continued(&mut search, page_token::decode(t, &query, now)?)?),
        None => None,
    };
    let found = if inputs_known(set, &search) {
        find(set, &search, after.as_deref(), limits)?
    } else {
        Found::default()
    };
    let next = if found.page.more {
        let next = page_token::Next {
            after: found.last.clone(),
            limit: search.limit,
        };
        page_token::encode(&query, &next, now.saturating_add(limits.token_ttl_secs))
    } else {
        String::new()
    };
    let asker = Asker {
        org_id: &admitted.caller.org_id,
        key_id: admitted.caller.key_id(),
        token: admitted.caller.token.as_ref(),
        request_id: admitted.request_id.as_deref(),
    };
    let mut answer = json!({
        "page": { "next_token": next, "count": found.page.results.len() },
        "results": results(&search, &found.page.results),
    });
    let page = described(set, &search, found.page);
    let decision = record::search_record(set, &page, &asker, &crate::ids::now_rfc3339());
    answer["context"] = json!({ "decision_id": decision.id });
    Ok((answer, decision))
}

/// A next page: the size the search began with (a different `page.limit`
/// is another query), and where it goes on.
fn continued(search: &mut Search<'_>, next: page_token::Next) -> Result<String, PdpError> {
    if search.limit_given && search.limit != next.limit {
        return Err(page_token::TokenError::OtherQuery.into());
    }
    search.limit = next.limit;
    Ok(next.after)
}

/// What a page found, and the last candidate it decided (where the next
/// page goes on).
#[derive(Debug, Default)]
struct Found {
    page: SearchPage,
    last: String,
}

/// Whether the entities a search starts from are the application's: of a
/// type it declares, and stored or described by their properties.
fn inputs_known(set: &AppSet, search: &Search<'_>) -> bool {
    let known = |e: &crate::policy::application::EntityInput<'_>| {
        set.type_text(e.type_name).is_some()
            && (set.stores(e.type_name, e.id) || e.properties.is_some_and(|p| !p.is_empty()))
    };
    let t = &search.template;
    match search.kind {
        SearchKind::Subject => known(&t.resource) && set.type_text(t.subject.type_name).is_some(),
        SearchKind::Resource => known(&t.subject) && set.type_text(t.resource.type_name).is_some(),
        SearchKind::Action => known(&t.subject) && known(&t.resource),
    }
}

/// The candidates of a search, in sorted order.
fn candidates<'s>(set: &'s AppSet, search: &Search<'_>) -> Vec<&'s str> {
    let ids = |type_name: &str| {
        set.stored_ids(type_name)
            .iter()
            .map(String::as_str)
            .collect()
    };
    match search.kind {
        SearchKind::Subject => ids(search.template.subject.type_name),
        SearchKind::Resource => ids(search.template.resource.type_name),
        SearchKind::Action => set.action_names(),
    }
}

/// Decides the candidates after `after`, in order, until the page is full,
/// its bounds are reached, or none is left.
fn find(
    set: &AppSet,
    search: &Search<'_>,
    after: Option<&str>,
    limits: &Limits,
) -> Result<Found, PdpError> {
    let names = candidates(set, search);
    let start = after.map_or(0, |a| names.partition_point(|n| *n <= a));
    let started = Instant::now();
    let mut found = Found::default();
    let (mut reasons, mut errors) = (BTreeSet::new(), BTreeSet::new());
    for name in names.iter().skip(start) {
        let bounded =
            found.page.examined >= limits.max_examined || started.elapsed() > limits.budget;
        if found.page.results.len() >= search.limit || bounded {
            found.page.more = true;
            break;
        }
        found.page.examined += 1;
        found.last = (*name).to_string();
        let input = candidate(search, name);
        let prepared = match set.prepare(&input) {
            Ok(p) => p,
            Err(e) => match outcome(search.kind, e) {
                Miss::Candidate => continue,
                Miss::All => return Ok(Found::default()),
                Miss::Refused(e) => return Err(e.into()),
            },
        };
        if found.page.context.is_empty() {
            found.page.context.clone_from(&prepared.context);
            found.page.overlay.clone_from(&prepared.overlay);
            found.page.ignored.clone_from(&prepared.ignored);
        }
        let verdict = set.decide(&prepared);
        errors.extend(verdict.errors);
        if verdict.allowed {
            reasons.extend(verdict.reasons);
            found.page.results.push((*name).to_string());
        }
    }
    found.page.reasons = reasons.into_iter().collect();
    found.page.errors = errors.into_iter().collect();
    Ok(found)
}

/// The evaluation of one candidate.
fn candidate<'a>(search: &Search<'a>, name: &'a str) -> RequestInput<'a> {
    let mut input = search.template.clone();
    match search.kind {
        SearchKind::Subject => input.subject.id = name,
        SearchKind::Resource => input.resource.id = name,
        SearchKind::Action => input.action.name = name,
    }
    input
}

/// What an input error means for a search.
enum Miss {
    /// This candidate is not a result.
    Candidate,
    /// No candidate can be one: the search has no results.
    All,
    /// The request is ill-typed (400).
    Refused(InputError),
}

fn outcome(kind: SearchKind, e: InputError) -> Miss {
    match e {
        InputError::UnknownEntityType { .. } | InputError::UnknownAction { .. } => Miss::All,
        InputError::Conflict { .. }
        | InputError::SameEntity { .. }
        | InputError::Request { .. } => Miss::Candidate,
        InputError::Context { .. } if kind == SearchKind::Action => Miss::Candidate,
        other => Miss::Refused(other),
    }
}

/// The page as its record names it: the searched side by its type.
fn described(set: &AppSet, search: &Search<'_>, mut page: SearchPage) -> SearchPage {
    let t = &search.template;
    let uid = |e: &crate::policy::application::EntityInput<'_>| {
        set.uid_text(e.type_name, e.id)
            .unwrap_or_else(|| e.type_name.to_string())
    };
    let type_of = |e: &crate::policy::application::EntityInput<'_>| {
        set.type_text(e.type_name)
            .unwrap_or_else(|| e.type_name.to_string())
    };
    page.kind = search.kind.name();
    page.request = search_request_json(t);
    (page.principal, page.resource) = match search.kind {
        SearchKind::Subject => (type_of(&t.subject), uid(&t.resource)),
        SearchKind::Resource => (uid(&t.subject), type_of(&t.resource)),
        SearchKind::Action => (uid(&t.subject), uid(&t.resource)),
    };
    page.action = match search.kind {
        SearchKind::Action => "*".to_string(),
        _ => t.action.name.to_string(),
    };
    if page.context.is_empty() {
        page.context = "{}".to_string();
    }
    page
}

/// The results as the specification writes them: entities of the
/// searched type as asked (`{type, id}`), or actions (`{name}`).
fn results(search: &Search<'_>, names: &[String]) -> Vec<Value> {
    let t = &search.template;
    names
        .iter()
        .map(|name| match search.kind {
            SearchKind::Subject => json!({ "type": t.subject.type_name, "id": name }),
            SearchKind::Resource => json!({ "type": t.resource.type_name, "id": name }),
            SearchKind::Action => json!({ "name": name }),
        })
        .collect()
}
