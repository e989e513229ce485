//! The decision record of one AuthZEN evaluation of a decision
//! application (`crate::pdp`): made with its verdict, like every other
//! decision ([`super::decide`]), so no evaluation is answered without one.
//!
//! The record is a decision record like the gateway's, on the same chain:
//! - `action`: `authzen:<app>:<action name>`
//!   ([`AUTHZEN_ACTION_PREFIX`]): the application is part of the action, so
//!   the trail's action filter and index find an application's decisions,
//!   and nothing takes them for the gateway's own actions;
//! - `principal`, `resource`: the Cedar uids of the subject and resource;
//! - `context`: the Cedar context as decided (`actionProperties` included);
//! - `org_id`: the asking key's org; `session_id`: none;
//! - `entities_hash` / snapshot: the application's entity data as loaded
//!   (stored once per version); `policy_hash`: its set's hash (recorded in
//!   `policy_sets` before the set decided anything);
//! - `notes.authzen`: `application`, `action` (the Cedar uid), `key` (a
//!   key asked) or `token` (a token asked: its `issuer`, `subject`,
//!   `client` and `jti`, never the token), `requestId` (the `X-Request-ID`, when sent), `evaluation` (its index
//!   in a batch), `entities` (what the request added to the stored data,
//!   Cedar entity JSON: with the snapshot, exactly the entities decided
//!   with) and `ignored` (members the schema does not declare).
//!
//! A search page is one record ([`search_record`]): the searched side's
//! column holds its type (`Records::user`), the action column `*` for an
//! action search, and `notes.authzen.search` the search (`kind`, and
//! `request`: the evaluation each candidate was decided as, the searched
//! id or action name empty), its results in order and how many candidates
//! it decided (each result decided exactly as an evaluation of it would
//! be, and so replayed).

use serde_json::{Map, Value, json};

use super::{Decided, json_text};
use crate::policy::application::{AppSet, Prepared};
use crate::store::decisions::{AUTHZEN_ACTION_PREFIX, NewDecision};

/// Who asked, as the record names them.
#[derive(Debug, Clone, Copy)]
pub struct Asker<'a> {
    /// The caller's org.
    pub org_id: &'a str,
    /// The key, when a key asked.
    pub key_id: Option<&'a str>,
    /// The token's issuer, subject, client and `jti`, when a token asked.
    pub token: Option<&'a Value>,
    /// The request's `X-Request-ID`, if sent.
    pub request_id: Option<&'a str>,
}

/// Decides one prepared evaluation and prepares its record; `index` is
/// its place in a batch.
pub fn decide(
    set: &AppSet,
    prepared: &Prepared<'_>,
    asker: &Asker<'_>,
    index: Option<usize>,
    time: &str,
) -> Decided {
    let verdict = set.decide(prepared);
    let record = NewDecision {
        id: uuid::Uuid::now_v7().to_string(),
        time: time.to_string(),
        org_id: Some(asker.org_id.to_string()),
        session_id: None,
        principal: prepared.principal.text(),
        action: format!(
            "{AUTHZEN_ACTION_PREFIX}{}:{}",
            set.name,
            prepared.action.id()
        ),
        resource: prepared.resource.text(),
        context: prepared.context.clone(),
        entities_hash: set.data.hash.clone(),
        entities: Some(set.data.json.clone()),
        policy_hash: set.bundle.hash.clone(),
        decision: if verdict.allowed { "allow" } else { "deny" }.to_string(),
        reasons: json_text(&verdict.reasons),
        errors: json_text(&verdict.errors),
        outcome: "null".to_string(),
        notes: notes(set, prepared, asker, index).to_string(),
    };
    Decided { verdict, record }
}

