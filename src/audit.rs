//! The decision trail: every Cedar decision becomes one record carrying
//! what is needed to re-run it exactly (request, context, entity slice hash,
//! policy-set hash) and what it led to (the outcome of the work it allowed).
//!
//! **Architecture Invariant:** a decision is made only through [`decide`],
//! so no code path can authorize without producing a record.

pub mod application;
pub mod archive;
mod archive_file;
pub mod checkpoint;
pub mod checkpoint_verify;
pub mod events;
pub mod export;
pub mod notes;
pub mod prelude;
pub mod repeated_listing;
pub mod signed_note;
pub mod tool_list;

/// A knowledge-graph node as `read_node` sees it (defined with the entity
/// slices, which build its Cedar entity).
pub use crate::policy::entities::NodeRef;

use serde_json::Value;

use crate::policy::entities::{EntitySlice, NodeEntitiesError, with_graph_nodes};
use crate::policy::{
    Action, ParseEntitiesError, PolicyBundle, PreparedContext, Uid, UidError, Verdict,
};
use crate::store::decisions::NewDecision;

/// A decision made, with its record waiting for an outcome.
#[derive(Debug, Clone)]
pub struct Decided {
    /// The verdict.
    pub verdict: Verdict,
    /// The record (outcome still `null`).
    pub record: NewDecision,
}

impl Decided {
    /// Whether the request may proceed.
    pub fn allowed(&self) -> bool {
        self.verdict.allowed
    }

    /// The decision id (UUIDv7).
    pub fn id(&self) -> &str {
        &self.record.id
    }

    /// The record with its outcome filled in.
    pub fn finish(mut self, outcome: Value) -> NewDecision {
        self.record.outcome = json_text(&outcome);
        self.record
    }

    /// The record with the default outcome for its verdict: `allowed` (the
    /// request went on) or `denied` (nothing ran).
    pub fn finish_default(mut self) -> NewDecision {
        // The text `json!({"status": …})` serializes to, without building it.
        self.record.outcome = if self.verdict.allowed {
            ALLOWED_OUTCOME
        } else {
            DENIED_OUTCOME
        }
        .to_string();
        self.record
    }
}

/// The default outcome of an allowed decision (`Decided::finish_default`),
/// the one a foldable prelude decision carries.
pub(crate) const ALLOWED_OUTCOME: &str = r#"{"status":"allowed"}"#;

/// The default outcome of a denied decision.
const DENIED_OUTCOME: &str = r#"{"status":"denied"}"#;

/// Who a decision is about, for the record's indexing columns.
#[derive(Debug, Clone, Copy)]
pub struct Scope<'a> {
    /// The org.
    pub org_id: Option<&'a str>,
    /// The session.
    pub session_id: Option<&'a str>,
}

/// Decides one request and prepares its record.
#[expect(
    clippy::too_many_arguments,
    reason = "each argument is one field of the record"
)]
pub fn decide(
    bundle: &PolicyBundle,
    slice: &EntitySlice,
    principal: &Uid,
    action: Action,
    resource: &Uid,
    context: &PreparedContext,
    scope: Scope<'_>,
    time: &str,
) -> Decided {
    let id = uuid::Uuid::now_v7().to_string();
    let verdict = observed_verdict(bundle, slice, principal, action, resource, context, &id);
    let record = NewDecision {
        id,
        time: time.to_string(),
        org_id: scope.org_id.map(str::to_string),
        session_id: scope.session_id.map(str::to_string),
        principal: principal.text(),
        action: action.name().to_string(),
        resource: resource.text(),
        context: context.text().to_string(),
        entities_hash: slice.hash.clone(),
        entities: Some(slice.json.clone()),
        policy_hash: bundle.hash.clone(),
        decision: if verdict.allowed { "allow" } else { "deny" }.to_string(),
        reasons: json_text(&verdict.reasons),
        errors: json_text(&verdict.errors),
        outcome: "null".to_string(),
        notes: "null".to_string(),
    };
    Decided { verdict, record }
}

