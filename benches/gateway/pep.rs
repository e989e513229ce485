//! Section 1 of the gateway bench: the policy enforcement point
//! in-process. The headline is one `tools/call` decision as the endpoint
//! makes it (decide, finish the record, enqueue it for the group-commit
//! writer); the breakdown times each piece of that decision and of the
//! request work around it, down to the Cedar calls.
//!
//! Requests are resolved and decided through the endpoint's own public
//! seam (`mcp::call::resolve`, `Call::decide`, `mcp::tools_list`), so the
//! bench measures the code that serves requests; only the breakdown of a
//! Cedar decision reaches `cedar_policy` directly.

use std::sync::Arc;
use std::time::Instant;

use crate::support::Res;
use crate::support::stats::Stats;
use axum::http::{HeaderMap, HeaderValue, header};
use cedar_policy::{Authorizer, Context, Request, RestrictedExpression};
use cedargate::audit::{self, Decided, Scope};
use cedargate::gateway::{Gateway, SessionView};
use cedargate::mcp::call::{Call, Target, resolve};
use cedargate::mcp::jsonrpc::{self, Answer, Reply};
use cedargate::mcp::tools_list::tools_list;
use cedargate::policy::entities::session_context;
use cedargate::policy::{Action, Kind, PreparedContext, Uid};
use cedargate::store::WriteOp;
use serde_json::{Value, json};

use crate::report::{Goal, Row, thousands};
use crate::{ORG, PART_ITERS, PEP_ITERS, RECALL_QUERY, THREADS, WARMUP, stats};

/// The `tools/list` response body the endpoint writes for a result.
fn list_body(result: String) -> String {
    jsonrpc::body(&[Answer::of(json!(1), Ok(Reply::Text(result)))], false)
}

/// The headers of a request with the bench key.
fn bearer(secret: &str) -> Res<HeaderMap> {
    let mut headers = HeaderMap::new();
    headers.insert(
        header::AUTHORIZATION,
        HeaderValue::from_str(&format!("Bearer {secret}"))?,
    );
    Ok(headers)
}

/// A request of the bench session, resolved by the endpoint's prelude
/// (key, session view, isolation, `access_session`).
async fn call(gw: &Arc<Gateway>, headers: &HeaderMap, session_id: &str) -> Res<Call> {
    resolve(gw, &Target::session(session_id), headers, None, &[])
        .await
        .map_err(|e| e.to_string().into())
}

pub struct Pep {
    /// The resolved request the decisions are made in.
    pub call: Call,
    principal: Uid,
    resource: Uid,
    context: Value,
    /// The context as the gateway prepares it: parsed once per request.
    prepared: PreparedContext,
}

impl Pep {
    pub async fn new(gw: &Arc<Gateway>, secret: &str, session_id: &str, tool: &str) -> Res<Pep> {
        let call = call(gw, &bearer(secret)?, session_id).await?;
        call.flush_deferred().await;
        let (bundle, time) = (&call.bundle, &call.time);
        // A tools/call decision: the typed action of the tool, with its
        // arguments in `context.args`, as the endpoint prepares it.
        let args = if tool == "af_memory_remember" {
            json!({ "content": "the retry backoff doubles up to 30 s", "type": "constraint", "confidence": 0.9 })
        } else {
            json!({ "query": RECALL_QUERY, "workType": "bug_fix" })
        };
        let prepared = bundle.prepare_tool_context(Action::CallTool, tool, session_id, time, &args);
        let pep = Pep {
            principal: call.agent_uid(),
            resource: Kind::Tool.uid(tool),
            context: prepared.json().clone(),
            prepared,
            call,
        };
        if !pep.decide().allowed() {
            return Err(format!("the bench decision (call_tool {tool}) was denied").into());
        }
        Ok(pep)
    }

    /// One `tools/call` decision, as the endpoint makes it.
    pub fn decide(&self) -> Decided {
        self.call.decide(
            &self.principal,
            Action::CallTool,
            &self.resource,
            &self.prepared,
        )
    }

    /// The session view of the request.
    pub fn view(&self) -> &Arc<SessionView> {
        &self.call.view
    }
}

