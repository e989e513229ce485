//! `McpError`: every way an MCP request can fail, and the one place that
//! maps each to its JSON-RPC code, message, `error.data` and HTTP status.
//!
//! Two kinds share the enum. Errors of the HTTP request (admission, the
//! session prelude, the transports) are answered with their HTTP status
//! and a JSON-RPC error body whose id is `null`. Errors of one JSON-RPC
//! request inside a body are answered in that request's response, with
//! HTTP 200 for the body as a whole ([`McpError::status`] says 200).
//! Codes are a public contract (see `jsonrpc`); messages never carry
//! internals: store failures are logged and answered generically.
//!
//! Messages and `error.data` repeat caller input (a tool or method name, a
//! header, a field, a bad value) only as a short prefix
//! ([`crate::tools::spec::echo`]: 128 characters, then `…`), so an error
//! body stays small whatever the request carried.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::jsonrpc::{self, Id, RpcError};
use super::protocol;
use super::streams::OpenError;
use crate::gateway::ResolveError;
use crate::identity::challenge::{self, ChallengeError};
use crate::tools::spec::{MESSAGE_MAX_CHARS, echo, prefix};
use crate::upstream::wire::UPSTREAM_ERROR;

/// One rejected argument, as `error.data.errors` lists it.
#[derive(Debug, Clone)]
pub struct BadArgument {
    /// The offending field.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

/// An MCP request that failed.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    /// `Origin` not on the allow-list (DNS rebinding): 403.
    #[error("origin `{}` is not allowed", echo(.0))]
    OriginNotAllowed(String),
    /// `Host` not on the allow-list (DNS rebinding): 403.
    #[error("host `{}` is not allowed", echo(.0))]
    HostNotAllowed(String),
    /// A protocol version (header or `_meta`) this gateway does not
    /// speak: 400, -32022 with the supported list.
    #[error("unsupported protocol version `{}`; supported: {supported}", echo(.0), supported = protocol::ALL.join(", "))]
    UnsupportedVersion(String),
    /// Body over `limits.max_body_bytes`: 413.
    #[error("request body exceeds {0} bytes")]
    BodyTooLarge(usize),
    /// Body not done within `http.body_read_timeout_ms`: 408.
    #[error("request body not received within {0} ms")]
    BodyTimeout(u64),
    /// Body stalled before its end for `http.body_stall_timeout_ms` (as a
    /// body shorter than its `Content-Length` does): 400.
    #[error("request body incomplete: nothing arrived for {0} ms before its end")]
    BodyIncomplete(u64),
    /// Body the connection could not deliver whole (malformed chunked
    /// encoding, or the client closed before its end): 400.
    #[error("request body malformed or cut short")]
    BodyMalformed,
    /// JSON nested deeper than `limits.max_json_depth`: 400.
    #[error("JSON nesting deeper than {0} levels")]
    TooDeep(usize),
    /// Not JSON: 400, -32700.
    #[error("parse error: body is not valid JSON")]
    Parse(String),
    /// Not a JSON-RPC request (or an empty batch): -32600.
    #[error("invalid request: {}", echo(.reason))]
    InvalidRequest {
        /// The request's id as written, when one could be read.
        id: Id,
        /// What is wrong.
        reason: String,
    },
    /// A batch longer than `limits.max_batch_len`: 400.
    #[error("batch of {len} requests exceeds the limit of {max}")]
    BatchTooLong {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// No, malformed or unknown credential: 401.
    #[error("{}", prefix(.0, MESSAGE_MAX_CHARS))]
    Unauthenticated(String),
    /// A bearer token the gateway refuses, or no credential where identity
    /// providers are configured: 401 with a `WWW-Authenticate: Bearer`
    /// challenge that names the protected-resource metadata (RFC 9728).
    #[error("{}", prefix(.message, MESSAGE_MAX_CHARS))]
    Challenged {
        /// Why, for the caller (never the token).
        message: String,
        /// The `WWW-Authenticate` value.
        challenge: String,
        /// Why a presented token was refused ([`RefusedToken`]); `None`
        /// when no token was presented, or not in the header.
        refused: Option<&'static str>,
    },
    /// No such session: 404.
    #[error("{}", prefix(.0, MESSAGE_MAX_CHARS))]
    SessionNotFound(String),
    /// The key's org does not own the session, or its entities could not
    /// be built (fail closed): 403.
    #[error("{}", prefix(.0, MESSAGE_MAX_CHARS))]
    Forbidden(String),
    /// The key's org does not own the session (tenant isolation): 403,
    /// with the id of the recorded refusal.
    #[error("this key's organization does not own session `{}`", echo(.session_id))]
    NotOwnSession {
        /// The session asked for.
        session_id: String,
        /// The recorded refusal (in the key's org's trail).
        decision_id: String,
    },
    /// Cedar denied `access_session`: 403, with the decision id.
    #[error("access to this session is not authorized")]
    AccessDenied {
        /// The denying decision.
        decision_id: String,
        /// `@advice` of the deciding policies.
        advice: Vec<String>,
    },
    /// The store failed while resolving the session: 503.
    #[error("storage unavailable")]
    StorageUnavailable,
    /// The decision trail could not record a denial: 503.
    #[error("decision trail unavailable")]
    TrailUnavailable,
    /// The disk holding the decision trail is below `database.min_free_bytes`:
    /// 507, -32010, before anything is decided or written (fail closed; it
    /// passes again once space is back). 507 rather than 503, so an alert can
    /// tell a full disk from an outage.
    #[error(
        "insufficient storage: the decision trail cannot record this request until disk space is freed"
    )]
    InsufficientStorage(crate::store::space::SpaceStatus),
    /// `Mcp-Session-Id` names another session: 400.
    #[error("`Mcp-Session-Id` `{}` does not name the session in the path", echo(.0))]
    SessionIdMismatch(String),
    /// The MCP session was terminated with `DELETE`: 404.
    #[error(
        "MCP session `{}` was terminated; send `initialize` without `Mcp-Session-Id` to start a new one",
        echo(.0)
    )]
    SessionTerminated(String),
    /// `GET` on the Streamable HTTP endpoint: 405.
    #[error(
        "this endpoint offers no server-initiated stream; use POST (or GET `sse` below it for the HTTP+SSE transport)"
    )]
    NoServerStream,
    /// A legacy POST without `streamId`: 400.
    #[error("missing `streamId` query parameter: POST to the URL of the stream's `endpoint` event")]
    MissingStreamId,
    /// A legacy POST to a stream that is not open for this session and key: 404.
    #[error(
        "stream `{}` is not open for this session and key; open a new one with GET /api/mcp/{}/sse",
        echo(.stream_id),
        echo(.session_id)
    )]
    StreamNotOpen {
        /// The stream asked for.
        stream_id: String,
        /// The session of the path.
        session_id: String,
    },
    /// The key holds `streams.max_streams_per_key` streams already: 429.
    #[error("this key already holds {0} open streams (the limit); close one first")]
    TooManyStreams(usize),
    /// A rate-limit bucket refused the request before any of it ran: 429
    /// with `Retry-After`, -32029 with `error.data.retryAfterSeconds`.
    #[error(
        "rate limit exceeded: this {} may spend {} per second (burst {}); retry after {} s",
        .0.level, .0.per_second, .0.burst, .0.retry_after_secs
    )]
    RateLimited(Box<RateRefusal>),
    /// Too many wrong daemon keys from this client address (`scope`
    /// `address`) or from all addresses (`total`): 429 with `Retry-After`,
    /// -32029 with `error.data.retryAfterSeconds`; the key was not checked.
    #[error(
        "too many wrong keys from {}; retry after {retry_after_secs} s",
        if *.scope == "total" { "all addresses" } else { "this address" }
    )]
    CredentialGuesses {
        /// `address` or `total`.
        scope: &'static str,
        /// Whole seconds until a key is checked again.
        retry_after_secs: u64,
    },
    /// The gateway or the stream is shutting down: 503.
    #[error("{0}")]
    Closing(&'static str),
    /// No such method: -32601.
    #[error("method `{}` not found", echo(.0))]
    MethodNotFound(String),
    /// Malformed `params`: -32602 naming the field.
    #[error("{message}")]
    InvalidParams {
        /// What is wrong.
        message: &'static str,
        /// The field.
        field: &'static str,
    },
    /// An unknown tool, or one the agent may not view: -32601 (the same
    /// answer for both, so visibility leaks nothing).
    #[error("unknown tool `{}`", echo(.0))]
    UnknownTool(String),
    /// An unknown resource, or one Cedar does not let the agent
    /// `read_resource`: -32002 (2026-07-28: -32602), one answer for both.
    #[error("resource `{}` not found", echo(.0))]
    UnknownResource(String),
    /// An unknown prompt, or one Cedar does not let the agent `get_prompt`:
    /// -32602, one answer for both.
    #[error("unknown prompt `{}`", echo(.0))]
    UnknownPrompt(String),
    /// Arguments that do not match the tool's `inputSchema`: -32602.
    #[error("invalid arguments for `{}`: `{}`: {}", echo(.tool), echo(first_field(.errors)), first_message(.errors))]
    InvalidArguments {
        /// The tool as called.
        tool: String,
        /// Every rejected field.
        errors: Vec<BadArgument>,
    },
    /// Cedar denied the call (`call_tool`, `a2a_invoke`): -32003.
    #[error("call to `{}` is not authorized for this session", .0.tool)]
    CallDenied(Box<Denial>),
    /// Cedar denied a person's `call_tool`, `a2a_invoke` or
    /// `access_session`, and would allow it with scopes their token lacks
    /// (`@requires_scope`, see `step_up`): 403 with a `WWW-Authenticate:
    /// Bearer error="insufficient_scope"` challenge naming every scope the
    /// request needs, -32003 with the deny's decision id. Inside a legacy
    /// body it makes the whole response 403 (`dispatch`).
    #[error("{}", step_up_message(.0))]
    StepUp(Box<StepUpRefusal>),
    /// Cedar denied `write_node` on the project: -32003.
    #[error("`{}` may not write the knowledge graph of this project", .0.tool)]
    WriteDenied(Box<Denial>),
    /// The tool failed while running: -32603.
    #[error("tool `{}` failed: {}", echo(.tool), prefix(.message, MESSAGE_MAX_CHARS))]
    ToolFailed {
        /// The tool as called.
        tool: String,
        /// What failed.
        message: String,
    },
    /// A remote peer failed: the bridge's code (-32201 … -32204).
    #[error("{message}")]
    Remote {
        /// The bridge code.
        code: i64,
        /// The message.
        message: String,
        /// `error.data`: tool, class, decision id, detail.
        data: Value,
    },
    /// The gateway failed (storage, a commit): -32603, without detail.
    #[error("internal error: the call was not completed")]
    Internal,
    /// 2026-07-28: a mirrored header (`MCP-Protocol-Version`,
    /// `Mcp-Method`, `Mcp-Name`, `Mcp-Param-*`) is missing, malformed or
    /// differs from the body: 400, -32020, with the recorded refusal.
    #[error("Header mismatch: {}", prefix(.detail, MESSAGE_MAX_CHARS))]
    HeaderMismatch {
        /// The header at fault.
        header: String,
        /// What is wrong (caller input only as short prefixes).
        detail: String,
        /// The recorded refusal, when the request got as far as a session.
        decision_id: Option<String>,
    },
    /// 2026-07-28: the request needs a client capability it did not
    /// declare: 400, -32021.
    #[error("`{}` requires client capabilities this request does not declare", echo(.method))]
    MissingClientCapability {
        /// The method.
        method: String,
        /// `requiredCapabilities`: each missing capability, as `{}`.
        required: Vec<String>,
    },
    /// 2026-07-28: a request without the `_meta` fields every request
    /// carries: 400, -32602.
    #[error("2026-07-28 requests carry `{0}` in `params._meta`")]
    MissingMeta(&'static str),
    /// `GET` or `DELETE` at 2026-07-28, which has neither server streams
    /// nor sessions: 405.
    #[error("protocol 2026-07-28 has no sessions and no server stream: POST each request")]
    StatelessOnly,
}

/// What a -32029 answer carries.
#[derive(Debug, Clone)]
pub struct RateRefusal {
    /// The bucket that refused: `key`, `agent` or `org`.
    pub level: &'static str,
    /// Its rate.
    pub per_second: u32,
    /// Its burst.
    pub burst: u32,
    /// What the request would have cost.
    pub cost: u32,
    /// Whole seconds until it could pass.
    pub retry_after_secs: u64,
    /// The refusal's record, when this one was recorded (the first of its
    /// subject in the window).
    pub decision_id: Option<String>,
}

/// What a -32003 answer carries besides its message.
#[derive(Debug, Clone)]
pub struct Denial {
    /// The tool (canonical name).
    pub tool: String,
    /// The denying decision.
    pub decision_id: String,
    /// Determining policy ids.
    pub reasons: Vec<String>,
    /// `@advice` of the deciding policies.
    pub advice: Vec<String>,
}

/// What a step-up answer carries.
#[derive(Debug, Clone)]
pub struct StepUpRefusal {
    /// The denied tool (canonical name); `None` for `access_session`.
    pub tool: Option<String>,
    /// The recorded deny.
    pub decision_id: String,
    /// Its determining policy ids.
    pub reasons: Vec<String>,
    /// `@advice` of the deciding policies.
    pub advice: Vec<String>,
    /// The scopes that would allow the request, not held yet.
    pub missing: Vec<String>,
    /// Every scope to ask for: the token's granted ones and the missing.
    pub scopes: Vec<String>,
    /// The protected-resource metadata URL of the endpoint.
    pub metadata_url: String,
}

impl StepUpRefusal {
    /// The `WWW-Authenticate` value: one challenge with every scope.
    pub fn challenge(&self) -> String {
        let why = format!(
            "this request needs the scope{} {}; authorize again with every scope this challenge names",
            if self.missing.len() == 1 { "" } else { "s" },
            self.missing.join(" ")
        );
        challenge::bearer(
            &self.metadata_url,
            &self.scopes,
            Some((ChallengeError::InsufficientScope, &why)),
        )
    }

    /// Adds another refusal's scopes (a batch with several step-ups
    /// answers one challenge asking for all of them).
    pub fn merge(&mut self, other: &StepUpRefusal) {
        for (mine, theirs) in [
            (&mut self.missing, &other.missing),
            (&mut self.scopes, &other.scopes),
        ] {
            for scope in theirs {
                if !mine.contains(scope) {
                    mine.push(scope.clone());
                }
            }
        }
    }
}

fn step_up_message(s: &StepUpRefusal) -> String {
    let what = match &s.tool {
        Some(tool) => format!("call to `{tool}`"),
        None => "access to this session".to_string(),
    };
    format!(
        "{what} is not authorized with this token's scopes; it needs {}",
        s.missing.join(" ")
    )
}

fn first_field(errors: &[BadArgument]) -> &str {
    errors.first().map(|e| e.field.as_str()).unwrap_or_default()
}

fn first_message(errors: &[BadArgument]) -> std::borrow::Cow<'_, str> {
    prefix(
        errors
            .first()
            .map(|e| e.message.as_str())
            .unwrap_or_default(),
        MESSAGE_MAX_CHARS,
    )
}

