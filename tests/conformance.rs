//! The official MCP conformance suite (`@modelcontextprotocol/conformance`,
//! server mode) against the real gateway, in both eras.
//!
//! The suite cannot send an `Authorization` header, so it talks to a small
//! proxy started here on a free loopback port, which forwards every request
//! to the tenant's session URL with the bearer key added and everything else
//! as sent (`Host` and `Origin` included, so the DNS-rebinding scenario
//! reaches the gateway's own allow-lists). Each scenario is one run of the
//! suite; the test reads the checks it saved (`checks.json`) and requires at
//! least one success and no failure.
//!
//! The gateway under test fronts one fixture upstream (started here), a
//! 2026-07-28 server registered with `prefix: ""`: the suite calls the
//! first listed tool with empty arguments and expects a result, and
//! exercises `x-mcp-header` on the first tool that has one, so a policy
//! lets the agent see only the fixture's tools: `echo`, which takes no
//! required argument and mirrors `region` into `Mcp-Param-Region`, and the
//! suite's three diagnostic tools, which exercise what the gateway relays
//! between a 2026-07-28 caller and such a server (its declared client
//! capabilities, an `input_required` round trip, -32021 as HTTP 400, no
//! log the caller did not ask for). The fixture also lists one resource,
//! one template and one prompt, so the caching scenario reads every list
//! through the gateway.
//!
//! Figures (suite 0.2.0-alpha.12):
//! - 2026-07-28: 6 of 6 scenarios pass, every check:
//!   `server-stateless`, `tools-list`, `dns-rebinding-protection`,
//!   `caching` (every list and `resources/read` with its hints),
//!   `http-header-validation`, `http-custom-header-server-validation`.
//! - 2025-11-25: 5 of 5 pass: `server-initialize`, `ping`, `tools-list`,
//!   `dns-rebinding-protection`, `server-session-lifecycle`.
//! - Fronting `@modelcontextprotocol/server-everything` with `prefix: ""`
//!   ([`FRONTED`]: tools, resources and prompts scenarios), every check the
//!   upstream passes directly passes through the gateway, both lists
//!   computed per run: at 2025-11-25, 23 directly and 23 through; at
//!   2026-07-28, which that server does not speak, 0 directly and 19
//!   through (at least [`COMPARED_FLOOR`] on the side that speaks the
//!   revision, and a scenario the suite cannot run fails the test). A
//!   direct pass on a tool the server does not have (answered
//!   `isError: true`, "Tool … not found") exercises nothing and is left out
//!   of the comparison ([`exercised`]).
//!
//! A control run through a proxy holding a wrong key must fail, so a suite
//! that reports nothing (or a parse that finds nothing) cannot pass.
//!
//! The suite and the Node it needs (>= 22) are installed at pinned versions
//! by `tests/conformance/setup.sh` (run by `.ci/run`, and here when
//! missing). Without network, outside CI, the tests skip loudly; with
//! `CI=true` a failed install fails them.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use common::{Tenant, TestGateway, repo};
use reqwest::Method;
use serde_json::{Value, json};

/// The 2026-07-28 scenarios that need no fixture tool.
const MODERN: &[&str] = &[
    "server-stateless",
    "tools-list",
    "dns-rebinding-protection",
    "caching",
    "http-header-validation",
    "http-custom-header-server-validation",
];

/// The 2025-11-25 scenarios that need no fixture tool.
const LEGACY: &[&str] = &[
    "server-initialize",
    "ping",
    "tools-list",
    "dns-rebinding-protection",
    "server-session-lifecycle",
];

/// Upper bound on one suite run (a hang fails instead of blocking); the
/// suite's own per-scenario timeout is shorter.
const RUN_TIMEOUT: Duration = Duration::from_secs(120);

fn suite_dir() -> PathBuf {
    repo().join("tests/conformance")
}

/// Runs the installer once per test binary.
fn installed() -> bool {
    static SETUP: OnceLock<Result<(), String>> = OnceLock::new();
    common::setup::install_once(
        &SETUP,
        &suite_dir().join("setup.sh"),
        "the MCP conformance suite",
    )
}

