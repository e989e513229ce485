//! The gateway fronting a real upstream: the official reference server
//! `@modelcontextprotocol/server-everything` (npm, pinned in
//! `tests/upstreams/package-lock.json`) over Streamable HTTP and over the
//! legacy HTTP+SSE transport, started here on a free loopback port. Its
//! tools are listed through a governed session, `echo` answers the
//! upstream's own result, and a call a policy denies never reaches it (its
//! log shows no request for it). Over SSE, the server is also stopped
//! (calls answer -32202), restarted on the same port (the next call opens
//! a new stream and session), and made slower than the call's budget
//! (-32201). A policy on `echo`'s typed `context.args.message` decides
//! its calls on their arguments.
//!
//! The server is installed by `tests/upstreams/setup.sh` (run by `.ci/run`,
//! and here when missing). Without network, outside CI, the tests skip
//! loudly; with `CI=true` a failed install fails them.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::TestGateway;
use common::setup::{upstreams_dir, upstreams_installed as installed};
use reqwest::Method;
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt;

/// `server-everything` over Streamable HTTP or SSE, with its log lines.
struct Everything {
    url: String,
    log: Arc<Mutex<Vec<String>>>,
    child: tokio::process::Child,
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

impl Everything {
    async fn start() -> Everything {
        Everything::start_on("streamableHttp", free_port()).await
    }

    /// `mode` is `streamableHttp` or `sse`.
    async fn start_on(mode: &str, port: u16) -> Everything {
        let entry = upstreams_dir()
            .join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
        let mut child = tokio::process::Command::new("node")
            .arg(entry)
            .arg(mode)
            .env("PORT", port.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        for stream in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn tokio::io::AsyncRead + Unpin + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let log = Arc::clone(&log);
            tokio::spawn(async move {
                let mut lines = tokio::io::BufReader::new(stream).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    log.lock().unwrap().push(line);
                }
            });
        }
        let path = if mode == "sse" { "sse" } else { "mcp" };
        let url = format!("http://127.0.0.1:{port}/{path}");
        for _ in 0..200 {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                return Everything { url, log, child };
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!(
            "server-everything did not listen: {:?}",
            log.lock().unwrap()
        );
    }

    /// POSTs the server has logged so far.
    fn posts(&self) -> usize {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|l| {
                l.contains("Received MCP POST request") || l.contains("Client Message from")
            })
            .count()
    }

    /// Stops the server (its connections close with it).
    async fn stop(mut self) {
        self.child.kill().await.unwrap();
    }
}

const FORBID_SUM: &str = r#"
@id("no-sums")
@advice("sums are not for agents")
forbid (principal, action in Gateway::Action::"call_tool", resource == Gateway::Tool::"everything.get-sum");
"#;

