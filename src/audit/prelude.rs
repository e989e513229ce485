//! A request's prelude decisions, recorded inside its main record.
//!
//! Before a `tools/call` runs, two decisions let it through: may the key
//! use the session (`access_session`), and may the agent see the tool
//! (`view_tool`). A `tools/list` has the first. Each used to be a row of
//! its own, so a call wrote three rows and a listing two, each touching
//! the trail's table and every one of its indexes: most of the writer's
//! work and of a durable call's commit.
//!
//! **Decision:** a request's *allowed* `access_session` and `view_tool`
//! decisions with the default outcome (`{"status":"allowed"}`, no notes)
//! travel in the `notes.prelude` of the request's next decision record
//! (the call's own decision, or the listing's record), committed in the
//! same transaction. Nothing an auditor could re-run is lost: each prelude
//! decision keeps its id, principal, action, resource, verdict and
//! context, is covered by the record's chain hash, and replay decides it
//! again alone, as it does a listed tool. One request, one row.
//!
//! Format 1 (`notes.prelude`):
//! `{"format":1,"context":"<context text>","decisions":[{"id","principal","action","resource","decision","reasons","errors"},…]}`
//! where `context` is absent when it equals the record's own context
//! (a listing), else holds the context the preludes were decided with.
//! The record's other columns (time, org, session, entity snapshot, policy
//! set) are the preludes' too: only decisions that share them are folded.
//!
//! Format 2 is format 1 plus `"contextPrefix":N` in place of `context`:
//! the preludes' context is the record's context cut after its first N
//! bytes and closed with `}`. A typed tool call's context is the session
//! context the preludes were decided with, plus its `args` as the last
//! member (`policy::entities::session_context_text_with`), so the cut
//! gives that context back byte for byte. **Decision:** the call's record
//! names its preludes' context instead of copying it (about 130 bytes, and
//! a person's token members, about 225 more, escaped into a JSON string):
//! the trail, its chain hash and its writer carry it once. Written only
//! when the cut lands exactly before `,"args":`, else format 1; this build
//! reads both, so records written before it replay unchanged.
//!
//! Kept as rows of their own: a denial or a decision with errors (an
//! auditor filtering on `access_session` denials finds it), a decision
//! with another outcome or notes, a prelude whose request records nothing
//! else in the same commit (a `ping`, a refused argument), and every
//! decision while shadow mode runs (a divergence names its live decision
//! by id, and the console follows that id to its row).

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

// The outcome a prelude decision carries (`Decided::finish_default`).
use super::ALLOWED_OUTCOME;
use crate::policy::Action;
use crate::store::WriteOp;
use crate::store::decisions::NewDecision;

/// The key of the prelude in a record's `notes`.
pub const PRELUDE_KEY: &str = "prelude";

/// The prelude format this build writes when the preludes' context is
/// the record's own or written out, and reads.
pub const PRELUDE_FORMAT: u64 = 1;

/// The format this build writes when the preludes' context is the
/// record's cut before its `args` (`contextPrefix`), and reads.
pub const PRELUDE_FORMAT_PREFIX: u64 = 2;

/// What follows a typed call context's session part: its `args`.
const ARGS_MEMBER: &str = ",\"args\":";

/// Folds the foldable prelude decisions of `ops` (one request's writes,
/// in order) into the next decision record of the same request. Other
/// writes keep their order; a folded decision's row is gone, its content
/// in the record that follows it.
pub fn fold(ops: Vec<WriteOp>) -> Vec<WriteOp> {
    let mut slots: Vec<Option<WriteOp>> = Vec::with_capacity(ops.len());
    // Indexes into `slots` of preludes not folded yet.
    let mut waiting: Vec<usize> = Vec::new();
    for op in ops {
        let WriteOp::Decision(mut record) = op else {
            slots.push(Some(op));
            continue;
        };
        if is_prelude(&record) {
            waiting.push(slots.len());
            slots.push(Some(WriteOp::Decision(record)));
            continue;
        }
        let folded = take_matching(&mut slots, &mut waiting, &record);
        if !folded.is_empty() {
            record.notes = with_prelude(&record, &folded);
        }
        slots.push(Some(WriteOp::Decision(record)));
    }
    slots.into_iter().flatten().collect()
}

