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
//! A subscriber wakes once per [`LINGER`] window, not once per event, and
//! handles the window's events together: its rows reach the database in
//! one job (a row then costs a share of a page write, not several whole
//! pages), and a call that ends within the window gets one task-instance
//! row instead of an insert and an update. [`HookBus::drain`] hands over
//! whatever is held (graceful shutdown).
//!
//! **Architecture Invariant:** the durable decision record of a call never
//! depends on the bus; subscriber rows are best-effort telemetry.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use crate::store::a2a_hooks;
use crate::store::{Store, StoreError, WriteOp};

/// Events a subscriber queue holds before new ones are dropped.
pub const QUEUE_CAPACITY: usize = 4096;
/// Most events a subscriber handles in one batch.
pub const BATCH_MAX: usize = 1024;
/// How long a subscriber holds its first event waiting for more.
pub const LINGER: std::time::Duration = std::time::Duration::from_millis(20);

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

/// Why a subscriber could not handle a batch (logged; the batch is
/// dropped and the call it describes is unaffected).
#[derive(Debug, thiserror::Error)]
pub enum SubscriberError {
    /// Its rows could not be queued on the writer.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// An event could not be encoded.
    #[error(transparent)]
    Encode(#[from] serde_json::Error),
    /// A subscriber's own failure (subscribers outside this module).
    #[error(transparent)]
    Other(Box<dyn std::error::Error + Send + Sync>),
}

/// A subscriber: handles batches of events on its own task.
pub trait Subscriber: Send + Sync + 'static {
    /// Name for logs and counters.
    fn name(&self) -> &str;
    /// Handles a batch; an error is logged and the batch dropped.
    fn handle(
        &self,
        events: Vec<Arc<VerbEvent>>,
    ) -> impl std::future::Future<Output = Result<(), SubscriberError>> + Send;
}

struct Slot {
    name: String,
    tx: mpsc::Sender<Msg>,
    /// Cuts a subscriber's wait short (drain).
    wake: Arc<tokio::sync::Notify>,
    dropped: Arc<AtomicU64>,
}

/// What a subscriber queue carries.
enum Msg {
    Event(Arc<VerbEvent>),
    /// Handle what is held now, then acknowledge.
    Flush(oneshot::Sender<()>),
}

/// The bus.
pub struct HookBus {
    slots: std::sync::RwLock<Vec<Slot>>,
    /// How long subscribers hold a batch open ([`LINGER`]).
    linger: std::time::Duration,
}

impl Default for HookBus {
    fn default() -> Self {
        HookBus::with_linger(LINGER)
    }
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
    /// A bus whose subscribers hold each batch open for `linger`.
    pub fn with_linger(linger: std::time::Duration) -> Self {
        HookBus {
            slots: std::sync::RwLock::default(),
            linger,
        }
    }

    /// Adds a subscriber with a queue of `capacity` events, served by a
    /// task on the current runtime.
    pub fn subscribe<S: Subscriber>(&self, subscriber: S, capacity: usize) {
        let (tx, rx) = mpsc::channel::<Msg>(capacity.max(1));
        let name = subscriber.name().to_string();
        let dropped = Arc::new(AtomicU64::new(0));
        let wake = Arc::new(tokio::sync::Notify::new());
        tokio::spawn(serve(subscriber, rx, Arc::clone(&wake), self.linger));
        if let Ok(mut slots) = self.slots.write() {
            slots.push(Slot {
                name,
                tx,
                wake,
                dropped,
            });
        }
    }

    /// Hands `event` to every subscriber without waiting.
    pub fn emit(&self, event: VerbEvent) {
        let event = Arc::new(event);
        let Ok(slots) = self.slots.read() else {
            return;
        };
        for slot in slots.iter() {
            if slot.tx.try_send(Msg::Event(Arc::clone(&event))).is_err() {
                let n = slot.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                if n.is_power_of_two() {
                    tracing::warn!(subscriber = %slot.name, dropped = n, "hook subscriber is not keeping up; events dropped");
                }
            }
        }
    }