impl McpError {
    /// The HTTP status of a failed HTTP request (200 for errors of one
    /// JSON-RPC request, answered inside the body).
    pub fn status(&self) -> StatusCode {
        use McpError::*;
        match self {
            OriginNotAllowed(_)
            | HostNotAllowed(_)
            | Forbidden(_)
            | NotOwnSession { .. }
            | StepUp(_)
            | AccessDenied { .. } => StatusCode::FORBIDDEN,
            UnsupportedVersion(_)
            | HeaderMismatch { .. }
            | MissingClientCapability { .. }
            | MissingMeta(_)
            | TooDeep(_)
            | Parse(_)
            | InvalidRequest { .. }
            | BatchTooLong { .. }
            | SessionIdMismatch(_)
            | MissingStreamId
            | BodyIncomplete(_)
            | BodyMalformed => StatusCode::BAD_REQUEST,
            BodyTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            BodyTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            Unauthenticated(_) | Challenged { .. } => StatusCode::UNAUTHORIZED,
            SessionNotFound(_) | SessionTerminated(_) | StreamNotOpen { .. } => {
                StatusCode::NOT_FOUND
            }
            StorageUnavailable | TrailUnavailable | Closing(_) => StatusCode::SERVICE_UNAVAILABLE,
            InsufficientStorage(_) => StatusCode::INSUFFICIENT_STORAGE,
            NoServerStream | StatelessOnly => StatusCode::METHOD_NOT_ALLOWED,
            TooManyStreams(_) | RateLimited(_) | CredentialGuesses { .. } => {
                StatusCode::TOO_MANY_REQUESTS
            }
            MethodNotFound(_)
            | InvalidParams { .. }
            | UnknownTool(_)
            | UnknownResource(_)
            | UnknownPrompt(_)
            | InvalidArguments { .. }
            | CallDenied(_)
            | WriteDenied(_)
            | ToolFailed { .. }
            | Remote { .. }
            | Internal => StatusCode::OK,
        }
    }