/// What the agent under test may see: only the fixture upstream's tools.
/// The suite calls the first listed tool with empty arguments and expects
/// a result, and exercises `x-mcp-header` on the first tool that has one;
/// the gateway's own tools take required arguments and carry no
/// annotation.
const FIXTURE_ONLY: &str = r#"
@id("conformance-fixture-only")
@advice("this agent sees the conformance fixture only")
forbid (principal, action == Gateway::Action::"view_tool", resource)
unless { resource in [
    Gateway::Tool::"echo",
    Gateway::Tool::"test_missing_capability",
    Gateway::Tool::"test_streaming_elicitation",
    Gateway::Tool::"test_logging_tool"
] };
"#;

/// A gateway whose tenant `acme` has the fixture upstream registered.
async fn gateway() -> (TestGateway, Tenant) {
    let g = TestGateway::start_with_policy("conformance.cedar", FIXTURE_ONLY).await;
    let t = g.tenant("acme").await;
    let (status, server) = g
        .admin(
            Method::POST,
            "/admin/orgs/acme/mcp-servers",
            Some(
                json!({"name": "Fixture", "transport": "streamable-http", "prefix": "",
                        "url": fixture().await, "timeoutMs": 5000}),
            ),
        )
        .await;
    assert_eq!(status, 201, "{server}");
    let mut names = g.tool_names(&t).await;
    names.sort();
    assert_eq!(names, FIXTURE_TOOLS);
    (g, t)
}

/// The fixture's tools, by name (the order a 2026-07-28 list has).
const FIXTURE_TOOLS: [&str; 4] = [
    "echo",
    "test_logging_tool",
    "test_missing_capability",
    "test_streaming_elicitation",
];

/// A minimal 2026-07-28 upstream MCP server (it answers `server/discover`,
/// so the gateway speaks that revision to it) with `echo`, which takes no
/// required argument and mirrors `region` into the `Mcp-Param-Region`
/// header, and the suite's diagnostic tools (see [`diagnostic`]).
async fn fixture() -> String {
    let app = axum::Router::new().route("/mcp", axum::routing::post(fixture_answer));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}/mcp")
}

async fn fixture_answer(body: String) -> Response {
    let msg: Value = serde_json::from_str(&body).unwrap();
    let Some(id) = msg.get("id").cloned() else {
        return StatusCode::ACCEPTED.into_response();
    };
    let params = &msg["params"];
    let result = match msg["method"].as_str().unwrap_or_default() {
        "server/discover" => json!({"supportedVersions": ["2026-07-28"],
                                    "capabilities": {"tools": {}, "resources": {}, "prompts": {}},
                                    "serverInfo": {"name": "fixture", "version": "1"}}),
        "tools/list" => json!({"tools": [{
            "name": "echo",
            "description": "Answers the arguments it was given",
            "inputSchema": {"type": "object", "properties": {
                "region": {"type": "string", "x-mcp-header": "Region"},
                "query": {"type": "string"}
            }}
        }, diagnostic_tool("test_missing_capability", "Asks the caller's model to sample"),
           diagnostic_tool("test_streaming_elicitation", "Asks the caller's user to confirm"),
           diagnostic_tool("test_logging_tool", "Logs while it runs")]}),
        "tools/call" => match diagnostic(&id, params) {
            Ok(answer) => return answer,
            Err(()) => {
                let text = params["arguments"].to_string();
                json!({"content": [{"type": "text", "text": text}], "isError": false})
            }
        },
        "resources/list" => json!({"resources": [
            {"uri": "fixture://notes/readme", "name": "readme", "mimeType": "text/plain"}
        ]}),
        "resources/templates/list" => json!({"resourceTemplates": [
            {"uriTemplate": "fixture://notes/{name}", "name": "note", "mimeType": "text/plain"}
        ]}),
        "resources/read" => json!({"contents": [{
            "uri": params["uri"], "mimeType": "text/plain", "text": "a note"
        }]}),
        "prompts/list" => json!({"prompts": [{"name": "greet", "description": "Says hello"}]}),
        "prompts/get" => json!({"messages": [
            {"role": "user", "content": {"type": "text", "text": "Hello"}}
        ]}),
        _ => json!({}),
    };
    axum::Json(json!({"jsonrpc": "2.0", "id": id, "result": result})).into_response()
}