/// `notes.authzen` of a record.
fn notes(set: &AppSet, prepared: &Prepared<'_>, asker: &Asker<'_>, index: Option<usize>) -> Value {
    let mut authzen = Map::new();
    authzen.insert("application".into(), json!(set.name));
    authzen.insert("action".into(), json!(prepared.action.text()));
    caller_notes(&mut authzen, asker);
    if let Some(id) = asker.request_id {
        authzen.insert("requestId".into(), json!(id));
    }
    if let Some(i) = index {
        authzen.insert("evaluation".into(), json!(i));
    }
    if !prepared.overlay.is_empty() {
        authzen.insert("entities".into(), json!(prepared.overlay));
    }
    if !prepared.ignored.is_empty() {
        authzen.insert("ignored".into(), json!(prepared.ignored));
    }
    json!({ "authzen": authzen })
}

/// `key` (the key's id) or `token` (its holder) in `notes.authzen`.
fn caller_notes(authzen: &mut Map<String, Value>, asker: &Asker<'_>) {
    if let Some(key) = asker.key_id {
        authzen.insert("key".into(), json!(key));
    }
    if let Some(token) = asker.token {
        authzen.insert("token".into(), token.clone());
    }
}

/// One page of a search, as its record holds it.
#[derive(Debug, Clone, Default)]
pub struct SearchPage {
    /// `subject`, `resource` or `action`.
    pub kind: &'static str,
    /// The subject's uid, or the searched type of a subject search.
    pub principal: String,
    /// The action's name (`*` for an action search).
    pub action: String,
    /// The resource's uid, or the searched type of a resource search.
    pub resource: String,
    /// The Cedar context the candidates were decided with.
    pub context: String,
    /// The candidates allowed (ids, or action names), in order.
    pub results: Vec<String>,
    /// The determining policies of the results.
    pub reasons: Vec<String>,
    /// The errors of any candidate's decision.
    pub errors: Vec<String>,
    /// Candidates decided.
    pub examined: usize,
    /// Whether the search goes on after this page.
    pub more: bool,
    /// The entities the request added to the stored data.
    pub overlay: Vec<Value>,
    /// The members left out.
    pub ignored: Vec<String>,
    /// The search as asked, in AuthZEN's shape (what replay decides each
    /// result again from).
    pub request: Value,
}

/// The record of one search page, however many candidates it decided
/// (`notes.authzen.search`: the search, its results, how many candidates
/// were decided; decision `allow` when some are returned).
pub fn search_record(
    set: &AppSet,
    page: &SearchPage,
    asker: &Asker<'_>,
    time: &str,
) -> NewDecision {
    let mut authzen = Map::new();
    authzen.insert("application".into(), json!(set.name));
    authzen.insert(
        "search".into(),
        json!({
            "kind": page.kind,
            "request": page.request,
            "results": page.results,
            "examined": page.examined,
            "more": page.more,
        }),
    );
    caller_notes(&mut authzen, asker);
    if let Some(id) = asker.request_id {
        authzen.insert("requestId".into(), json!(id));
    }
    if !page.overlay.is_empty() {
        authzen.insert("entities".into(), json!(page.overlay));
    }
    if !page.ignored.is_empty() {
        authzen.insert("ignored".into(), json!(page.ignored));
    }
    NewDecision {
        id: uuid::Uuid::now_v7().to_string(),
        time: time.to_string(),
        org_id: Some(asker.org_id.to_string()),
        session_id: None,
        principal: page.principal.clone(),
        action: format!("{AUTHZEN_ACTION_PREFIX}{}:{}", set.name, page.action),
        resource: page.resource.clone(),
        context: page.context.clone(),
        entities_hash: set.data.hash.clone(),
        entities: Some(set.data.json.clone()),
        policy_hash: set.bundle.hash.clone(),
        decision: if page.results.is_empty() {
            "deny"
        } else {
            "allow"
        }
        .to_string(),
        reasons: json_text(&page.reasons),
        errors: json_text(&page.errors),
        outcome: json!({
            "status": "searched",
            "results": page.results.len(),
            "examined": page.examined,
        })
        .to_string(),
        notes: json!({ "authzen": authzen }).to_string(),
    }
}