    /// The JSON-RPC code.
    pub fn code(&self) -> i64 {
        use McpError::*;
        match self {
            Parse(_) => jsonrpc::PARSE_ERROR,
            UnsupportedVersion(_) => jsonrpc::UNSUPPORTED_PROTOCOL_VERSION,
            HeaderMismatch { .. } => jsonrpc::HEADER_MISMATCH,
            MissingClientCapability { .. } => jsonrpc::MISSING_CLIENT_CAPABILITY,
            OriginNotAllowed(_)
            | HostNotAllowed(_)
            | StatelessOnly
            | BodyTooLarge(_)
            | BodyTimeout(_)
            | BodyIncomplete(_)
            | BodyMalformed
            | TooDeep(_)
            | InvalidRequest { .. }
            | BatchTooLong { .. }
            | SessionIdMismatch(_)
            | NoServerStream
            | MissingStreamId
            | TooManyStreams(_) => jsonrpc::INVALID_REQUEST,
            Unauthenticated(_) | Challenged { .. } => jsonrpc::UNAUTHENTICATED,
            SessionNotFound(_) | SessionTerminated(_) | StreamNotOpen { .. } => {
                jsonrpc::SESSION_NOT_FOUND
            }
            Forbidden(_)
            | NotOwnSession { .. }
            | AccessDenied { .. }
            | StepUp(_)
            | CallDenied(_)
            | WriteDenied(_) => jsonrpc::AUTH_DENIED,
            StorageUnavailable | TrailUnavailable | Closing(_) | ToolFailed { .. } | Internal => {
                jsonrpc::INTERNAL_ERROR
            }
            MethodNotFound(_) | UnknownTool(_) => jsonrpc::METHOD_NOT_FOUND,
            InsufficientStorage(_) => jsonrpc::INSUFFICIENT_STORAGE,
            InvalidParams { .. } | InvalidArguments { .. } | MissingMeta(_) | UnknownPrompt(_) => {
                jsonrpc::INVALID_PARAMS
            }
            UnknownResource(_) => jsonrpc::RESOURCE_NOT_FOUND,
            RateLimited(_) | CredentialGuesses { .. } => jsonrpc::RATE_LIMITED,
            Remote { code, .. } => *code,
        }
    }

