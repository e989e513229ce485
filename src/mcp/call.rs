//! The session prelude every MCP route shares after admission, and the
//! request it produces. [`resolve`] authenticates the bearer key, loads the
//! session view, checks tenant isolation, spends the cost of the body's
//! first element from the rate limits (before any Cedar decision or
//! durable write: a refused request is cheap; [`charge`] spends the rest
//! of the request's work as it comes) and decides `access_session`;
//! the resulting [`Call`] is what every method handler works with: the
//! policy set the request decides under, the session view, the protocol
//! version that shapes results, and the request's pending records.
//!
//! `Call` is also the public decision seam: benchmarks and tests resolve a
//! call and drive the same methods the endpoint does.
//!
//! **Architecture Invariant:** every decision of a request goes through
//! [`Call::decide`] (so through `audit::decide`) or, for a `tools/list`,
//! through [`Call::tool_list`] (one record for the list), and its records reach
//! the writer either with the request's next durable commit or, at the
//! latest, when the request ends ([`Call::flush_deferred`]). The one
//! exception authorizes nothing: a step-up's hypothetical re-decision of a
//! deny with scopes the token lacks (`step_up`), which only shapes the
//! answer to that recorded deny.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::HeaderMap;

use super::credential::{self, Caller};
use super::error::{McpError, RateRefusal, StepUpRefusal};
use super::jsonrpc::Message;
use super::{cost, protocol, step_up};
use crate::audit::tool_list::ToolListGuard;
use crate::audit::{self, Decided, Scope};
use crate::gateway::{Gateway, ResolveError, SessionView};
use crate::identity::person::Person;
use crate::policy::entities::{self, KeyFacts};
use crate::policy::{Action, Kind, PolicyBundle, PreparedContext, Uid};
use crate::rate_limits::{Limited, Subjects};
use crate::store::WriteOp;
use crate::store::decisions::NewDecision;
use crate::store::tenants::ApiKey;
use crate::tools::Invocation;

/// Where a request arrived: its gateway session, and the path of the MCP
/// endpoint the client used (the resource an access token must name).
#[derive(Debug, Clone)]
pub struct Target {
    /// The gateway session.
    pub session_id: String,
    /// `/api/mcp/{sessionId}`, or a person's `/mcp/{org}/{project}`.
    pub path: String,
    /// The person a person's URL already authenticated (their token checked
    /// against that URL), so the prelude does not check it again.
    pub person: Option<Arc<Person>>,
}

/// Who a request's credential turned out to be.
enum Resolved {
    Key(ApiKey),
    Person(Arc<Person>),
}

impl Target {
    /// The session's own endpoint, `/api/mcp/{sessionId}`.
    pub fn session(session_id: &str) -> Target {
        Target {
            session_id: session_id.to_string(),
            path: format!("/api/mcp/{session_id}"),
            person: None,
        }
    }
}

/// What one HTTP request resolved to.
#[derive(Debug)]
pub struct Call {
    /// Shared gateway state.
    pub gw: Arc<Gateway>,
    /// The policy set this request decides under (loaded once, so a reload
    /// mid-request cannot mix two sets).
    pub bundle: Arc<PolicyBundle>,
    /// The session view (tenant rows, tools, entity slice).
    pub view: Arc<SessionView>,
    /// The person calling, for a token-authenticated request: their token's
    /// facts and `jti` are this request's (the view is shared by every
    /// token of theirs).
    pub person: Option<Arc<Person>>,
    /// Where the request arrived.
    pub target: Target,
    /// Protocol version governing result shapes.
    pub version: String,
    /// Time of the request (all its decisions share it).
    pub time: String,
    /// The Cedar context of in-session decisions, prepared once.
    pub context: PreparedContext,
    /// Records (and other writes) of this request not yet handed to the
    /// writer: they travel with the request's next durable commit, or are
    /// queued when the request ends, so a request costs one writer job.
    pending: Mutex<Vec<WriteOp>>,
    /// Pending writes of the messages already answered, stamped with
    /// their messages' trace context (never stamped again).
    sealed: Mutex<Vec<WriteOp>>,
    /// The caller's W3C trace context, written into the `notes` of every
    /// decision record of the request.
    pub trace: Option<TraceContext>,
    /// The client capabilities a 2026-07-28 request declared in its
    /// `_meta` (`None` for older revisions, which declare them at
    /// `initialize`): handed to adapters fronting other MCP servers.
    pub capabilities: Option<serde_json::Map<String, serde_json::Value>>,
    /// The trace context of the message being answered, when a legacy
    /// body's message carries its own (see [`Call::enter_message`]).
    message_trace: Mutex<Option<TraceContext>>,
    /// The protected-resource metadata URL of the endpoint the client
    /// used, for a token-authenticated request (its step-up challenges).
    pub resource_metadata: Option<String>,
    /// The step-ups of the messages answered so far (merged): a legacy
    /// body holding one answers 403 with its challenge.
    step_up: Mutex<Option<StepUpRefusal>>,
    /// The ids of the span of the message being answered (sampled only),
    /// noted in its records as `traceId` and `spanId`.
    span_ids: Mutex<Option<crate::telemetry::SpanIds>>,
    /// Spans of decisions whose records are not committed yet (export on).
    decision_spans: Mutex<Vec<crate::telemetry::DecisionSpan>>,
}

