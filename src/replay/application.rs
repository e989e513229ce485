//! Replaying the records of the decision applications (`authzen:<app>:…`
//! actions), each on the entity data it was decided on.
//!
//! - **Which records**: under the recorded sets, every application's;
//!   under a candidate of one application ([`Against::Application`]) only
//!   that application's (the filter is narrowed to it, so the store reads
//!   no other); under a candidate of the gateway's set, none.
//! - **Which set**: the record's own (its policy hash, recorded in
//!   `policy_sets` before the set decided anything), or the candidate.
//! - **Which data**: the record's entity snapshot (the application's
//!   `entities.json` as it was loaded), read under the deciding set's
//!   schema, with the entities the request added (`notes.authzen.entities`)
//!   over it: exactly the entities decided with.
//! - **An evaluation** is decided again from its Cedar request as recorded
//!   (principal, action, resource, context), and compared as the gateway's
//!   records are: decision, determining policies, errors.
//! - **A search page** is one decision per result, each decided again as
//!   the evaluation it was (the recorded search request with the result in
//!   the searched place) and named by its own principal, action and
//!   resource; a page records the union of its results' policies, so a
//!   result is compared on its decision alone. A result now denied is an
//!   `allow_to_deny` flip; a page cannot show what it did not find, so no
//!   result is ever `deny_to_allow`.

use std::sync::Arc;

use serde_json::Value;

use super::{Against, Caches, Recorded, Replayed, Unreplayable};
use crate::policy::application::AppSet;
use crate::policy::application::load::with_data;
use crate::policy::application::recorded::{RecordedError, RecordedEvaluation};
use crate::store::audit_query::DecisionFilter;
use crate::store::decisions::{AUTHZEN_ACTION_PREFIX, StoredDecision};
use crate::store::{Conn, StoreError};

/// The application a record's action names (`authzen:<app>:<action>`).
pub fn of_action(action: &str) -> Option<&str> {
    let rest = action.strip_prefix(AUTHZEN_ACTION_PREFIX)?;
    rest.split_once(':').map(|(app, _)| app)
}

/// The action name after the application (`write`, or `*` for an action
/// search's page).
fn action_name(action: &str) -> Option<&str> {
    let rest = action.strip_prefix(AUTHZEN_ACTION_PREFIX)?;
    rest.split_once(':').map(|(_, name)| name)
}

/// `filter`, narrowed to the application a candidate of one is for.
pub(super) fn narrowed(filter: &DecisionFilter, against: &Against) -> DecisionFilter {
    match against {
        Against::Application { name, .. } => DecisionFilter {
            application: Some(name.clone()),
            ..filter.clone()
        },
        _ => filter.clone(),
    }
}

/// Whether a record of `action` is replayed under `against`.
pub(super) fn replays(against: &Against, action: &str) -> bool {
    match (against, of_action(action)) {
        (Against::Recorded, _) => true,
        (Against::Candidate(_), app) => app.is_none(),
        (Against::Application { name, .. }, app) => app == Some(name.as_str()),
    }
}

impl Caches {
    /// The set an application's record replays with: the deciding set on
    /// the record's entity snapshot, built once per (set, snapshot).
    pub(super) fn resolve_app(
        &mut self,
        conn: &mut Conn,
        against: &Against,
        app: &str,
        row: &StoredDecision,
    ) -> Result<Result<Arc<AppSet>, Unreplayable>, StoreError> {
        let bundle = match against {
            Against::Candidate(b) | Against::Application { bundle: b, .. } => Arc::clone(b),
            Against::Recorded => match self.bundle(conn, &row.record.policy_hash)? {
                Ok(b) => b,
                Err(e) => return Ok(Err(e)),
            },
        };
        let snapshot = &row.record.entities_hash;
        if let Some(set) = self
            .apps
            .get(&bundle.hash)
            .and_then(|of_set| of_set.get(snapshot))
        {
            return Ok(set.clone());
        }
        let set = match crate::store::decisions::entity_snapshot(conn, snapshot)? {
            None => Err(Unreplayable::SnapshotMissing(snapshot.clone())),
            Some(text) => {
                let origin = format!("entity snapshot {snapshot}");
                with_data(app, Arc::clone(&bundle), &text, &origin)
                    .map(Arc::new)
                    .map_err(|e| Unreplayable::AppData(Arc::new(e)))
            }
        };
        self.apps
            .entry(bundle.hash.clone())
            .or_default()
            .insert(snapshot.clone(), set.clone());
        Ok(set)
    }
}

/// Decides the decisions of one application record again.
pub(super) fn replay_record(
    row: &StoredDecision,
    set: &Result<Arc<AppSet>, Unreplayable>,
) -> Result<Vec<Replayed>, Unreplayable> {
    let set = set.as_ref().map_err(Clone::clone)?;
    let r = &row.record;
    let unreadable = |what: &str| Unreplayable::AppRequest(RecordedError::Search(what.into()));
    let notes: Value = serde_json::from_str(&r.notes).map_err(|_| unreadable("notes"))?;
    let authzen = &notes["authzen"];
    let action = action_name(&r.action).ok_or_else(|| unreadable("action"))?;
    if let Some(search) = authzen.get("search") {
        let app = of_action(&r.action).unwrap_or_default();
        return replay_search(set, app, search);
    }
    let added = authzen
        .get("entities")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    let now = set
        .decide_recorded(&RecordedEvaluation {
            principal: &r.principal,
            action,
            resource: &r.resource,
            context: &r.context,
            added,
        })
        .map_err(Unreplayable::AppRequest)?;
    Ok(vec![Replayed {
        prelude: None,
        resource: None,
        recorded: Recorded::of(r),
        now,
    }])
}

/// Each result of a search page, decided again (rules in the module doc).
fn replay_search(set: &AppSet, app: &str, search: &Value) -> Result<Vec<Replayed>, Unreplayable> {
    let unreadable = |what: &str| Unreplayable::AppRequest(RecordedError::Search(what.into()));
    let kind = search["kind"].as_str().ok_or_else(|| unreadable("kind"))?;
    let request = search
        .get("request")
        .ok_or_else(|| unreadable("no `request`"))?;
    let results = search["results"]
        .as_array()
        .ok_or_else(|| unreadable("results"))?;
    let mut out = Vec::with_capacity(results.len());
    for result in results {
        let result = result.as_str().ok_or_else(|| unreadable("results"))?;
        let (now, [principal, action, resource]) = set
            .decide_search_result(request, kind, result)
            .map_err(Unreplayable::AppRequest)?;
        // Compared on the decision: the page holds no result's own policies.
        let (reasons, errors) = if now.allowed {
            (now.reasons.clone(), now.errors.clone())
        } else {
            (Vec::new(), Vec::new())
        };
        out.push(Replayed {
            prelude: Some((format!("{AUTHZEN_ACTION_PREFIX}{app}:{action}"), principal)),
            resource: Some(resource),
            recorded: Recorded {
                allowed: true,
                reasons,
                errors,
            },
            now,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::{action_name, of_action};

    #[test]
    fn the_application_and_action_of_a_record() {
        assert_eq!(of_action("authzen:records:write"), Some("records"));
        assert_eq!(action_name("authzen:records:write"), Some("write"));
        assert_eq!(action_name("authzen:records:*"), Some("*"));
        assert_eq!(of_action("call_tool"), None);
        assert_eq!(of_action("authzen:broken"), None);
    }
}
