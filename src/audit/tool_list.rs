//! The `view_tool` decisions of one `tools/list`, recorded together as one
//! compact record that replays tool by tool (format in
//! `src/policy/README.md`, "Batched view_tool records").
//!
//! A list decides every tool of the session against the same principal,
//! context and entity slice (the session's, which holds every tool
//! entity), so one record carries what each decision needs: the slice's
//! hash, the context, and per tool its name and the index of its verdict
//! (distinct verdicts are stored once). A batch of lists writes one record
//! per list instead of one per tool.

use serde::Serialize;
use serde_json::Value;

use super::{Scope, observed_verdict};
use crate::policy::entities::EntitySlice;
use crate::policy::recorded::{RecordedEntities, RecordedRequest, RecordedRequestError};
use crate::policy::{Action, Kind, PolicyBundle, PreparedContext, Uid, Verdict};
use crate::store::decisions::NewDecision;

/// Version tag of the batched `view_tool` record format.
pub const TOOL_LIST_FORMAT: u32 = 1;

/// The key of the record's notes that marks a batched `view_tool` record.
pub const TOOL_LIST_KEY: &str = "toolList";

/// What one tool's decision gave.
#[derive(Debug, Clone, Copy)]
pub struct Listed {
    /// Whether the tool is shown.
    pub allowed: bool,
    /// Index of its verdict in the record.
    pub verdict: usize,
    /// Whether other tools may share the verdict: a verdict with errors is
    /// never shared (an error may name its tool).
    pub shareable: bool,
}

/// Tools that share one decision (an A2A peer's tools no policy names).
#[derive(Debug)]
struct Class {
    /// The class's parent: its kind (`peerAgent`, `mcpServer`) and id.
    parent: (&'static str, String),
    decided_on: String,
    verdict: usize,
    tools: usize,
}

/// The `view_tool` decisions of one `tools/list`, one Cedar decision per
/// tool (or per equivalence class), recorded as one record.
#[derive(Debug)]
pub struct ToolListGuard<'a> {
    /// The record's id (known up front so observers can name it).
    id: String,
    bundle: &'a PolicyBundle,
    slice: &'a EntitySlice,
    principal: Uid,
    context: &'a PreparedContext,
    org_id: Option<String>,
    session_id: String,
    time: String,
    /// `(tool name, verdict index)` in list order.
    tools: Vec<(String, usize)>,
    /// Distinct verdicts (most lists have one or two).
    verdicts: Vec<Verdict>,
    classes: Vec<Class>,
}

