//! The verb hook bus: every bridged call emits `pre-verb` before the
//! outbound request, then `post-verb` (outcome `completed` or `failed`),
//! plus `verb-error` on failure. Subscribers shipped: task instances (load
//! tracking), audit records and cost events, each a row per event or call.
//!
//! The bus is in-process and bounded: each subscriber owns a bounded queue
//! and its own task; emitting never waits, and an event a full queue cannot
//! take is dropped and counted. A slow or failing subscriber therefore never
//! delays a call.
//!
//! **Architecture Invariant:** the durable decision record of a call never
//! depends on the bus; subscriber rows are best-effort telemetry.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::store::db::Value as SqlValue;
use serde::Serialize;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::store::{Store, WriteOp};

/// Events a subscriber queue holds before new ones are dropped.
pub const QUEUE_CAPACITY: usize = 4096;
/// Most events a subscriber handles in one batch.
const BATCH_MAX: usize = 256;

/// When an event is emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Phase {
    /// Before the outbound call (Cedar has decided; `context.denied` tells).
    #[serde(rename = "pre-verb")]
    PreVerb,
    /// After the call, successful or not.
    #[serde(rename = "post-verb")]
    PostVerb,
    /// After a failed call, with the error.
    #[serde(rename = "verb-error")]
    VerbError,
}

impl Phase {
    /// The phase as written in events.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::PreVerb => "pre-verb",
            Phase::PostVerb => "post-verb",
            Phase::VerbError => "verb-error",
        }
    }
}

/// `verb-error`'s error.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EventError {
    /// Bridge or authorization code.
    pub code: i64,
    /// Message.
    pub message: String,
}

/// What the PEP decided, as seen by subscribers.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EventContext {
    /// Cedar denied `a2a_invoke`: nothing was sent.
    pub denied: bool,
    /// The decision record of the `a2a_invoke` decision.
    pub decision_id: String,
}

/// One event. Field names are the published contract.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VerbEvent {
    /// Phase.
    pub phase: Phase,
    /// Canonical tool name (`<agentSlug>.<skillId>`), even for alias calls.
    pub verb: String,
    /// The tool's legacy alias.
    pub legacy_alias: String,
    /// Org.
    pub org_id: String,
    /// Registry row of the peer.
    pub agent_card_id: String,
    /// The interface URL called.
    pub agent_url: String,
    /// Skill.
    pub skill_id: String,
    /// Session.
    pub session_id: String,
    /// Validated arguments.
    pub args: Value,
    /// RFC 3339 time of emission.
    pub emitted_at: String,
    /// Ties the events of one call together.
    pub call_id: String,
    /// The authorization outcome.
    pub context: EventContext,
    /// Wall-clock duration of the outbound call (post-verb, verb-error).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<f64>,
    /// `completed` or `failed` (post-verb).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome: Option<&'static str>,
    /// The failure (verb-error).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<EventError>,
    /// Request and response body sizes (post-verb).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<(usize, usize)>,
}

/// A subscriber: handles batches of events on its own task.
pub trait Subscriber: Send + Sync + 'static {
    /// Name for logs and counters.
    fn name(&self) -> &str;
    /// Handles a batch; an error is logged and the batch dropped.
    fn handle(
        &self,
        events: Vec<Arc<VerbEvent>>,
    ) -> impl std::future::Future<Output = Result<(), String>> + Send;
}

struct Slot {
    name: String,
    tx: mpsc::Sender<Arc<VerbEvent>>,
    dropped: Arc<AtomicU64>,
}

/// The bus.
#[derive(Default)]
pub struct HookBus {
    slots: std::sync::RwLock<Vec<Slot>>,
}

impl std::fmt::Debug for HookBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<String> = self
            .slots
            .read()
            .map(|s| s.iter().map(|s| s.name.clone()).collect())
            .unwrap_or_default();
        f.debug_struct("HookBus")
            .field("subscribers", &names)
            .finish()
    }
}

impl HookBus {
    /// Adds a subscriber with a queue of `capacity` events, served by a
    /// task on the current runtime.
    pub fn subscribe<S: Subscriber>(&self, subscriber: S, capacity: usize) {
        let (tx, mut rx) = mpsc::channel::<Arc<VerbEvent>>(capacity.max(1));
        let name = subscriber.name().to_string();
        let dropped = Arc::new(AtomicU64::new(0));
        tokio::spawn(async move {
            let mut batch = Vec::with_capacity(BATCH_MAX);
            while rx.recv_many(&mut batch, BATCH_MAX).await > 0 {
                let events = std::mem::take(&mut batch);
                if let Err(e) = subscriber.handle(events).await {
                    tracing::warn!(subscriber = subscriber.name(), error = %e, "hook subscriber failed");
                }
            }
        });
        if let Ok(mut slots) = self.slots.write() {
            slots.push(Slot { name, tx, dropped });
        }
    }

    /// Hands `event` to every subscriber without waiting.
    pub fn emit(&self, event: VerbEvent) {
        let event = Arc::new(event);
        let Ok(slots) = self.slots.read() else {
            return;
        };
        for slot in slots.iter() {
            if slot.tx.try_send(Arc::clone(&event)).is_err() {
                let n = slot.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                if n.is_power_of_two() {
                    tracing::warn!(subscriber = %slot.name, dropped = n, "hook subscriber is not keeping up; events dropped");
                }
            }
        }
    }