/// A caller's W3C trace context (`traceparent`, `tracestate`), already
/// checked for its format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    /// `version-traceid-parentid-flags`.
    pub traceparent: String,
    /// The vendor list, when the caller sent a well-formed one.
    pub tracestate: Option<String>,
}

impl TraceContext {
    /// The parent of a span continuing this context.
    pub fn parent(&self) -> crate::telemetry::Parent<'_> {
        crate::telemetry::Parent {
            traceparent: &self.traceparent,
            tracestate: self.tracestate.as_deref(),
        }
    }

    /// `notes` (a JSON object or `null`) with the trace context added,
    /// unless they already carry one.
    pub fn noted(&self, notes: &str) -> String {
        let mut fields = vec![("traceparent", self.traceparent.as_str())];
        if let Some(state) = &self.tracestate {
            fields.push(("tracestate", state.as_str()));
        }
        audit::notes::stamped(notes, &fields)
    }
}

/// Notes the `jti` of a person's token in each decision record of `ops`
/// (`notes.jti`): the record names the token it was decided for, never the
/// token itself.
pub fn stamp_jti(jti: &str, ops: &mut [WriteOp]) {
    for op in ops {
        if let WriteOp::Decision(record) = op {
            record.notes = audit::notes::stamped(&record.notes, &[("jti", jti)]);
        }
    }
}

impl Call {
    /// Notes that a message of this request was answered with a step-up.
    pub fn note_step_up(&self, refusal: &StepUpRefusal) {
        if let Ok(mut noted) = self.step_up.lock() {
            match noted.as_mut() {
                Some(first) => first.merge(refusal),
                None => *noted = Some(refusal.clone()),
            }
        }
    }

    /// The step-up of the messages answered, if any (merged).
    pub fn take_step_up(&self) -> Option<StepUpRefusal> {
        self.step_up.lock().ok().and_then(|mut s| s.take())
    }

    /// Adds writes that need not be durable before the next answer.
    pub fn defer(&self, ops: impl IntoIterator<Item = WriteOp>) {
        if let Ok(mut p) = self.pending.lock() {
            p.extend(ops);
        }
    }

    /// Everything deferred so far followed by `ops`, in order, each record
    /// stamped with its message's trace context and the open message's
    /// preludes folded.
    fn take_pending(&self, ops: Vec<WriteOp>) -> Vec<WriteOp> {
        let mut all = self.take_sealed();
        let mut open = self.take_open();
        open.extend(ops);
        all.extend(self.marked(open));
        all
    }

    /// The writes of the messages already answered (stamped and folded).
    fn take_sealed(&self) -> Vec<WriteOp> {
        self.sealed
            .lock()
            .map(|mut s| std::mem::take(&mut *s))
            .unwrap_or_default()
    }

    /// The writes of the message being answered, as deferred.
    fn take_open(&self) -> Vec<WriteOp> {
        self.pending
            .lock()
            .map(|mut p| std::mem::take(&mut *p))
            .unwrap_or_default()
    }