/// Whether a record's prelude can hold decisions of `action`.
pub fn may_hold(action: &str) -> bool {
    action == Action::AccessSession.name() || action == Action::ViewTool.name()
}

/// How many writes at the end of `ops` are preludes still waiting for a
/// record to ride in.
pub fn waiting_at_end(ops: &[WriteOp]) -> usize {
    ops.iter()
        .rev()
        .take_while(|op| matches!(op, WriteOp::Decision(d) if is_prelude(d)))
        .count()
}

/// Whether `record` may ride in a later record of its request.
pub fn is_prelude(record: &NewDecision) -> bool {
    may_hold(&record.action)
        && !super::tool_list::is_tool_list(record)
        && record.decision == "allow"
        && record.errors == "[]"
        && record.outcome == ALLOWED_OUTCOME
        && record.notes == "null"
}

/// Removes from `slots` the waiting preludes `main` can hold: same
/// request columns, one shared context; returns them in order.
fn take_matching(
    slots: &mut [Option<WriteOp>],
    waiting: &mut Vec<usize>,
    main: &NewDecision,
) -> Vec<NewDecision> {
    if may_have_prelude(&main.notes) {
        return Vec::new();
    }
    let mut taken = Vec::new();
    let mut context: Option<String> = None;
    waiting.retain(|&i| {
        let Some(Some(WriteOp::Decision(p))) = slots.get(i) else {
            return false;
        };
        let fits = same_request(p, main) && context.as_ref().is_none_or(|c| *c == p.context);
        if !fits {
            return true;
        }
        context.get_or_insert_with(|| p.context.clone());
        if let Some(Some(WriteOp::Decision(p))) = slots.get_mut(i).map(Option::take) {
            taken.push(*p);
        }
        false
    });
    taken
}

/// Whether two records belong to one request and decided on the same
/// entities under the same policy set.
fn same_request(a: &NewDecision, b: &NewDecision) -> bool {
    a.time == b.time
        && a.org_id == b.org_id
        && a.session_id == b.session_id
        && a.policy_hash == b.policy_hash
        && a.entities_hash == b.entities_hash
}

/// Whether `notes` may hold a prelude (a cheap look before parsing: no
/// other notes name the key).
fn may_have_prelude(notes: &str) -> bool {
    notes.contains(QUOTED_KEY)
}

/// [`PRELUDE_KEY`] as it appears in the notes' text.
const QUOTED_KEY: &str = "\"prelude\"";

/// The prelude as written (format 1, or 2 with `contextPrefix`).
#[derive(Serialize)]
struct Written<'a> {
    format: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    context: Option<&'a str>,
    #[serde(rename = "contextPrefix", skip_serializing_if = "Option::is_none")]
    context_prefix: Option<usize>,
    decisions: Vec<WrittenDecision<'a>>,
}

/// How a prelude names its context against the record's `main`: not at
/// all (the same), as a cut of it (a typed call's), or written out.
fn context_of<'a>(prelude: &'a str, main: &str) -> (Option<&'a str>, Option<usize>) {
    if prelude == main {
        return (None, None);
    }
    match prelude.strip_suffix('}') {
        Some(open) if main.starts_with(open) && main[open.len()..].starts_with(ARGS_MEMBER) => {
            (None, Some(open.len()))
        }
        _ => (Some(prelude), None),
    }
}

/// The preludes' context a format 2 record names: its context cut after
/// `prefix` bytes and closed, when that cut is one format 2 writes.
fn cut_context(context: &str, prefix: usize) -> Result<String, PreludeError> {
    match context.get(..prefix) {
        Some(open) if context[prefix..].starts_with(ARGS_MEMBER) => Ok(format!("{open}}}")),
        _ => Err(PreludeError::ContextPrefix(prefix)),
    }
}

