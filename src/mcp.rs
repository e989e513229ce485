//! The MCP endpoint `POST /api/mcp/{sessionId}` (Streamable HTTP, JSON
//! responses). Order of checks, each failing closed:
//! origin/host → protocol header → body limit → JSON parse and shape →
//! key (401) → session (404) → tenant isolation (403) → Cedar
//! `access_session` (403) → method dispatch.
//!
//! **Architecture Invariant:** every tool call's response is sent only after
//! its decision records (and any observation it stored) are durably
//! committed; a failed commit is answered -32603, never success.

mod a2a;
mod graph;
pub mod jsonrpc;
pub mod protocol;
pub mod sse;
pub mod streamable;

pub use graph::GuardFilter;

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use crate::audit::{self, Decided, Scope};
use crate::gateway::{Gateway, ResolveError, SessionView};
use crate::policy::{Action, Kind, PolicyBundle, PreparedContext};
use crate::store::WriteOp;
use crate::tools::{Adapter, ToolOutput, memory};
use jsonrpc::{Answer, Message, Reply, RpcError};

/// Header carrying the negotiated protocol version after `initialize`.
pub const PROTOCOL_HEADER: &str = "mcp-protocol-version";

/// Server name in `serverInfo`.
pub const SERVER_NAME: &str = "cedargate";

/// A JSON response with a status.
fn json_response(status: StatusCode, body: &Value) -> Response {
    json_text_response(status, body.to_string())
}

/// A response with a status and a JSON text body.
fn json_text_response(status: StatusCode, body: String) -> Response {
    let mut resp = (status, body).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// An HTTP-level failure answered with a JSON-RPC error body.
fn http_error(status: StatusCode, code: i64, message: impl Into<String>) -> Response {
    let mut resp = json_response(
        status,
        &jsonrpc::error_response(Value::Null, &RpcError::new(code, message)),
    );
    if status == StatusCode::UNAUTHORIZED {
        resp.headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    resp
}

/// `GET /api/mcp/{sessionId}`: no server-initiated stream is offered.
pub async fn get_endpoint() -> Response {
    let mut resp = http_error(
        StatusCode::METHOD_NOT_ALLOWED,
        jsonrpc::INVALID_REQUEST,
        "this endpoint offers no server-initiated stream; use POST (or GET `sse` below it for the HTTP+SSE transport)",
    );
    resp.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static("POST, DELETE"));
    resp
}

/// The header checks every transport runs first, in this order: `Origin`
/// and `Host` (403), then `MCP-Protocol-Version` (400). Returns the
/// version the header asked for, if any.
fn admit_headers(gw: &Gateway, headers: &HeaderMap) -> Result<Option<String>, Box<Response>> {
    if let Err(msg) = check_origin_and_host(gw, headers) {
        return Err(Box::new(http_error(
            StatusCode::FORBIDDEN,
            jsonrpc::INVALID_REQUEST,
            msg,
        )));
    }
    header_version(headers)
}

/// Checks `Origin` and `Host` against the allow-lists (DNS rebinding).
fn check_origin_and_host(gw: &Gateway, headers: &HeaderMap) -> Result<(), String> {
    let sec = &gw.config.http;
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("<non-ascii>");
        let allowed = sec
            .allowed_origins
            .iter()
            .any(|a| a == "*" || strip_port(origin) == strip_port(a));
        if !allowed {
            return Err(format!("origin `{origin}` is not allowed"));
        }
    }
    if !sec.allowed_hosts.iter().any(|h| h == "*") {
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or("");
        let name = host_name(host);
        if !sec
            .allowed_hosts
            .iter()
            .any(|h| h.eq_ignore_ascii_case(name))
        {
            return Err(format!("host `{host}` is not allowed"));
        }
    }
    Ok(())
}

/// `scheme://host:port` → `scheme://host`.
fn strip_port(origin: &str) -> &str {
    let after_scheme = origin.find("://").map(|i| i + 3).unwrap_or(0);
    let rest = origin.get(after_scheme..).unwrap_or("");
    let end = if rest.starts_with('[') {
        rest.find(']').map(|i| i + 1).unwrap_or(rest.len())
    } else {
        rest.find([':', '/']).unwrap_or(rest.len())
    };
    origin.get(..after_scheme + end).unwrap_or(origin)
}