    /// One message's writes, each record marked with the current trace
    /// context and the person's `jti`, and its prelude decisions folded
    /// into its next record ([`audit::prelude`]).
    ///
    /// Records are marked before the fold: a record's notes are small until
    /// its preludes are folded in (the fold keeps what they held), and
    /// marking a record that carries them cost a person's `tools/call` more
    /// than deciding it. Preludes that stay rows of their own are marked
    /// after it.
    fn marked(&self, mut ops: Vec<WriteOp>) -> Vec<WriteOp> {
        self.mark(&mut ops, |r| !audit::prelude::is_prelude(r));
        let mut ops = self.folded(ops);
        self.mark(&mut ops, |r| r.notes == "null");
        ops
    }

    /// The ops' prelude decisions folded, except while shadow mode runs:
    /// a divergence names each live decision by the id of its own row.
    fn folded(&self, ops: Vec<WriteOp>) -> Vec<WriteOp> {
        if self.bundle.hooks.observer().is_some_and(|o| o.redecides()) {
            return ops;
        }
        audit::prelude::fold(ops)
    }

    /// Stamps the current trace context (the message's, else the
    /// request's) and the person's `jti` on the records `which` picks.
    fn mark(&self, ops: &mut [WriteOp], which: impl Fn(&NewDecision) -> bool) {
        let message = self.message_trace.lock().ok().and_then(|t| t.clone());
        let trace = message.as_ref().or(self.trace.as_ref());
        let jti = self.person.as_ref().and_then(|p| p.jti.as_deref());
        let span = self.span_ids.lock().ok().and_then(|s| s.clone());
        for op in ops {
            let WriteOp::Decision(record) = op else {
                continue;
            };
            if !which(record) {
                continue;
            }
            if let Some(trace) = trace {
                record.notes = trace.noted(&record.notes);
            }
            if let Some(span) = &span {
                let ids = [
                    ("traceId", span.trace_id.as_str()),
                    ("spanId", span.span_id.as_str()),
                ];
                record.notes = audit::notes::stamped(&record.notes, &ids);
            }
            if let Some(jti) = jti {
                record.notes = audit::notes::stamped(&record.notes, &[("jti", jti)]);
            }
        }
    }

    /// Starts answering one message of a legacy body that carries its own
    /// trace context (or none): the records still pending belong to the
    /// messages before it, so they are stamped with theirs first. A batch's
    /// messages may belong to different traces; each record keeps its own.
    ///
    /// The request's own prelude decisions still waiting (its
    /// `access_session`) stay pending for the message's record
    /// ([`audit::prelude`]) when that record carries the trace context
    /// they would have been stamped with.
    pub fn enter_message(&self, trace: Option<TraceContext>) {
        let mut before = self.take_open();
        let same_trace = self
            .message_trace
            .lock()
            .map(|current| {
                current.as_ref().or(self.trace.as_ref()) == trace.as_ref().or(self.trace.as_ref())
            })
            .unwrap_or(false);
        let carried = if same_trace {
            let waiting = audit::prelude::waiting_at_end(&before);
            before.split_off(before.len() - waiting)
        } else {
            Vec::new()
        };
        let before = self.marked(before);
        if let Ok(mut sealed) = self.sealed.lock() {
            sealed.extend(before);
        }
        self.defer(carried);
        if let Ok(mut current) = self.message_trace.lock() {
            *current = trace;
        }
    }

    /// The digest of the request's token (`""` for a key): a listing
    /// repeats only one decided with the same token's facts.
    fn token_digest(&self) -> &str {
        self.person.as_ref().map_or("", |p| p.token.digest())
    }

    /// Defers a `tools/list` record, unless it repeats the session's last
    /// recorded listing ([`audit::repeated_listing`]): then neither it nor
    /// the request's decisions waiting to ride in it are written.
    pub fn record_listing(&self, record: NewDecision) {
        let every = Duration::from_secs(self.gw.config.audit.listing_record_secs);
        let Ok(mut open) = self.pending.lock() else {
            return;
        };
        let preludes: Vec<&NewDecision> = open
            .iter()
            .filter_map(|op| match op {
                WriteOp::Decision(d) => Some(&**d),
                _ => None,
            })
            .collect();
        let only_preludes = audit::prelude::waiting_at_end(&open) == open.len();
        let repeat = only_preludes
            && self.view.listings.is_repeat(
                &self.bundle,
                (&record, self.token_digest()),
                &preludes,
                every,
            );
        if repeat {
            open.clear();
            self.gw.lifecycle.metrics.listings_repeated.inc();
            return;
        }
        open.push(WriteOp::Decision(Box::new(record)));
    }