impl<'a> ToolListGuard<'a> {
    /// A guard deciding for `principal` in session `session_id`.
    pub fn new(
        bundle: &'a PolicyBundle,
        slice: &'a EntitySlice,
        principal: Uid,
        context: &'a PreparedContext,
        scope: Scope<'_>,
        time: &str,
    ) -> ToolListGuard<'a> {
        ToolListGuard {
            id: uuid::Uuid::now_v7().to_string(),
            bundle,
            slice,
            principal,
            context,
            org_id: scope.org_id.map(str::to_string),
            session_id: scope.session_id.unwrap_or_default().to_string(),
            time: time.to_string(),
            tools: Vec::new(),
            verdicts: Vec::new(),
            classes: Vec::new(),
        }
    }

    /// Decides `view_tool` on `tool` (through the session's remembered
    /// verdicts, like every in-session decision).
    pub fn decide(&mut self, tool: &str) -> Listed {
        let verdict = observed_verdict(
            self.bundle,
            self.slice,
            &self.principal,
            Action::ViewTool,
            &Kind::Tool.uid(tool),
            self.context,
            &self.id,
        );
        let allowed = verdict.allowed;
        let shareable = verdict.errors.is_empty();
        let index = self.verdict_index(verdict);
        self.tools.push((tool.to_string(), index));
        Listed {
            allowed,
            verdict: index,
            shareable,
        }
    }

    /// Opens an equivalence class of the tools of `parent` (its kind and
    /// id), decided on `tool` (just decided with `listed`); returns the
    /// class to share.
    pub fn open_class(
        &mut self,
        parent: (&'static str, &str),
        tool: &str,
        listed: Listed,
    ) -> usize {
        self.classes.push(Class {
            parent: (parent.0, parent.1.to_string()),
            decided_on: tool.to_string(),
            verdict: listed.verdict,
            tools: 1,
        });
        self.classes.len() - 1
    }

    /// Gives `tool` the verdict of its class; whether it is shown.
    pub fn share(&mut self, tool: &str, class: usize) -> bool {
        let Some(c) = self.classes.get_mut(class) else {
            // No such class: decide the tool alone.
            return self.decide(tool).allowed;
        };
        c.tools += 1;
        let verdict = c.verdict;
        self.tools.push((tool.to_string(), verdict));
        self.verdicts.get(verdict).is_some_and(|v| v.allowed)
    }

    fn verdict_index(&mut self, v: Verdict) -> usize {
        if let Some(i) = self
            .verdicts
            .iter()
            .position(|c| c.allowed == v.allowed && c.reasons == v.reasons && c.errors == v.errors)
        {
            return i;
        }
        self.verdicts.push(v);
        self.verdicts.len() - 1
    }

    /// The record, or `None` when the list decided no tool.
    pub fn record(self) -> Option<NewDecision> {
        if self.tools.is_empty() {
            return None;
        }
        let shown = self
            .tools
            .iter()
            .filter(|(_, v)| self.verdicts.get(*v).is_some_and(|v| v.allowed))
            .count();
        let hidden = self.tools.len() - shown;
        let reasons = union(self.verdicts.iter().map(|v| &v.reasons));
        let errors = union(self.verdicts.iter().map(|v| &v.errors));
        Some(NewDecision {
            id: self.id.clone(),
            time: self.time.clone(),
            org_id: self.org_id.clone(),
            session_id: Some(self.session_id.clone()),
            principal: self.principal.text(),
            action: Action::ViewTool.name().to_string(),
            resource: Kind::Session.uid(&self.session_id).text(),
            context: self.context.text().to_string(),
            entities_hash: self.slice.hash.clone(),
            entities: Some(self.slice.json.clone()),
            policy_hash: self.bundle.hash.clone(),
            decision: if hidden == 0 { "allow" } else { "deny" }.to_string(),
            reasons,
            errors,
            // The text `json!({"status", "shown", "hidden"})` wrote.
            outcome: format!(r#"{{"status":"listed","shown":{shown},"hidden":{hidden}}}"#),
            notes: self.notes(),
        })
    }

    /// The record's notes, serialized straight from the guard's fields
    /// (a `tools/list` writes one per request: no value tree is built).
    fn notes(&self) -> String {
        let notes = NotesOut {
            list: ListOut {
                format: TOOL_LIST_FORMAT,
                tools: &self.tools,
                verdicts: self
                    .verdicts
                    .iter()
                    .map(|v| VerdictOut {
                        decision: if v.allowed { "allow" } else { "deny" },
                        reasons: &v.reasons,
                        errors: &v.errors,
                    })
                    .collect(),
                classes: &self.classes,
            },
        };
        serde_json::to_string(&notes).unwrap_or_else(|_| "null".into())
    }
}

/// `{"toolList": …}` as written (format 1).
#[derive(Serialize)]
struct NotesOut<'a> {
    #[serde(rename = "toolList")]
    list: ListOut<'a>,
}

#[derive(Serialize)]
struct ListOut<'a> {
    format: u32,
    /// `[name, verdict index]` pairs.
    tools: &'a [(String, usize)],
    verdicts: Vec<VerdictOut<'a>>,
    #[serde(skip_serializing_if = "<[Class]>::is_empty")]
    classes: &'a [Class],
}

#[derive(Serialize)]
struct VerdictOut<'a> {
    decision: &'static str,
    reasons: &'a [String],
    errors: &'a [String],
}

/// A class as written: `{"decidedOn", "tools", <parent kind>: <parent>}`.
impl Serialize for Class {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(3))?;
        map.serialize_entry("decidedOn", &self.decided_on)?;
        map.serialize_entry("tools", &self.tools)?;
        map.serialize_entry(self.parent.0, &self.parent.1)?;
        map.end()
    }
}

/// The sorted, distinct strings of `lists`, as a JSON array text.
fn union<'v>(lists: impl Iterator<Item = &'v Vec<String>>) -> String {
    let mut all: Vec<&str> = lists.flatten().map(String::as_str).collect();
    all.sort_unstable();
    all.dedup();
    serde_json::to_string(&all).unwrap_or_else(|_| "[]".into())
}