#[tokio::test]
async fn server_everything_over_streamable_http_is_governed() {
    if !installed() {
        return;
    }
    let up = Everything::start().await;
    let g = TestGateway::start_with_policy("extra.cedar", FORBID_SUM).await;
    let t = g.tenant("acme").await;
    let other = g.tenant("globex").await;
    let (status, server) = g
        .admin(
            Method::POST,
            "/admin/orgs/acme/mcp-servers",
            Some(json!({"name": "everything", "transport": "streamable-http", "url": up.url})),
        )
        .await;
    assert_eq!(status, 201, "{server}");
    assert_eq!(server["health"], "healthy", "{server}");
    assert_eq!(server["protocolVersion"], "2025-11-25");

    let names = g.tool_names(&t).await;
    for tool in ["everything.echo", "everything.get-sum"] {
        assert!(names.contains(&tool.to_string()), "{names:?}");
    }
    assert!(
        g.tool_names(&other)
            .await
            .iter()
            .all(|n| !n.starts_with("everything.")),
        "another org sees nothing of it"
    );

    let body = g
        .call_tool(&t, "everything.echo", json!({"message": "hello"}))
        .await;
    assert_eq!(
        body["result"],
        json!({"content": [{"type": "text", "text": "Echo: hello"}]}),
        "{body}"
    );

    let before = up.posts();
    let body = g
        .call_tool(&t, "everything.get-sum", json!({"a": 1, "b": 2}))
        .await;
    assert_eq!(body["error"]["code"], -32003, "{body}");
    assert_eq!(body["error"]["data"]["reasons"], json!(["no-sums"]));
    // Anything in flight would have been logged by now.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(up.posts(), before, "the denied call reached the upstream");

    // An allowed call reaches it again.
    let body = g
        .call_tool(&t, "everything.echo", json!({"message": "again"}))
        .await;
    assert!(body["result"].is_object(), "{body}");
    assert!(up.posts() > before);
    let allowed: Vec<Value> = g
        .decisions()
        .await
        .iter()
        .filter(|d| d.record.action == "call_tool")
        .map(|d| json!([d.record.resource, d.record.decision]))
        .collect();
    assert_eq!(
        allowed,
        [
            json!([r#"Gateway::Tool::"everything.echo""#, "allow"]),
            json!([r#"Gateway::Tool::"everything.get-sum""#, "deny"]),
            json!([r#"Gateway::Tool::"everything.echo""#, "allow"]),
        ]
    );
}

const ECHO_NO_SECRETS: &str = r#"
@id("no-secret-echoes")
forbid (principal, action == Gateway::Action::"everything.echo", resource)
when { context.args.message like "*secret*" };
"#;

/// `echo`'s typed action reads its `message` argument: one value is
/// denied (nothing reaches the server), another allowed; a policy on an
/// argument `echo` does not declare is refused.
#[tokio::test]
async fn a_context_args_policy_decides_server_everything_calls_on_their_arguments() {
    if !installed() {
        return;
    }
    let up = Everything::start().await;
    let g = TestGateway::start_with_policy("extra.cedar", "// filled in below\n").await;
    let t = g.tenant("acme").await;
    let (status, server) = g
        .admin(
            Method::POST,
            "/admin/orgs/acme/mcp-servers",
            Some(json!({"name": "everything", "transport": "streamable-http", "url": up.url})),
        )
        .await;
    assert_eq!(status, 201, "{server}");
    let mut typed = Value::Null;
    for _ in 0..200 {
        typed = g.admin(Method::GET, "/admin/policies", None).await.1["typedTools"].clone();
        if typed
            .as_array()
            .unwrap()
            .contains(&json!("everything.echo"))
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        typed
            .as_array()
            .unwrap()
            .contains(&json!("everything.echo")),
        "{typed}"
    );
    let extra = g.gw.config.policies_dir.join("extra.cedar");
    let wrong = ECHO_NO_SECRETS.replace("context.args.message", "context.args.text");
    std::fs::write(&extra, wrong).unwrap();
    let (status, body) = g.admin(Method::POST, "/admin/policies/reload", None).await;
    assert_eq!(status, 422, "{body}");
    std::fs::write(&extra, ECHO_NO_SECRETS).unwrap();
    let (status, body) = g.admin(Method::POST, "/admin/policies/reload", None).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        g.gw.pep
            .current()
            .policy_ids
            .iter()
            .any(|p| p == "no-secret-echoes")
    );

    let before = up.posts();
    let body = g
        .call_tool(&t, "everything.echo", json!({"message": "my secret key"}))
        .await;
    assert_eq!(body["error"]["code"], -32003, "{body}");
    assert_eq!(
        body["error"]["data"]["reasons"],
        json!(["no-secret-echoes"])
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(up.posts(), before, "the denied call reached the upstream");
    let body = g
        .call_tool(&t, "everything.echo", json!({"message": "hello"}))
        .await;
    assert_eq!(
        body["result"],
        json!({"content": [{"type": "text", "text": "Echo: hello"}]}),
        "{body}"
    );
}

#[tokio::test]
async fn server_everything_over_sse_is_governed_and_recovers_from_a_dropped_stream() {
    if !installed() {
        return;
    }
    let port = free_port();
    let up = Everything::start_on("sse", port).await;
    let g = TestGateway::start_with_policy("extra.cedar", FORBID_SUM).await;
    let t = g.tenant("acme").await;
    let (status, server) = g
        .admin(
            Method::POST,
            "/admin/orgs/acme/mcp-servers",
            Some(
                json!({"name": "everything", "transport": "sse", "url": up.url, "timeoutMs": 1500}),
            ),
        )
        .await;
    assert_eq!(status, 201, "{server}");
    assert_eq!(server["health"], "healthy", "{server}");
    assert_eq!(server["transport"], "sse");
    let names = g.tool_names(&t).await;
    for tool in ["everything.echo", "everything.get-sum"] {
        assert!(names.contains(&tool.to_string()), "{names:?}");
    }

    let echo = json!({"content": [{"type": "text", "text": "Echo: hello"}]});
    let body = g
        .call_tool(&t, "everything.echo", json!({"message": "hello"}))
        .await;
    assert_eq!(body["result"], echo, "{body}");

    let before = up.posts();
    let body = g
        .call_tool(&t, "everything.get-sum", json!({"a": 1, "b": 2}))
        .await;
    assert_eq!(body["error"]["code"], -32003, "{body}");
    // Anything in flight would have been logged by now.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(up.posts(), before, "the denied call reached the upstream");

    // Slower than the registration's budget.
    let body = g
        .call_tool(
            &t,
            "everything.trigger-long-running-operation",
            json!({"duration": 30, "steps": 1}),
        )
        .await;
    assert_eq!(body["error"]["code"], -32201, "{body}");

    // The server goes away: its stream drops, calls answer the transport code.
    up.stop().await;
    let body = g
        .call_tool(&t, "everything.echo", json!({"message": "down"}))
        .await;
    assert_eq!(body["error"]["code"], -32202, "{body}");
    assert_eq!(body["error"]["data"]["class"], "transport", "{body}");

    // Back on the same port: a new stream, a new session, the call answered.
    let up = Everything::start_on("sse", port).await;
    let body = g
        .call_tool(&t, "everything.echo", json!({"message": "hello"}))
        .await;
    assert_eq!(body["result"], echo, "{body}");
    assert_eq!(up.posts(), 3, "initialize, initialized, the call");
}
