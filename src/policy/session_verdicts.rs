//! Verdicts that repeat within a session, decided once per entity slice.
//!
//! A Cedar verdict is a function of the policies, the entities, and the
//! request (principal, action, resource, context). An MCP session decides
//! against one entity slice, and its plain context `{session, time}`
//! differs between requests only by `time`. When no policy that can apply
//! to an action reads `context` except through `context.session`, the
//! verdict of one (principal, action, resource) in one session is the same
//! on every request until the policies or the slice change: it is decided
//! once and remembered on the slice, under the policy-set hash.
//!
//! **Tokens.** A token-authenticated request's context also holds
//! `context.token` (and `context.client`), the same on every request with
//! that token. Reading them (or asking `context has token`) keeps a
//! verdict reusable: it is remembered under the token's digest besides
//! the session, so a verdict decided with one token's scopes is never
//! reused for another token, nor for a key-authenticated request (digest
//! `""`, where `context has token` is false on every request). A typed
//! tool call's context `{session, time, args}` qualifies the same way
//! under its typed action (its verdict then cannot depend on `args`),
//! but each call's own context is still checked against the schema.
//!
//! **Argument shapes.** That check is Cedar's: the request is built with
//! the schema, which first builds the Cedar context from the arguments
//! (about 9% of a recall's CPU when done on every call). Whether projected
//! arguments conform to the action's `args` type depends only on their
//! shape: which attributes are present, nested how, each a string, a long
//! or a boolean, a set with elements of which shapes (`args_shape`). So
//! the check runs once per (typed action, shape) per slice, and a shape
//! Cedar accepted is accepted again. A `decimal` (what a JSON number
//! projects to) has a shape of its own when its text is one Cedar always
//! parses (`always_a_decimal`: the form the projection writes), so a tool
//! with a number argument is checked once per shape like any other.
//! Arguments whose conformance depends on their content (a decimal in any
//! other form, an entity or another extension value) have no shape and
//! are checked on every call; any other shape is checked the first time
//! it is seen; a shape Cedar refused is never remembered.
//! Principal and resource types were checked when the verdict was first
//! decided for that same (principal, action, resource).
//!
//! Nothing else changes: every request still records its own decision
//! (with its own time and context), and replay decides each record alone,
//! so the trail keeps proving every reused verdict. A verdict that carries
//! errors is never reused, and nothing is reused while a shadow candidate
//! runs (it must see each request).

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use cedar_policy::{EntityUid, PolicySet};
use serde_json::Value;

use super::action_slices::ActionSlices;
use super::fingerprinted::{BorrowedKey, Fingerprinted, fingerprint};
use super::{Uid, Verdict};

/// The actions whose verdicts, given the session, do not depend on
/// `context.time` (nor on anything else of the context).
#[derive(Debug, Clone, Default)]
pub struct SessionDetermined {
    /// Looked up once per decision replayed: foldhash, not SipHash.
    actions: HashSet<EntityUid, foldhash::fast::RandomState>,
}

impl SessionDetermined {
    /// Reads every action's slice. Without slices (they could not be built)
    /// no action qualifies.
    pub fn of(slices: &ActionSlices) -> Self {
        SessionDetermined {
            actions: slices
                .iter()
                .filter(|(_, policies)| reads_only_session(policies))
                .map(|(action, _)| action.clone())
                .collect(),
        }
    }

    /// Whether verdicts of `action` can be reused within a session.
    pub fn contains(&self, action: &Uid) -> bool {
        self.actions.contains(&action.0)
    }
}

/// Whether every policy of `policies` reads `context` only as
/// `context.session`, `context.token` or `context.client` (those two also
/// through `has`). A policy that cannot be read counts as reading more.
pub fn reads_only_session(policies: &PolicySet) -> bool {
    policies.policies().all(|p| match p.to_json() {
        Ok(est) => !reads_context_beyond_session(&est),
        Err(_) => false,
    })
}