    /// `error.data`, where the error has any.
    fn data(&self) -> Option<Value> {
        use McpError::*;
        let data = match self {
            Parse(detail) => json!({ "detail": echo(detail) }),
            UnsupportedVersion(requested) => {
                json!({ "supported": protocol::ALL, "requested": echo(requested) })
            }
            HeaderMismatch {
                header,
                decision_id,
                ..
            } => json!({ "header": echo(header), "decisionId": decision_id }),
            MissingClientCapability { required, .. } => {
                let caps: serde_json::Map<String, Value> =
                    required.iter().map(|c| (c.clone(), json!({}))).collect();
                json!({ "requiredCapabilities": caps })
            }
            MissingMeta(field) => json!({ "field": field }),
            InvalidRequest { reason, .. } => json!({ "reason": echo(reason) }),
            BatchTooLong { max, .. } => json!({ "maxBatchLength": max }),
            AccessDenied {
                decision_id,
                advice,
            } => json!({ "decisionId": decision_id, "advice": advice }),
            NotOwnSession { decision_id, .. } => json!({ "decisionId": decision_id }),
            TooManyStreams(max) => json!({ "maxStreamsPerKey": max }),
            InsufficientStorage(s) => json!({
                "freeBytes": s.free_bytes,
                "minFreeBytes": s.min_free_bytes,
            }),
            RateLimited(r) => {
                let mut data = json!({
                    "retryAfterSeconds": r.retry_after_secs,
                    "limit": r.level,
                    "perSecond": r.per_second,
                    "burst": r.burst,
                    "cost": r.cost,
                });
                if let (Some(id), Value::Object(map)) = (&r.decision_id, &mut data) {
                    map.insert("decisionId".into(), id.as_str().into());
                }
                data
            }
            CredentialGuesses {
                scope,
                retry_after_secs,
            } => json!({
                "retryAfterSeconds": retry_after_secs,
                "limit": "credential_guesses",
                "scope": scope,
            }),
            MethodNotFound(method) => json!({ "method": echo(method) }),
            InvalidParams { field, .. } => json!({ "field": field }),
            UnknownTool(tool) | ToolFailed { tool, .. } => json!({ "tool": echo(tool) }),
            UnknownResource(uri) => json!({ "uri": echo(uri) }),
            UnknownPrompt(name) => json!({ "prompt": echo(name) }),
            InvalidArguments { tool, errors } => json!({
                "tool": echo(tool),
                "field": echo(first_field(errors)),
                "errors": errors.iter().map(|e| json!({ "field": echo(&e.field), "message": prefix(&e.message, MESSAGE_MAX_CHARS) })).collect::<Vec<_>>(),
            }),
            CallDenied(d) | WriteDenied(d) => json!({
                "decisionId": d.decision_id,
                "tool": d.tool,
                "reasons": d.reasons,
                "advice": d.advice,
            }),
            StepUp(s) => {
                let mut data = json!({
                    "decisionId": s.decision_id,
                    "reasons": s.reasons,
                    "advice": s.advice,
                    "requiredScopes": s.missing,
                    "scope": s.scopes.iter().filter(|x| *x != "offline_access").cloned().collect::<Vec<_>>().join(" "),
                });
                if let (Some(tool), Value::Object(map)) = (&s.tool, &mut data) {
                    map.insert("tool".into(), tool.as_str().into());
                }
                data
            }
            Remote { data, .. } => data.clone(),
            _ => return None,
        };
        Some(data)
    }

