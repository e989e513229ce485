//! The decision trail: every Cedar decision becomes one record carrying
//! what is needed to re-run it exactly (request, context, entity slice hash,
//! policy-set hash) and what it led to (the outcome of the work it allowed).
//!
//! **Architecture Invariant:** a decision is made only through [`decide`],
//! so no code path can authorize without producing a record.

pub mod export;

use cedar_policy::EntityUid;
use serde_json::Value;

use crate::policy::entities::EntitySlice;
use crate::policy::{Action, PolicyBundle, PreparedContext, Verdict};
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
        self.record.outcome = outcome.to_string();
        self.record
    }

    /// The record with the default outcome for its verdict: `allowed` (the
    /// request went on) or `denied` (nothing ran).
    pub fn finish_default(self) -> NewDecision {
        let outcome = if self.verdict.allowed {
            serde_json::json!({ "status": "allowed" })
        } else {
            serde_json::json!({ "status": "denied" })
        };
        self.finish(outcome)
    }
}

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
    principal: &EntityUid,
    action: Action,
    resource: &EntityUid,
    context: &PreparedContext,
    scope: Scope<'_>,
    time: &str,
) -> Decided {
    let started = std::time::Instant::now();
    let verdict = if slice.schema_hash == bundle.schema_hash {
        bundle.decide(principal, action, resource, context, &slice.entities)
    } else {
        // A slice built against another schema may not conform: fail closed.
        Verdict {
            allowed: false,
            reasons: Vec::new(),
            errors: vec!["entity slice was built for a different schema".into()],
            advice: Vec::new(),
        }
    };
    let record = NewDecision {
        id: uuid::Uuid::now_v7().to_string(),
        time: time.to_string(),
        org_id: scope.org_id.map(str::to_string),
        session_id: scope.session_id.map(str::to_string),
        principal: principal.to_string(),
        action: action.name().to_string(),
        resource: resource.to_string(),
        context: context.text.clone(),
        entities_hash: slice.hash.clone(),
        entities: Some(slice.json.clone()),
        policy_hash: bundle.hash.clone(),
        decision: if verdict.allowed { "allow" } else { "deny" }.to_string(),
        reasons: Value::from(verdict.reasons.clone()).to_string(),
        errors: Value::from(verdict.errors.clone()).to_string(),
        outcome: "null".to_string(),
        notes: "null".to_string(),
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
            decision_id: &record.id,
            elapsed: started.elapsed(),
        });
    }
    Decided { verdict, record }
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

/// A knowledge-graph node as `read_node` sees it.
#[derive(Debug, Clone, Copy)]
pub struct NodeRef<'a> {
    /// Node UUID (the `GraphNode` entity id).
    pub id: &'a str,
    /// `type` attribute.
    pub node_type: &'a str,
    /// `name` attribute.
    pub name: &'a str,
}

/// Version tag of the batched `read_node` record format.
pub const NODE_BATCH_FORMAT: u32 = 1;

/// Cedar `read_node` decisions for the nodes one tool call touches, made
/// one per node and recorded together as one compact, replayable record
/// (format in `ARCHITECTURE.md`, "Batched read_node records").
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
    principal: EntityUid,
    project_id: String,
    context: &'a PreparedContext,
    org_id: Option<String>,
    session_id: Option<String>,
    time: String,
    /// `(id, type, name, verdict class)` in decision order.
    decided: Vec<(String, String, String, usize)>,
    /// Distinct verdicts (most batches have one or two).
    classes: Vec<Verdict>,
}