    /// Commits `ops` together with everything deferred so far, and waits
    /// until it is durable; a failed commit is -32603.
    pub async fn commit(&self, ops: Vec<WriteOp>) -> Result<(), McpError> {
        let all = self.take_pending(ops);
        if !self.gw.telemetry.is_on() {
            return self.gw.store.writer().submit(all).await.map_err(|e| {
                tracing::error!(error = %e, "internal error");
                McpError::Internal
            });
        }
        let ids: Vec<String> = all
            .iter()
            .filter_map(|op| match op {
                WriteOp::Decision(d) => Some(d.id.clone()),
                _ => None,
            })
            .collect();
        let span = crate::telemetry::commit_span(ids.len(), self.gw.store.backend_name());
        let committed = self.gw.store.writer().submit_chained(all).await;
        if let Some(span) = span {
            let outcome = committed
                .as_ref()
                .map(|seq| *seq)
                .map_err(|_| "commit failed");
            span.done(outcome, ids.len());
        }
        let first = committed.as_ref().ok().copied().flatten();
        self.finish_decision_spans(&ids, first);
        committed.map(drop).map_err(|e| {
            tracing::error!(error = %e, "internal error");
            McpError::Internal
        })
    }

    /// Queues whatever is still deferred (end of request).
    pub async fn flush_deferred(&self) {
        let rest = self.take_pending(Vec::new());
        self.finish_decision_spans(&[], None);
        if !rest.is_empty()
            && let Err(e) = self.gw.store.writer().enqueue(rest).await
        {
            tracing::error!(error = %e, "cannot queue decision records");
        }
    }

    /// Decides one request of this session and prepares its record.
    pub fn decide(
        &self,
        principal: &Uid,
        action: Action,
        resource: &Uid,
        context: &PreparedContext,
    ) -> Decided {
        self.decide_in(&self.view.slice, principal, action, resource, context)
    }

    /// [`Call::decide`] against `slice` (the session's plus entities of
    /// this request, such as an upstream resource).
    pub fn decide_in(
        &self,
        slice: &crate::policy::entities::EntitySlice,
        principal: &Uid,
        action: Action,
        resource: &Uid,
        context: &PreparedContext,
    ) -> Decided {
        let session = &self.view.tenant.session;
        let started = self.gw.telemetry.is_on().then(std::time::SystemTime::now);
        let decided = audit::decide(
            &self.bundle,
            slice,
            principal,
            action,
            resource,
            context,
            Scope {
                org_id: Some(&session.org_id),
                session_id: Some(&session.id),
            },
            &self.time,
        );
        if let Some(started) = started {
            self.trace_decision(started, &decided);
        }
        decided
    }

    /// Starts the span of a decision just made (export on); it is
    /// exported once its record is committed.
    fn trace_decision(&self, started: std::time::SystemTime, decided: &Decided) {
        let facts = crate::telemetry::DecisionFacts {
            action: &decided.record.action,
            allowed: decided.allowed(),
            policy_ids: &decided.verdict.reasons,
            errors: decided.verdict.errors.len(),
            policy_hash: &decided.record.policy_hash,
            record_id: decided.id(),
        };
        if let Some(span) = crate::telemetry::decision_span(started, &facts)
            && let Ok(mut spans) = self.decision_spans.lock()
        {
            spans.push(span);
        }
    }

    /// Ends the pending decision spans: those whose records are among
    /// `committed` (ids in chain order from `first_seq`) with their
    /// sequence numbers, the others (folded into another record, or
    /// queued without a durable commit) without.
    fn finish_decision_spans(&self, committed: &[String], first_seq: Option<i64>) {
        let spans = self
            .decision_spans
            .lock()
            .map(|mut s| std::mem::take(&mut *s))
            .unwrap_or_default();
        for span in spans {
            let seq = first_seq.and_then(|first| {
                let at = committed.iter().position(|id| id == span.record_id())?;
                Some(first + at as i64)
            });
            span.finish(seq);
        }
    }