/// One folded decision as written: its recorded reasons and errors (JSON
/// array texts) are embedded as they are, not parsed again.
#[derive(Serialize)]
struct WrittenDecision<'a> {
    id: &'a str,
    principal: &'a str,
    action: &'a str,
    resource: &'a str,
    decision: &'a str,
    reasons: &'a List,
    errors: &'a List,
}

/// `main`'s notes with the prelude of `folded` added (the notes are a
/// JSON object or `null`; the object's text is kept as it was).
fn with_prelude(main: &NewDecision, folded: &[NewDecision]) -> String {
    let lists: Vec<(List, List)> = folded
        .iter()
        .map(|p| (raw_list(&p.reasons), raw_list(&p.errors)))
        .collect();
    let (context, context_prefix) = folded
        .first()
        .map_or((None, None), |p| context_of(&p.context, &main.context));
    let written = Written {
        format: if context_prefix.is_some() {
            PRELUDE_FORMAT_PREFIX
        } else {
            PRELUDE_FORMAT
        },
        context,
        context_prefix,
        decisions: folded
            .iter()
            .zip(&lists)
            .map(|(p, (reasons, errors))| WrittenDecision {
                id: &p.id,
                principal: &p.principal,
                action: &p.action,
                resource: &p.resource,
                decision: &p.decision,
                reasons,
                errors,
            })
            .collect(),
    };
    let prelude = serde_json::to_string(&written).unwrap_or_else(|_| "null".into());
    let entry = format!("\"{PRELUDE_KEY}\":{prelude}");
    let notes = main.notes.trim();
    match notes.strip_prefix('{') {
        Some(rest) if rest.trim_start().starts_with('}') => format!("{{{entry}}}"),
        Some(rest) => format!("{{{entry},{rest}"),
        None => format!("{{{entry}}}"),
    }
}

/// A recorded JSON array text, embedded as it is.
#[derive(Serialize)]
#[serde(untagged)]
enum List {
    Raw(Box<RawValue>),
    /// What an unreadable list is written as: `[]`.
    Empty([(); 0]),
}

/// `text` as a list to embed (an unreadable one as an empty list).
fn raw_list(text: &str) -> List {
    RawValue::from_string(text.to_string())
        .ok()
        .filter(|r| r.get().trim_start().starts_with('['))
        .map_or(List::Empty([]), List::Raw)
}

/// One prelude decision read back from a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreludeDecision {
    /// Its decision id.
    pub id: String,
    /// Principal uid text.
    pub principal: String,
    /// Action name.
    pub action: String,
    /// Resource uid text.
    pub resource: String,
    /// The context it was decided with (the prelude's, else the record's).
    pub context: String,
    /// Whether it allowed.
    pub allowed: bool,
    /// Determining policy ids.
    pub reasons: Vec<String>,
    /// Error strings.
    pub errors: Vec<String>,
}