/// Whether a record is a batched `view_tool` record: the only `view_tool`
/// records whose resource is a session (a single decision's is a tool).
pub fn is_tool_list(record: &NewDecision) -> bool {
    static SESSION: std::sync::LazyLock<String> =
        std::sync::LazyLock::new(|| format!("{}::", Kind::Session.qualified()));
    record.action == Action::ViewTool.name() && record.resource.starts_with(SESSION.as_str())
}

/// One tool's decision on replay: what was recorded and what the bundle
/// decides now.
#[derive(Debug, Clone)]
pub struct ReplayedTool {
    /// `Gateway::Tool::"<name>"`.
    pub resource: Uid,
    /// The recorded verdict (`advice` is not recorded).
    pub recorded: Verdict,
    /// The verdict now.
    pub now: Verdict,
}

/// Why a batched `view_tool` record cannot be replayed.
#[derive(Debug, thiserror::Error)]
pub enum ToolListError {
    /// The record's notes are not JSON.
    #[error("notes are not JSON: {0}")]
    Notes(#[source] serde_json::Error),
    /// The notes hold no `toolList`.
    #[error("the record is not a batched view_tool record")]
    NotAList,
    /// The list's format is not one this build reads.
    #[error("tool list format {0} is not supported")]
    Format(u64),
    /// A tool entry is not `[name, verdict]`.
    #[error("a tool entry is not [name, verdict]")]
    Entry,
    /// A tool's verdict index is out of range.
    #[error("a tool refers to a missing verdict")]
    MissingVerdict,
    /// The principal or action/context columns cannot be used.
    #[error(transparent)]
    Request(#[from] RecordedRequestError),
}

/// Re-decides every tool of a batched `view_tool` record against `bundle`
/// and `entities` (the record's entity snapshot), each tool alone.
pub fn replay_tool_list(
    bundle: &PolicyBundle,
    record: &NewDecision,
    principal: &Uid,
    entities: &RecordedEntities,
) -> Result<Vec<ReplayedTool>, ToolListError> {
    let notes: Value = serde_json::from_str(&record.notes).map_err(ToolListError::Notes)?;
    let tools = recorded_tools(&notes)?;
    let Some((first, _)) = tools.first() else {
        return Ok(Vec::new());
    };
    // The context is the same for every tool: prepare it once.
    let request = RecordedRequest::with_uids(
        principal.clone(),
        &record.action,
        first.clone(),
        &record.context,
    )?;
    let context = bundle.recorded_context(&request);
    Ok(tools
        .into_iter()
        .map(|(resource, recorded)| {
            let now =
                bundle.decide_reusing(principal, Action::ViewTool, &resource, &context, entities);
            ReplayedTool {
                resource,
                recorded,
                now,
            }
        })
        .collect())
}

/// `(tool uid, recorded verdict)` of each tool of a list record's notes.
fn recorded_tools(notes: &Value) -> Result<Vec<(Uid, Verdict)>, ToolListError> {
    let list = notes.get(TOOL_LIST_KEY).ok_or(ToolListError::NotAList)?;
    let format = list.get("format").and_then(Value::as_u64).unwrap_or(0);
    if format != u64::from(TOOL_LIST_FORMAT) {
        return Err(ToolListError::Format(format));
    }
    let verdicts: Vec<Verdict> = list
        .get("verdicts")
        .and_then(Value::as_array)
        .map(|vs| vs.iter().map(recorded_verdict).collect())
        .unwrap_or_default();
    let entries = list
        .get("tools")
        .and_then(Value::as_array)
        .ok_or(ToolListError::Entry)?;
    let mut out = Vec::with_capacity(entries.len());
    for entry in entries {
        let name = entry
            .get(0)
            .and_then(Value::as_str)
            .ok_or(ToolListError::Entry)?;
        let index = entry
            .get(1)
            .and_then(Value::as_u64)
            .ok_or(ToolListError::Entry)?;
        let verdict = usize::try_from(index)
            .ok()
            .and_then(|i| verdicts.get(i))
            .ok_or(ToolListError::MissingVerdict)?;
        out.push((Kind::Tool.uid(name), verdict.clone()));
    }
    Ok(out)
}

fn recorded_verdict(v: &Value) -> Verdict {
    let strings = |key: &str| -> Vec<String> {
        v.get(key)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    };
    Verdict {
        allowed: v.get("decision").and_then(Value::as_str) == Some("allow"),
        reasons: strings("reasons"),
        errors: strings("errors"),
        advice: Vec::new(),
    }
}