    /// Notes the span of the message about to be answered (its ids go
    /// into the message's records).
    pub fn enter_span(&self, ids: Option<crate::telemetry::SpanIds>) {
        if let Ok(mut current) = self.span_ids.lock() {
            *current = ids;
        }
    }

    /// The guard deciding one `tools/list`'s `view_tool` decisions into
    /// one record.
    pub fn tool_list(&self) -> ToolListGuard<'_> {
        let session = &self.view.tenant.session;
        ToolListGuard::new(
            &self.bundle,
            &self.view.slice,
            self.agent_uid(),
            &self.context,
            Scope {
                org_id: Some(&session.org_id),
                session_id: Some(&session.id),
            },
            &self.time,
        )
    }

    /// The principal of the request's tool decisions: the person calling
    /// (a token-authenticated request), else the session's agent.
    pub fn agent_uid(&self) -> Uid {
        match &self.person {
            Some(person) => person.user.uid(),
            None => Kind::Agent.uid(&self.view.tenant.agent.id),
        }
    }

    /// The principal of the request's `access_session`: the person, else
    /// the daemon key.
    pub fn caller_uid(&self) -> Uid {
        match &self.person {
            Some(person) => person.user.uid(),
            None => Kind::ApiKey.uid(&self.view.key.id),
        }
    }

    /// Whose calls the agent-level rate limits and `context.usage` count:
    /// the person's (every person's session has the same agent), else the
    /// session's agent's.
    pub fn actor_id(&self) -> &str {
        match &self.person {
            Some(_) => &self.view.key.id,
            None => &self.view.tenant.agent.id,
        }
    }

    /// What tool adapters see of this request.
    pub fn invocation(&self) -> Invocation<'_> {
        Invocation {
            tenant: &self.view.tenant,
            store: &self.gw.store,
            graphs: &self.gw.graphs,
            bundle: &self.bundle,
            slice: &self.view.slice,
            context: &self.context,
            time: &self.time,
        }
    }
}

/// Authenticates, checks the disk-space guard, loads the session, checks
/// isolation, spends the cost of the first of `messages` (the request's
/// body; none for a `DELETE`) from the rate limits and decides
/// `access_session`;
/// `header_version` is what
/// admission read.
pub async fn resolve(
    gw: &Arc<Gateway>,
    target: &Target,
    headers: &HeaderMap,
    header_version: Option<String>,
    messages: &[Message],
) -> Result<Call, McpError> {
    let call = prepare(gw, target, headers, header_version, messages).await?;
    spend(&call, messages).await?;
    admit(&call).await?;
    Ok(call)
}