/// Why a record's prelude cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum PreludeError {
    /// The record's notes are not JSON.
    #[error("notes are not JSON: {0}")]
    Notes(#[source] serde_json::Error),
    /// The prelude's format is not one this build reads.
    #[error("prelude format {0} is not supported")]
    Format(u64),
    /// A prelude decision lacks a field.
    #[error("a prelude decision has no `{0}`")]
    Field(&'static str),
    /// A field of the prelude has the wrong type.
    #[error("the prelude does not read as format 1 or 2: {0}")]
    Shape(#[source] serde_json::Error),
    /// A format 2 prelude's `contextPrefix` does not cut the record's
    /// context before its `args`.
    #[error("the prelude's contextPrefix {0} does not cut the record's context before its args")]
    ContextPrefix(usize),
}

/// The prelude decisions a record holds (none for a record without one).
pub fn preludes(record: &NewDecision) -> Result<Vec<PreludeDecision>, PreludeError> {
    if !may_have_prelude(&record.notes) {
        return Ok(Vec::new());
    }
    let notes: ReadNotes = match serde_json::from_str(&record.notes) {
        Ok(notes) => notes,
        Err(e) => return unread(&record.notes, e),
    };
    let Some(prelude) = notes.prelude else {
        return Ok(Vec::new());
    };
    let format = prelude.format.unwrap_or(0);
    let cut = match (format, prelude.context_prefix) {
        (PRELUDE_FORMAT, _) => None,
        (PRELUDE_FORMAT_PREFIX, Some(prefix)) => Some(cut_context(&record.context, prefix)?),
        (PRELUDE_FORMAT_PREFIX, None) => return Err(PreludeError::Field("contextPrefix")),
        _ => return Err(PreludeError::Format(format)),
    };
    let decisions = prelude.decisions.ok_or(PreludeError::Field("decisions"))?;
    let context = cut
        .as_deref()
        .or(prelude.context.as_deref())
        .unwrap_or(&record.context);
    decisions.into_iter().map(|d| d.read(context)).collect()
}

/// Notes that did not read as format 1 or 2, looked at again (slowly, only
/// then): no prelude after all (notes that are not an object), or why
/// not: not JSON, a prelude of another format, a field of the wrong type.
fn unread(notes: &str, error: serde_json::Error) -> Result<Vec<PreludeDecision>, PreludeError> {
    let Ok(value) = serde_json::from_str::<serde_json::Value>(notes) else {
        return Err(PreludeError::Notes(error));
    };
    let Some(prelude) = value.get(PRELUDE_KEY).filter(|p| !p.is_null()) else {
        return Ok(Vec::new());
    };
    match prelude.get("format").and_then(serde_json::Value::as_u64) {
        Some(PRELUDE_FORMAT | PRELUDE_FORMAT_PREFIX) => Err(PreludeError::Shape(error)),
        other => Err(PreludeError::Format(other.unwrap_or(0))),
    }
}

/// A record's notes, read only for their prelude, in one pass straight
/// into these types (no value tree).
#[derive(Deserialize)]
struct ReadNotes {
    prelude: Option<ReadPrelude>,
}

/// A prelude as format 1 or 2 writes it.
#[derive(Deserialize)]
struct ReadPrelude {
    format: Option<u64>,
    context: Option<String>,
    #[serde(rename = "contextPrefix")]
    context_prefix: Option<usize>,
    decisions: Option<Vec<ReadDecision>>,
}

/// One prelude decision as format 1 writes it.
#[derive(Deserialize)]
struct ReadDecision {
    id: Option<String>,
    principal: Option<String>,
    action: Option<String>,
    resource: Option<String>,
    decision: Option<String>,
    reasons: Option<Vec<String>>,
    errors: Option<Vec<String>>,
}

impl ReadDecision {
    fn read(self, context: &str) -> Result<PreludeDecision, PreludeError> {
        let field = |v: Option<String>, key| v.ok_or(PreludeError::Field(key));
        let list = |v: Option<Vec<String>>, key| v.ok_or(PreludeError::Field(key));
        Ok(PreludeDecision {
            id: field(self.id, "id")?,
            principal: field(self.principal, "principal")?,
            action: field(self.action, "action")?,
            resource: field(self.resource, "resource")?,
            context: context.to_string(),
            allowed: field(self.decision, "decision")? == "allow",
            reasons: list(self.reasons, "reasons")?,
            errors: list(self.errors, "errors")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn the_quick_look_names_the_key() {
        assert_eq!(QUOTED_KEY, format!("\"{PRELUDE_KEY}\""));
    }

    fn record(action: &str, resource: &str, context: &str) -> NewDecision {
        NewDecision {
            id: format!("id-{action}-{resource}"),
            time: "2026-11-26T00:00:00Z".into(),
            org_id: Some("o".into()),
            session_id: Some("s".into()),
            principal: "Gateway::Agent::\"a\"".into(),
            action: action.into(),
            resource: resource.into(),
            context: context.into(),
            entities_hash: "e".into(),
            entities: None,
            policy_hash: "p".into(),
            decision: "allow".into(),
            reasons: "[\"r\"]".into(),
            errors: "[]".into(),
            outcome: ALLOWED_OUTCOME.into(),
            notes: "null".into(),
        }
    }

    #[test]
    fn unreadable_preludes_say_why_and_other_notes_hold_none() {
        let read = |notes: &str| {
            let mut r = record("call_tool", "Gateway::Tool::\"t\"", "{}");
            r.notes = notes.into();
            preludes(&r)
        };
        let one = r#"{"id":"i","principal":"p","action":"view_tool","resource":"r","decision":"allow","reasons":[],"errors":[]}"#;
        assert_eq!(
            read(&format!(
                r#"{{"x":1,"prelude":{{"format":1,"decisions":[{one}]}}}}"#
            ))
            .unwrap()
            .len(),
            1
        );
        for (notes, why) in [
            (
                r#"{"prelude":{"format":3,"decisions":7}}"#.to_string(),
                "format 3",
            ),
            (
                format!(r#"{{"prelude":{{"format":2,"decisions":[{one}]}}}}"#),
                "no `contextPrefix`",
            ),
            (
                format!(r#"{{"prelude":{{"format":2,"contextPrefix":1,"decisions":[{one}]}}}}"#),
                "contextPrefix 1 does not cut",
            ),
            (
                format!(r#"{{"prelude":{{"format":2,"contextPrefix":99,"decisions":[{one}]}}}}"#),
                "contextPrefix 99 does not cut",
            ),
            (r#"{"prelude":{"decisions":[]}}"#.into(), "format 0"),
            (r#"{"prelude":{"format":1}}"#.into(), "no `decisions`"),
            (
                r#"{"prelude":{"format":1,"decisions":[{"id":"i"}]}}"#.into(),
                "no `principal`",
            ),
            (
                format!(r#"{{"prelude":{{"format":1,"decisions":[{one}],"context":5}}}}"#),
                "does not read as format 1 or 2",
            ),
            (r#"{"prelude": nope"#.into(), "not JSON"),
        ] {
            let err = read(&notes).unwrap_err().to_string();
            assert!(err.contains(why), "{notes}: {err}");
        }
        for notes in [
            r#""the word \"prelude\" in a string""#,
            r#"{"prelude":null}"#,
        ] {
            assert!(read(notes).unwrap().is_empty(), "{notes}");
        }
    }

    fn decisions(ops: &[WriteOp]) -> Vec<&NewDecision> {
        ops.iter()
            .filter_map(|op| match op {
                WriteOp::Decision(d) => Some(d.as_ref()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_calls_preludes_fold_into_its_decision_and_read_back() {
        let mut access = record("access_session", "Gateway::Session::\"s\"", "{\"plain\":1}");
        access.principal = "Gateway::ApiKey::\"k\"".into();
        let view = record("view_tool", "Gateway::Tool::\"t\"", "{\"plain\":1}");
        let mut main = record("call_tool", "Gateway::Tool::\"t\"", "{\"typed\":1}");
        main.outcome = "{\"status\":\"ok\"}".into();
        main.notes = "{\"calledAs\":\"x\"}".into();
        let ops = vec![
            WriteOp::Decision(Box::new(access.clone())),
            WriteOp::Decision(Box::new(view.clone())),
            WriteOp::Decision(Box::new(main)),
        ];
        let folded = fold(ops);
        let rows = decisions(&folded);
        assert_eq!(rows.len(), 1);
        let notes: Value = serde_json::from_str(&rows[0].notes).unwrap();
        assert_eq!(notes["calledAs"], "x", "the record's own notes stay");
        let back = preludes(rows[0]).unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!(back[0].id, access.id);
        assert_eq!(back[0].principal, access.principal);
        assert_eq!(back[0].action, "access_session");
        assert_eq!(back[1].resource, view.resource);
        assert_eq!(
            back[1].context, "{\"plain\":1}",
            "the plain context is kept"
        );
        assert!(back.iter().all(|p| p.allowed && p.reasons == ["r"]));
    }

    #[test]
    fn a_typed_calls_record_names_its_preludes_context_by_a_cut() {
        let session = crate::policy::entities::session_context_text("s", "2026-11-26T00:00:00Z");
        let args = serde_json::json!({"path": "/tmp/a\"b}", "n": 2});
        let typed = crate::policy::entities::session_context_text_with(
            "s",
            "2026-11-26T00:00:00Z",
            None,
            Some(&args),
        );
        let access = record("access_session", "Gateway::Session::\"s\"", &session);
        let mut main = record("call_tool", "Gateway::Tool::\"t\"", &typed);
        main.outcome = "{\"status\":\"ok\"}".into();
        let folded = fold(vec![
            WriteOp::Decision(Box::new(access)),
            WriteOp::Decision(Box::new(main)),
        ]);
        let rows = decisions(&folded);
        let notes: Value = serde_json::from_str(&rows[0].notes).unwrap();
        assert_eq!(notes["prelude"]["format"], PRELUDE_FORMAT_PREFIX);
        assert!(notes["prelude"].get("context").is_none(), "{notes}");
        assert!(!rows[0].notes.contains("__entity"), "not copied: {notes}");
        let back = preludes(rows[0]).unwrap();
        assert_eq!(
            back[0].context, session,
            "the session context, byte for byte"
        );

        // A context that is not the record's plus `args` is written out.
        let other = record("access_session", "Gateway::Session::\"s\"", "{\"other\":1}");
        let mut main = record("call_tool", "Gateway::Tool::\"t\"", &typed);
        main.outcome = "{}".into();
        let folded = fold(vec![
            WriteOp::Decision(Box::new(other)),
            WriteOp::Decision(Box::new(main)),
        ]);
        let rows = decisions(&folded);
        let notes: Value = serde_json::from_str(&rows[0].notes).unwrap();
        assert_eq!(notes["prelude"]["format"], PRELUDE_FORMAT);
        assert_eq!(notes["prelude"]["context"], "{\"other\":1}");
        assert_eq!(preludes(rows[0]).unwrap()[0].context, "{\"other\":1}");
    }

    #[test]
    fn a_listings_prelude_shares_the_records_context() {
        let access = record("access_session", "Gateway::Session::\"s\"", "{\"plain\":1}");
        let mut list = record("view_tool", "Gateway::Session::\"s\"", "{\"plain\":1}");
        list.outcome = "{\"status\":\"listed\"}".into();
        list.notes = "{\"toolList\":{}}".into();
        let folded = fold(vec![
            WriteOp::Decision(Box::new(access)),
            WriteOp::Decision(Box::new(list)),
        ]);
        let rows = decisions(&folded);
        assert_eq!(rows.len(), 1);
        let notes: Value = serde_json::from_str(&rows[0].notes).unwrap();
        assert!(notes["prelude"].get("context").is_none());
        assert!(notes["toolList"].is_object());
        assert_eq!(preludes(rows[0]).unwrap()[0].context, "{\"plain\":1}");
    }

    #[test]
    fn denials_lone_preludes_and_other_requests_keep_their_rows() {
        let mut denied = record("access_session", "Gateway::Session::\"s\"", "{}");
        denied.decision = "deny".into();
        let lone = record("access_session", "Gateway::Session::\"s\"", "{}");
        let folded = fold(vec![
            WriteOp::Decision(Box::new(denied)),
            WriteOp::Decision(Box::new(lone.clone())),
        ]);
        assert_eq!(decisions(&folded).len(), 2, "nothing to fold into");

        let mut other_time = record("call_tool", "Gateway::Tool::\"t\"", "{}");
        other_time.time = "2026-11-26T00:00:01Z".into();
        other_time.outcome = "{}".into();
        let folded = fold(vec![
            WriteOp::Decision(Box::new(lone)),
            WriteOp::Decision(Box::new(other_time)),
        ]);
        let rows = decisions(&folded);
        assert_eq!(rows.len(), 2, "another request's record holds nothing");
        assert!(preludes(rows[1]).unwrap().is_empty());
    }

    #[test]
    fn a_record_with_notes_is_no_prelude() {
        let mut noted = record("view_tool", "Gateway::Tool::\"t\"", "{}");
        noted.notes = "{\"unknownTool\":true}".into();
        let mut main = record("call_tool", "Gateway::Tool::\"t\"", "{}");
        main.outcome = "{}".into();
        let folded = fold(vec![
            WriteOp::Decision(Box::new(noted)),
            WriteOp::Decision(Box::new(main)),
        ]);
        assert_eq!(decisions(&folded).len(), 2);
    }
}