fn diagnostic_tool(name: &str, description: &str) -> Value {
    json!({"name": name, "description": description,
           "inputSchema": {"type": "object", "properties": {}}})
}

/// The suite's diagnostic tools, as its reference server behaves, deciding
/// on the client capabilities the gateway relays in `_meta`:
/// `test_missing_capability` needs `sampling` and `test_streaming_elicitation`
/// `elicitation` (-32021 naming it when undeclared; else an
/// `input_required` result asking for it, and on the retry with the answer
/// a result quoting it); `test_logging_tool` logs (`notifications/message`
/// on an event-stream answer) whatever the caller asked, which the gateway
/// must not pass on. `Err` for any other tool.
fn diagnostic(id: &Value, params: &Value) -> Result<Response, ()> {
    let (capability, key, method) = match params["name"].as_str().unwrap_or_default() {
        "test_missing_capability" => ("sampling", "sample", "sampling/createMessage"),
        "test_streaming_elicitation" => ("elicitation", "confirm", "elicitation/create"),
        "test_logging_tool" => {
            let log = json!({"jsonrpc": "2.0", "method": "notifications/message",
                             "params": {"level": "info", "data": "working"}});
            let done = json!({"jsonrpc": "2.0", "id": id, "result":
                              {"content": [{"type": "text", "text": "logged"}]}});
            let body = format!("event: message\ndata: {log}\n\nevent: message\ndata: {done}\n\n");
            return Ok(([(header::CONTENT_TYPE, "text/event-stream")], body).into_response());
        }
        _ => return Err(()),
    };
    let meta = &params["_meta"];
    let declared = meta["io.modelcontextprotocol/clientCapabilities"][capability].is_object();
    let answer = if !declared {
        json!({"error": {"code": -32021, "message": format!("{capability} is required"),
                         "data": {"requiredCapabilities": {capability: {}}}}})
    } else if let Some(response) = params["inputResponses"].get(key) {
        assert_eq!(
            params["requestState"], "fixture-state",
            "the state comes back as sent"
        );
        json!({"result": {"content": [{"type": "text", "text": format!("answered: {response}")}]}})
    } else {
        json!({"result": {"resultType": "input_required", "requestState": "fixture-state",
                          "inputRequests": {key: {"method": method, "params": {}}}}})
    };
    let mut answer = answer;
    answer["jsonrpc"] = json!("2.0");
    answer["id"] = id.clone();
    Ok(axum::Json(answer).into_response())
}

/// Request headers the proxy does not pass on (hop-by-hop, or set again
/// by the client it forwards with).
const DROPPED_REQUEST: &[header::HeaderName] = &[
    header::CONNECTION,
    header::CONTENT_LENGTH,
    header::TRANSFER_ENCODING,
    header::AUTHORIZATION,
];

/// Response headers the proxy does not pass back.
const DROPPED_RESPONSE: &[header::HeaderName] = &[
    header::CONNECTION,
    header::CONTENT_LENGTH,
    header::TRANSFER_ENCODING,
];

/// Starts the header-adding proxy in front of `target` (a session URL) and
/// answers the URL the suite is given.
async fn proxy(target: String, key: String) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let app = axum::Router::new()
        .fallback(move |req: Request| forward(client.clone(), target.clone(), key.clone(), req));
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://127.0.0.1:{port}/mcp")
}