/// Finds a `context` variable that is not the receiver of `.session`,
/// `.token` or `.client`, nor of `has token` or `has client`.
fn reads_context_beyond_session(est: &Value) -> bool {
    match est {
        Value::Object(map) => {
            if map.get("Var").and_then(Value::as_str) == Some("context") {
                return true;
            }
            let of_context = |op: &str, attrs: &[&str]| {
                map.get(op)
                    .and_then(Value::as_object)
                    .is_some_and(|access| {
                        access
                            .get("attr")
                            .and_then(Value::as_str)
                            .is_some_and(|a| attrs.contains(&a))
                            && access
                                .get("left")
                                .and_then(|l| l.get("Var"))
                                .and_then(Value::as_str)
                                == Some("context")
                    })
            };
            if of_context(".", &["session", "token", "client"])
                || of_context("has", &["token", "client"])
            {
                return false;
            }
            map.values().any(reads_context_beyond_session)
        }
        Value::Array(items) => items.iter().any(reads_context_beyond_session),
        _ => false,
    }
}

impl super::PolicyBundle {
    /// Decides one in-session request against `entities`, reusing the
    /// verdict `memo` remembers for it when its deciding action's policies
    /// read nothing of the context but `context.session` (the module doc's
    /// rule), and remembering what may be reused. A typed tool context
    /// (`{session, time, args}`) qualifies too: its verdict cannot depend
    /// on the arguments, but each request's own context is still checked
    /// against the schema, so arguments that do not fit deny as before. A
    /// plain context is the gateway's own `{session, time}` and always
    /// fits. Nothing is reused while an observer re-decides every request
    /// (a shadow candidate).
    pub fn decide_in_session(
        &self,
        (principal, action, resource): (&Uid, super::Action, &Uid),
        context: &super::PreparedContext,
        entities: &cedar_policy::Entities,
        memo: &VerdictMemo,
    ) -> Verdict {
        let decide = || self.decide(principal, action, resource, context, entities);
        if self.hooks.observer().is_some_and(|o| o.redecides()) {
            return decide();
        }
        let Some((deciding, typed, session_id, token)) = self.reusable(action, resource, context)
        else {
            return decide();
        };
        let deciding = Uid(deciding);
        let key = VerdictKey {
            policy_hash: &self.hash,
            session_id,
            token,
            principal,
            action: &deciding,
            resource,
        };
        match memo.get(&key) {
            Some(verdict) if typed => self.conforming(&key, context, memo, verdict, || {
                self.request(principal, action, resource, context).err()
            }),
            Some(verdict) => verdict,
            None => {
                let verdict = decide();
                memo.put(&key, &verdict);
                verdict
            }
        }
    }

    /// `verdict` when the typed context conforms to its action's context
    /// type, else the deny `check` (Cedar's request check) returns. The
    /// check runs once per shape of the arguments (module doc, "Argument
    /// shapes"): a shape Cedar accepted once for this action is accepted
    /// again without building the Cedar context.
    fn conforming(
        &self,
        key: &VerdictKey<'_>,
        context: &super::PreparedContext,
        memo: &VerdictMemo,
        verdict: Verdict,
        check: impl FnOnce() -> Option<Verdict>,
    ) -> Verdict {
        let shape = context.args().and_then(args_shape);
        if let Some(shape) = &shape
            && memo.knows_shape(key, shape)
        {
            return verdict;
        }
        if let Some(denied) = check() {
            return denied;
        }
        if let Some(shape) = shape {
            memo.remember_shape(key, shape);
        }
        verdict
    }
}