/// The prelude's steps before any Cedar decision on the session:
/// authenticates the key, loads the session view and checks isolation (a
/// cross-org key is refused and recorded, and spends from its buckets).
/// [`spend`] and [`admit`] (`access_session`) come next; checks that must
/// come before any decision of the session (2026-07-28 header validation)
/// run before them.
pub async fn prepare(
    gw: &Arc<Gateway>,
    target: &Target,
    headers: &HeaderMap,
    header_version: Option<String>,
    messages: &[Message],
) -> Result<Call, McpError> {
    let session_id = target.session_id.as_str();
    // A person's URL already authenticated its caller.
    let caller = match &target.person {
        Some(person) => Resolved::Person(Arc::clone(person)),
        None => match credential::caller(gw, headers, &target.path).await? {
            Caller::Key(key) => Resolved::Key(key),
            Caller::Person(identity) => Resolved::Person(credential::person(gw, &identity)?),
        },
    };
    // Every request of a session records decisions: with the trail's disk
    // below its minimum, refuse before anything is decided or written.
    gw.store
        .space()
        .check()
        .map_err(|low| McpError::InsufficientStorage(low.0))?;
    let bundle = gw.pep.current();
    let time = crate::ids::now_rfc3339();
    let resource_metadata = matches!(caller, Resolved::Person(_))
        .then(|| super::resource_metadata::url_for(gw, headers, &target.path));
    let person = match &caller {
        Resolved::Person(person) => Some(Arc::clone(person)),
        Resolved::Key(_) => None,
    };
    let (view, context) = match caller {
        Resolved::Key(key) => {
            let view = match gw.session_view(session_id, &key, &bundle).await {
                Ok(view) => view,
                Err(ResolveError::CrossOrg(_)) => {
                    let refused = refuse_cross_org(gw, &bundle, (&key, None), session_id, messages);
                    return Err(refused.await);
                }
                Err(e) => return Err(McpError::resolving(e)),
            };
            (view, bundle.prepare_session_context(session_id, &time))
        }
        Resolved::Person(person) => {
            let view = match gw.person_view(session_id, &person, &bundle).await {
                Ok(view) => view,
                Err(ResolveError::CrossOrg(_)) => {
                    let key = crate::gateway::stand_in_key(&person);
                    let caller = (&key, Some(person.as_ref()));
                    return Err(refuse_cross_org(gw, &bundle, caller, session_id, messages).await);
                }
                Err(e) => return Err(McpError::resolving(e)),
            };
            let context =
                bundle.prepare_session_context_with_token(session_id, &time, &person.token);
            (view, context)
        }
    };
    let version = header_version
        .or_else(|| gw.negotiated(&view))
        .unwrap_or_else(|| protocol::DEFAULT_WITHOUT_HEADER.to_string());
    Ok(Call {
        gw: Arc::clone(gw),
        bundle,
        view,
        person,
        target: target.clone(),
        version,
        time,
        context,
        pending: Mutex::new(Vec::new()),
        sealed: Mutex::new(Vec::new()),
        trace: None,
        capabilities: None,
        message_trace: Mutex::new(None),
        resource_metadata,
        step_up: Mutex::new(None),
        span_ids: Mutex::new(None),
        decision_spans: Mutex::new(Vec::new()),
    })
}

/// Spends the cost of the body's first element (`cost::first`; the later
/// ones are charged as they are answered) from the key's, the agent's and
/// the org's buckets. Over one: 429, see [`charge`].
pub async fn spend(call: &Call, messages: &[Message]) -> Result<(), McpError> {
    if !call.gw.rate_limits.enabled() {
        return Ok(());
    }
    charge(
        call,
        cost::first(&call.gw, &call.bundle, &call.view, messages),
    )
    .await
}

/// Spends `cost` tokens of work of this request from the key's, the
/// agent's and the org's buckets (nothing when `cost` is 0). Over one:
/// -32029 (429 for a whole request), and the first refusal of that subject
/// in the recording window is recorded (durably, before the answer) as a
/// denied `access_session` whose outcome says how it was limited; the
/// others write nothing.
pub async fn charge(call: &Call, cost: u32) -> Result<(), McpError> {
    let limits = &call.gw.rate_limits;
    if !limits.enabled() || cost == 0 {
        return Ok(());
    }
    let tenant = &call.view.tenant;
    let who = Subjects {
        org: &tenant.org.id,
        agent: Some(call.actor_id()),
        key: &call.view.key.id,
    };
    let Err(limited) = limits.spend(who, cost).await else {
        return Ok(());
    };
    let decision_id = if limited.first_in_window {
        Some(record_rate_refusal(call, &limited).await?)
    } else {
        None
    };
    Err(rate_limited(&limited, decision_id))
}

/// The 429 answer of a refusal (`decision_id`: its record, if this one
/// was recorded).
fn rate_limited(limited: &Limited, decision_id: Option<String>) -> McpError {
    McpError::RateLimited(Box::new(RateRefusal {
        level: limited.level.name(),
        per_second: limited.bucket.per_second,
        burst: limited.bucket.burst,
        cost: limited.cost,
        retry_after_secs: limited.retry_after_secs,
        decision_id,
    }))
}

/// The rate-limit notes of a refusal's record.
fn rate_notes(gw: &Gateway, limited: &Limited) -> serde_json::Value {
    serde_json::json!({
        "limit": limited.level.name(),
        "subject": limited.subject,
        "perSecond": limited.bucket.per_second,
        "burst": limited.bucket.burst,
        "cost": limited.cost,
        "instances": limited.instances,
        "retryAfterSeconds": limited.retry_after_secs,
        "recordedOncePerSeconds": gw.config.rate_limits.refusal_record_secs,
    })
}