/// `host:port` → `host` (IPv6 in brackets kept with brackets).
pub(crate) fn host_name(host: &str) -> &str {
    if host.starts_with('[') {
        return host.find(']').and_then(|i| host.get(..=i)).unwrap_or(host);
    }
    host.split(':').next().unwrap_or(host)
}

/// What one HTTP request resolved to.
struct Call {
    gw: Arc<Gateway>,
    bundle: Arc<PolicyBundle>,
    view: Arc<SessionView>,
    /// Protocol version governing result shapes.
    version: String,
    /// Time of the request (all its decisions share it).
    time: String,
    /// The Cedar context of in-session decisions, parsed once.
    context: PreparedContext,
    /// Records (and other writes) of this request not yet handed to the
    /// writer: they travel with the request's next durable commit, or are
    /// queued when the request ends, so a request costs one writer job.
    pending: std::sync::Mutex<Vec<WriteOp>>,
}

impl Call {
    /// Adds writes that need not be durable before the next answer.
    fn defer(&self, ops: impl IntoIterator<Item = WriteOp>) {
        if let Ok(mut p) = self.pending.lock() {
            p.extend(ops);
        }
    }

    fn take_pending(&self) -> Vec<WriteOp> {
        self.pending
            .lock()
            .map(|mut p| std::mem::take(&mut *p))
            .unwrap_or_default()
    }

    /// Commits `ops` together with everything deferred so far, and waits
    /// until it is durable.
    async fn commit(&self, ops: Vec<WriteOp>) -> Result<(), RpcError> {
        let mut all = self.take_pending();
        all.extend(ops);
        self.gw
            .store
            .writer()
            .submit(all)
            .await
            .map_err(|e| internal(&e))
    }

    /// Queues whatever is still deferred (end of request).
    async fn flush_deferred(&self) {
        let rest = self.take_pending();
        if !rest.is_empty()
            && let Err(e) = self.gw.store.writer().enqueue(rest).await
        {
            tracing::error!(error = %e, "cannot queue decision records");
        }
    }

    fn scope(&self) -> Scope<'_> {
        Scope {
            org_id: Some(&self.view.tenant.session.org_id),
            session_id: Some(&self.view.tenant.session.id),
        }
    }

    fn decide(
        &self,
        principal: &crate::policy::Uid,
        action: Action,
        resource: &crate::policy::Uid,
        context: &PreparedContext,
    ) -> Decided {
        audit::decide(
            &self.bundle,
            &self.view.slice,
            principal,
            action,
            resource,
            context,
            self.scope(),
            &self.time,
        )
    }

    fn agent_uid(&self) -> crate::policy::Uid {
        Kind::Agent.uid(&self.view.tenant.agent.id)
    }
}