/// Times `f` per iteration, after a warm-up.
fn time_sync(iters: usize, mut f: impl FnMut()) -> Stats {
    for _ in 0..WARMUP {
        f();
    }
    let mut v = Vec::with_capacity(iters);
    for _ in 0..iters {
        let t0 = Instant::now();
        f();
        v.push(t0.elapsed());
    }
    stats(v)
}

/// The headline's decide + record + enqueue with the session's verdict
/// memo emptied before each decision, so Cedar evaluates every one: what a
/// session's first call of each tool, and every call under a shadow
/// candidate, costs. Emptying the memo is a lock and a reset, inside the
/// figure.
async fn cold_decisions(pep: &Pep, writer: &cedargate::store::Writer) -> Res<Stats> {
    let memo = &pep.view().slice.verdicts;
    let mut v = Vec::with_capacity(PEP_ITERS);
    for _ in 0..PEP_ITERS {
        let t0 = Instant::now();
        memo.forget();
        let decided = pep.decide();
        writer
            .enqueue(vec![WriteOp::Decision(Box::new(decided.finish_default()))])
            .await?;
        v.push(t0.elapsed());
    }
    writer.flush().await?;
    Ok(stats(v))
}

pub struct PepReport {
    pub rows: Vec<Row>,
    pub parts: Vec<(String, Stats)>,
    pub lines: Vec<String>,
}

