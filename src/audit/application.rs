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
//! - `notes.authzen`: `application`, `action` (the Cedar uid), `key`,
//!   `requestId` (the `X-Request-ID`, when sent), `evaluation` (its index
//!   in a batch), `entities` (what the request added to the stored data,
//!   Cedar entity JSON: with the snapshot, exactly the entities decided
//!   with) and `ignored` (members the schema does not declare).

use serde_json::{Map, Value, json};

use super::{Decided, json_text};
use crate::policy::application::{AppSet, Prepared};
use crate::store::decisions::{AUTHZEN_ACTION_PREFIX, NewDecision};

/// Who asked, as the record names them.
#[derive(Debug, Clone, Copy)]
pub struct Asker<'a> {
    /// The key's org.
    pub org_id: &'a str,
    /// The key.
    pub key_id: &'a str,
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
    authzen.insert("key".into(), json!(asker.key_id));
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