/// `POST /api/mcp/{sessionId}`.
pub async fn post_endpoint(
    State(gw): State<Arc<Gateway>>,
    Path(session_id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let header_version = match admit_headers(&gw, &headers) {
        Ok(v) => v,
        Err(resp) => return *resp,
    };
    let (batch, messages) = match read_messages(&gw, body).await {
        Ok(m) => m,
        Err(resp) => return resp,
    };
    let call = match resolve(&gw, &session_id, &headers, header_version).await {
        Ok(call) => call,
        Err(resp) => return resp,
    };
    if let Some(resp) = streamable::check_session_header(&gw, &headers, &session_id) {
        call.flush_deferred().await;
        return resp;
    }
    let initialize = messages
        .iter()
        .any(|m| matches!(m, Message::Request { method, .. } if method == "initialize"));
    let responses = answer(&call, messages).await;
    if responses.is_empty() {
        return StatusCode::ACCEPTED.into_response();
    }
    let initialized = initialize && streamable::initialized(&responses);
    let body = jsonrpc::body(&responses, batch);
    streamable::respond(&gw, &headers, &session_id, initialized, body)
}

/// The `MCP-Protocol-Version` header: absent, a supported version, or a 400.
/// (Boxed: a `Response` is large.)
fn header_version(headers: &HeaderMap) -> Result<Option<String>, Box<Response>> {
    match headers.get(PROTOCOL_HEADER) {
        None => Ok(None),
        Some(v) => match v.to_str() {
            Ok(v) if protocol::is_supported(v) => Ok(Some(v.to_string())),
            _ => Err(Box::new(http_error(
                StatusCode::BAD_REQUEST,
                jsonrpc::INVALID_REQUEST,
                format!(
                    "unsupported MCP-Protocol-Version `{}`; supported: {}",
                    v.to_str().unwrap_or("<non-ascii>"),
                    protocol::SUPPORTED.join(", ")
                ),
            ))),
        },
    }
}

/// Reads a body within the limits and classifies its messages; returns
/// whether it was a batch. A body that is not one valid request or a
/// non-empty, bounded batch is answered here.
async fn read_messages(gw: &Gateway, body: Body) -> Result<(bool, Vec<Message>), Response> {
    let limits = &gw.config.limits;
    let bytes: Bytes = match axum::body::to_bytes(body, limits.max_body_bytes).await {
        Ok(b) => b,
        Err(_) => {
            return Err(http_error(
                StatusCode::PAYLOAD_TOO_LARGE,
                jsonrpc::INVALID_REQUEST,
                format!("request body exceeds {} bytes", limits.max_body_bytes),
            ));
        }
    };
    if jsonrpc::depth_exceeds(&bytes, limits.max_json_depth) {
        return Err(http_error(
            StatusCode::BAD_REQUEST,
            jsonrpc::INVALID_REQUEST,
            format!("JSON nesting deeper than {} levels", limits.max_json_depth),
        ));
    }
    let parsed: Value = match serde_json::from_slice(&bytes) {
        Ok(v) => v,
        Err(e) => {
            return Err(json_response(
                StatusCode::BAD_REQUEST,
                &jsonrpc::error_response(
                    Value::Null,
                    &RpcError::with_data(
                        jsonrpc::PARSE_ERROR,
                        "parse error: body is not valid JSON",
                        json!({ "detail": e.to_string() }),
                    ),
                ),
            ));
        }
    };
    let (batch, messages) = match parsed {
        Value::Array(items) => {
            if items.is_empty() {
                return Err(json_response(
                    StatusCode::BAD_REQUEST,
                    &jsonrpc::error_response(Value::Null, &jsonrpc::invalid_request("empty batch")),
                ));
            }
            if items.len() > limits.max_batch_len {
                return Err(json_response(
                    StatusCode::BAD_REQUEST,
                    &jsonrpc::error_response(
                        Value::Null,
                        &RpcError::with_data(
                            jsonrpc::INVALID_REQUEST,
                            format!(
                                "batch of {} requests exceeds the limit of {}",
                                items.len(),
                                limits.max_batch_len
                            ),
                            json!({ "maxBatchLength": limits.max_batch_len }),
                        ),
                    ),
                ));
            }
            (
                true,
                items.into_iter().map(jsonrpc::classify).collect::<Vec<_>>(),
            )
        }
        other => (false, vec![jsonrpc::classify(other)]),
    };
    if !batch && let Some(Message::Invalid { id, reason }) = messages.first() {
        return Err(json_response(
            StatusCode::BAD_REQUEST,
            &jsonrpc::error_response(id.clone(), &jsonrpc::invalid_request(reason)),
        ));
    }
    Ok((batch, messages))
}

/// Answers `messages` in order (notifications and client responses get
/// nothing), then queues the request's remaining deferred records.
async fn answer(call: &Call, messages: Vec<Message>) -> Vec<Answer> {
    let mut responses = Vec::new();
    for message in messages {
        match message {
            Message::Request { id, method, params } => {
                let outcome = dispatch(call, &method, params).await;
                responses.push(Answer::of(id, outcome));
            }
            Message::Invalid { id, reason } => responses.push(Answer::Json(
                jsonrpc::error_response(id, &jsonrpc::invalid_request(&reason)),
            )),
            Message::Notification { .. } | Message::ClientResponse => {}
        }
    }
    call.flush_deferred().await;
    responses
}

/// Authenticates, loads the session, checks isolation and decides
/// `access_session`.
async fn resolve(
    gw: &Arc<Gateway>,
    session_id: &str,
    headers: &HeaderMap,
    header_version: Option<String>,
) -> Result<Call, Response> {
    let presented = crate::auth::bearer_key(headers).map_err(|e| {
        http_error(
            StatusCode::UNAUTHORIZED,
            jsonrpc::UNAUTHENTICATED,
            e.to_string(),
        )
    })?;
    let key = gw.authenticate(&presented).await.map_err(resolve_error)?;
    let bundle = gw.pep.current();
    let view = gw
        .session_view(session_id, &key, &bundle)
        .await
        .map_err(resolve_error)?;
    let time = crate::ids::now_rfc3339();
    let context = bundle.prepare_session_context(session_id, &time);
    let version = header_version
        .or_else(|| gw.negotiated(&view))
        .unwrap_or_else(|| protocol::DEFAULT_WITHOUT_HEADER.to_string());
    let call = Call {
        gw: Arc::clone(gw),
        bundle,
        view,
        version,
        time,
        context,
        pending: std::sync::Mutex::new(Vec::new()),
    };

    let decided = call.decide(
        &Kind::ApiKey.uid(&call.view.key.id),
        Action::AccessSession,
        &Kind::Session.uid(session_id),
        &call.context,
    );
    let allowed = decided.allowed();
    let decision_id = decided.id().to_string();
    let advice = decided.verdict.advice.clone();
    call.defer([WriteOp::Decision(Box::new(decided.finish_default()))]);
    if !allowed {
        // A refused request is answered only once its record is durable.
        if let Err(e) = call.commit(Vec::new()).await {
            tracing::error!(error = ?e, "cannot record an access denial");
            return Err(http_error(
                StatusCode::SERVICE_UNAVAILABLE,
                jsonrpc::INTERNAL_ERROR,
                "decision trail unavailable",
            ));
        }
    }
    if !allowed {
        let body = jsonrpc::error_response(
            Value::Null,
            &RpcError::with_data(
                jsonrpc::AUTH_DENIED,
                "access to this session is not authorized",
                json!({ "decisionId": decision_id, "advice": advice }),
            ),
        );
        return Err(json_response(StatusCode::FORBIDDEN, &body));
    }
    Ok(call)
}

fn resolve_error(e: ResolveError) -> Response {
    match e {
        ResolveError::Credential(_) | ResolveError::UnknownKey => http_error(
            StatusCode::UNAUTHORIZED,
            jsonrpc::UNAUTHENTICATED,
            e.to_string(),
        ),
        ResolveError::NoSession(_) => http_error(
            StatusCode::NOT_FOUND,
            jsonrpc::SESSION_NOT_FOUND,
            e.to_string(),
        ),
        ResolveError::CrossOrg(_) => {
            http_error(StatusCode::FORBIDDEN, jsonrpc::AUTH_DENIED, e.to_string())
        }
        ResolveError::Entities(_) => {
            http_error(StatusCode::FORBIDDEN, jsonrpc::AUTH_DENIED, e.to_string())
        }
        ResolveError::Store(err) => {
            tracing::error!(error = %err, "store failure while resolving a session");
            http_error(
                StatusCode::SERVICE_UNAVAILABLE,
                jsonrpc::INTERNAL_ERROR,
                "storage unavailable",
            )
        }
    }
}

async fn dispatch(call: &Call, method: &str, params: Value) -> Result<Reply, RpcError> {
    match method {
        "initialize" => initialize(call, &params).await.map(Reply::Json),
        "ping" => Ok(Reply::Json(json!({}))),
        "tools/list" => Ok(Reply::Text(tools_list(call))),
        "tools/call" => tools_call(call, params).await.map(Reply::Json),
        _ => Err(RpcError::with_data(
            jsonrpc::METHOD_NOT_FOUND,
            format!("method `{method}` not found"),
            json!({ "method": method }),
        )),
    }
}

async fn initialize(call: &Call, params: &Value) -> Result<Value, RpcError> {
    let requested = params.get("protocolVersion").and_then(Value::as_str);
    let version = protocol::negotiate(requested);
    let op = WriteOp::SessionProtocol {
        session_id: call.view.tenant.session.id.clone(),
        version: version.to_string(),
    };
    call.defer([op]);
    call.gw
        .set_negotiated(&call.view.tenant.session.id, version);
    Ok(json!({
        "protocolVersion": version,
        "capabilities": { "tools": { "listChanged": false } },
        "serverInfo": { "name": SERVER_NAME, "version": env!("CARGO_PKG_VERSION") },
        "instructions": "Tools are authorized per call by Cedar policies; a denied call answers -32003 with the decision id.",
    }))
}

/// The `tools/list` result, assembled from each visible tool's serialized
/// entry.
fn tools_list(call: &Call) -> String {
    let agent = call.agent_uid();
    let mut tools: Vec<&str> = Vec::new();
    let mut records = Vec::new();
    for spec in &call.view.tools {
        if spec.adapter == Adapter::A2a {
            continue;
        }
        let decided = call.decide(
            &agent,
            Action::ViewTool,
            &Kind::Tool.uid(&spec.name),
            &call.context,
        );
        if decided.allowed() {
            tools.push(spec.listing_json());
        }
        records.push(WriteOp::Decision(Box::new(decided.finish_default())));
    }
    a2a::list_tools(call, &mut tools, &mut records);
    call.defer(records);
    crate::tools::list_result(&tools)
}

fn internal(e: &dyn std::fmt::Display) -> RpcError {
    tracing::error!(error = %e, "internal error");
    RpcError::new(
        jsonrpc::INTERNAL_ERROR,
        "internal error: the call was not completed",
    )
}

async fn tools_call(call: &Call, params: Value) -> Result<Value, RpcError> {
    let Value::Object(mut params) = params else {
        return Err(RpcError::with_data(
            jsonrpc::INVALID_PARAMS,
            "tools/call needs `params` with a `name`",
            json!({ "field": "params" }),
        ));
    };
    let name = match params.remove("name") {
        Some(Value::String(n)) => n,
        _ => {
            return Err(RpcError::with_data(
                jsonrpc::INVALID_PARAMS,
                "tools/call is missing `params.name`",
                json!({ "field": "name" }),
            ));
        }
    };
    let mut args = match params.remove("arguments") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(a)) => a,
        Some(_) => {
            return Err(RpcError::with_data(
                jsonrpc::INVALID_PARAMS,
                "`params.arguments` must be an object",
                json!({ "field": "arguments" }),
            ));
        }
    };
    let unknown = || {
        RpcError::with_data(
            jsonrpc::METHOD_NOT_FOUND,
            format!("unknown tool `{name}`"),
            json!({ "tool": name }),
        )
    };
    let Some(spec) = call.view.tool(&name).cloned() else {
        // Gate first: a graph tool of a project without the graph answers
        // a normal result, not an error.
        if crate::tools::graph::is_graph_tool(&name) && !crate::graph::enabled(&call.view.tenant) {
            return Ok(tool_result(&call.version, crate::tools::graph::disabled()));
        }
        return Err(unknown());
    };
    let agent = call.agent_uid();
    let tool_uid = Kind::Tool.uid(&spec.name);

    // Hidden tools answer exactly like unknown ones.
    let view = call.decide(&agent, Action::ViewTool, &tool_uid, &call.context);
    if !view.allowed() {
        call.commit(vec![WriteOp::Decision(Box::new(view.finish_default()))])
            .await?;
        return Err(unknown());
    }
    call.defer([WriteOp::Decision(Box::new(view.finish_default()))]);

    // The gateway owns `arguments.context`: whatever the caller sent is
    // replaced by the session's identity, and the attempt is recorded.
    let supplied_context = args.remove("context");
    let args_value = Value::Object(args);
    if let Err(errors) = spec.validate(&args_value) {
        let first = errors.first().map(|e| e.field.clone()).unwrap_or_default();
        let message = errors
            .first()
            .map(|e| e.message.clone())
            .unwrap_or_default();
        return Err(RpcError::with_data(
            jsonrpc::INVALID_PARAMS,
            format!("invalid arguments for `{name}`: `{first}`: {message}"),
            json!({
                "tool": name,
                "field": first,
                "errors": errors.iter().map(|e| json!({ "field": e.field, "message": e.message })).collect::<Vec<_>>(),
            }),
        ));
    }
    let tenant = &call.view.tenant;
    let authoritative = json!({
        "orgId": tenant.session.org_id,
        "projectId": tenant.session.project_id,
        "sessionId": tenant.session.id,
        "agentId": tenant.session.agent_id,
    });
    let notes = match &supplied_context {
        Some(supplied) if *supplied != authoritative => {
            json!({ "callerContextReplaced": true, "callerContext": supplied })
        }
        _ => Value::Null,
    };
    let mut args_value = args_value;
    if let Value::Object(map) = &mut args_value {
        map.insert("context".into(), authoritative);
    }

    if spec.adapter == Adapter::A2a {
        return a2a::call_tool(call, &spec, &name, args_value, notes).await;
    }

    // Typed tools are decided under their own action, with `context.args`.
    let typed_context = call.bundle.typed_tool_context(
        Action::CallTool,
        &spec.name,
        &tenant.session.id,
        &call.time,
        &args_value,
    );
    let tool_context = typed_context.as_ref().unwrap_or(&call.context);
    let mut decided = call.decide(&agent, Action::CallTool, &tool_uid, tool_context);
    decided.record.notes = notes.to_string();
    if !decided.allowed() {
        let data = json!({
            "decisionId": decided.id(),
            "tool": name,
            "reasons": decided.verdict.reasons,
            "advice": decided.verdict.advice,
        });
        call.commit(vec![WriteOp::Decision(Box::new(decided.finish_default()))])
            .await?;
        return Err(RpcError::with_data(
            jsonrpc::AUTH_DENIED,
            format!("call to `{name}` is not authorized for this session"),
            data,
        ));
    }

    // Graph writes need `write_node` on the project; a deny changes nothing.
    let mut write_decision = None;
    if matches!(spec.adapter, Adapter::GraphIngest | Adapter::GraphImprove) {
        let project = Kind::Project.uid(&call.view.tenant.session.project_id);
        let write = call.decide(&agent, Action::WriteNode, &project, &call.context);
        if !write.allowed() {
            let data = json!({
                "decisionId": write.id(),
                "tool": name,
                "reasons": write.verdict.reasons,
                "advice": write.verdict.advice,
            });
            let outcome =
                json!({ "status": "denied", "deniedBy": "write_node", "decisionId": write.id() });
            call.commit(vec![
                WriteOp::Decision(Box::new(decided.finish(outcome))),
                WriteOp::Decision(Box::new(write.finish_default())),
            ])
            .await?;
            return Err(RpcError::with_data(
                jsonrpc::AUTH_DENIED,
                format!("`{name}` may not write the knowledge graph of this project"),
                data,
            ));
        }
        write_decision = Some(write);
    }

    let started = std::time::Instant::now();
    let executed = execute(call, spec.adapter, &args_value).await;
    let duration_ms = started.elapsed().as_secs_f64() * 1000.0;
    match executed {
        Ok((output, mut ops, pending)) => {
            let outcome = json!({ "status": "completed", "durationMs": duration_ms, "result": outcome_summary(&output) });
            if let Some(write) = write_decision {
                ops.push(WriteOp::Decision(Box::new(write.finish(outcome.clone()))));
            }
            ops.push(WriteOp::Decision(Box::new(decided.finish(outcome))));
            call.commit(ops).await?;
            if let Some(p) = pending {
                p.apply();
            }
            Ok(tool_result(&call.version, output))
        }
        Err((e, mut ops)) => {
            let outcome = json!({ "status": "failed", "durationMs": duration_ms, "error": e.0 });
            if let Some(write) = write_decision {
                ops.push(WriteOp::Decision(Box::new(write.finish(outcome.clone()))));
            }
            ops.push(WriteOp::Decision(Box::new(decided.finish(outcome))));
            call.commit(ops).await?;
            tracing::warn!(tool = %name, error = %e, "tool execution failed");
            Err(RpcError::with_data(
                jsonrpc::INTERNAL_ERROR,
                format!("tool `{name}` failed: {e}"),
                json!({ "tool": name }),
            ))
        }
    }
}