/// The shape of projected arguments: their JSON structure with every
/// string, long and boolean reduced to its type, a set to the distinct
/// shapes of its elements. Whether such a value conforms to a Cedar
/// record type depends on nothing else. `None` for a value whose
/// conformance depends on its content (an extension value such as a
/// `decimal`, an entity reference) or that projection never makes (a
/// null): those are checked by Cedar on every call.
fn args_shape(args: &Value) -> Option<String> {
    fn walk(v: &Value, out: &mut String) -> Option<()> {
        match v {
            Value::String(_) => out.push('s'),
            Value::Bool(_) => out.push('b'),
            Value::Number(n) if n.is_i64() => out.push('l'),
            Value::Number(_) => out.push('n'),
            Value::Array(items) => {
                let mut kinds = std::collections::BTreeSet::new();
                for item in items {
                    let mut kind = String::new();
                    walk(item, &mut kind)?;
                    kinds.insert(kind);
                }
                out.push('[');
                for kind in kinds {
                    out.push_str(&kind);
                    out.push(',');
                }
                out.push(']');
            }
            Value::Object(map) if map.contains_key("__extn") => {
                // A decimal whose text Cedar always parses has the shape of
                // every other such decimal; any other extension value is
                // checked by Cedar on every call.
                let text = map
                    .get("__extn")
                    .filter(|_| map.len() == 1)
                    .and_then(decimal_text)?;
                if !always_a_decimal(text) {
                    return None;
                }
                out.push('d');
            }
            Value::Object(map) => {
                if map.contains_key("__entity") {
                    return None;
                }
                out.push('{');
                for (name, value) in map {
                    // Length-prefixed: no name can be mistaken for syntax.
                    out.push_str(&name.len().to_string());
                    out.push(':');
                    out.push_str(name);
                    walk(value, out)?;
                    out.push(',');
                }
                out.push('}');
            }
            Value::Null => return None,
        }
        Some(())
    }
    let mut shape = String::new();
    walk(args, &mut shape)?;
    Some(shape)
}

/// The text of `{"fn": "decimal", "arg": text}`, the only form Cedar's
/// JSON reads as a decimal.
fn decimal_text(extn: &Value) -> Option<&str> {
    let call = extn.as_object().filter(|call| call.len() == 2)?;
    if call.get("fn")?.as_str()? != "decimal" {
        return None;
    }
    call.get("arg")?.as_str()
}

/// Whether `text` is a decimal Cedar parses whatever its digits: an
/// optional `-`, one to fourteen ASCII digits, a `.`, one to four ASCII
/// digits (what the projection writes for a JSON number below 10^14).
/// Cedar's own pattern matches more texts (its `\d` also matches other
/// scripts' digits, which then fail to parse; fifteen digits or more may
/// overflow), so a text outside this form keeps its per-call check.
fn always_a_decimal(text: &str) -> bool {
    let digits =
        |s: &str, max: usize| (1..=max).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_digit());
    let unsigned = text.strip_prefix('-').unwrap_or(text);
    unsigned
        .split_once('.')
        .is_some_and(|(whole, fraction)| digits(whole, 14) && digits(fraction, 4))
}

/// Verdicts remembered on one entity slice.
#[derive(Debug, Default)]
pub struct VerdictMemo {
    inner: Mutex<Memo>,
}

#[derive(Debug, Default)]
struct Memo {
    /// The policy set the verdicts were decided with.
    policy_hash: String,
    /// Found by a fingerprint of the request's borrowed uids
    /// ([`super::fingerprinted`]).
    verdicts: Fingerprinted<MemoKey>,
    /// Per typed action, the argument shapes Cedar found conforming.
    shapes: HashMap<Uid, HashSet<String>>,
}

/// Session id, token digest, principal, action, resource.
type MemoKey = (String, String, Uid, Uid, Uid);

/// One request a verdict is remembered for.
#[derive(Debug, Clone, Copy)]
pub struct VerdictKey<'a> {
    /// The policy set deciding it.
    pub policy_hash: &'a str,
    /// The session of its context.
    pub session_id: &'a str,
    /// The digest of its context's token (`""` without one).
    pub token: &'a str,
    /// Principal.
    pub principal: &'a Uid,
    /// The deciding action (a tool's typed action for a typed context).
    pub action: &'a Uid,
    /// Resource.
    pub resource: &'a Uid,
}