/// Forwards one request with the bearer key; the answer streams back as
/// it comes (a `subscriptions/listen` stream stays open until the suite
/// closes it, which closes the gateway's side too).
async fn forward(client: reqwest::Client, target: String, key: String, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let body = axum::body::to_bytes(body, usize::MAX).await.unwrap();
    let url = match parts.uri.query() {
        Some(q) => format!("{target}?{q}"),
        None => target,
    };
    let mut headers = parts.headers;
    for h in DROPPED_REQUEST {
        headers.remove(h);
    }
    headers.insert(
        header::AUTHORIZATION,
        HeaderValue::from_str(&format!("Bearer {key}")).unwrap(),
    );
    let answer = client
        .request(parts.method, url)
        .headers(headers)
        .body(body)
        .send()
        .await;
    let mut answer = match answer {
        Ok(a) => a,
        Err(e) => return (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
    };
    let status = answer.status();
    let mut headers: HeaderMap = answer.headers().clone();
    for h in DROPPED_RESPONSE {
        headers.remove(h);
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(16);
    tokio::spawn(async move {
        loop {
            let chunk = match answer.chunk().await {
                Ok(Some(c)) => Ok(c),
                Ok(None) => break,
                Err(e) => Err(std::io::Error::other(e)),
            };
            let failed = chunk.is_err();
            if tx.send(chunk).await.is_err() || failed {
                break;
            }
        }
    });
    let body = Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx));
    (status, headers, body).into_response()
}

/// One scenario's verdict: the number of checks that passed, or why it
/// failed.
type Verdict = Result<usize, String>;

/// Runs one scenario of the suite at `version` against `url`.
async fn scenario(url: &str, name: &str, version: &str) -> Verdict {
    let (checks, exited_ok, log) = run_suite(url, name, version).await?;
    judge(&checks, exited_ok).map_err(|e| format!("{e}\n{log}"))
}

/// Runs one scenario and answers the checks it saved, whether the suite
/// exited successfully, and its output.
async fn run_suite(
    url: &str,
    name: &str,
    version: &str,
) -> Result<(Vec<Value>, bool, String), String> {
    let out_dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let dir = suite_dir();
    let mut cmd = tokio::process::Command::new(dir.join("node_modules/node/bin/node"));
    cmd.arg(dir.join("node_modules/@modelcontextprotocol/conformance/dist/index.js"))
        .args(["server", "--url", url, "--scenario", name])
        .args(["--spec-version", version, "--timeout", "20000", "-o"])
        .arg(out_dir.path())
        .current_dir(&dir)
        .env("HOME", home.path())
        .env("NO_PROXY", "127.0.0.1,localhost")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for var in ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"] {
        cmd.env_remove(var).env_remove(var.to_lowercase());
    }
    let child = cmd.spawn().expect("cannot start the conformance suite");
    let out = tokio::time::timeout(RUN_TIMEOUT, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("scenario {name} at {version} hung"))
        .unwrap();
    let log = format!(
        "stdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let checks = saved_checks(out_dir.path(), name).map_err(|e| format!("{e}\n{log}"))?;
    Ok((checks, out.status.success(), log))
}

