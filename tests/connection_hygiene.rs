//! Connection hygiene through the real server: slow headers, slow and
//! truncated bodies, idle keep-alive connections, the connection caps, and
//! shutdown with a deadline while slow clients stay connected. Each bound
//! is set small in the test's config so the test crosses it in a moment.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};

use cedargate::config::Config;
use cedargate::store::decisions;
use common::TestGateway;
use common::cli::{bin, run, stderr, stdout, write_config};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const LONG: u64 = 60_000;

/// Every connection bound far away, so a test crosses only its own.
fn quiet(c: &mut Config) {
    c.http.header_read_timeout_ms = LONG;
    c.http.body_read_timeout_ms = LONG;
    c.http.body_stall_timeout_ms = LONG;
    c.http.idle_timeout_ms = LONG;
}

async fn connect(base: &str) -> TcpStream {
    TcpStream::connect(base.trim_start_matches("http://"))
        .await
        .unwrap()
}

/// Reads until the server closes the connection; `None` if it is still
/// open after `within`.
async fn read_to_close(s: &mut TcpStream, within: Duration) -> Option<String> {
    let mut out = Vec::new();
    let closed = tokio::time::timeout(within, async {
        let mut buf = [0u8; 4096];
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    closed
        .ok()
        .map(|()| String::from_utf8_lossy(&out).into_owned())
}

/// Sends `first`, then `drip` every 100 ms (nothing when empty) until the
/// server answers or closes; returns what it sent back and when it did.
async fn trickle(s: &mut TcpStream, first: &[u8], drip: &[u8]) -> (String, Duration) {
    let started = Instant::now();
    s.write_all(first).await.unwrap();
    let mut buf = [0u8; 4096];
    while started.elapsed() < Duration::from_secs(10) {
        match tokio::time::timeout(Duration::from_millis(100), s.read(&mut buf)).await {
            Err(_) => {
                if !drip.is_empty() && s.write_all(drip).await.is_err() {
                    break;
                }
            }
            Ok(Ok(0)) | Ok(Err(_)) => return (String::new(), started.elapsed()),
            Ok(Ok(n)) => {
                let at = started.elapsed();
                let head = String::from_utf8_lossy(&buf[..n]).into_owned();
                let rest = read_to_close(s, Duration::from_secs(3)).await;
                let rest = rest.expect("the connection closes after the answer");
                return (head + &rest, at);
            }
        }
    }
    let rest = read_to_close(s, Duration::from_secs(3)).await;
    (rest.unwrap_or_default(), started.elapsed())
}

/// `GET /healthz` on an open connection, kept alive.
async fn healthz(s: &mut TcpStream) -> String {
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    tokio::time::timeout(Duration::from_secs(3), async {
        while !out.ends_with(b"}") {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await
    .expect("healthz answers");
    String::from_utf8_lossy(&out).into_owned()
}

fn post_head(len: Option<usize>) -> String {
    let framing = match len {
        Some(n) => format!("Content-Length: {n}"),
        None => "Transfer-Encoding: chunked".to_string(),
    };
    format!(
        "POST /api/mcp/some-session HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n{framing}\r\n\r\n"
    )
}

#[tokio::test]
async fn a_slow_header_client_is_cut_off() {
    let g = TestGateway::start_with(|c| {
        quiet(c);
        c.http.header_read_timeout_ms = 500;
    })
    .await;
    let mut s = connect(&g.base).await;
    // A header line every 100 ms: never silent, never done.
    let (answer, at) = trickle(
        &mut s,
        b"POST /api/mcp/s HTTP/1.1\r\nHost: 127.0.0.1\r\n",
        b"X-Slow: 1\r\n",
    )
    .await;
    assert!(at < Duration::from_secs(4), "cut off after {at:?}");
    assert!(!answer.contains(" 200 "), "{answer}");
    // A client that sends its headers at once is served as before.
    let mut s = connect(&g.base).await;
    assert!(healthz(&mut s).await.starts_with("HTTP/1.1 200"));
}

#[tokio::test]
async fn a_slow_body_is_answered_408_and_cut_off() {
    let g = TestGateway::start_with(|c| {
        quiet(c);
        c.http.body_read_timeout_ms = 800;
    })
    .await;
    let mut s = connect(&g.base).await;
    let head = post_head(Some(1000)) + "{";
    // One byte every 100 ms: never stalls, never ends in time.
    let (answer, at) = trickle(&mut s, head.as_bytes(), b" ").await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("-32600"), "{answer}");
    assert!(at < Duration::from_secs(4), "answered after {at:?}");
}

#[tokio::test]
async fn a_body_shorter_than_its_content_length_is_answered_400_promptly() {
    let g = TestGateway::start_with(|c| {
        quiet(c);
        c.http.body_stall_timeout_ms = 300;
    })
    .await;
    // The client sends part of the body, then waits.
    let mut s = connect(&g.base).await;
    let head = post_head(Some(50)) + r#"{"jsonrpc":"#;
    let (answer, at) = trickle(&mut s, head.as_bytes(), b"").await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("incomplete"), "{answer}");
    assert!(at < Duration::from_secs(3), "answered after {at:?}");

    // The client sends part of the body, then closes its side.
    let mut s = connect(&g.base).await;
    let head = post_head(Some(50)) + r#"{"jsonrpc":"#;
    s.write_all(head.as_bytes()).await.unwrap();
    s.shutdown().await.unwrap();
    let answer = read_to_close(&mut s, Duration::from_secs(3)).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(!answer.contains("exceeds"), "{answer}");
}

#[tokio::test]
async fn a_malformed_chunked_body_is_400_and_only_a_real_oversize_body_413() {
    let g = TestGateway::start_with(|c| {
        quiet(c);
        c.limits.max_body_bytes = 1024;
    })
    .await;
    let mut s = connect(&g.base).await;
    let bad = post_head(None) + "zz\r\n{}\r\n0\r\n\r\n";
    let (answer, _) = trickle(&mut s, bad.as_bytes(), b"").await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("malformed"), "{answer}");

    // Declared over the limit: refused before it is read.
    let url = format!("{}/api/mcp/some-session", g.base);
    let (status, body) = g.mcp_raw(&url, None, &[], "x".repeat(2048)).await;
    assert_eq!(status, 413, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("1024"));

    // Chunked, so only its bytes tell: still 413.
    let mut s = connect(&g.base).await;
    let chunk = "x".repeat(2048);
    let big = post_head(None) + &format!("{:x}\r\n{chunk}\r\n0\r\n\r\n", chunk.len());
    let (answer, _) = trickle(&mut s, big.as_bytes(), b"").await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");

    // A body within the limit still reaches the JSON-RPC checks.
    let (status, body) = g.mcp_raw(&url, None, &[], "{".into()).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], -32700);
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed() {
    let g = TestGateway::start_with(|c| {
        quiet(c);
        c.http.idle_timeout_ms = 400;
    })
    .await;
    let mut s = connect(&g.base).await;
    assert!(healthz(&mut s).await.starts_with("HTTP/1.1 200"));
    // Kept alive for the next request…
    assert!(healthz(&mut s).await.starts_with("HTTP/1.1 200"));
    // …and closed once it has been idle for the timeout.
    let started = Instant::now();
    let rest = read_to_close(&mut s, Duration::from_secs(4)).await;
    assert_eq!(rest.as_deref(), Some(""), "closed without another answer");
    assert!(started.elapsed() < Duration::from_secs(3));
}

/// With the cap at two: the third connection is closed at once, the two
/// open ones keep working, and a place freed is taken again.
/// Reads one answer (its head, then the body its `Content-Length` names)
/// from `s`, lowercased.
async fn one_answer(s: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            let text = String::from_utf8_lossy(&out).to_ascii_lowercase();
            if let Some(end) = text.find("\r\n\r\n") {
                let length = text[..end]
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length: "))
                    .and_then(|n| n.trim().parse::<usize>().ok())
                    .unwrap_or(0);
                if out.len() >= end + 4 + length {
                    break;
                }
            }
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await
    .expect("an answer comes");
    String::from_utf8_lossy(&out).to_ascii_lowercase()
}

#[tokio::test]
async fn an_answer_sent_before_the_body_was_read_closes_the_connection_and_says_so() {
    let g = TestGateway::start_with(quiet).await;
    let t = g.tenant("acme").await;
    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    let head = |path: &str, auth: &str| {
        format!(
            "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\n{auth}Content-Length: {}\r\n\r\n",
            ping.len()
        )
    };

    // A person's project URL without a token is answered 401 at once; the
    // body is still held back by the client.
    let mut s = connect(&g.base).await;
    let path = format!("/mcp/acme/{}", t.project);
    s.write_all(head(&path, "").as_bytes()).await.unwrap();
    let answer = one_answer(&mut s).await;
    assert!(answer.starts_with("http/1.1 401"), "{answer}");
    assert!(answer.contains("\r\nconnection: close\r\n"), "{answer}");
    assert!(
        read_to_close(&mut s, Duration::from_secs(3))
            .await
            .is_some(),
        "the server closes the connection it said it would"
    );

    // Answers to bodies read to their end keep the connection.
    let mut s = connect(&g.base).await;
    let path = format!("/api/mcp/{}", t.session_id);
    let auth = format!("Authorization: Bearer {}\r\n", t.key);
    for _ in 0..2 {
        let request = head(&path, &auth) + ping;
        s.write_all(request.as_bytes()).await.unwrap();
        let answer = one_answer(&mut s).await;
        assert!(answer.starts_with("http/1.1 200"), "{answer}");
        assert!(answer.contains(r#""result""#), "{answer}");
        assert!(!answer.contains("connection: close"), "{answer}");
    }
}

async fn the_connection_over_the_cap_is_refused(g: &TestGateway) {
    let mut a = connect(&g.base).await;
    let mut b = connect(&g.base).await;
    assert!(healthz(&mut a).await.starts_with("HTTP/1.1 200"));
    assert!(healthz(&mut b).await.starts_with("HTTP/1.1 200"));
    let mut over = connect(&g.base).await;
    let refused = read_to_close(&mut over, Duration::from_secs(2)).await;
    assert_eq!(refused.as_deref(), Some(""), "refused without an answer");
    assert!(healthz(&mut a).await.starts_with("HTTP/1.1 200"));
    drop(b);
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let mut c = connect(&g.base).await;
        let _ = c
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            .await;
        let answer = read_to_close(&mut c, Duration::from_secs(2))
            .await
            .unwrap_or_default();
        if answer.starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(Instant::now() < deadline, "the freed place was not reused");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn the_connection_cap_refuses_the_connection_over_it() {
    let g = TestGateway::start_with(|c| {
        quiet(c);
        c.http.max_connections = 2;
    })
    .await;
    the_connection_over_the_cap_is_refused(&g).await;
}

#[tokio::test]
async fn the_per_address_cap_refuses_the_connection_over_it() {
    let g = TestGateway::start_with(|c| {
        quiet(c);
        c.http.max_connections_per_ip = 2;
    })
    .await;
    the_connection_over_the_cap_is_refused(&g).await;
}

#[tokio::test]
async fn shutdown_closes_slow_clients_at_the_deadline_and_keeps_the_trail() {
    let g = TestGateway::start_with(|c| {
        quiet(c);
        c.http.shutdown_grace_secs = 1;
    })
    .await;
    let t = g.tenant("acme").await;
    // tools/list records are queued, not awaited: the final flush keeps them.
    assert!(!g.tool_names(&t).await.is_empty());
    let ok = g
        .call_tool(
            &t,
            "af_memory_remember",
            json!({"content": "before shutdown"}),
        )
        .await;
    assert!(ok["result"].is_object(), "{ok}");
    let mut slow_head = connect(&g.base).await;
    slow_head
        .write_all(b"POST /api/mcp/s HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .await
        .unwrap();
    let mut slow_body = connect(&g.base).await;
    let head = post_head(Some(1000)) + "{";
    slow_body.write_all(head.as_bytes()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;

    let started = Instant::now();
    let dir = g.stop().await.into_dir();
    let took = started.elapsed();
    assert!(took < Duration::from_secs(1 + 4), "shutdown took {took:?}");
    assert!(
        read_to_close(&mut slow_head, Duration::from_secs(1))
            .await
            .is_some()
    );
    assert!(
        read_to_close(&mut slow_body, Duration::from_secs(1))
            .await
            .is_some()
    );

    let g = TestGateway::start_in(dir, |_| {}).await;
    let actions = g.texts("SELECT action FROM decisions").await;
    assert!(
        actions.iter().any(|a| a.contains("view_tool")),
        "{actions:?}"
    );
    assert!(
        actions.iter().any(|a| a.contains("call_tool")),
        "{actions:?}"
    );
    let report = g.gw.store.read(decisions::verify).await.unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}

#[tokio::test]
async fn sigterm_with_a_slowloris_connected_exits_0_within_the_grace_period() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &common::repo().join("policies"));
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str("\n[http]\nshutdown_grace_secs = 1\nheader_read_timeout_ms = 60000\nidle_timeout_ms = 60000\n");
    std::fs::write(&config, text).unwrap();
    let mut child = bin()
        .arg("--config")
        .arg(&config)
        .arg("serve")
        .env_remove("CEDARGATE_ADMIN_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let url = lines
        .by_ref()
        .map(|l| l.unwrap())
        .find_map(|l| l.strip_prefix("MCP URL:").map(|u| u.trim().to_string()))
        .expect("banner prints the MCP URL");
    std::thread::spawn(move || for _ in lines {});
    let authority = url.trim_start_matches("http://").split('/').next().unwrap();
    let mut slow = TcpStream::connect(authority).await.unwrap();
    slow.write_all(b"POST /api/mcp/s HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;

    let started = Instant::now();
    let kill = std::process::Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status()
        .unwrap();
    assert!(kill.success());
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if started.elapsed() > Duration::from_secs(1 + 5) {
            child.kill().unwrap();
            panic!("serve did not stop within the grace period of SIGTERM");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success(), "{status:?}");
    assert!(
        read_to_close(&mut slow, Duration::from_secs(1))
            .await
            .is_some()
    );
    let verify = run(&config, &["audit", "verify"]);
    assert!(verify.status.success(), "{}", stderr(&verify));
    assert!(stdout(&verify).contains("records verified"));
}