    /// The JSON-RPC error object.
    pub fn rpc(&self) -> RpcError {
        RpcError {
            code: self.code(),
            message: self.to_string(),
            data: self.data(),
        }
    }

    /// The JSON-RPC code at 2026-07-28, whose changes are: an unknown (or
    /// hidden) tool is -32602 (invalid params), not -32601, and so is an
    /// unknown (or hidden) resource, not -32002.
    pub fn modern_code(&self) -> i64 {
        match self {
            McpError::UnknownTool(_) | McpError::UnknownResource(_) => jsonrpc::INVALID_PARAMS,
            _ => self.code(),
        }
    }

    /// The HTTP status at 2026-07-28: an unknown method answers 404 (so a
    /// client tells it from a server without the method's era); the rest
    /// as [`McpError::status`].
    pub fn modern_status(&self) -> StatusCode {
        match self {
            McpError::MethodNotFound(_) => StatusCode::NOT_FOUND,
            // A fronted server's -32021 is the caller's to fix, as the
            // gateway's own is.
            McpError::Remote { code, .. } if *code == jsonrpc::MISSING_CLIENT_CAPABILITY => {
                StatusCode::BAD_REQUEST
            }
            _ => self.status(),
        }
    }

    /// The JSON-RPC error object at 2026-07-28.
    pub fn modern_rpc(&self) -> RpcError {
        RpcError {
            code: self.modern_code(),
            ..self.rpc()
        }
    }