/// The checks the suite saved for `name` under `dir`
/// (`server-<name>-<timestamp>/checks.json`).
fn saved_checks(dir: &Path, name: &str) -> Result<Vec<Value>, String> {
    let prefix = format!("server-{name}-");
    let run = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(Result::ok)
        .find(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .ok_or("the suite saved no results (scenario skipped or not run)")?;
    let text = std::fs::read_to_string(run.path().join("checks.json"))
        .map_err(|e| format!("no checks.json: {e}"))?;
    let checks: Value = serde_json::from_str(&text).map_err(|e| format!("checks.json: {e}"))?;
    checks
        .as_array()
        .cloned()
        .ok_or_else(|| format!("checks.json is not a list: {text}"))
}

/// At least one check passed, none failed, and the suite agreed.
fn judge(checks: &[Value], exited_ok: bool) -> Verdict {
    let failed: Vec<String> = checks
        .iter()
        .filter(|c| c["status"] == "FAILURE")
        .map(|c| format!("{}: {}", c["id"], c["errorMessage"]))
        .collect();
    let passed = checks.iter().filter(|c| c["status"] == "SUCCESS").count();
    if !failed.is_empty() {
        return Err(format!("failed checks: {failed:#?}"));
    }
    if passed == 0 {
        return Err(format!("no check passed: {checks:#?}"));
    }
    if !exited_ok {
        return Err("the suite exited with a failure".into());
    }
    Ok(passed)
}

/// Runs `scenarios` at `version` through a proxy holding a valid key, and
/// asserts every one passed.
async fn run_era(version: &str, scenarios: &[&str]) {
    if !installed() {
        return;
    }
    let (g, t) = gateway().await;
    let url = proxy(t.mcp_url.clone(), t.key.clone()).await;
    let mut failures = Vec::new();
    for name in scenarios {
        match scenario(&url, name, version).await {
            Ok(passed) => eprintln!("{version} {name}: {passed} checks passed"),
            Err(why) => failures.push(format!("{version} {name}: {why}")),
        }
    }
    g.stop().await;
    assert!(
        failures.is_empty(),
        "{} of {} scenarios failed:\n{}",
        failures.len(),
        scenarios.len(),
        failures.join("\n\n")
    );
}

#[tokio::test]
async fn conformance_2026_07_28_scenarios_pass() {
    run_era("2026-07-28", MODERN).await;
}

#[tokio::test]
async fn conformance_2025_11_25_scenarios_pass() {
    run_era("2025-11-25", LEGACY).await;
}

/// The control: the same suite through a proxy whose key the gateway does
/// not know is refused (401) and must be reported as failing.
#[tokio::test]
async fn conformance_run_without_a_valid_key_fails() {
    if !installed() {
        return;
    }
    let (g, t) = gateway().await;
    let url = proxy(t.mcp_url.clone(), "cg_not_a_key".into()).await;
    for (version, name) in [("2026-07-28", "tools-list"), ("2025-11-25", "tools-list")] {
        let verdict = scenario(&url, name, version).await;
        assert!(
            verdict.is_err(),
            "{version} {name} passed without a key: {verdict:?}"
        );
    }
    g.stop().await;
}

/// The scenarios of tools, resources and prompts (and the basics around
/// them) compared between an upstream and the gateway fronting it.
const FRONTED: &[&str] = &[
    "server-initialize",
    "ping",
    "tools-list",
    "tools-call-simple-text",
    "tools-call-image",
    "tools-call-audio",
    "tools-call-error",
    "resources-list",
    "resources-read-text",
    "resources-read-binary",
    "resources-templates-read",
    "prompts-list",
    "prompts-get-simple",
    "prompts-get-with-args",
    "prompts-get-embedded-resource",
    "prompts-get-with-image",
];

/// [`FRONTED`] as the suite has them at `version`: 2026-07-28 has no
/// `initialize` handshake, and the suite no `server-initialize` nor `ping`
/// scenario for it (`conformance list --server --spec-version 2026-07-28`).
fn fronted(version: &str) -> Vec<&'static str> {
    const LEGACY_ONLY: [&str; 2] = ["server-initialize", "ping"];
    FRONTED
        .iter()
        .copied()
        .filter(|name| version != "2026-07-28" || !LEGACY_ONLY.contains(name))
        .collect()
}

/// The fewest checks a comparison with `server-everything` rests on, at
/// each revision (23 pass directly at 2025-11-25, 19 through the gateway at
/// 2026-07-28): fewer means the suite or the upstream changed under the
/// test, and an equal comparison would prove little.
const COMPARED_FLOOR: usize = 10;

/// The ids (`scenario/check`) of the checks that passed.
async fn passed_checks(url: &str, version: &str, scenarios: &[&str]) -> Vec<String> {
    let mut passed = Vec::new();
    for name in scenarios {
        // A scenario the suite cannot run (no saved checks) fails the test:
        // dropping it would shrink both lists and still compare equal.
        let (checks, _, _) = run_suite(url, name, version)
            .await
            .unwrap_or_else(|e| panic!("{url} {version}: the suite could not run {name}: {e}"));
        for c in checks.iter().filter(|c| c["status"] == "FAILURE") {
            eprintln!(
                "{url} {version} {name}: {} failed: {}",
                c["id"], c["errorMessage"]
            );
        }
        passed.extend(
            checks
                .iter()
                .filter(|c| c["status"] == "SUCCESS" && exercised(c))
                .map(|c| format!("{name}/{}", c["id"].as_str().unwrap_or_default())),
        );
    }
    passed
}