    /// Makes every subscriber handle the events it holds now, and waits
    /// until each has (their writes are then queued on the writer).
    pub async fn drain(&self) {
        let senders: Vec<(mpsc::Sender<Msg>, Arc<tokio::sync::Notify>)> = self
            .slots
            .read()
            .map(|s| {
                s.iter()
                    .map(|s| (s.tx.clone(), Arc::clone(&s.wake)))
                    .collect()
            })
            .unwrap_or_default();
        for (tx, wake) in senders {
            let (ack, done) = oneshot::channel();
            if tx.send(Msg::Flush(ack)).await.is_ok() {
                wake.notify_one();
                let _ = done.await;
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

/// A subscriber's task. It wakes for the first event of a batch, sleeps
/// `linger` while later events queue up without waking it, then handles
/// everything queued (up to [`BATCH_MAX`] events) at once: one wake-up and
/// one writer job per batch instead of per event. A flush request (`wake`)
/// cuts the wait short.
async fn serve<S: Subscriber>(
    subscriber: S,
    mut rx: mpsc::Receiver<Msg>,
    wake: Arc<tokio::sync::Notify>,
    linger: std::time::Duration,
) {
    let mut inbox = Vec::with_capacity(BATCH_MAX);
    while rx.recv_many(&mut inbox, BATCH_MAX).await > 0 {
        if !inbox.iter().any(|m| matches!(m, Msg::Flush(_))) {
            tokio::select! {
                () = tokio::time::sleep(linger) => {}
                () = wake.notified() => {}
            }
        }
        while inbox.len() < BATCH_MAX {
            match rx.try_recv() {
                Ok(msg) => inbox.push(msg),
                Err(_) => break,
            }
        }
        let mut events = Vec::with_capacity(inbox.len());
        let mut acks = Vec::new();
        for msg in inbox.drain(..) {
            match msg {
                Msg::Event(e) => events.push(e),
                Msg::Flush(ack) => acks.push(ack),
            }
        }
        if !events.is_empty()
            && let Err(e) = subscriber.handle(events).await
        {
            tracing::warn!(subscriber = subscriber.name(), error = %e, "hook subscriber failed");
        }
        for ack in acks {
            let _ = ack.send(());
        }
    }
}

/// Queues a subscriber's rows on the writer (a call never waits on them).
async fn enqueue(store: &Store, ops: Vec<WriteOp>) -> Result<(), SubscriberError> {
    if ops.is_empty() {
        return Ok(());
    }
    Ok(store.writer().enqueue(ops).await?)
}

/// Load tracking: a `running` row at pre-verb, finished at post-verb. A
/// call whose events all arrive in one batch is written once, finished.
#[derive(Debug)]
pub struct TaskInstances(pub Store);

/// One call's events within a batch that holds its pre-verb.
struct CallRow<'a> {
    pre: &'a VerbEvent,
    post: Option<&'a VerbEvent>,
    error_code: Option<i64>,
}

impl Subscriber for TaskInstances {
    fn name(&self) -> &str {
        "task-instances"
    }

    async fn handle(&self, events: Vec<Arc<VerbEvent>>) -> Result<(), SubscriberError> {
        let mut rows: Vec<CallRow<'_>> = Vec::new();
        let mut row_of: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
        // Events of calls whose row an earlier batch inserted.
        let mut ops = Vec::new();
        for e in &events {
            let known = row_of.get(e.call_id.as_str()).copied();
            match (e.phase, known) {
                (Phase::PreVerb, _) => {
                    row_of.insert(&e.call_id, rows.len());
                    rows.push(CallRow {
                        pre: e,
                        post: None,
                        error_code: None,
                    });
                }
                (Phase::PostVerb, Some(i)) => {
                    if let Some(row) = rows.get_mut(i) {
                        row.post = Some(e);
                    }
                }
                (Phase::VerbError, Some(i)) => {
                    if let Some(row) = rows.get_mut(i) {
                        row.error_code = e.error.as_ref().map(|x| x.code);
                    }
                }
                (Phase::PostVerb, None) => ops.push(a2a_hooks::finish_task(
                    &e.call_id,
                    e.outcome.unwrap_or("failed"),
                    &e.emitted_at,
                    e.duration_ms.unwrap_or_default(),
                )),
                (Phase::VerbError, None) => ops.push(a2a_hooks::set_task_error(
                    &e.call_id,
                    e.error.as_ref().map(|x| x.code).unwrap_or_default(),
                )),
            }
        }
        for row in rows {
            let e = row.pre;
            let status = match row.post {
                Some(post) => post.outcome.unwrap_or("failed"),
                None if e.context.denied => "denied",
                None => "running",
            };
            ops.push(a2a_hooks::insert_task(&a2a_hooks::TaskInstance {
                id: &e.call_id,
                org_id: &e.org_id,
                agent_card_id: &e.agent_card_id,
                verb: &e.verb,
                skill_id: &e.skill_id,
                session_id: &e.session_id,
                status,
                started_at: &e.emitted_at,
                finished_at: row.post.map(|p| p.emitted_at.as_str()),
                duration_ms: row.post.and_then(|p| p.duration_ms),
                error_code: row.error_code,
            }));
        }
        enqueue(&self.0, ops).await
    }
}

/// Audit: every event, as emitted.
#[derive(Debug)]
pub struct AuditRecords(pub Store);

impl Subscriber for AuditRecords {
    fn name(&self) -> &str {
        "audit"
    }

    async fn handle(&self, events: Vec<Arc<VerbEvent>>) -> Result<(), SubscriberError> {
        let mut ops = Vec::with_capacity(events.len());
        for e in events {
            let json = serde_json::to_string(&*e)?;
            ops.push(a2a_hooks::insert_event(a2a_hooks::HookEvent {
                call_id: &e.call_id,
                org_id: &e.org_id,
                phase: e.phase.as_str(),
                verb: &e.verb,
                event: json,
                emitted_at: &e.emitted_at,
            }));
        }
        enqueue(&self.0, ops).await
    }
}

/// Cost: one row per finished call with its duration and bytes.
#[derive(Debug)]
pub struct CostEvents(pub Store);

impl Subscriber for CostEvents {
    fn name(&self) -> &str {
        "cost"
    }

    async fn handle(&self, events: Vec<Arc<VerbEvent>>) -> Result<(), SubscriberError> {
        let ops: Vec<WriteOp> = events
            .iter()
            .filter(|e| e.phase == Phase::PostVerb)
            .map(|e| {
                let (sent, received) = e.bytes.unwrap_or((0, 0));
                a2a_hooks::insert_cost(&a2a_hooks::CostEvent {
                    call_id: &e.call_id,
                    org_id: &e.org_id,
                    agent_card_id: &e.agent_card_id,
                    verb: &e.verb,
                    session_id: &e.session_id,
                    outcome: e.outcome.unwrap_or("failed"),
                    duration_ms: e.duration_ms.unwrap_or_default(),
                    request_bytes: sent,
                    response_bytes: received,
                    emitted_at: &e.emitted_at,
                })
            })
            .collect();
        enqueue(&self.0, ops).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records the size of every batch it handles.
    struct Batches(Arc<std::sync::Mutex<Vec<usize>>>);

    impl Subscriber for Batches {
        fn name(&self) -> &str {
            "batches"
        }

        async fn handle(&self, events: Vec<Arc<VerbEvent>>) -> Result<(), SubscriberError> {
            if let Ok(mut b) = self.0.lock() {
                b.push(events.len());
            }
            Ok(())
        }
    }

    fn event(call_id: &str) -> VerbEvent {
        VerbEvent {
            phase: Phase::PreVerb,
            verb: "p.s".into(),
            legacy_alias: "a2a_p_s".into(),
            org_id: "o".into(),
            agent_card_id: "c".into(),
            agent_url: "http://peer/rpc".into(),
            skill_id: "s".into(),
            session_id: "sess".into(),
            args: Value::Null,
            emitted_at: "2026-01-01T00:00:00.000Z".into(),
            call_id: call_id.into(),
            context: EventContext {
                denied: false,
                decision_id: "d".into(),
            },
            duration_ms: None,
            outcome: None,
            error: None,
            bytes: None,
        }
    }

    #[tokio::test]
    async fn a_window_of_events_is_one_batch_and_drain_hands_over_what_is_held() {
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let bus = HookBus::with_linger(std::time::Duration::from_millis(200));
        bus.subscribe(Batches(Arc::clone(&seen)), 64);
        for i in 0..5 {
            bus.emit(event(&format!("call-{i}")));
        }
        tokio::time::sleep(std::time::Duration::from_millis(600)).await;
        assert_eq!(*seen.lock().unwrap(), vec![5], "one batch for the window");

        // Drain hands over what is held without waiting out the window.
        let slow = HookBus::with_linger(std::time::Duration::from_secs(60));
        slow.subscribe(Batches(Arc::clone(&seen)), 64);
        slow.emit(event("late"));
        tokio::time::timeout(std::time::Duration::from_secs(10), slow.drain())
            .await
            .expect("drain did not wait for the 60 s window");
        assert_eq!(*seen.lock().unwrap(), vec![5, 1]);
    }
}