/// Compact JSON text of a record field, written straight to bytes (a
/// `Value`'s `Display` goes through the formatter, and a list of strings
/// needs no `Value` at all); the same text either way.
fn json_text<T: serde::Serialize + ?Sized>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "null".to_string())
}

/// The verdict of one in-session request, handed to the PEP's observer
/// under `decision_id` (the record that will hold it). A slice built
/// against another schema fails closed.
pub(crate) fn observed_verdict(
    bundle: &PolicyBundle,
    slice: &EntitySlice,
    principal: &Uid,
    action: Action,
    resource: &Uid,
    context: &PreparedContext,
    decision_id: &str,
) -> Verdict {
    let started = std::time::Instant::now();
    let verdict = if slice.schema_hash == bundle.schema_hash {
        bundle.decide_in_session(
            (principal, action, resource),
            context,
            &slice.entities,
            &slice.verdicts,
        )
    } else {
        // A slice built against another schema may not conform: fail closed.
        Verdict {
            allowed: false,
            reasons: Vec::new(),
            errors: vec!["entity slice was built for a different schema".into()],
            advice: Vec::new(),
        }
    };
    if let Some(observer) = bundle.hooks.observer() {
        observer.observe(&crate::policy::Observed {
            bundle,
            entities: &slice.entities,
            entities_json: Some(&slice.json),
            principal,
            action,
            resource,
            context,
            verdict: &verdict,
            decision_id,
            elapsed: started.elapsed(),
        });
    }
    verdict
}

/// One line per record for `cedargate audit tail`.
pub fn format_line(d: &crate::store::decisions::StoredDecision) -> String {
    format!(
        "#{seq} {time} {decision:<5} {action} {principal} -> {resource} reasons={reasons} outcome={outcome} id={id}",
        seq = d.seq,
        time = d.record.time,
        decision = d.record.decision,
        action = d.record.action,
        principal = d.record.principal,
        resource = d.record.resource,
        reasons = d.record.reasons,
        outcome = d.record.outcome,
        id = d.record.id,
    )
}

/// Version tag of the batched `read_node` record format.
pub const NODE_BATCH_FORMAT: u32 = 1;

/// Cedar `read_node` decisions for the nodes one tool call touches, made
/// one per node and recorded together as one compact, replayable record
/// (format in `src/policy/README.md`, "Batched read_node records").
///
/// Each node's entity (`Gateway::GraphNode::"<id>"` with `type`, `name`
/// and parent `Gateway::Project::"<project>"`) is added to the session's
/// entity slice for its decision; the record stores the slice's hash and,
/// per node, the id, type and name, so replay rebuilds exactly the entities
/// each decision used.
#[derive(Debug)]
pub struct NodeGuard<'a> {
    /// The batched record's id (known up front so observers can name it).
    id: String,
    bundle: &'a PolicyBundle,
    slice: &'a EntitySlice,
    principal: Uid,
    project_id: String,
    context: &'a PreparedContext,
    org_id: Option<String>,
    session_id: Option<String>,
    time: String,
    /// `(id, type, name, verdict class)` in decision order.
    decided: Vec<(String, String, String, usize)>,
    /// Distinct verdicts (most batches have one or two).
    classes: Vec<Verdict>,
    /// Verdict class of each node key already decided in this call.
    shared: std::collections::HashMap<String, usize>,
    /// Cedar evaluations made.
    evaluated: usize,
}

