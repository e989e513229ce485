//! A session's repeated `tools/list`, recorded once per interval.
//!
//! Agents list their tools again and again (many clients before every
//! turn), and a session's listings are nearly always the same: the same
//! tools, each with the same verdict, decided by the same policy set on the
//! same entity snapshot. Writing each one was most of what a `tools/list`
//! cost (the record, its chain hash, the trail's indexes), for records an
//! auditor cannot tell apart but by their time.
//!
//! **Decision:** a listing is not written again when it repeats the last
//! listing recorded for the same session and key, less than
//! `audit.listing_record_secs` (default 60; 0 records every listing) after
//! that record, and re-running the recorded one decides it exactly:
//! - the same policy-set hash and entity-snapshot hash;
//! - the same tools with the same verdicts (decision, determining policies;
//!   no errors), so the same batched notes;
//! - the same token's facts (its digest; none for a key): a person's view
//!   is shared by their tokens, and a verdict may read `context.token`;
//! - its request's other decisions (the `access_session` that rides in the
//!   listing's prelude) allowed alike, by the same policies;
//! - and no policy of `view_tool` nor of those decisions' actions reads the
//!   context beyond `context.session`, `context.token` and `context.client`
//!   (the rule the session verdict memo uses): the only thing that differs,
//!   `context.time`, then cannot change a verdict.
//!
//! Any change (a policy reload, a new tool, a changed role, a verdict with
//! errors, a denied access) is recorded at once, and a repeated listing
//! is recorded again once the interval has passed, so the trail shows at
//! least one listing per interval while a session lists. Nothing is
//! skipped while a shadow candidate runs (a divergence names its live
//! decision by the id of its row). `cedargate_listings_repeated_total`
//! counts the listings answered without a record of their own.
//!
//! Tool calls are never skipped: each call is one record, committed before
//! its answer.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::policy::{Action, PolicyBundle};
use crate::store::decisions::NewDecision;

/// The last listing recorded for one session and key (held by its cached
/// session view, so a view built anew records its first listing).
#[derive(Debug, Default)]
pub struct ListingMemory {
    last: Mutex<Option<Recorded>>,
}

#[derive(Debug)]
struct Recorded {
    /// Everything re-running the record depends on, but time.
    key: String,
    at: Instant,
}

impl ListingMemory {
    /// Whether `listing` (a `tools/list` record), with `preludes` (the
    /// request's decisions waiting to ride in it), repeats the last
    /// recorded listing within `every` under the module doc's rule. When
    /// it does not, `listing` is remembered as the last recorded one.
    pub fn is_repeat(
        &self,
        bundle: &PolicyBundle,
        (listing, token): (&NewDecision, &str),
        preludes: &[&NewDecision],
        every: Duration,
    ) -> bool {
        let Ok(mut last) = self.last.lock() else {
            return false;
        };
        let key =
            repeatable(bundle, listing, preludes, every).then(|| key((listing, token), preludes));
        let now = Instant::now();
        if let (Some(key), Some(last)) = (&key, last.as_ref())
            && *key == last.key
            && now.duration_since(last.at) < every
        {
            return true;
        }
        *last = key.map(|key| Recorded { key, at: now });
        false
    }
}

/// Whether a listing may stand for later ones: skipping is on, no shadow
/// candidate runs, its verdicts carry no errors, and no policy of its
/// actions reads the context beyond the session.
fn repeatable(
    bundle: &PolicyBundle,
    listing: &NewDecision,
    preludes: &[&NewDecision],
    every: Duration,
) -> bool {
    let determined = |action: &str| {
        Action::from_name(action).is_some_and(|a| bundle.session_determined.contains(&a.uid()))
    };
    !every.is_zero()
        && !bundle.hooks.observer().is_some_and(|o| o.redecides())
        && listing.errors == "[]"
        && determined(&listing.action)
        && preludes
            .iter()
            .all(|p| p.errors == "[]" && p.decision == "allow" && determined(&p.action))
}

/// The fields a re-run depends on, but time and ids, each prefixed with
/// its length (as the chain hash frames them), so no two lists of fields
/// make one key.
fn key((listing, token): (&NewDecision, &str), preludes: &[&NewDecision]) -> String {
    let mut key = String::with_capacity(listing.notes.len() + 256);
    let mut field = |s: &str| {
        key.push_str(&s.len().to_string());
        key.push(':');
        key.push_str(s);
    };
    field(&listing.policy_hash);
    field(&listing.entities_hash);
    field(&listing.principal);
    field(&listing.resource);
    field(&listing.decision);
    field(&listing.reasons);
    field(&listing.notes);
    field(token);
    for p in preludes {
        field(&p.principal);
        field(&p.action);
        field(&p.resource);
        field(&p.reasons);
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(action: &str, notes: &str) -> NewDecision {
        NewDecision {
            id: uuid::Uuid::now_v7().to_string(),
            time: crate::ids::now_rfc3339(),
            org_id: Some("acme".into()),
            session_id: Some("s1".into()),
            principal: r#"Gateway::Agent::"claude""#.into(),
            action: action.into(),
            resource: r#"Gateway::Session::"s1""#.into(),
            context: "{}".into(),
            entities_hash: "e1".into(),
            entities: None,
            policy_hash: "p1".into(),
            decision: "allow".into(),
            reasons: r#"["p"]"#.into(),
            errors: "[]".into(),
            outcome: "{}".into(),
            notes: notes.into(),
        }
    }

    fn bundle() -> PolicyBundle {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        crate::policy::load::load_bundle(
            &dir.join("schemas/gateway.cedarschema"),
            &dir.join("policies"),
        )
        .unwrap_or_else(|e| panic!("{}", e.render()))
    }

    #[test]
    fn a_listing_repeats_until_anything_a_rerun_reads_changes_or_the_interval_passes() {
        let bundle = bundle();
        let memory = ListingMemory::default();
        let minute = Duration::from_secs(60);
        let access = record("access_session", "null");
        let list = record("view_tool", r#"{"toolList":1}"#);
        assert!(!memory.is_repeat(&bundle, (&list, ""), &[&access], minute));
        assert!(memory.is_repeat(&bundle, (&list, ""), &[&access], minute));

        let mut other = record("view_tool", r#"{"toolList":2}"#);
        assert!(!memory.is_repeat(&bundle, (&other, ""), &[&access], minute));
        other.entities_hash = "e2".into();
        assert!(!memory.is_repeat(&bundle, (&other, ""), &[&access], minute));
        assert!(memory.is_repeat(&bundle, (&other, ""), &[&access], minute));

        // Another token's listing (another digest) is recorded on its own.
        assert!(!memory.is_repeat(&bundle, (&other, "token-b"), &[&access], minute));
        assert!(memory.is_repeat(&bundle, (&other, "token-b"), &[&access], minute));
        assert!(!memory.is_repeat(&bundle, (&other, ""), &[&access], minute));

        let mut denied = record("access_session", "null");
        denied.decision = "deny".into();
        assert!(!memory.is_repeat(&bundle, (&other, ""), &[&denied], minute));
        assert!(!memory.is_repeat(&bundle, (&other, ""), &[&denied], minute));

        assert!(!memory.is_repeat(&bundle, (&list, ""), &[], Duration::ZERO));
        assert!(!memory.is_repeat(&bundle, (&list, ""), &[], Duration::ZERO));
        assert!(!memory.is_repeat(&bundle, (&list, ""), &[], Duration::from_nanos(1)));
        std::thread::sleep(Duration::from_millis(1));
        assert!(!memory.is_repeat(&bundle, (&list, ""), &[], Duration::from_nanos(1)));
    }
}