    /// Events dropped per subscriber so far.
    pub fn dropped(&self) -> Vec<(String, u64)> {
        self.slots
            .read()
            .map(|s| {
                s.iter()
                    .map(|s| (s.name.clone(), s.dropped.load(Ordering::Relaxed)))
                    .collect()
            })
            .unwrap_or_default()
    }
}

fn text(s: &str) -> SqlValue {
    SqlValue::Text(s.to_string())
}

/// Load tracking: a `running` row at pre-verb, finished at post-verb.
#[derive(Debug)]
pub struct TaskInstances(pub Store);

impl Subscriber for TaskInstances {
    fn name(&self) -> &str {
        "task-instances"
    }

    async fn handle(&self, events: Vec<Arc<VerbEvent>>) -> Result<(), String> {
        let mut ops = Vec::new();
        for e in events {
            match e.phase {
                Phase::PreVerb => ops.push(WriteOp::Exec {
                    sql: "INSERT INTO a2a_task_instances
                          (id, org_id, agent_card_id, verb, skill_id, session_id, status, started_at)
                          VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) ON CONFLICT DO NOTHING",
                    params: vec![
                        text(&e.call_id),
                        text(&e.org_id),
                        text(&e.agent_card_id),
                        text(&e.verb),
                        text(&e.skill_id),
                        text(&e.session_id),
                        text(if e.context.denied { "denied" } else { "running" }),
                        text(&e.emitted_at),
                    ],
                }),
                Phase::PostVerb => ops.push(WriteOp::Exec {
                    sql: "UPDATE a2a_task_instances SET status = ?2, finished_at = ?3, duration_ms = ?4
                          WHERE id = ?1",
                    params: vec![
                        text(&e.call_id),
                        text(e.outcome.unwrap_or("failed")),
                        text(&e.emitted_at),
                        SqlValue::Real(e.duration_ms.unwrap_or_default()),
                    ],
                }),
                Phase::VerbError => ops.push(WriteOp::Exec {
                    sql: "UPDATE a2a_task_instances SET error_code = ?2 WHERE id = ?1",
                    params: vec![
                        text(&e.call_id),
                        SqlValue::Int(e.error.as_ref().map(|x| x.code).unwrap_or_default()),
                    ],
                }),
            }
        }
        self.0
            .writer()
            .enqueue(ops)
            .await
            .map_err(|e| e.to_string())
    }
}

/// Audit: every event, as emitted.
#[derive(Debug)]
pub struct AuditRecords(pub Store);

impl Subscriber for AuditRecords {
    fn name(&self) -> &str {
        "audit"
    }

    async fn handle(&self, events: Vec<Arc<VerbEvent>>) -> Result<(), String> {
        let mut ops = Vec::with_capacity(events.len());
        for e in events {
            let json = serde_json::to_string(&*e).map_err(|x| x.to_string())?;
            ops.push(WriteOp::Exec {
                sql: "INSERT INTO a2a_hook_events (call_id, org_id, phase, verb, event, emitted_at)
                      VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params: vec![
                    text(&e.call_id),
                    text(&e.org_id),
                    text(e.phase.as_str()),
                    text(&e.verb),
                    SqlValue::Text(json),
                    text(&e.emitted_at),
                ],
            });
        }
        self.0
            .writer()
            .enqueue(ops)
            .await
            .map_err(|e| e.to_string())
    }
}

/// Cost: one row per finished call with its duration and bytes.
#[derive(Debug)]
pub struct CostEvents(pub Store);

impl Subscriber for CostEvents {
    fn name(&self) -> &str {
        "cost"
    }

    async fn handle(&self, events: Vec<Arc<VerbEvent>>) -> Result<(), String> {
        let ops: Vec<WriteOp> = events
            .iter()
            .filter(|e| e.phase == Phase::PostVerb)
            .map(|e| {
                let (sent, received) = e.bytes.unwrap_or((0, 0));
                WriteOp::Exec {
                    sql: "INSERT INTO a2a_cost_events
                          (call_id, org_id, agent_card_id, verb, session_id, outcome, duration_ms,
                           request_bytes, response_bytes, emitted_at)
                          VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) ON CONFLICT DO NOTHING",
                    params: vec![
                        text(&e.call_id),
                        text(&e.org_id),
                        text(&e.agent_card_id),
                        text(&e.verb),
                        text(&e.session_id),
                        text(e.outcome.unwrap_or("failed")),
                        SqlValue::Real(e.duration_ms.unwrap_or_default()),
                        SqlValue::Int(i64::try_from(sent).unwrap_or(i64::MAX)),
                        SqlValue::Int(i64::try_from(received).unwrap_or(i64::MAX)),
                        text(&e.emitted_at),
                    ],
                }
            })
            .collect();
        if ops.is_empty() {
            return Ok(());
        }
        self.0
            .writer()
            .enqueue(ops)
            .await
            .map_err(|e| e.to_string())
    }
}