/// A compact outcome for the decision record (ids and counts, not payloads).
fn outcome_summary(output: &ToolOutput) -> Value {
    let s = &output.structured;
    let mut summary = Map::new();
    if let Some(id) = s.get("id") {
        summary.insert("id".into(), id.clone());
    }
    if let Some(obs) = s.get("observations").and_then(Value::as_array) {
        summary.insert("observations".into(), obs.len().into());
    }
    if let Some(t) = s.get("tokensUsed") {
        summary.insert("tokensUsed".into(), t.clone());
    }
    for key in [
        "processed",
        "totalNodesCreated",
        "totalEdgesCreated",
        "mergedCount",
        "nodeUpdates",
        "edgeUpdates",
        "tripletEmbeddings",
        "disabled",
    ] {
        if let Some(v) = s.get(key) {
            summary.insert(key.into(), v.clone());
        }
    }
    for key in ["triplets", "nodes", "edges", "graph"] {
        if let Some(v) = s.get(key).and_then(Value::as_array) {
            summary.insert(key.into(), v.len().into());
        }
    }
    if let Some(p) = s.get("path") {
        summary.insert(
            "pathLength".into(),
            p.get("length").cloned().unwrap_or(Value::Null),
        );
    }
    Value::Object(summary)
}

/// Runs the adapter; returns the output, the writes to commit with the
/// decision record, and a graph write to apply to the in-memory view once
/// committed. On failure, records of decisions made meanwhile come back too.
async fn execute(
    call: &Call,
    adapter: Adapter,
    args: &Value,
) -> Result<
    (
        ToolOutput,
        Vec<WriteOp>,
        Option<crate::tools::graph::PendingWrite>,
    ),
    (crate::tools::ToolError, Vec<WriteOp>),