/// Records a rate-limit refusal: Cedar's `access_session` verdict (asked
/// once per subject and window), with outcome
/// `{"status": "denied", "deniedBy": "rate_limit", "limit": <level>}` and
/// the bucket, subject, cost and wait in `notes.rateLimited`.
async fn record_rate_refusal(call: &Call, limited: &Limited) -> Result<String, McpError> {
    let session_id = call.view.tenant.session.id.as_str();
    let mut decided = call.decide(
        &Kind::ApiKey.uid(&call.view.key.id),
        Action::AccessSession,
        &Kind::Session.uid(session_id),
        &call.context,
    );
    decided.record.notes =
        serde_json::json!({ "rateLimited": rate_notes(&call.gw, limited) }).to_string();
    let decision_id = decided.id().to_string();
    let outcome = serde_json::json!({
        "status": "denied",
        "deniedBy": "rate_limit",
        "limit": limited.level.name(),
    });
    if let Err(e) = call
        .commit(vec![WriteOp::Decision(Box::new(decided.finish(outcome)))])
        .await
    {
        tracing::error!(error = ?e, "cannot record a rate-limit refusal");
        return Err(McpError::TrailUnavailable);
    }
    Ok(decision_id)
}

/// Decides `access_session` on the call's session; a denial is answered
/// only once its record is durable.
pub async fn admit(call: &Call) -> Result<(), McpError> {
    let session_id = call.view.tenant.session.id.as_str();
    let (principal, session) = (call.caller_uid(), Kind::Session.uid(session_id));
    let mut decided = call.decide(&principal, Action::AccessSession, &session, &call.context);
    let allowed = decided.allowed();
    let step_up = if allowed {
        None
    } else {
        let denied = step_up::Denied {
            bundle: &call.bundle,
            slice: &call.view.slice,
            person: call.person.as_deref(),
            identities: &call.gw.identities,
            principal: &principal,
            action: Action::AccessSession,
            resource: &session,
        };
        step_up::find(&denied, |token| {
            call.bundle
                .prepare_session_context_with_token(session_id, &call.time, token)
        })
        .map(|s| step_up::refusal(call.resource_metadata.as_deref(), &mut decided, None, s))
    };
    let decision_id = decided.id().to_string();
    let advice = decided.verdict.advice.clone();
    call.defer([WriteOp::Decision(Box::new(decided.finish_default()))]);
    if allowed {
        return Ok(());
    }
    if let Err(e) = call.commit(Vec::new()).await {
        tracing::error!(error = ?e, "cannot record an access denial");
        return Err(McpError::TrailUnavailable);
    }
    if let Some(refusal) = step_up {
        return Err(McpError::StepUp(Box::new(refusal)));
    }
    Err(McpError::AccessDenied {
        decision_id,
        advice,
    })
}

/// Records the refusal of a key on another org's session as a denied
/// `access_session`, durably, then answers 403. The record belongs to the
/// key's org (the caller's trail, not the session owner's) and is decided
/// on a slice holding only the key: nothing of the other org enters it, and
/// any policy reading the session fails closed on the absent entity.
///
/// Such requests spend from the key's and its org's buckets too (one token
/// per element: no session, no tool list), so they cannot fill the trail:
/// over a bucket they answer 429, and only the first refusal of the window
/// is recorded (this same record, its outcome `deniedBy: rate_limit`).
async fn refuse_cross_org(
    gw: &Gateway,
    bundle: &PolicyBundle,
    (key, person): (&ApiKey, Option<&Person>),
    session_id: &str,
    messages: &[Message],
) -> McpError {
    let limited = spend_without_session(gw, key, messages).await;
    if let Some(l) = &limited
        && !l.first_in_window
    {
        return rate_limited(l, None);
    }
    let mut notes = serde_json::json!({
        "reason": "the key's organization does not own this session",
    });
    let mut outcome = None;
    if let Some(l) = &limited {
        notes["rateLimited"] = rate_notes(gw, l);
        outcome = Some(serde_json::json!({
            "status": "denied", "deniedBy": "rate_limit", "limit": l.level.name(),
        }));
    }
    let refusal = Refusal {
        session_id,
        in_session: false,
        refused_by: "tenant_isolation",
        notes,
        outcome,
        trace: None,
        person,
    };
    match record_refusal(gw, bundle, key, refusal).await {
        Ok(decision_id) => match limited {
            Some(l) => rate_limited(&l, Some(decision_id)),
            None => McpError::NotOwnSession {
                session_id: session_id.to_string(),
                decision_id,
            },
        },
        Err(e) => e,
    }
}