impl BorrowedKey for VerdictKey<'_> {
    type Owned = MemoKey;

    fn fingerprint(&self) -> u64 {
        fingerprint((
            self.session_id,
            self.token,
            &self.principal.0,
            &self.action.0,
            &self.resource.0,
        ))
    }

    fn is(&self, key: &MemoKey) -> bool {
        self.session_id == key.0
            && self.token == key.1
            && *self.resource == key.4
            && *self.principal == key.2
            && *self.action == key.3
    }

    fn owned(&self) -> MemoKey {
        (
            self.session_id.to_string(),
            self.token.to_string(),
            self.principal.clone(),
            self.action.clone(),
            self.resource.clone(),
        )
    }
}

/// Most verdicts one slice remembers: a session sees each of its tools
/// under two actions, plus `access_session`; beyond this the memo starts
/// over (about 1 MB at most per cached session view).
const MEMO_MAX: usize = 4096;

/// Most argument shapes one slice remembers (a tool's calls mostly share
/// a few: which optional arguments they pass).
const SHAPES_MAX: usize = 1024;

impl VerdictMemo {
    /// Forgets every verdict and shape, as a new session view starts: the
    /// next decision of each request is Cedar's again (the gateway bench's
    /// cold-decision row uses it).
    pub fn forget(&self) {
        if let Ok(mut memo) = self.inner.lock() {
            *memo = Memo::default();
        }
    }

    /// The verdict remembered for this request, if any.
    pub fn get(&self, key: &VerdictKey<'_>) -> Option<Verdict> {
        let memo = self.inner.lock().ok()?;
        if memo.policy_hash != key.policy_hash {
            return None;
        }
        memo.verdicts.get(key)
    }

    /// Remembers an error-free verdict.
    pub fn put(&self, key: &VerdictKey<'_>, verdict: &Verdict) {
        let Ok(mut memo) = self.inner.lock() else {
            return;
        };
        if memo.policy_hash != key.policy_hash || memo.verdicts.len() >= MEMO_MAX {
            *memo = Memo::default();
            memo.policy_hash = key.policy_hash.to_string();
        }
        memo.verdicts.insert(key, verdict);
    }

    /// Whether Cedar found arguments of `shape` conforming to the context
    /// type of `key`'s action, under `key`'s policy set.
    fn knows_shape(&self, key: &VerdictKey<'_>, shape: &str) -> bool {
        let Ok(memo) = self.inner.lock() else {
            return false;
        };
        memo.policy_hash == key.policy_hash
            && memo
                .shapes
                .get(key.action)
                .is_some_and(|shapes| shapes.contains(shape))
    }