> {
    match adapter {
        Adapter::MemoryRemember => {
            let (obs, output) =
                memory::remember(&call.view.tenant, args).map_err(|e| (e, Vec::new()))?;
            Ok((output, vec![WriteOp::Observation(Box::new(obs))], None))
        }
        Adapter::MemoryRecall => {
            if crate::graph::enabled(&call.view.tenant) {
                let source = Arc::new(graph::GraphRecall::new(call));
                let dynamic: Arc<dyn memory::RecallSource> = source.clone();
                let out =
                    memory::recall(&call.gw.store, &call.view.tenant, args, Some(&dynamic)).await;
                let records = source.take_records();
                match out {
                    Ok(output) => Ok((output, records, None)),
                    Err(e) => Err((e, records)),
                }
            } else {
                let output = memory::recall(&call.gw.store, &call.view.tenant, args, None)
                    .await
                    .map_err(|e| (e, Vec::new()))?;
                Ok((output, Vec::new(), None))
            }
        }
        Adapter::GraphQuery
        | Adapter::GraphNeighbors
        | Adapter::GraphPath
        | Adapter::GraphIngest
        | Adapter::GraphImprove => {
            let done = graph::execute(call, adapter, args).await?;
            Ok((done.output, done.ops, done.pending))
        }
        Adapter::A2a => Err((
            crate::tools::ToolError("A2A tools are served by the bridge".into()),
            Vec::new(),
        )),
    }
}

/// The `tools/call` result for the negotiated version.
fn tool_result(version: &str, output: ToolOutput) -> Value {
    let mut result = json!({
        "content": [ { "type": "text", "text": output.text } ],
        "isError": false,
    });
    if protocol::has_structured_content(version)
        && let Value::Object(map) = &mut result
    {
        map.insert("structuredContent".into(), output.structured);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origin_and_host_parsing() {
        assert_eq!(strip_port("http://localhost:3000"), "http://localhost");
        assert_eq!(strip_port("http://[::1]:80"), "http://[::1]");
        assert_eq!(strip_port("https://evil.example/x"), "https://evil.example");
        assert_eq!(host_name("127.0.0.1:8080"), "127.0.0.1");
        assert_eq!(host_name("[::1]:8080"), "[::1]");
        assert_eq!(host_name("localhost"), "localhost");
    }
}