impl<'a> NodeGuard<'a> {
    /// A guard deciding for `principal` on nodes of `project_id`.
    pub fn new(
        bundle: &'a PolicyBundle,
        slice: &'a EntitySlice,
        principal: EntityUid,
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

    /// Decides `read_node` for each node (one Cedar decision each, against
    /// one entity set holding the session slice and these nodes). Failing
    /// to build the entities denies them all.
    pub fn decide(&mut self, nodes: &[NodeRef<'_>]) -> Vec<bool> {
        if nodes.is_empty() {
            return Vec::new();
        }
        let built = if self.slice.schema_hash != self.bundle.schema_hash {
            Err("entity slice was built for a different schema".to_string())
        } else {
            node_entities(&self.slice.entities, &self.project_id, nodes)
        };
        let uids: Vec<EntityUid> = nodes
            .iter()
            .map(|n| crate::policy::Kind::GraphNode.uid(n.id))
            .collect();
        let started = std::time::Instant::now();
        let verdicts = match &built {
            Ok(entities) => {
                let verdicts = self.bundle.decide_many(
                    &self.principal,
                    Action::ReadNode,
                    &uids,
                    self.context,
                    entities,
                );
                if let Some(observer) = self.bundle.hooks.observer() {
                    // One batch: each decision is credited an equal share.
                    let each = started.elapsed() / u32::try_from(uids.len().max(1)).unwrap_or(1);
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
            Err(e) => nodes
                .iter()
                .map(|_| Verdict {
                    allowed: false,
                    reasons: Vec::new(),
                    errors: vec![e.clone()],
                    advice: Vec::new(),
                })
                .collect(),
        };
        let mut out = Vec::with_capacity(nodes.len());
        for (n, verdict) in nodes.iter().zip(verdicts) {
            out.push(verdict.allowed);
            let class = self.class_of(verdict);
            self.decided.push((
                n.id.to_string(),
                n.node_type.to_string(),
                n.name.to_string(),
                class,
            ));
        }
        out
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
            principal: self.principal.to_string(),
            action: Action::ReadNode.name().to_string(),
            resource: crate::policy::Kind::Project
                .uid(&self.project_id)
                .to_string(),
            context: self.context.text.clone(),
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

/// The session entities plus one `GraphNode` per node.
fn node_entities(
    base: &cedar_policy::Entities,
    project_id: &str,
    nodes: &[NodeRef<'_>],
) -> Result<cedar_policy::Entities, String> {
    use cedar_policy::{Entity, RestrictedExpression};
    let project = crate::policy::Kind::Project.uid(project_id);
    let mut seen = std::collections::HashSet::new();
    let mut list = Vec::with_capacity(nodes.len());
    for n in nodes {
        if !seen.insert(n.id) {
            continue;
        }
        let attrs = std::collections::HashMap::from([
            (
                "type".to_string(),
                RestrictedExpression::new_string(n.node_type.to_string()),
            ),
            (
                "name".to_string(),
                RestrictedExpression::new_string(n.name.to_string()),
            ),
        ]);
        let entity = Entity::new(
            crate::policy::Kind::GraphNode.uid(n.id),
            attrs,
            std::collections::HashSet::from([project.clone()]),
        )
        .map_err(|e| format!("cannot build node entity `{}`: {e}", n.id))?;
        list.push(entity);
    }
    // Built here from typed values (two strings and the project parent),
    // so they conform by construction; skipping the per-entity schema
    // check keeps a 1,000-node batch cheap.
    base.clone()
        .add_entities(list, None)
        .map_err(|e| format!("cannot build node entities: {e}"))
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

/// Re-runs every decision of a batched `read_node` record against `bundle`,
/// with `slice` being the record's entity snapshot (JSON array text).
pub fn replay_node_batch(
    bundle: &PolicyBundle,
    record: &NewDecision,
    slice: &str,
) -> Result<Vec<ReplayedNode>, String> {
    let notes: Value =
        serde_json::from_str(&record.notes).map_err(|e| format!("notes are not JSON: {e}"))?;
    let batch = notes
        .get("readNodeBatch")
        .ok_or("the record is not a batched read_node record")?;
    let verdicts = batch
        .get("verdicts")
        .and_then(Value::as_array)
        .ok_or("batch has no verdicts")?;
    let nodes = batch
        .get("nodes")
        .and_then(Value::as_array)
        .ok_or("batch has no nodes")?;
    let mut parsed = Vec::with_capacity(nodes.len());
    for n in nodes {
        let field = |i: usize| n.get(i).and_then(Value::as_str).unwrap_or_default();
        let class = n.get(3).and_then(Value::as_u64).unwrap_or(u64::MAX) as usize;
        let recorded = verdicts
            .get(class)
            .and_then(|v| v.get("decision"))
            .and_then(Value::as_str)
            .ok_or("a node refers to a missing verdict")?;
        parsed.push((field(0), field(1), field(2), recorded.to_string()));
    }
    let project: EntityUid = record
        .resource
        .parse()
        .map_err(|e| format!("resource is not an entity uid: {e}"))?;
    let principal: EntityUid = record
        .principal
        .parse()
        .map_err(|e| format!("principal is not an entity uid: {e}"))?;
    let project_id = project.id().unescaped().to_string();
    let base = bundle.parse_entities(
        &serde_json::from_str(slice).map_err(|e| format!("snapshot is not JSON: {e}"))?,
    )?;
    let refs: Vec<NodeRef<'_>> = parsed
        .iter()
        .map(|(id, t, n, _)| NodeRef {
            id,
            node_type: t,
            name: n,
        })
        .collect();
    let entities = node_entities(&base, &project_id, &refs)?;
    let context = bundle.prepare_context(
        Action::ReadNode,
        serde_json::from_str(&record.context).map_err(|e| format!("context is not JSON: {e}"))?,
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
                recorded: recorded.clone(),
                decision: if v.allowed { "allow" } else { "deny" }.to_string(),
                reasons: v.reasons,
                errors: v.errors,
            }
        })
        .collect())
}
