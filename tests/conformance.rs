//! The official MCP conformance suite (`@modelcontextprotocol/conformance`,
//! server mode) against the real gateway, in both eras.
//!
//! The suite cannot send an `Authorization` header, so it talks to a small
//! proxy started here on a free loopback port, which forwards every request
//! to the tenant's session URL with the bearer key added and everything else
//! as sent (`Host` and `Origin` included, so the DNS-rebinding scenario
//! reaches the gateway's own allow-lists). Each scenario is one run of the
//! suite; the test reads the checks it saved (`checks.json`) and requires at
//! least one success and no failure but those [`NOT_SERVED`] lists.
//!
//! The gateway under test fronts one fixture upstream (started here): the
//! suite calls the first listed tool with empty arguments and expects a
//! result, and exercises `x-mcp-header` on the first tool that has one, so
//! a policy lets the agent see only the fixture's `fixture.echo`, which
//! takes no required argument and mirrors `region` into `Mcp-Param-Region`.
//!
//! Figures (suite 0.2.0-alpha.12):
//! - 2026-07-28: 6 of 6 scenarios pass (57 checks): `server-stateless` (24),
//!   `tools-list` (3), `dns-rebinding-protection` (2), `caching` (4),
//!   `http-header-validation` (14), `http-custom-header-server-validation`
//!   (10). Seven checks the suite fails for reasons outside the gateway are
//!   listed in [`NOT_SERVED`] and must fail for that reason only: four need
//!   the suite's diagnostic tools (`test_missing_capability`,
//!   `test_streaming_elicitation`, `test_logging_tool`), three the caching
//!   hints of `prompts/list`, `resources/list` and
//!   `resources/templates/list`, which the gateway does not serve (-32601).
//! - 2025-11-25: 5 of 5 pass (13 checks): `server-initialize` (3), `ping`
//!   (2), `tools-list` (3), `dns-rebinding-protection` (2),
//!   `server-session-lifecycle` (3).
//!
//! Left out: the scenarios that need the suite's fixture tools, resources
//! and prompts (`test_simple_text`, `test://static-text`,
//! `test_simple_prompt`, …), and those of methods the gateway does not
//! serve (`logging/setLevel`, `completion/complete`, resources, prompts,
//! tasks, input-required results).
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

/// What the agent under test may see: only the fixture upstream's tool.
/// The suite calls the first listed tool with empty arguments and expects
/// a result, and exercises `x-mcp-header` on the first tool that has one;
/// the gateway's own tools take required arguments and carry no
/// annotation.
const FIXTURE_ONLY: &str = r#"
@id("conformance-fixture-only")
@advice("this agent sees the conformance fixture only")
forbid (principal, action == Gateway::Action::"view_tool", resource)
unless { resource == Gateway::Tool::"fixture.echo" };
"#;

/// A gateway whose tenant `acme` has the fixture upstream registered.
async fn gateway() -> (TestGateway, Tenant) {
    let g = TestGateway::start_with_policy("conformance.cedar", FIXTURE_ONLY).await;
    let t = g.tenant("acme").await;
    let (status, server) = g
        .admin(
            Method::POST,
            "/admin/orgs/acme/mcp-servers",
            Some(json!({"name": "Fixture", "transport": "streamable-http",
                        "url": fixture().await, "timeoutMs": 5000})),
        )
        .await;
    assert_eq!(status, 201, "{server}");
    assert_eq!(g.tool_names(&t).await, ["fixture.echo"]);
    (g, t)
}

/// A minimal upstream MCP server (2025-06-18, JSON answers) with one tool,
/// `echo`, that takes no required argument and mirrors `region` into the
/// `Mcp-Param-Region` header.
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
    let result = match msg["method"].as_str().unwrap_or_default() {
        "initialize" => json!({"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                               "serverInfo": {"name": "fixture", "version": "1"}}),
        "tools/list" => json!({"tools": [{
            "name": "echo",
            "description": "Answers the arguments it was given",
            "inputSchema": {"type": "object", "properties": {
                "region": {"type": "string", "x-mcp-header": "Region"},
                "query": {"type": "string"}
            }}
        }]}),
        "tools/call" => {
            let text = msg["params"]["arguments"].to_string();
            json!({"content": [{"type": "text", "text": text}], "isError": false})
        }
        _ => json!({}),
    };
    axum::Json(json!({"jsonrpc": "2.0", "id": id, "result": result})).into_response()
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
    judge(name, &checks, out.status.success()).map_err(|e| format!("{e}\n{log}"))
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

/// Checks the suite reports as failed for a reason outside the gateway:
/// (scenario, check id, text its message must hold). Anything else that
/// fails, or one of these failing for another reason, fails the test.
const NOT_SERVED: &[(&str, &str, &str)] = &[
    // Diagnostic tools of the suite's reference server.
    (
        "server-stateless",
        "sep-2575-server-rejects-undeclared-capability",
        "'test_missing_capability'",
    ),
    (
        "server-stateless",
        "sep-2575-missing-capability-http-400",
        "'test_missing_capability'",
    ),
    (
        "server-stateless",
        "sep-2575-http-server-no-independent-requests-on-stream",
        "'test_streaming_elicitation'",
    ),
    (
        "server-stateless",
        "sep-2575-server-no-log-without-loglevel",
        "'test_logging_tool'",
    ),
    // The gateway serves no prompts or resources (nor declares them).
    (
        "caching",
        "sep-2549-prompts-list-caching-hints",
        "error -32601",
    ),
    (
        "caching",
        "sep-2549-resources-list-caching-hints",
        "error -32601",
    ),
    (
        "caching",
        "sep-2549-resources-templates-list-caching-hints",
        "error -32601",
    ),
];

/// Whether a failed check of `scenario` is one [`NOT_SERVED`] lists.
fn not_served(scenario: &str, check: &Value) -> bool {
    let message = check["errorMessage"].as_str().unwrap_or_default();
    NOT_SERVED
        .iter()
        .any(|(s, id, text)| *s == scenario && check["id"] == *id && message.contains(text))
}

/// At least one check passed, none failed (but those [`NOT_SERVED`]
/// lists), and the suite agreed unless one of those failed.
fn judge(scenario: &str, checks: &[Value], exited_ok: bool) -> Verdict {
    let failures = || checks.iter().filter(|c| c["status"] == "FAILURE");
    let failed: Vec<String> = failures()
        .filter(|c| !not_served(scenario, c))
        .map(|c| format!("{}: {}", c["id"], c["errorMessage"]))
        .collect();
    let passed = checks.iter().filter(|c| c["status"] == "SUCCESS").count();
    if !failed.is_empty() {
        return Err(format!("failed checks: {failed:#?}"));
    }
    if passed == 0 {
        return Err(format!("no check passed: {checks:#?}"));
    }
    if !exited_ok && failures().next().is_none() {
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
