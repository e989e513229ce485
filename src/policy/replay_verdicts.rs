//! Verdicts a replay decides once per entity snapshot and reuses.
//!
//! A trail repeats itself: every request of a session decides the same few
//! (principal, action, resource) triples against the same entity snapshot,
//! and only the context's `time` (and a tool call's `args`) differ. Replay
//! must still reproduce each record exactly, so a verdict is reused only
//! where deciding it again cannot give another one.
//!
//! **The rule.** A record's verdict is reused from an earlier record of the
//! same replay when both have
//! - the same entity snapshot (the memo lives on the parsed snapshot) and
//!   the same policy set (keyed by its hash, which covers the schema and
//!   with it the typed actions);
//! - the same principal, deciding action (the typed action of a typed
//!   tool, else the group action) and resource;
//! - a context of the same shape, `{session, time}` (plain) or
//!   `{session, time, args}` (typed), with the same `session`;
//!
//! and when no policy that can apply to the deciding action reads
//! `context` except as `context.session` ([`super::session_verdicts`]: the
//! analysis the live path uses for the same purpose). Cedar is
//! deterministic, so the authorization of a valid request then depends on
//! the context only through the session.
//!
//! **Validity is still checked per record.** A record whose request would
//! not build (an unparsable `time`, arguments that do not fit the typed
//! action) is a deny carrying that error, whatever the memo holds:
//! - a plain context is built again from its own session and time (that
//!   fails exactly when `datetime(time)` does). Cedar's schema check of the
//!   request is skipped: it looks at the principal's, the resource's and
//!   the session's uids, which are part of the key, and at the types of the
//!   context's values, which the shape fixes (an entity of
//!   `Gateway::Session`, a `datetime`), never at the values themselves; so
//!   it passes because it passed for the record that filled the memo;
//! - a typed context is built and the request checked against the schema
//!   as for any decision: the arguments' values decide whether it fits.
//!
//! Only error-free verdicts are remembered, and any other context shape
//! (one carrying `usage`, say) is decided in full. The memo is bounded and
//! starts over when full; it lives as long as the parsed snapshot, which a
//! replay keeps for its own run.

use std::collections::HashMap;
use std::sync::Mutex;

use cedar_policy::EntityUid;

use cedar_policy::Entities;

use super::{Action, Checked, PolicyBundle, PreparedContext, Uid, Verdict};

/// Most verdicts one snapshot remembers (a session slice sees its tools
/// under a few actions); beyond this the memo starts over.
const MEMO_MAX: usize = 8192;

/// The verdicts remembered on one entity snapshot, by policy-set hash.
#[derive(Debug, Default)]
pub struct ReplayVerdicts {
    inner: Mutex<Memo>,
}

#[derive(Debug, Default)]
struct Memo {
    by_policy_set: HashMap<String, HashMap<ReuseKey, Verdict>>,
    len: usize,
}

/// What, besides the snapshot and the policy set, a reusable verdict
/// depends on.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ReuseKey {
    /// The context is typed (`{session, time, args}`), not plain.
    typed: bool,
    principal: EntityUid,
    /// The deciding action.
    action: EntityUid,
    resource: EntityUid,
    /// The id of `context.session`.
    session: String,
}

impl ReplayVerdicts {
    /// How many verdicts are remembered.
    pub fn len(&self) -> usize {
        self.inner.lock().map(|m| m.len).unwrap_or(0)
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn get(&self, policy_hash: &str, key: &ReuseKey) -> Option<Verdict> {
        let memo = self.inner.lock().ok()?;
        memo.by_policy_set.get(policy_hash)?.get(key).cloned()
    }

    /// Remembers an error-free verdict.
    fn put(&self, policy_hash: &str, key: ReuseKey, verdict: &Verdict) {
        if !verdict.errors.is_empty() {
            return;
        }
        let Ok(mut memo) = self.inner.lock() else {
            return;
        };
        if memo.len >= MEMO_MAX {
            memo.by_policy_set.clear();
            memo.len = 0;
        }
        if !memo.by_policy_set.contains_key(policy_hash) {
            memo.by_policy_set
                .insert(policy_hash.to_string(), HashMap::new());
        }
        let added = memo
            .by_policy_set
            .get_mut(policy_hash)
            .map(|verdicts| verdicts.insert(key, verdict.clone()).is_none());
        if added == Some(true) {
            memo.len += 1;
        }
    }
}

impl PolicyBundle {
    /// [`PolicyBundle::decide`] against the entities `memo` is kept on,
    /// reusing the verdict of an earlier request that cannot be decided
    /// otherwise (see the module doc for the rule).
    pub(super) fn decide_remembering(
        &self,
        request: (&Uid, Action, &Uid),
        context: &PreparedContext,
        entities: &Entities,
        memo: &ReplayVerdicts,
    ) -> Verdict {
        let (principal, action, resource) = request;
        let Some(key) = self.reuse_key(principal, action, resource, context) else {
            return self.decide(principal, action, resource, context, entities);
        };
        if let Some(verdict) = memo.get(&self.hash, &key) {
            // This record's own request must still be valid.
            let checked = if key.typed {
                Checked::AgainstSchema
            } else {
                Checked::Already
            };
            return match self.request(principal, action, resource, context, checked) {
                Ok(_) => verdict,
                Err(denied) => denied,
            };
        }
        let verdict = self.decide(principal, action, resource, context, entities);
        memo.put(&self.hash, key, &verdict);
        verdict
    }

    /// The key a verdict of this request is remembered under, when it can
    /// be reused at all.
    fn reuse_key(
        &self,
        principal: &Uid,
        action: Action,
        resource: &Uid,
        context: &PreparedContext,
    ) -> Option<ReuseKey> {
        let deciding = Uid(self.deciding_action(action, resource, context).ok()?);
        if !self.session_determined.contains(&deciding) {
            return None;
        }
        let (typed, session) = match &context.action {
            None => (false, context.session_and_time()?.0),
            Some(_) => (true, context.typed_session()?),
        };
        Some(ReuseKey {
            typed,
            principal: principal.0.clone(),
            action: deciding.0,
            resource: resource.0.clone(),
            session: session.to_string(),
        })
    }
}