impl<'a> NodeGuard<'a> {
    /// A guard deciding for `principal` on nodes of `project_id`.
    pub fn new(
        bundle: &'a PolicyBundle,
        slice: &'a EntitySlice,
        principal: Uid,
        project_id: &str,
        context: &'a PreparedContext,
        scope: Scope<'_>,
        time: &str,
    ) -> NodeGuard<'a> {
        NodeGuard {
            id: uuid::Uuid::now_v7().to_string(),
            bundle,
            slice,
            principal,
            project_id: project_id.to_string(),
            context,
            org_id: scope.org_id.map(str::to_string),
            session_id: scope.session_id.map(str::to_string),
            time: time.to_string(),
            decided: Vec::new(),
            classes: Vec::new(),
            shared: std::collections::HashMap::new(),
            evaluated: 0,
        }
    }

    fn class_of(&mut self, v: Verdict) -> usize {
        if let Some(i) = self
            .classes
            .iter()
            .position(|c| c.allowed == v.allowed && c.reasons == v.reasons && c.errors == v.errors)
        {
            return i;
        }
        self.classes.push(v);
        self.classes.len() - 1
    }

    /// Decides `read_node` for each node. Nodes that no policy of the
    /// bundle can tell apart (same values of the attributes policies read,
    /// see [`crate::policy::node_reads`]) share the verdict of the first of
    /// them decided in this call, unless that verdict carries errors or an
    /// observer re-decides requests (shadow mode); every other node gets
    /// its own Cedar decision. Failing to build the entities denies.
    pub fn decide(&mut self, nodes: &[NodeRef<'_>]) -> Vec<bool> {
        if nodes.is_empty() {
            return Vec::new();
        }
        let started = std::time::Instant::now();
        let observer = self.bundle.hooks.observer();
        let redecides = observer.is_some_and(|o| o.redecides());
        let dependence = self.bundle.node_reads;
        // Each node's verdict class, once known.
        let mut class: Vec<Option<usize>> = vec![None; nodes.len()];
        // Nodes decided alone; the first node of each key new to this call;
        // later nodes of those keys, waiting on the first one's verdict.
        let mut alone: Vec<usize> = Vec::new();
        let mut firsts: Vec<(usize, String)> = Vec::new();
        let mut waiting: Vec<(usize, String)> = Vec::new();
        let mut pending = std::collections::HashSet::new();
        for (i, n) in nodes.iter().enumerate() {
            let key = (!redecides)
                .then(|| dependence.key(n.node_type, n.name))
                .flatten()
                .map(key_text);
            match key {
                None => alone.push(i),
                Some(k) => match self.shared.get(&k) {
                    Some(c) => class[i] = Some(*c),
                    None if pending.contains(&k) => waiting.push((i, k)),
                    None => {
                        pending.insert(k.clone());
                        firsts.push((i, k));
                    }
                },
            }
        }
        let picked: Vec<usize> = firsts.iter().map(|(i, _)| *i).collect();
        let decided = self.decide_each(nodes, &picked, redecides);
        for ((i, k), verdict) in firsts.into_iter().zip(decided) {
            let shareable = verdict.errors.is_empty();
            let c = self.class_of(verdict);
            class[i] = Some(c);
            if shareable {
                self.shared.insert(k, c);
            }
        }
        for (i, k) in waiting {
            match self.shared.get(&k) {
                Some(c) => class[i] = Some(*c),
                // The first verdict had errors, which may name its node:
                // decide the others alone.
                None => alone.push(i),
            }
        }
        alone.sort_unstable();
        let decided = self.decide_each(nodes, &alone, redecides);
        for (i, verdict) in alone.iter().zip(decided) {
            class[*i] = Some(self.class_of(verdict));
        }
        if let Some(observer) = observer.filter(|_| !redecides) {
            // Each node is credited an equal share of the batch's time.
            let each = started.elapsed() / u32::try_from(nodes.len()).unwrap_or(u32::MAX);
            for (n, c) in nodes.iter().zip(&class) {
                let Some(verdict) = c.and_then(|c| self.classes.get(c)) else {
                    continue;
                };
                observer.observe(&crate::policy::Observed {
                    bundle: self.bundle,
                    entities: &self.slice.entities,
                    entities_json: None,
                    principal: &self.principal,
                    action: Action::ReadNode,
                    resource: &crate::policy::Kind::GraphNode.uid(n.id),
                    context: self.context,
                    verdict,
                    decision_id: &self.id,
                    elapsed: each,
                });
            }
        }
        let mut out = Vec::with_capacity(nodes.len());
        for (n, c) in nodes.iter().zip(class) {
            // Every node got a class above; a missing one denies.
            let c = c.unwrap_or_else(|| {
                self.class_of(Verdict::denied_with("node was not decided".into()))
            });
            out.push(self.classes.get(c).is_some_and(|v| v.allowed));
            self.decided.push((
                n.id.to_string(),
                n.node_type.to_string(),
                n.name.to_string(),
                c,
            ));
        }
        out
    }

    /// One Cedar decision for each of `nodes[picked]`, against one entity
    /// set holding the session slice and those nodes. An observer that
    /// re-decides requests is given each decision here, with its entities.
    fn decide_each(
        &mut self,
        nodes: &[NodeRef<'_>],
        picked: &[usize],
        redecides: bool,
    ) -> Vec<Verdict> {
        if picked.is_empty() {
            return Vec::new();
        }
        self.evaluated += picked.len();
        let refs: Vec<NodeRef<'_>> = picked
            .iter()
            .filter_map(|i| nodes.get(*i))
            .copied()
            .collect();
        let built = if self.slice.schema_hash != self.bundle.schema_hash {
            Err(BatchEntitiesError::OtherSchema)
        } else {
            with_graph_nodes(&self.slice.entities, &self.project_id, &refs)
                .map_err(BatchEntitiesError::Nodes)
        };
        match &built {
            Ok(entities) => {
                let uids: Vec<Uid> = refs
                    .iter()
                    .map(|n| crate::policy::Kind::GraphNode.uid(n.id))
                    .collect();
                let started = std::time::Instant::now();
                let verdicts = self.bundle.decide_many(
                    &self.principal,
                    Action::ReadNode,
                    &uids,
                    self.context,
                    entities,
                );
                if let Some(observer) = self.bundle.hooks.observer().filter(|_| redecides) {
                    let each = started.elapsed() / u32::try_from(uids.len()).unwrap_or(u32::MAX);
                    for (resource, v) in uids.iter().zip(&verdicts) {
                        observer.observe(&crate::policy::Observed {
                            bundle: self.bundle,
                            entities,
                            entities_json: None,
                            principal: &self.principal,
                            action: Action::ReadNode,
                            resource,
                            context: self.context,
                            verdict: v,
                            decision_id: &self.id,
                            elapsed: each,
                        });
                    }
                }
                verdicts
            }
            Err(e) => {
                let error = e.to_string();
                refs.iter()
                    .map(|_| Verdict::denied_with(error.clone()))
                    .collect()
            }
        }
    }

    /// Number of Cedar evaluations made so far (nodes sharing a verdict
    /// count once).
    pub fn cedar_decisions(&self) -> usize {
        self.evaluated
    }

    /// Number of nodes decided so far.
    pub fn len(&self) -> usize {
        self.decided.len()
    }

    /// Whether no node was decided.
    pub fn is_empty(&self) -> bool {
        self.decided.is_empty()
    }

    /// The batched record, or `None` when no node was decided.
    pub fn record(self) -> Option<NewDecision> {
        if self.decided.is_empty() {
            return None;
        }
        let allowed = self
            .decided
            .iter()
            .filter(|d| self.classes.get(d.3).is_some_and(|c| c.allowed))
            .count();
        let denied = self.decided.len() - allowed;
        let mut reasons: Vec<String> = self
            .classes
            .iter()
            .flat_map(|c| c.reasons.iter().cloned())
            .collect();
        reasons.sort();
        reasons.dedup();
        let mut errors: Vec<String> = self
            .classes
            .iter()
            .flat_map(|c| c.errors.iter().cloned())
            .collect();
        errors.sort();
        errors.dedup();
        let notes = serde_json::json!({
            "readNodeBatch": {
                "format": NODE_BATCH_FORMAT,
                "nodes": self.decided.iter().map(|(id, t, n, c)| serde_json::json!([id, t, n, c])).collect::<Vec<_>>(),
                "verdicts": self.classes.iter().map(|c| serde_json::json!({
                    "decision": if c.allowed { "allow" } else { "deny" },
                    "reasons": c.reasons,
                    "errors": c.errors,
                })).collect::<Vec<_>>(),
            }
        });
        Some(NewDecision {
            id: self.id,
            time: self.time,
            org_id: self.org_id,
            session_id: self.session_id,
            principal: self.principal.text(),
            action: Action::ReadNode.name().to_string(),
            resource: crate::policy::Kind::Project
                .uid(&self.project_id)
                .to_string(),
            context: self.context.text().to_string(),
            entities_hash: self.slice.hash.clone(),
            entities: Some(self.slice.json.clone()),
            policy_hash: self.bundle.hash.clone(),
            decision: if denied == 0 { "allow" } else { "deny" }.to_string(),
            reasons: Value::from(reasons).to_string(),
            errors: Value::from(errors).to_string(),
            outcome:
                serde_json::json!({ "status": "filtered", "allowed": allowed, "denied": denied })
                    .to_string(),
            notes: notes.to_string(),
        })
    }
}

/// Why a batch's entities are unavailable; every node of the batch is
/// denied with this message.
#[derive(Debug, thiserror::Error)]
enum BatchEntitiesError {
    /// The session slice was parsed under another schema.
    #[error("entity slice was built for a different schema")]
    OtherSchema,
    /// The node entities could not be built.
    #[error(transparent)]
    Nodes(NodeEntitiesError),
}

/// One text per node key (the attribute values a shared verdict depends on).
fn key_text((node_type, name): crate::policy::node_reads::NodeKey<'_>) -> String {
    let part = |v: Option<&str>| v.map_or_else(|| "-".to_string(), |v| format!("+{v}"));
    format!("{}\0{}", part(node_type), part(name))
}

/// One node's verdict on replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayedNode {
    /// Node id.
    pub id: String,
    /// What was recorded.
    pub recorded: String,
    /// What the bundle decides now.
    pub decision: String,
    /// The determining policies now.
    pub reasons: Vec<String>,
    /// Errors now.
    pub errors: Vec<String>,
}