    /// The id a whole-request error answers (a single invalid request's
    /// own id when it had one, else `null`).
    fn id(&self) -> Id {
        match self {
            McpError::InvalidRequest { id, .. } => id.clone(),
            _ => Id::null(),
        }
    }
}

impl McpError {
    /// A fronted server's failure: its code and message, `data` (the
    /// gateway's fields) with the server's own `error.data` as `detail`;
    /// for a -32021, its `requiredCapabilities` also at the top, where the
    /// revision puts them. An upstream MCP server's own error (class
    /// `upstream-error`) is marked `source: "upstream"`: its code may be
    /// one the gateway answers its own decisions with (-32003, -3220x,
    /// -32029), and the mark tells the agent no gateway decided it.
    pub fn remote(code: i64, message: String, mut data: Value, detail: Value) -> McpError {
        if data.get("class").and_then(Value::as_str) == Some(UPSTREAM_ERROR) {
            data["source"] = "upstream".into();
        }
        if code == jsonrpc::MISSING_CLIENT_CAPABILITY
            && let Some(required) = detail.get("requiredCapabilities").filter(|r| r.is_object())
        {
            data["requiredCapabilities"] = required.clone();
        }
        data["detail"] = detail;
        McpError::Remote {
            code,
            message,
            data,
        }
    }