    /// Remembers that Cedar found `shape` conforming for `key`'s action
    /// (beyond [`SHAPES_MAX`] shapes, each is checked every time).
    fn remember_shape(&self, key: &VerdictKey<'_>, shape: String) {
        let Ok(mut memo) = self.inner.lock() else {
            return;
        };
        // Counted only here: a shape is remembered after Cedar checked it.
        let held: usize = memo.shapes.values().map(HashSet::len).sum();
        if memo.policy_hash == key.policy_hash && held < SHAPES_MAX {
            memo.shapes
                .entry(key.action.clone())
                .or_default()
                .insert(shape);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn only_session(policies: &str) -> bool {
        let set: PolicySet = policies.parse().unwrap();
        reads_only_session(&set)
    }

    #[test]
    fn session_attributes_are_fine_and_anything_else_of_the_context_is_not() {
        assert!(only_session(
            r#"permit (principal, action, resource) when { resource in context.session.org };
               forbid (principal, action, resource) unless { principal == context.session.agent };
               permit (principal, action, resource) when { context.session.project.memoryEnabled };"#
        ));
        assert!(!only_session(
            r#"forbid (principal, action, resource) when { context.time < datetime("2026-01-01") };"#
        ));
        assert!(!only_session(
            r#"forbid (principal, action, resource) when { context has args };"#
        ));
        assert!(!only_session(
            r#"forbid (principal, action, resource) when { context == {} };"#
        ));
        assert!(!only_session(
            r#"forbid (principal, action, resource) when { context.args.count > 2 };"#
        ));
        // `context.session` used as a whole value is still only the session.
        assert!(only_session(
            r#"permit (principal, action, resource) when { context.session == resource };"#
        ));
    }

    /// The token's parts are the same on every request with the token (the
    /// memo keys them by its digest); the token's expiry against the
    /// request's time is not.
    #[test]
    fn the_token_and_client_are_fine_and_their_time_against_the_clock_is_not() {
        assert!(only_session(
            r#"forbid (principal, action, resource)
               unless { context has token && context.token.scopes.contains("mcp:admin") };
               permit (principal, action, resource)
               when { context has client && context.client.id == "desktop" };
               forbid (principal, action, resource) when { context.token.issuer like "*evil*" };"#
        ));
        assert!(!only_session(
            r#"forbid (principal, action, resource)
               when { context has token && context.token.expiresAt < context.time };"#
        ));
        assert!(!only_session(
            r#"forbid (principal, action, resource) when { context has usage };"#
        ));
    }

    #[test]
    fn a_linked_template_reading_the_time_counts() {
        let mut set: PolicySet = r#"
            @id("t")
            forbid (principal == ?principal, action, resource)
            when { context.time > datetime("2026-01-01") };"#
            .parse()
            .unwrap();
        assert!(
            reads_only_session(&set),
            "an unlinked template applies to nothing"
        );
        let template = set.templates().next().unwrap().id().clone();
        set.link(
            template,
            cedar_policy::PolicyId::new("t1"),
            [(
                cedar_policy::SlotId::principal(),
                r#"Gateway::Agent::"a""#.parse().unwrap(),
            )]
            .into(),
        )
        .unwrap();
        assert!(!reads_only_session(&set));
    }

    #[test]
    fn the_memo_forgets_on_another_policy_set_and_never_keeps_errors() {
        let memo = VerdictMemo::default();
        let uid = |s: &str| -> Uid { s.parse().unwrap() };
        let (p, a, r) = (
            uid(r#"Gateway::Agent::"a""#),
            uid(r#"Gateway::Action::"view_tool""#),
            uid(r#"Gateway::Tool::"t""#),
        );
        let allow = Verdict {
            allowed: true,
            reasons: vec!["p1".into()],
            errors: vec![],
            advice: vec![],
        };
        let key = |policy_hash, session_id, resource| VerdictKey {
            policy_hash,
            session_id,
            token: "",
            principal: &p,
            action: &a,
            resource,
        };
        memo.put(&key("h1", "s1", &r), &allow);
        assert_eq!(
            memo.get(&key("h1", "s1", &r)).map(|v| v.allowed),
            Some(true)
        );
        assert!(memo.get(&key("h1", "s2", &r)).is_none(), "another session");
        let other = uid(r#"Gateway::Tool::"other""#);
        assert!(memo.get(&key("h1", "s1", &other)).is_none(), "another tool");
        assert!(
            memo.get(&key("h2", "s1", &r)).is_none(),
            "another policy set"
        );
        let u = uid(r#"Gateway::Tool::"u""#);
        memo.put(&key("h2", "s1", &u), &allow);
        assert!(
            memo.get(&key("h1", "s1", &r)).is_none(),
            "forgotten on reload"
        );
        let errored = Verdict::denied_with("boom".into());
        memo.put(&key("h2", "s1", &r), &errored);
        assert!(memo.get(&key("h2", "s1", &r)).is_none());
    }

    #[test]
    fn an_argument_shape_is_its_structure_and_types_not_its_content() {
        use serde_json::json;
        assert_eq!(
            args_shape(&json!({"query": "a", "n": 2, "tags": ["x", "y"], "on": true})).as_deref(),
            Some("{5:querys,1:nl,4:tags[s,],2:onb,}")
        );
        assert_eq!(
            args_shape(&json!({"q": "b"})),
            args_shape(&json!({"q": "zzz"}))
        );
        assert_eq!(
            args_shape(&json!({"t": ["a", "b", "c"]})),
            args_shape(&json!({"t": ["d"]}))
        );
        for (a, b) in [
            (json!({"q": "b"}), json!({"q": "b", "w": "x"})),
            (json!({"a": "b"}), json!({"a": 1})),
            (json!({"a": 1}), json!({"a": 1.5})),
            (json!({"t": []}), json!({"t": ["a"]})),
            (
                json!({"t": [{"a": 1}]}),
                json!({"t": [{"a": 1}, {"a": "x"}]}),
            ),
            (json!({"ab": {"c": "d"}}), json!({"a": {"bc": "d"}})),
        ] {
            assert_ne!(args_shape(&a), args_shape(&b), "{a} and {b}");
        }
        // A decimal Cedar always parses has one shape whatever its value.
        let decimal = |arg: &str| json!({"d": {"__extn": {"fn": "decimal", "arg": arg}}});
        assert_eq!(args_shape(&decimal("0.9000")), Some("{1:dd,}".into()));
        for same in ["1.0", "-12.5", "99999999999999.9999"] {
            assert_eq!(
                args_shape(&decimal(same)),
                args_shape(&decimal("0.9000")),
                "{same}"
            );
        }
        assert_ne!(args_shape(&decimal("1.0")), args_shape(&json!({"d": 1.0})));
        // Content-dependent values have no shape: Cedar checks them always.
        for unsure in [
            "1.00000",              // five fractional digits: refused by Cedar
            "1",                    // no point: refused
            ".5",                   // no whole part: refused
            "--1.0",                // refused
            "\u{0661}.0",           // an Arabic-Indic digit: refused
            "922337203685477.5808", // fifteen digits: out of range
            "100000000000000.0",    // fifteen digits, in range: still checked
        ] {
            assert_eq!(args_shape(&decimal(unsure)), None, "{unsure}");
        }
        for other in [
            json!({"d": {"__extn": {"fn": "ip", "arg": "10.0.0.1"}}}),
            json!({"d": {"__extn": {"fn": "decimal", "arg": 1.0}}}),
            json!({"d": {"__extn": {"fn": "decimal", "arg": "1.0", "x": 1}}}),
            json!({"d": {"__extn": {"fn": "decimal", "arg": "1.0"}, "y": 2}}),
        ] {
            assert_eq!(args_shape(&other), None, "{other}");
        }
        assert_eq!(
            args_shape(&json!({"e": {"__entity": {"type": "T", "id": "x"}}})),
            None
        );
        assert_eq!(args_shape(&json!({"n": null})), None);
    }

    /// A verdict decided with one token's scopes and client is reused for
    /// that token only: another token, or a key's request, is decided
    /// anew. The token's context built from values decides as its JSON,
    /// parsed against the schema, does.
    #[test]
    fn a_verdict_is_reused_for_its_own_token_only() {
        use super::super::identity::{CheckedToken, TokenFacts};
        use super::super::{Action, PreparedContext};
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("p.cedar"),
            r#"@id("all") permit (principal, action, resource);
               @id("admin") forbid (principal, action == Gateway::Action::"call_tool", resource)
               unless { context has token && context.token.scopes.contains("mcp:admin") };
               @id("client") forbid (principal, action, resource)
               when { context has client && context.client.id == "evil" };
               @id("expiry") forbid (principal, action, resource)
               when { context has token && context.token.expiresAt > datetime("9000-01-01") };"#,
        )
        .unwrap();
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let bundle =
            super::super::load::load_bundle(&root.join("schemas/gateway.cedarschema"), dir.path())
                .unwrap_or_else(|e| panic!("{}", e.render()));
        let token = |scopes: &[&str], client: &str, expires_at: i64| -> CheckedToken {
            TokenFacts {
                issuer: "https://idp.test".into(),
                audience: vec!["https://gw.test/mcp/acme/web".into()],
                scopes: scopes.iter().map(|s| s.to_string()).collect(),
                expires_at,
                client_id: Some(client.into()),
            }
            .checked()
            .unwrap()
        };
        let plain = token(&["mcp:tools"], "desktop", 1_795_000_000);
        let admin = token(&["mcp:tools", "mcp:admin"], "desktop", 1_795_000_000);
        let evil = token(&["mcp:tools", "mcp:admin"], "evil", 1_795_000_000);
        let late = token(&["mcp:tools", "mcp:admin"], "desktop", 253_402_300_799);
        let (user, tool): (Uid, Uid) = (
            r#"Gateway::User::"https://idp.test|alice""#.parse().unwrap(),
            r#"Gateway::Tool::"t""#.parse().unwrap(),
        );
        let time = "2026-11-28T08:00:00.000Z";
        let memo = VerdictMemo::default();
        let entities = cedar_policy::Entities::empty();
        let decide = |ctx: &PreparedContext| {
            bundle
                .decide_in_session((&user, Action::CallTool, &tool), ctx, &entities, &memo)
                .allowed
        };
        let with = |t: &CheckedToken| bundle.prepare_session_context_with_token("s1", time, t);
        for _ in 0..2 {
            assert!(!decide(&with(&plain)), "without mcp:admin");
            assert!(decide(&with(&admin)), "with it");
            assert!(!decide(&with(&evil)), "another client");
            assert!(!decide(&with(&late)), "another expiry");
            assert!(
                !decide(&bundle.prepare_session_context("s1", time)),
                "a key's request has no token"
            );
        }
        let action = Action::CallTool.uid();
        let remembered = |t: &str| {
            let key = VerdictKey {
                policy_hash: &bundle.hash,
                session_id: "s1",
                token: t,
                principal: &user,
                action: &action,
                resource: &tool,
            };
            memo.get(&key).map(|v| v.allowed)
        };
        assert_eq!(remembered(admin.digest()), Some(true));
        assert_eq!(remembered(plain.digest()), Some(false));
        assert_eq!(remembered(""), Some(false));
        for t in [&plain, &admin, &evil, &late] {
            let built = with(t);
            let parsed = bundle.prepare_context(Action::CallTool, built.json().clone());
            let fresh = VerdictMemo::default();
            let parsed = bundle
                .decide_in_session((&user, Action::CallTool, &tool), &parsed, &entities, &fresh)
                .allowed;
            assert_eq!(decide(&built), parsed, "{}", built.text());
        }
    }

    /// A person's typed tool call never builds its context's JSON: the
    /// decision reads `args`, the memo the token's digest, the trail the
    /// text. Asked for, the JSON is the context the text records.
    #[test]
    fn a_typed_token_context_makes_its_json_only_when_asked() {
        use super::super::identity::TokenFacts;
        use serde_json::json;
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let tools = [super::super::schema_gen::ToolSchema {
            name: "search".into(),
            group: super::super::Action::CallTool,
            input_schema: json!({"type": "object", "properties": {
                "query": {"type": "string"}, "limit": {"type": "integer"}}}),
            dropped: None,
        }];
        let bundle = super::super::load::load_bundle_with_tools(
            &dir.join("schemas/gateway.cedarschema"),
            &dir.join("policies"),
            &tools,
        )
        .unwrap_or_else(|e| panic!("{}", e.render()));
        let token = TokenFacts {
            issuer: "https://idp.test".into(),
            audience: vec!["https://gw.test/mcp/acme/web".into()],
            scopes: vec!["mcp:tools".into()],
            expires_at: 1_795_000_000,
            client_id: Some("desktop".into()),
        }
        .checked()
        .unwrap();
        let time = "2026-11-28T08:00:00.000Z";
        let args = json!({"query": "q \"1\"", "limit": 3, "extra": true});
        let built = bundle.prepare_tool_context_with_token(
            super::super::Action::CallTool,
            "search",
            "s1",
            time,
            &args,
            None,
            &token,
        );
        let (user, tool): (Uid, Uid) = (
            r#"Gateway::User::"https://idp.test|alice""#.parse().unwrap(),
            r#"Gateway::Tool::"search""#.parse().unwrap(),
        );
        let entities = cedar_policy::Entities::empty();
        bundle.decide_in_session(
            (&user, super::super::Action::CallTool, &tool),
            &built,
            &entities,
            &VerdictMemo::default(),
        );
        let text = built.text().to_string();
        assert!(
            built.json.get().is_none(),
            "decided and recorded without it"
        );
        assert_eq!(built.args(), Some(&json!({"query": "q \"1\"", "limit": 3})));
        let json = built.json().clone();
        assert_eq!(text, json.to_string());
        assert_eq!(json["token"]["scopes"], json!(["mcp:tools"]));
        assert_eq!(json["client"]["id"], "desktop");
        assert_eq!(json["args"]["limit"], 3);
    }

    #[test]
    fn cedar_checks_each_new_argument_shape_and_only_accepted_ones_are_remembered() {
        use serde_json::json;
        use std::cell::Cell;
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let tools = [super::super::schema_gen::ToolSchema {
            name: "search".into(),
            group: super::super::Action::CallTool,
            input_schema: json!({"type": "object", "properties": {
                "query": {"type": "string"}, "kind": {"type": "string"},
                "ratio": {"type": "number"}}, "required": ["query"]}),
            dropped: None,
        }];
        let bundle = super::super::load::load_bundle_with_tools(
            &dir.join("schemas/gateway.cedarschema"),
            &dir.join("policies"),
            &tools,
        )
        .unwrap_or_else(|e| panic!("{}", e.render()));
        let context = |args: serde_json::Value| {
            bundle
                .typed_tool_context(
                    super::super::Action::CallTool,
                    "search",
                    "s1",
                    "2026-11-26T08:00:00.000Z",
                    &args,
                )
                .unwrap()
        };
        let (principal, action, resource): (Uid, Uid, Uid) = (
            r#"Gateway::Agent::"a""#.parse().unwrap(),
            r#"Gateway::Action::"search""#.parse().unwrap(),
            r#"Gateway::Tool::"search""#.parse().unwrap(),
        );
        let key = VerdictKey {
            policy_hash: &bundle.hash,
            session_id: "s1",
            token: "",
            principal: &principal,
            action: &action,
            resource: &resource,
        };
        let (memo, fresh) = (VerdictMemo::default(), VerdictMemo::default());
        let allow = Verdict {
            allowed: true,
            reasons: vec!["p".into()],
            errors: vec![],
            advice: vec![],
        };
        // The verdict a hit reuses was remembered first, under this set.
        memo.put(&key, &allow);
        fresh.put(&key, &allow);
        let checks = Cell::new(0);
        let run = |args: serde_json::Value, refuse: bool| {
            let ctx = context(args);
            let memo = if refuse { &fresh } else { &memo };
            bundle.conforming(&key, &ctx, memo, allow.clone(), || {
                checks.set(checks.get() + 1);
                refuse.then(|| Verdict::denied_with("refused".into()))
            })
        };
        assert!(run(json!({"query": "a"}), false).allowed);
        assert!(run(json!({"query": "other words"}), false).allowed);
        assert_eq!(checks.get(), 1, "one shape, one check");
        assert!(run(json!({"query": "a", "kind": "k"}), false).allowed);
        assert_eq!(checks.get(), 2, "a new shape is checked");
        // Undeclared arguments are projected away: still a known shape.
        assert!(run(json!({"query": "a", "kind": "k", "x": 1}), false).allowed);
        assert_eq!(checks.get(), 2);
        // A refused shape answers the refusal and is checked again next time.
        let refused = run(json!({"query": "a"}), true);
        assert!(!refused.allowed);
        assert_eq!(refused.errors, vec!["refused".to_string()]);
        assert!(!run(json!({"query": "a"}), true).allowed);
        assert_eq!(checks.get(), 4);
        // A number projects to a decimal: one shape whatever its value.
        assert!(run(json!({"query": "a", "ratio": 0.5}), false).allowed);
        assert!(run(json!({"query": "a", "ratio": -12.25}), false).allowed);
        assert!(run(json!({"query": "a", "ratio": 3}), false).allowed);
        assert_eq!(checks.get(), 5);
        // The real check: a projected context conforms, so Cedar accepts it.
        for args in [
            json!({"query": "q"}),
            json!({"query": "q", "ratio": -0.00001}),
        ] {
            let ctx = context(args);
            let request =
                bundle.request(&principal, super::super::Action::CallTool, &resource, &ctx);
            assert!(request.is_ok());
        }
    }
}