/// Why a batched `read_node` record cannot be replayed.
#[derive(Debug, thiserror::Error)]
pub enum NodeBatchError {
    /// The record's notes are not JSON.
    #[error("notes are not JSON: {0}")]
    Notes(#[source] serde_json::Error),
    /// The notes hold no `readNodeBatch`.
    #[error("the record is not a batched read_node record")]
    NotABatch,
    /// The batch lists no verdicts.
    #[error("batch has no verdicts")]
    NoVerdicts,
    /// The batch lists no nodes.
    #[error("batch has no nodes")]
    NoNodes,
    /// A node's verdict class is out of range.
    #[error("a node refers to a missing verdict")]
    MissingVerdict,
    /// The resource column is not a uid.
    #[error("resource is not an entity uid: {0}")]
    Resource(#[source] UidError),
    /// The principal column is not a uid.
    #[error("principal is not an entity uid: {0}")]
    Principal(#[source] UidError),
    /// The entity snapshot is not JSON.
    #[error("snapshot is not JSON: {0}")]
    SnapshotJson(#[source] serde_json::Error),
    /// Cedar refuses the entity snapshot under the bundle's schema.
    #[error(transparent)]
    Snapshot(#[from] ParseEntitiesError),
    /// The node entities could not be built.
    #[error(transparent)]
    Nodes(#[from] NodeEntitiesError),
    /// The context column is not JSON.
    #[error("context is not JSON: {0}")]
    Context(#[source] serde_json::Error),
}

/// Re-runs every decision of a batched `read_node` record against `bundle`,
/// with `slice` being the record's entity snapshot (JSON array text).
pub fn replay_node_batch(
    bundle: &PolicyBundle,
    record: &NewDecision,
    slice: &str,
) -> Result<Vec<ReplayedNode>, NodeBatchError> {
    let notes: Value = serde_json::from_str(&record.notes).map_err(NodeBatchError::Notes)?;
    let parsed = batch_nodes(&notes)?;
    let project: Uid = record.resource.parse().map_err(NodeBatchError::Resource)?;
    let principal: Uid = record
        .principal
        .parse()
        .map_err(NodeBatchError::Principal)?;
    let snapshot = serde_json::from_str(slice).map_err(NodeBatchError::SnapshotJson)?;
    let base = bundle.parse_entities(&snapshot)?;
    let refs: Vec<NodeRef<'_>> = parsed
        .iter()
        .map(|(id, t, n, _)| NodeRef {
            id,
            node_type: t,
            name: n,
        })
        .collect();
    let entities = with_graph_nodes(&base, project.id(), &refs)?;
    let context = bundle.prepare_context(
        Action::ReadNode,
        serde_json::from_str(&record.context).map_err(NodeBatchError::Context)?,
    );
    Ok(parsed
        .iter()
        .map(|(id, _, _, recorded)| {
            let v = bundle.decide(
                &principal,
                Action::ReadNode,
                &crate::policy::Kind::GraphNode.uid(id),
                &context,
                &entities,
            );
            ReplayedNode {
                id: (*id).to_string(),
                recorded: (*recorded).to_string(),
                decision: if v.allowed { "allow" } else { "deny" }.to_string(),
                reasons: v.reasons,
                errors: v.errors,
            }
        })
        .collect())
}

/// `(id, type, name, recorded decision)` of each node of a batch record's
/// notes (format in `src/policy/README.md`, "Batched read_node records").
fn batch_nodes(notes: &Value) -> Result<Vec<(&str, &str, &str, &str)>, NodeBatchError> {
    let batch = notes
        .get("readNodeBatch")
        .ok_or(NodeBatchError::NotABatch)?;
    let verdicts = batch
        .get("verdicts")
        .and_then(Value::as_array)
        .ok_or(NodeBatchError::NoVerdicts)?;
    let nodes = batch
        .get("nodes")
        .and_then(Value::as_array)
        .ok_or(NodeBatchError::NoNodes)?;
    let mut parsed = Vec::with_capacity(nodes.len());
    for n in nodes {
        let field = |i: usize| n.get(i).and_then(Value::as_str).unwrap_or_default();
        let class = n.get(3).and_then(Value::as_u64).unwrap_or(u64::MAX) as usize;
        let recorded = verdicts
            .get(class)
            .and_then(|v| v.get("decision"))
            .and_then(Value::as_str)
            .ok_or(NodeBatchError::MissingVerdict)?;
        parsed.push((field(0), field(1), field(2), recorded));
    }
    Ok(parsed)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    /// The texts a record holds are the ones its `Value`s serialize to, so
    /// records read back, fold and hash as before.
    #[test]
    fn record_texts_are_the_json_they_stand_for() {
        let allowed = json!({ "status": "allowed" }).to_string();
        assert_eq!(super::ALLOWED_OUTCOME, allowed);
        assert_eq!(
            super::DENIED_OUTCOME,
            json!({ "status": "denied" }).to_string()
        );
        let reasons = vec!["a \"quoted\" id".to_string(), "ünïcode\n".to_string()];
        assert_eq!(
            super::json_text(&reasons),
            Value::from(reasons.clone()).to_string()
        );
        let outcome = json!({ "status": "completed", "durationMs": 0.5, "n": [1, null] });
        assert_eq!(super::json_text(&outcome), outcome.to_string());
    }
}