    /// The answer to a failed 2026-07-28 request: its status and code at
    /// that revision, with the request's id when it had one.
    pub fn modern_response(self, id: Option<&Id>) -> Response {
        let id = id.cloned().unwrap_or_else(|| self.id());
        let (status, rpc) = (self.modern_status(), self.modern_rpc());
        self.response(&id, status, &rpc)
    }

    fn response(self, id: &Id, status: StatusCode, rpc: &RpcError) -> Response {
        let body = jsonrpc::error_body(id, rpc);
        let mut resp = (status, body).into_response();
        if let McpError::Challenged {
            refused: Some(reason),
            ..
        } = &self
        {
            resp.extensions_mut().insert(RefusedToken(reason));
        }
        let headers = resp.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        match self {
            McpError::Unauthenticated(_) => {
                headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            McpError::Challenged { challenge, .. } => {
                let value = HeaderValue::from_str(&challenge)
                    .unwrap_or_else(|_| HeaderValue::from_static("Bearer"));
                headers.insert(header::WWW_AUTHENTICATE, value);
            }
            McpError::StepUp(refusal) => {
                headers.insert(header::WWW_AUTHENTICATE, step_up_header(&refusal));
            }
            McpError::NoServerStream => {
                headers.insert(header::ALLOW, HeaderValue::from_static("POST, DELETE"));
            }
            McpError::StatelessOnly => {
                headers.insert(header::ALLOW, HeaderValue::from_static("POST"));
            }
            McpError::TooManyStreams(_) => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
            }
            McpError::RateLimited(r) => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(r.retry_after_secs));
            }
            McpError::CredentialGuesses {
                retry_after_secs, ..
            } => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(retry_after_secs));
            }
            // The rest of the body is not read: the connection cannot carry
            // another request.
            McpError::BodyTooLarge(_)
            | McpError::BodyTimeout(_)
            | McpError::BodyIncomplete(_)
            | McpError::BodyMalformed => {
                headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            _ => {}
        }
        resp
    }
}