pub async fn pep_section(gw: &Arc<Gateway>, secret: &str, session_id: &str) -> Res<PepReport> {
    let pep = Pep::new(gw, secret, session_id, "af_memory_recall").await?;
    let (bundle, view) = (Arc::clone(&pep.call.bundle), Arc::clone(pep.view()));
    let time = pep.call.time.clone();
    let writer = gw.store.writer().clone();
    let mark = THREADS.mark();

    // Headline: decide + record + enqueue, as the MCP endpoint does it.
    for _ in 0..WARMUP {
        let record = pep.decide().finish_default();
        writer
            .enqueue(vec![WriteOp::Decision(Box::new(record))])
            .await?;
    }
    writer.flush().await?;
    let mut v = Vec::with_capacity(PEP_ITERS);
    for _ in 0..PEP_ITERS {
        let t0 = Instant::now();
        let decided = pep.decide();
        writer
            .enqueue(vec![WriteOp::Decision(Box::new(decided.finish_default()))])
            .await?;
        v.push(t0.elapsed());
    }
    writer.flush().await?;
    let headline = stats(v);
    let cold = cold_decisions(&pep, &writer).await?;
    let decide_only = time_sync(PEP_ITERS, || {
        std::hint::black_box(pep.decide());
    });
    let rows = vec![
        Row {
            label: "PEP: audit::decide + finish + writer.enqueue, verdict remembered".into(),
            conc: None,
            lat: headline,
            rps: None,
            errors: 0,
            goal: Goal::None,
        },
        Row {
            label: "PEP: the same, cold (Cedar decides; nothing remembered)".into(),
            conc: None,
            lat: cold,
            rps: None,
            errors: 0,
            goal: Goal::P50AtMost(20.0),
        },
        Row {
            label: "PEP: audit::decide alone".into(),
            conc: None,
            lat: decide_only,
            rps: None,
            errors: 0,
            goal: Goal::None,
        },
    ];

    // Where one decision's time goes.
    // The typed action of the tool (one per tool inside `call_tool`).
    let action_uid: cedar_policy::EntityUid = r#"Gateway::Action::"af_memory_recall""#.parse()?;
    let principal = cedar_policy::EntityUid::from(pep.principal.clone());
    let resource = cedar_policy::EntityUid::from(pep.resource.clone());
    let entities = &view.slice.entities;
    let schema_ctx = Some((&bundle.schema, &action_uid));
    let mut parts = Vec::new();
    parts.push((
        "PolicyBundle::prepare_session_context (once per MCP request)".to_string(),
        time_sync(PART_ITERS, || {
            std::hint::black_box(bundle.prepare_session_context(session_id, &time));
        }),
    ));
    let recall_args = json!({ "query": RECALL_QUERY, "workType": "bug_fix" });
    parts.push((
        "PolicyBundle::prepare_tool_context (typed tools/call context with args)".to_string(),
        time_sync(PART_ITERS, || {
            std::hint::black_box(bundle.prepare_tool_context(
                Action::CallTool,
                "af_memory_recall",
                session_id,
                &time,
                &recall_args,
            ));
        }),
    ));
    let remember_args =
        json!({ "content": "the retry backoff doubles up to 30 s", "confidence": 0.9 });
    parts.push((
        "PolicyBundle::prepare_tool_context (remember: a `decimal` in args)".to_string(),
        time_sync(PART_ITERS, || {
            std::hint::black_box(bundle.prepare_tool_context(
                Action::CallTool,
                "af_memory_remember",
                session_id,
                &time,
                &remember_args,
            ));
        }),
    ));
    parts.push((
        "  RestrictedExpression::new_datetime (parses the name `datetime` per call)".to_string(),
        time_sync(PART_ITERS, || {
            std::hint::black_box(RestrictedExpression::new_datetime(&time));
        }),
    ));
    parts.push((
        "  RestrictedExpression::new_decimal (parses the name `decimal` per call)".to_string(),
        time_sync(PART_ITERS, || {
            std::hint::black_box(RestrictedExpression::new_decimal("0.9000"));
        }),
    ));
    parts.push((
        "PolicyBundle::prepare_context (JSON path, as create_session uses it)".to_string(),
        time_sync(PART_ITERS, || {
            std::hint::black_box(bundle.prepare_context(Action::CallTool, pep.context.clone()));
        }),
    ));
    parts.push((
        "PolicyBundle::decide (Cedar part of audit::decide)".to_string(),
        time_sync(PART_ITERS, || {
            std::hint::black_box(bundle.decide(
                &pep.principal,
                Action::CallTool,
                &pep.resource,
                &pep.prepared,
                entities,
            ));
        }),
    ));
    parts.push((
        "  Context::from_json_value(context.clone(), Some(schema))  <- as shipped".to_string(),
        time_sync(PART_ITERS, || {
            std::hint::black_box(Context::from_json_value(pep.context.clone(), schema_ctx)).ok();
        }),
    ));
    parts.push((
        "  serde_json::Value::clone of the context (included above)".to_string(),
        time_sync(PART_ITERS, || {
            std::hint::black_box(pep.context.clone());
        }),
    ));
    let ctx = Context::from_json_value(pep.context.clone(), schema_ctx)?;
    let request_of = |c: Context| {
        Request::new(
            principal.clone(),
            action_uid.clone(),
            resource.clone(),
            c,
            Some(&bundle.schema),
        )
        .map_err(|e| e.to_string())
    };
    parts.push((
        "  Request::new(.., Some(schema)) (validates the context too)".to_string(),
        time_sync(PART_ITERS, || {
            std::hint::black_box(request_of(ctx.clone())).ok();
        }),
    ));
    let request = request_of(ctx.clone())?;
    let authorizer = Authorizer::new();
    parts.push((
        "  Authorizer::is_authorized".to_string(),
        time_sync(PART_ITERS, || {
            std::hint::black_box(authorizer.is_authorized(&request, &bundle.policies, entities));
        }),
    ));
    parts.push((
        "  Authorizer::new".to_string(),
        time_sync(PART_ITERS, || {
            std::hint::black_box(Authorizer::new());
        }),
    ));
    let first_policy = bundle.policies.policies().next().map(|p| p.id().clone());
    if let Some(id) = first_policy {
        parts.push((
            "  PolicySet::annotation(id, \"advice\") (parses the key on every call)".to_string(),
            time_sync(PART_ITERS, || {
                std::hint::black_box(bundle.policies.annotation(&id, "advice"));
            }),
        ));
    }
    parts.push((
        "  PolicyBundle::decide_request (Authorizer::new + authorize + diagnostics)".to_string(),
        time_sync(PART_ITERS, || {
            std::hint::black_box(bundle.decide_request(&request, entities));
        }),
    ));
    parts.push((
        "  alternative: Context::from_json_value(context.clone(), None)".to_string(),
        time_sync(PART_ITERS, || {
            std::hint::black_box(Context::from_json_value(pep.context.clone(), None)).ok();
        }),
    ));
    for key in ["session", "time"] {
        let only = json!({ key: pep.context.get(key).cloned().unwrap_or(Value::Null) });
        parts.push((
            format!("    of which: a context with only `{key}` (no schema)"),
            time_sync(PART_ITERS, || {
                std::hint::black_box(Context::from_json_value(only.clone(), None)).ok();
            }),
        ));
    }
    let session_uid = Kind::Session.uid(session_id);
    let typed = || {
        Context::from_pairs([
            (
                "session".to_string(),
                RestrictedExpression::new_entity_uid(session_uid.clone().into()),
            ),
            (
                "time".to_string(),
                RestrictedExpression::new_datetime(&time),
            ),
        ])
        .map_err(|e| e.to_string())
    };
    // Without `args` the typed action's context does not conform: a deny.
    let typed_same = request_of(typed()?)
        .map(|r| bundle.decide_request(&r, entities).allowed)
        .unwrap_or(false);
    parts.push((
        format!("  alternative: Context::from_pairs(new_entity_uid, new_datetime) (same verdict: {typed_same})"),
        time_sync(PART_ITERS, || {
            std::hint::black_box(typed()).ok();
        }),
    ));
    let unchecked = Context::from_json_value(pep.context.clone(), None)?;
    let same = request_of(unchecked.clone())
        .map(|r| bundle.decide_request(&r, entities).allowed)
        .unwrap_or(false);
    parts.push((
        format!(
            "  alternative: context built once per request, Context::clone (same verdict: {same})"
        ),
        time_sync(PART_ITERS, || {
            std::hint::black_box(ctx.clone());
        }),
    ));
    let decided = pep.decide();
    parts.push((
        "record fields: uuid v7 + principal/resource/context to_string + hashes (replicated)"
            .to_string(),
        time_sync(PART_ITERS, || {
            std::hint::black_box((
                uuid::Uuid::now_v7().to_string(),
                pep.principal.to_string(),
                pep.resource.to_string(),
                pep.context.to_string(),
                view.slice.hash.clone(),
                Some(Arc::clone(&view.slice.json)),
                bundle.hash.clone(),
                Value::from(vec!["memory-tools-visible-when-memory-enabled".to_string()])
                    .to_string(),
            ));
        }),
    ));
    parts.push((
        "Decided::clone + finish_default (outcome JSON)".to_string(),
        time_sync(PART_ITERS, || {
            std::hint::black_box(decided.clone().finish_default());
        }),
    ));
    parts.push((
        "access_session: whole audit::decide (ApiKey principal)".to_string(),
        {
            let principal = Kind::ApiKey.uid(&view.key.id);
            let resource = Kind::Session.uid(session_id);
            time_sync(PART_ITERS, || {
                std::hint::black_box(audit::decide(
                    &bundle,
                    &view.slice,
                    &principal,
                    Action::AccessSession,
                    &resource,
                    &pep.prepared,
                    Scope {
                        org_id: Some(ORG),
                        session_id: Some(session_id),
                    },
                    &time,
                ));
            })
        },
    ));

    // Do two cores give twice the decisions? The same loop on both at once.
    let per_thread: Vec<Stats> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..2)
            .map(|_| {
                scope.spawn(|| {
                    time_sync(PART_ITERS, || {
                        std::hint::black_box(pep.decide());
                    })
                })
            })
            .collect();
        handles.into_iter().filter_map(|h| h.join().ok()).collect()
    });
    for (i, s) in per_thread.into_iter().enumerate() {
        parts.push((
            format!("audit::decide on 2 threads at once: thread {i} (scaling check)"),
            s,
        ));
    }

    // Enqueue alone, on pre-built records; then how fast the writer commits.
    let records: Vec<_> = (0..PEP_ITERS)
        .map(|_| pep.decide().finish_default())
        .collect();
    writer.flush().await?;
    let mut v = Vec::with_capacity(PEP_ITERS);
    let started = Instant::now();
    for r in records {
        let t0 = Instant::now();
        writer.enqueue(vec![WriteOp::Decision(Box::new(r))]).await?;
        v.push(t0.elapsed());
    }
    let enqueued = started.elapsed();
    writer.flush().await?;
    let committed = started.elapsed();
    parts.push((
        "writer.enqueue alone (pre-built record)".to_string(),
        stats(v),
    ));
    let mut lines = vec![format!(
        "writer: {PEP_ITERS} records (1 per job) enqueued in {:.0} ms and all committed after {:.0} ms \
         => {} records/s through the group-commit writer",
        enqueued.as_secs_f64() * 1e3,
        committed.as_secs_f64() * 1e3,
        thousands(PEP_ITERS as f64 / committed.as_secs_f64()),
    )];

    // Per-request work around the decisions.
    let presented = cedargate::auth::parse_key(secret).ok_or("malformed bench key")?;
    let mut v = Vec::with_capacity(PART_ITERS);
    for _ in 0..PART_ITERS {
        let t0 = Instant::now();
        std::hint::black_box(gw.authenticate(&presented).await.ok());
        v.push(t0.elapsed());
    }
    parts.push((
        "Gateway::authenticate (cache hit: moka + SHA-256)".to_string(),
        stats(v),
    ));
    let mut v = Vec::with_capacity(PART_ITERS);
    for _ in 0..PART_ITERS {
        let t0 = Instant::now();
        std::hint::black_box(gw.session_view(session_id, &view.key, &bundle).await.ok());
        v.push(t0.elapsed());
    }
    parts.push(("Gateway::session_view (cache hit)".to_string(), stats(v)));
    parts.push((
        "ids::now_rfc3339 + session_context".to_string(),
        time_sync(PART_ITERS, || {
            let t = cedargate::ids::now_rfc3339();
            std::hint::black_box(session_context(session_id, &t));
        }),
    ));
    parts.push((
        "tools/list answer: listing_json() x2 + JSON-RPC wrap".to_string(),
        time_sync(PART_ITERS, || {
            let entries: Vec<&str> = view.tools.iter().map(|t| t.spec().listing_json()).collect();
            std::hint::black_box(list_body(cedargate::tools::list_result(&entries)));
        }),
    ));
    if let Some(spec) = view.tool("af_memory_recall") {
        let args = json!({"query": RECALL_QUERY, "workType": "bug_fix"});
        parts.push((
            "ToolSpec::validate (recall arguments, JSON Schema)".to_string(),
            time_sync(PART_ITERS, || {
                std::hint::black_box(spec.spec().validate(&args)).ok();
            }),
        ));
    }
    // The tools/list handler's work through the endpoint's own functions
    // (the session prelude with its `access_session` decision, the
    // `view_tool` decisions, the answer), to compare with the router called
    // in-process; without the enqueue the request's records are dropped.
    let headers = bearer(secret)?;
    for with_enqueue in [true, false] {
        let mut v = Vec::with_capacity(PART_ITERS);
        for i in 0..(PART_ITERS + WARMUP) {
            let t0 = Instant::now();
            let call = call(gw, &headers, session_id).await?;
            let body = list_body(tools_list(&call));
            if with_enqueue {
                call.flush_deferred().await;
            }
            std::hint::black_box(body);
            if i >= WARMUP {
                v.push(t0.elapsed());
            }
        }
        writer.flush().await?;
        parts.push((
            format!(
                "tools/list handler work in-process: resolve + tools_list ({})",
                if with_enqueue {
                    "with enqueues"
                } else {
                    "records dropped, writer idle"
                }
            ),
            stats(v),
        ));
    }

    let cpu = mark.since();
    lines.push(format!(
        "in-process section: other processes kept {:.2} cores busy on average",
        cpu.foreign_cores()
    ));
    lines.push(format!(
        "entity slice: {} bytes of JSON; context: {}",
        view.slice.json.len(),
        pep.context
    ));
    Ok(PepReport { rows, parts, lines })
}
