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
//!   `{session, time, args}` (typed), with the same `session`, and either
//!   no token or a token with the same facts (`context.token` and
//!   `context.client`, compared by their digest);
//!
//! and when no policy that can apply to the deciding action reads
//! `context` except as `context.session`, `context.token` and
//! `context.client` ([`super::session_verdicts`]: the analysis the live
//! path uses for the same purpose). Cedar is
//! deterministic, so the authorization of a valid request then depends on
//! the context only through the session.
//!
//! **Validity is still checked per record.** A record whose request would
//! not build (an unparsable `time`, arguments that do not fit the typed
//! action) is a deny carrying that error, whatever the memo holds:
//! - a plain context is built again from its own session and time (that
//!   fails exactly when `datetime(time)` does), and nothing else is built:
//!   Cedar's request, and its schema check, are not needed. That check
//!   looks at the principal's, the resource's and
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

use super::fingerprinted::{BorrowedKey, Fingerprinted, fingerprint};
use super::{Action, PolicyBundle, PreparedContext, Uid, Verdict};

/// Most verdicts one snapshot remembers (a session slice sees its tools
/// under a few actions); beyond this the memo starts over.
const MEMO_MAX: usize = 8192;

/// The verdicts remembered on one entity snapshot, by policy-set hash.
///
/// A verdict is found by a fingerprint of its borrowed key
/// ([`super::fingerprinted`]): a hit copies no uid.
#[derive(Debug, Default)]
pub struct ReplayVerdicts {
    inner: Mutex<Memo>,
}

#[derive(Debug, Default)]
struct Memo {
    by_policy_set: HashMap<String, Fingerprinted<ReuseKey>>,
    len: usize,
}

/// What, besides the snapshot and the policy set, a reusable verdict
/// depends on.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ReuseKey {
    /// The context is typed (`{session, time, args}`), not plain.
    typed: bool,
    principal: EntityUid,
    /// The deciding action.
    action: EntityUid,
    resource: EntityUid,
    /// The id of `context.session`.
    session: String,
    /// The digest of `context.token` (`""` without one).
    token: String,
}

/// A [`ReuseKey`] of borrowed parts, as a request presents it.
#[derive(Clone, Copy)]
struct KeyRef<'a> {
    typed: bool,
    principal: &'a EntityUid,
    action: &'a EntityUid,
    resource: &'a EntityUid,
    session: &'a str,
    token: &'a str,
}

impl BorrowedKey for KeyRef<'_> {
    type Owned = ReuseKey;

    fn fingerprint(&self) -> u64 {
        fingerprint((
            self.typed,
            self.principal,
            self.action,
            self.resource,
            self.session,
            self.token,
        ))
    }

    fn is(&self, key: &ReuseKey) -> bool {
        self.typed == key.typed
            && self.session == key.session
            && self.token == key.token
            && self.resource == &key.resource
            && self.principal == &key.principal
            && self.action == &key.action
    }

    fn owned(&self) -> ReuseKey {
        ReuseKey {
            typed: self.typed,
            principal: self.principal.clone(),
            action: self.action.clone(),
            resource: self.resource.clone(),
            session: self.session.to_string(),
            token: self.token.to_string(),
        }
    }
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

    fn get(&self, policy_hash: &str, key: &KeyRef<'_>) -> Option<Verdict> {
        let memo = self.inner.lock().ok()?;
        memo.by_policy_set.get(policy_hash)?.get(key)
    }

    /// Remembers an error-free verdict.
    fn put(&self, policy_hash: &str, key: &KeyRef<'_>, verdict: &Verdict) {
        let Ok(mut memo) = self.inner.lock() else {
            return;
        };
        if memo.len >= MEMO_MAX {
            memo.by_policy_set.clear();
            memo.len = 0;
        }
        if !memo.by_policy_set.contains_key(policy_hash) {
            memo.by_policy_set
                .insert(policy_hash.to_string(), Fingerprinted::default());
        }
        let Some(verdicts) = memo.by_policy_set.get_mut(policy_hash) else {
            return;
        };
        if verdicts.insert(key, verdict) {
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
        let Some((deciding, typed, session, token)) = self.reusable(action, resource, context)
        else {
            return self.decide(principal, action, resource, context, entities);
        };
        let key = KeyRef {
            typed,
            principal: &principal.0,
            action: &deciding,
            resource: &resource.0,
            session,
            token,
        };
        if let Some(verdict) = memo.get(&self.hash, &key) {
            return self.still_valid(request, context, typed, verdict);
        }
        let verdict = self.decide(principal, action, resource, context, entities);
        memo.put(&self.hash, &key, &verdict);
        verdict
    }

    /// A remembered verdict, when this record's own request is valid too
    /// (else the deny its request gives). A plain context's check is its
    /// Cedar context building (`datetime(time)`): the request itself was
    /// built without a schema, which cannot fail, for the record that
    /// filled the memo. A typed one is checked against the schema.
    fn still_valid(
        &self,
        (principal, action, resource): (&Uid, Action, &Uid),
        context: &PreparedContext,
        typed: bool,
        verdict: Verdict,
    ) -> Verdict {
        if !typed {
            return match context.cedar() {
                Ok(_) => verdict,
                Err(e) => Verdict::denied_with(e.to_string()),
            };
        }
        match self.request(principal, action, resource, context) {
            Ok(_) => verdict,
            Err(denied) => denied,
        }
    }

    /// The deciding action, whether the context is typed, and the session
    /// and token digest (`""` without a token) a verdict of this request is
    /// remembered under, when it can be reused at all.
    pub(super) fn reusable<'c>(
        &self,
        action: Action,
        resource: &Uid,
        context: &'c PreparedContext,
    ) -> Option<(EntityUid, bool, &'c str, &'c str)> {
        let deciding = Uid(self.deciding_action(action, resource, context).ok()?);
        if !self.session_determined.contains(&deciding) {
            return None;
        }
        let (typed, session) = match &context.action {
            None => (false, context.session_and_time()?.0),
            Some(_) => (true, context.typed_session()?),
        };
        Some((deciding.0, typed, session, context.variant()))
    }
}