/// A request refused before any decision of its session, to be recorded
/// as a denied `access_session`.
#[derive(Debug)]
pub struct Refusal<'a> {
    /// The session of the path.
    pub session_id: &'a str,
    /// Whether the record belongs to the session's trail (the key's org
    /// owns it) or only to the key's org (a cross-org refusal).
    pub in_session: bool,
    /// `notes.refusedBy` and, by default, `outcome.deniedBy`.
    pub refused_by: &'static str,
    /// Further notes (an object).
    pub notes: serde_json::Value,
    /// The outcome, when not `{"status": "denied", "deniedBy": refused_by}`.
    pub outcome: Option<serde_json::Value>,
    /// The caller's trace context.
    pub trace: Option<&'a TraceContext>,
    /// The person calling, for a token-authenticated request (the record's
    /// principal; `key` is their stand-in).
    pub person: Option<&'a Person>,
}

/// Records a refusal durably and returns its decision id. The record is
/// decided on a slice holding only the key: nothing of the session, and
/// nothing the caller sent, enters it, so any policy reading the session
/// fails closed; the refusal itself is enforced in code whatever a policy
/// says, and the record carries Cedar's verdict.
pub async fn record_refusal(
    gw: &Gateway,
    bundle: &PolicyBundle,
    key: &ApiKey,
    refusal: Refusal<'_>,
) -> Result<String, McpError> {
    let time = crate::ids::now_rfc3339();
    let session_id = refusal.session_id;
    let (slice, principal, context) = match refusal.person {
        Some(person) => (
            entities::user_slice(bundle, &person.user),
            person.user.uid(),
            bundle.prepare_session_context_with_token(session_id, &time, &person.token),
        ),
        None => {
            let facts = KeyFacts {
                org_id: &key.org_id,
                id: &key.id,
                label: &key.label,
            };
            (
                entities::key_slice(bundle, &facts),
                Kind::ApiKey.uid(&key.id),
                bundle.prepare_session_context(session_id, &time),
            )
        }
    };
    let slice = slice.map_err(|e| McpError::resolving(ResolveError::Entities(e)))?;
    let mut decided = audit::decide(
        bundle,
        &slice,
        &principal,
        Action::AccessSession,
        &Kind::Session.uid(session_id),
        &context,
        Scope {
            org_id: Some(&key.org_id),
            session_id: refusal.in_session.then_some(session_id),
        },
        &time,
    );
    let mut notes = match refusal.notes {
        serde_json::Value::Object(map) => map,
        _ => serde_json::Map::new(),
    };
    notes.insert("refusedBy".into(), refusal.refused_by.into());
    decided.record.notes = serde_json::Value::Object(notes).to_string();
    if let Some(trace) = refusal.trace {
        decided.record.notes = trace.noted(&decided.record.notes);
    }
    let decision_id = decided.id().to_string();
    let outcome = refusal.outcome.unwrap_or_else(
        || serde_json::json!({ "status": "denied", "deniedBy": refusal.refused_by }),
    );
    let op = WriteOp::Decision(Box::new(decided.finish(outcome)));
    if let Err(e) = gw.store.writer().submit(vec![op]).await {
        tracing::error!(error = %e, refused_by = refusal.refused_by, "cannot record a refusal");
        return Err(McpError::TrailUnavailable);
    }
    Ok(decision_id)
}

/// Spends a request that reached no session of its org from the key's and
/// the org's buckets: one token per element.
async fn spend_without_session(
    gw: &Gateway,
    key: &ApiKey,
    messages: &[Message],
) -> Option<Limited> {
    let who = Subjects {
        org: &key.org_id,
        agent: None,
        key: &key.id,
    };
    let cost = u32::try_from(messages.len().max(1)).unwrap_or(u32::MAX);
    gw.rate_limits.spend(who, cost).await.err()
}
