//! The two servers `sdk` compares cedargate with, each run as this bench
//! binary in a process of its own (so its CPU is its own):
//! - `rmcp`: the official Rust SDK's Streamable HTTP service, stateless,
//!   JSON answers, with a handler that lists the gateway's two memory tools
//!   and answers a call with the gateway's own empty-recall result;
//! - `floor`: a bare axum route that parses the JSON-RPC request and
//!   answers the same results, nothing else;
//! - `forwarder`: a bare proxy (`benches/upstream.rs`): each POST is sent on
//!   to [`UPSTREAM_VAR`] with its body and MCP headers, and the answer
//!   returned as it came: what forwarding alone costs;
//! - `collector`: an OTLP/HTTP trace receiver (`POST /v1/traces`) that
//!   takes every export and keeps nothing (`upstream`'s traced way).
//!
//! `rmcp` and `floor` read the results from the JSON file named by
//! [`RESULTS_VAR`]; all listen on [`ADDR_VAR`], path [`PATH`].

use std::sync::Arc;

use axum::Router;
use axum::response::IntoResponse;
use axum::routing::post;
use rmcp::ErrorData;
use rmcp::handler::server::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Value, json};

use super::support::Res;

/// Which server this process is.
pub const ROLE_VAR: &str = "SDK_BENCH_ROLE";
/// Where it listens.
pub const ADDR_VAR: &str = "SDK_BENCH_ADDR";
/// The JSON file with `list` (a `tools/list` result) and `call` (a
/// `tools/call` result).
pub const RESULTS_VAR: &str = "SDK_BENCH_RESULTS";
/// The MCP endpoint the forwarder forwards to.
pub const UPSTREAM_VAR: &str = "SDK_BENCH_UPSTREAM";
/// The MCP path of all three.
pub const PATH: &str = "/mcp";

/// Runs the server `role` until killed.
pub fn serve(role: &str) -> Res<()> {
    let addr: std::net::SocketAddr = std::env::var(ADDR_VAR)?.parse()?;
    let results = || -> Res<Value> {
        Ok(serde_json::from_slice(&std::fs::read(std::env::var(
            RESULTS_VAR,
        )?)?)?)
    };
    let app = match role {
        "rmcp" => rmcp_app(&results()?)?,
        "floor" => floor_app(&results()?),
        "forwarder" => forwarder_app(std::env::var(UPSTREAM_VAR)?)?,
        "collector" => collector_app(),
        other => return Err(format!("unknown {ROLE_VAR} `{other}`").into()),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        axum::serve(listener, app).await
    })?;
    Ok(())
}

/// The SDK handler: the same tools, the same call result.
#[derive(Clone)]
struct Handler {
    tools: Arc<ListToolsResult>,
    call: Arc<CallToolResult>,
}

impl ServerHandler for Handler {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok((*self.tools).clone())
    }

    async fn call_tool(
        &self,
        _request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        Ok((*self.call).clone().into())
    }
}

fn rmcp_app(results: &Value) -> Res<Router> {
    let handler = Handler {
        tools: Arc::new(serde_json::from_value(results["list"].clone())?),
        call: Arc::new(serde_json::from_value(results["call"].clone())?),
    };
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true);
    let service = StreamableHttpService::new(
        move || Ok(handler.clone()),
        Arc::new(NeverSessionManager::default()),
        config,
    );
    Ok(Router::new().route_service(PATH, service))
}

fn floor_app(results: &Value) -> Router {
    let list = Arc::new(results["list"].clone());
    let call = Arc::new(results["call"].clone());
    Router::new().route(
        PATH,
        post(move |body: axum::body::Bytes| {
            let (list, call) = (list.clone(), call.clone());
            async move {
                let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                let result = match request["method"].as_str() {
                    Some("tools/list") => (*list).clone(),
                    Some("tools/call") => (*call).clone(),
                    _ => json!({}),
                };
                axum::Json(json!({"jsonrpc": "2.0", "id": request["id"], "result": result}))
            }
        }),
    )
}

fn forwarder_app(upstream: String) -> Res<Router> {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(64)
        .tcp_nodelay(true)
        .build()?;
    let forward = move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
        let (client, upstream) = (client.clone(), upstream.clone());
        async move {
            let mut req = client.post(&upstream).body(body);
            for name in [
                "content-type",
                "accept",
                "mcp-protocol-version",
                "mcp-session-id",
            ] {
                if let Some(v) = headers.get(name) {
                    req = req.header(name, v.as_bytes());
                }
            }
            let Ok(resp) = req.send().await else {
                return (axum::http::StatusCode::BAD_GATEWAY, Vec::new()).into_response();
            };
            let status = axum::http::StatusCode::from_u16(resp.status().as_u16())
                .unwrap_or(axum::http::StatusCode::BAD_GATEWAY);
            let content_type = resp.headers().get("content-type").cloned();
            let bytes = resp.bytes().await.unwrap_or_default();
            let mut out = (status, bytes.to_vec()).into_response();
            if let Some(ct) = content_type
                && let Ok(v) = axum::http::HeaderValue::from_bytes(ct.as_bytes())
            {
                out.headers_mut().insert("content-type", v);
            }
            out
        }
    };
    Ok(Router::new().route(PATH, post(forward)))
}

/// Answers every OTLP/HTTP export with an empty success, once its body is
/// read.
fn collector_app() -> Router {
    Router::new().route(
        "/v1/traces",
        post(|_body: axum::body::Bytes| async {
            (
                [("content-type", "application/x-protobuf")],
                Vec::<u8>::new(),
            )
        }),
    )
}