/// Whether a passed check exercised what it names: the suite also passes
/// a tool scenario whose tool the server does not have when the server
/// answers the call with a tool error (`isError: true`, "Tool … not
/// found"); such a pass says nothing of the scenario and is left out of
/// the comparison (the gateway answers a tool it does not offer -32601,
/// as for a hidden one).
fn exercised(check: &Value) -> bool {
    let vacuous = check["details"]["result"]["isError"] == true;
    if vacuous {
        eprintln!(
            "not compared (the server had no such tool): {}",
            check["id"]
        );
    }
    !vacuous
}

/// `@modelcontextprotocol/server-everything` over Streamable HTTP on a
/// free port (installed by `tests/upstreams/setup.sh`).
async fn everything() -> (String, tokio::process::Child) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let entry = repo()
        .join("tests/upstreams/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let child = tokio::process::Command::new(suite_dir().join("node_modules/node/bin/node"))
        .arg(entry)
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return (format!("http://127.0.0.1:{port}/mcp"), child);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("server-everything did not listen");
}

/// Runs the installer of the upstream servers once per test binary.
fn upstreams_installed() -> bool {
    static SETUP: OnceLock<Result<(), String>> = OnceLock::new();
    common::setup::install_once(
        &SETUP,
        &repo().join("tests/upstreams/setup.sh"),
        "upstream MCP servers",
    )
}

/// Only the gateway's upstream is offered: the built-in tools are hidden,
/// so the session stands in for the upstream exactly.
const UPSTREAM_ONLY: &str = r#"
@id("conformance-upstream-only")
@advice("this agent sees the fronted upstream only")
forbid (principal, action == Gateway::Action::"view_tool", resource)
unless { resource in Gateway::ToolGroup::"upstream" };
"#;

/// The suite's tools, resources and prompts scenarios against
/// `server-everything` directly and through a governed session fronting
/// it with `prefix: ""`: every check the upstream passes directly also
/// passes through the gateway (both lists computed here).
#[tokio::test]
async fn the_gateway_passes_every_check_its_upstream_passes() {
    if !installed() || !upstreams_installed() {
        return;
    }
    let (upstream, _child) = everything().await;
    let g = TestGateway::start_with_policy("conformance.cedar", UPSTREAM_ONLY).await;
    let t = g.tenant("acme").await;
    let (status, server) = g
        .admin(
            Method::POST,
            "/admin/orgs/acme/mcp-servers",
            Some(json!({"name": "everything", "transport": "streamable-http",
                        "prefix": "", "url": upstream, "timeoutMs": 10000})),
        )
        .await;
    assert_eq!(status, 201, "{server}");
    let through_url = proxy(t.mcp_url.clone(), t.key.clone()).await;
    for version in ["2025-11-25", "2026-07-28"] {
        let scenarios = fronted(version);
        let direct = passed_checks(&upstream, version, &scenarios).await;
        let through = passed_checks(&through_url, version, &scenarios).await;
        eprintln!(
            "{version}: {} checks pass directly, {} through the gateway",
            direct.len(),
            through.len()
        );
        let missing: Vec<&String> = direct.iter().filter(|c| !through.contains(c)).collect();
        assert!(
            missing.is_empty(),
            "{version}: passed directly, not through the gateway: {missing:#?}"
        );
        // The floor, at both revisions, on the side that speaks it: at
        // 2025-11-25 the upstream's own passes (what is compared); at
        // 2026-07-28, which the upstream does not speak (it passes none
        // directly, so the comparison above is empty), the gateway's passes
        // fronting it, translated to the upstream's revision.
        let (floor_on, side) = if version == "2026-07-28" {
            (&through, "through the gateway")
        } else {
            (&direct, "directly")
        };
        assert!(
            floor_on.len() >= COMPARED_FLOOR,
            "{version}: only {} checks pass {side}, fewer than {COMPARED_FLOOR}: {floor_on:?}",
            floor_on.len()
        );
    }
    g.stop().await;
}