/// On the answer to a request whose access token the gateway refused:
/// why ([`crate::identity::TokenError::reason`]). The credential-guess
/// guard reads it to charge the guess and record the burst.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefusedToken(pub &'static str);

impl McpError {
    /// The answer to a request that could not be tied to a session.
    pub fn resolving(e: ResolveError) -> McpError {
        match e {
            ResolveError::Credential(_) | ResolveError::UnknownKey => {
                McpError::Unauthenticated(e.to_string())
            }
            ResolveError::NoSession(_) => McpError::SessionNotFound(e.to_string()),
            ResolveError::CrossOrg(_) | ResolveError::Entities(_) | ResolveError::PdpKey => {
                McpError::Forbidden(e.to_string())
            }
            ResolveError::Store(err) => {
                tracing::error!(error = %err, "store failure while resolving a session");
                McpError::StorageUnavailable
            }
        }
    }
}

/// Makes `resp` (a body of answers one of which is a step-up) the
/// step-up's: 403 with its challenge. A client re-authorizes only on the
/// HTTP status, so the answers of the other messages ride along.
pub fn stepped_up(resp: &mut Response, refusal: &StepUpRefusal) {
    *resp.status_mut() = StatusCode::FORBIDDEN;
    resp.headers_mut()
        .insert(header::WWW_AUTHENTICATE, step_up_header(refusal));
}

/// The challenge of a step-up as a header value.
fn step_up_header(refusal: &StepUpRefusal) -> HeaderValue {
    HeaderValue::from_str(&refusal.challenge())
        .unwrap_or_else(|_| HeaderValue::from_static("Bearer error=\"insufficient_scope\""))
}

impl IntoResponse for McpError {
    fn into_response(self) -> Response {
        let (id, status, rpc) = (self.id(), self.status(), self.rpc());
        self.response(&id, status, &rpc)
    }
}

impl From<OpenError> for McpError {
    fn from(e: OpenError) -> Self {
        match e {
            OpenError::TooMany(max) => McpError::TooManyStreams(max),
            OpenError::Closed => McpError::Closing("the gateway is shutting down"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(missing: &[&str], scopes: &[&str]) -> StepUpRefusal {
        StepUpRefusal {
            tool: Some("t".into()),
            decision_id: "d-1".into(),
            reasons: vec!["p".into()],
            advice: Vec::new(),
            missing: missing.iter().map(|s| s.to_string()).collect(),
            scopes: scopes.iter().map(|s| s.to_string()).collect(),
            metadata_url: "https://gw.example/.well-known/oauth-protected-resource/mcp/a/p".into(),
        }
    }

    #[test]
    fn a_step_up_is_a_403_challenge_naming_every_scope_once() {
        let mut first = refusal(&["mcp:admin"], &["offline_access", "mcp:read", "mcp:admin"]);
        first.merge(&refusal(&["files:write"], &["mcp:read", "files:write"]));
        assert_eq!(
            first.challenge(),
            "Bearer error=\"insufficient_scope\", resource_metadata=\"https://gw.example/.well-known/oauth-protected-resource/mcp/a/p\", scope=\"mcp:read mcp:admin files:write\", error_description=\"this request needs the scopes mcp:admin files:write; authorize again with every scope this challenge names\""
        );
        let error = McpError::StepUp(Box::new(first));
        assert_eq!(
            (error.status(), error.code()),
            (StatusCode::FORBIDDEN, jsonrpc::AUTH_DENIED)
        );
        let data = error.rpc().data.unwrap_or_default();
        assert_eq!(data["decisionId"], "d-1");
        assert_eq!(data["requiredScopes"], json!(["mcp:admin", "files:write"]));
        assert_eq!(data["scope"], "mcp:read mcp:admin files:write");
        let resp = error.into_response();
        assert_eq!(resp.status(), StatusCode::FORBIDDEN);
        let header = resp.headers().get(header::WWW_AUTHENTICATE);
        assert!(
            header.is_some_and(|v| v
                .as_bytes()
                .starts_with(b"Bearer error=\"insufficient_scope\"")),
            "{header:?}"
        );
    }
}
