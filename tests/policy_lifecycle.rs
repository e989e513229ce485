//! The policy lifecycle through the real server: hot reload (admin API,
//! file watch, SIGHUP) that never activates a broken set, typed tool
//! arguments, shadow mode, the auditor's decision listing, and metrics.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{TestGateway, repo};
use reqwest::Method;
use serde_json::{Value, json};

/// Copies the shipped policies *and their tests* into `dest/policies`.
/// (`FREEZE` targets org `initech`, which the shipped tests do not use.)
fn copy_policies_with_tests(dest: &Path) -> PathBuf {
    fn copy_dir(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let path = entry.unwrap().path();
            let target = to.join(path.file_name().unwrap());
            if path.is_dir() {
                copy_dir(&path, &target);
            } else {
                std::fs::copy(&path, &target).unwrap();
            }
        }
    }
    let dir = dest.join("policies");
    copy_dir(&repo().join("policies"), &dir);
    dir
}

/// A gateway on an editable copy of the shipped policies (with tests).
async fn gateway(watch: bool) -> (TestGateway, PathBuf, tempfile::TempDir) {
    let holder = tempfile::tempdir().unwrap();
    let policies = copy_policies_with_tests(holder.path());
    let p = policies.clone();
    let g = TestGateway::start_with(move |c| {
        c.policies_dir = p;
        c.lifecycle.watch = watch;
        c.lifecycle.watch_debounce_ms = 50;
    })
    .await;
    (g, policies, holder)
}

const FREEZE: &str = "@id(\"freeze-remember\")\n@advice(\"memory writes are frozen\")\nforbid (principal in Gateway::Org::\"initech\", action == Gateway::Action::\"af_memory_remember\", resource);\n";

async fn reload(g: &TestGateway) -> (u16, Value) {
    g.admin(Method::POST, "/admin/policies/reload", None).await
}

/// Writes `text` as `dir/file`, reloads and asserts the new set is active;
/// returns the reload's answer.
async fn apply(g: &TestGateway, dir: &Path, file: &str, text: &str) -> Value {
    std::fs::write(dir.join(file), text).unwrap();
    let (s, body) = reload(g).await;
    assert_eq!(
        (s, body["result"].as_str()),
        (200, Some("applied")),
        "{body}"
    );
    body
}

async fn policies(g: &TestGateway) -> Value {
    let (s, body) = g.admin(Method::GET, "/admin/policies", None).await;
    assert_eq!(s, 200, "{body}");
    body
}

async fn remember(g: &TestGateway, t: &common::Tenant, content: &str) -> Value {
    g.call_tool(t, "af_memory_remember", json!({ "content": content }))
        .await
}

#[tokio::test]
async fn a_valid_edit_takes_effect_without_restart() {
    let (g, dir, _keep) = gateway(false).await;
    let t = g.tenant("initech").await;
    let before = policies(&g).await;
    assert!(remember(&g, &t, "before").await["result"].is_object());

    std::fs::write(dir.join("freeze.cedar"), FREEZE).unwrap();
    let (s, body) = reload(&g).await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(body["result"], "applied");
    assert!(
        body["testsRun"].as_u64().unwrap() > 0,
        "the shipped policy tests ran: {body}"
    );
    let after = policies(&g).await;
    assert_ne!(after["hash"], before["hash"]);
    assert_eq!(after["hash"], body["hash"]);
    assert!(
        after["policyIds"]
            .as_array()
            .unwrap()
            .contains(&json!("freeze-remember"))
    );
    assert_eq!(after["lastReload"]["trigger"], "admin");
    assert_eq!(after["lastError"], Value::Null);

    let denied = remember(&g, &t, "after").await;
    assert_eq!(denied["error"]["code"], -32003, "{denied}");
    assert_eq!(
        denied["error"]["data"]["reasons"],
        json!(["freeze-remember"])
    );
    // Every decision records the hash of the set that made it, and the
    // new set is stored for replay.
    let records = g.decisions().await;
    let last = records.last().unwrap();
    assert_eq!(last.record.policy_hash, after["hash"].as_str().unwrap());
    assert!(
        records
            .iter()
            .any(|d| d.record.policy_hash == before["hash"].as_str().unwrap())
    );
    assert_eq!(g.count("policy_sets").await, 2);

    // Reloading the same files changes nothing.
    let (s, body) = reload(&g).await;
    assert_eq!((s, body["result"].as_str()), (200, Some("unchanged")));
}

/// Verdicts a session repeats are reused only while no policy of the
/// action reads the context beyond `context.session`: a policy on
/// `context.time` is decided on every request, so a deadline that passes
/// between two requests of one session denies the second.
#[tokio::test]
async fn a_policy_on_the_time_is_decided_on_every_request_of_a_session() {
    let (g, dir, _keep) = gateway(false).await;
    let t = g.tenant("initech").await;
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    // Reused within the session under the shipped set: the repeated
    // listing is recorded once (no policy reads the time).
    for _ in 0..3 {
        let (s, body) = g.mcp(&t, list.clone()).await;
        assert_eq!(s, 200, "{body}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let access: Vec<_> = common::flat(&g.decisions().await)
        .into_iter()
        .filter(|d| d.action == "access_session")
        .collect();
    assert_eq!(access.len(), 1);
    assert!(access.iter().all(|d| d.decision == "allow"));

    // The same millisecond RFC 3339 form as `context.time`. The deadline
    // leaves the reload (strict validation and policy tests in a debug
    // build: more than 4 s at a load average of 10) ample time; each
    // request after it is judged by the time its own record carries, not
    // by the test's clock.
    let deadline = cedargate::ids::rfc3339(
        time::OffsetDateTime::now_utc() + time::Duration::milliseconds(12_000),
    );
    let deadline_policy = format!(
        "@id(\"sessions-until-deadline\")\nforbid (principal, action == Gateway::Action::\"access_session\", resource)\nwhen {{ context.time >= datetime(\"{deadline}\") }};\n"
    );
    apply(&g, &dir, "deadline.cedar", &deadline_policy).await;
    let mut allowed_before_deadline = 0;
    let denied = loop {
        let (s, body) = g.mcp(&t, list.clone()).await;
        let access = common::flat(&g.decisions().await)
            .into_iter()
            .rev()
            .find(|d| d.action == "access_session")
            .unwrap();
        let context: Value = serde_json::from_str(&access.context).unwrap();
        let time = context["time"]["__extn"]["arg"]
            .as_str()
            .or(context["time"].as_str())
            .unwrap_or_else(|| panic!("no time in {context}"))
            .to_string();
        if time < deadline {
            assert_eq!(s, 200, "at {time}, before the deadline {deadline}: {body}");
            allowed_before_deadline += 1;
        } else {
            assert_eq!(s, 403, "at {time}, past the deadline {deadline}: {body}");
            break (body, access);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        allowed_before_deadline >= 2,
        "the session's verdict must have been allowed (and so remembered) after the reload"
    );
    // A policy on the time makes every listing a decision of its own: each
    // one before the deadline was recorded, with its own time.
    let access: Vec<_> = common::flat(&g.decisions().await)
        .into_iter()
        .filter(|d| d.action == "access_session")
        .collect();
    assert_eq!(access.len(), 1 + allowed_before_deadline + 1);
    let times: std::collections::HashSet<_> = access.iter().map(|d| &d.context).collect();
    assert_eq!(times.len(), access.len(), "each record has its own time");
    let (denied, last) = denied;
    assert_eq!(denied["error"]["code"], -32003, "{denied}");
    assert_eq!(
        (last.action.as_str(), last.reasons.as_str()),
        ("access_session", r#"["sessions-until-deadline"]"#)
    );
}

/// Asserts a reload is rejected, the active set is untouched and the
/// error is reported by `GET /admin/policies`.
async fn assert_rejected(g: &TestGateway, expect: &[&str]) -> Value {
    let active = policies(g).await["hash"].clone();
    let (s, body) = reload(g).await;
    assert_eq!(s, 422, "{body}");
    assert_eq!(body["error"]["code"], "policy_set_rejected");
    assert_eq!(body["activeHash"], active);
    let now = policies(g).await;
    assert_eq!(now["hash"], active, "the last good set stays active");
    let err = &now["lastError"];
    assert_eq!(err["result"], "rejected");
    let text = err.to_string();
    for e in expect {
        assert!(text.contains(e), "`{e}` missing in {text}");
    }
    now
}

#[tokio::test]
async fn a_broken_file_never_replaces_the_active_set() {
    let (g, dir, _keep) = gateway(false).await;
    let t = g.tenant("initech").await;

    // Syntax error: located by file, line and column.
    std::fs::write(
        dir.join("broken.cedar"),
        "@id(\"broken\")\nforbid (principal, action, resource)\nwhen { principal == };\n",
    )
    .unwrap();
    assert_rejected(&g, &["broken.cedar:3:"]).await;
    assert!(remember(&g, &t, "still works").await["result"].is_object());

    // Schema violation (strict validation).
    std::fs::write(
        dir.join("broken.cedar"),
        "@id(\"typo\")\nforbid (principal, action in Gateway::Action::\"call_tool\", resource)\nwhen { resource.readOnlly };\n",
    )
    .unwrap();
    assert_rejected(&g, &["broken.cedar:3:", "readOnlly"]).await;

    // `action == call_tool` would silently miss typed tool actions.
    std::fs::write(
        dir.join("broken.cedar"),
        "@id(\"misses-typed\")\nforbid (principal, action == Gateway::Action::\"call_tool\", resource);\n",
    )
    .unwrap();
    assert_rejected(
        &g,
        &[
            "misses-typed",
            "action in Gateway::Action::\\\"call_tool\\\"",
        ],
    )
    .await;

    // A valid policy that breaks a shipped policy test.
    std::fs::write(
        dir.join("broken.cedar"),
        "@id(\"no-sessions\")\nforbid (principal, action == Gateway::Action::\"access_session\", resource);\n",
    )
    .unwrap();
    let now = assert_rejected(
        &g,
        &[
            "policy test(s) failed",
            "a key uses a session of its own org",
        ],
    )
    .await;
    assert!(
        now["lastError"]["testFailures"]
            .as_array()
            .is_some_and(|f| !f.is_empty())
    );

    // A malformed test file is a failure too.
    std::fs::remove_file(dir.join("broken.cedar")).unwrap();
    std::fs::write(dir.join("tests/bad.json"), "{not json").unwrap();
    assert_rejected(&g, &["bad.json", "not a JSON array of tests"]).await;

    // Nothing of the above ever decided: the gateway still answers with
    // the original set, and fixing the files reloads cleanly.
    assert!(remember(&g, &t, "still works").await["result"].is_object());
    std::fs::remove_file(dir.join("tests/bad.json")).unwrap();
    let (s, body) = reload(&g).await;
    assert_eq!(
        (s, body["result"].as_str()),
        (200, Some("unchanged")),
        "{body}"
    );
    // The last error stays visible until the next failure.
    assert_eq!(policies(&g).await["lastReload"]["result"], "unchanged");
}

async fn wait_for_hash_change(g: &TestGateway, old: &Value) -> Value {
    for _ in 0..200 {
        let now = policies(g).await;
        if now["hash"] != *old {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the policy set was not reloaded");
}

#[tokio::test]
async fn a_file_change_is_picked_up_by_the_watch() {
    let (g, dir, _keep) = gateway(true).await;
    let t = g.tenant("initech").await;
    let before = policies(&g).await["hash"].clone();
    std::fs::write(dir.join("freeze.cedar"), FREEZE).unwrap();
    let now = wait_for_hash_change(&g, &before).await;
    assert_eq!(now["lastReload"]["trigger"], "file-watch");
    assert_eq!(remember(&g, &t, "x").await["error"]["code"], -32003);
}

#[cfg(unix)]
#[tokio::test]
async fn sighup_reloads() {
    let (g, dir, _keep) = gateway(false).await;
    let before = policies(&g).await["hash"].clone();
    std::fs::write(dir.join("freeze.cedar"), FREEZE).unwrap();
    let status = std::process::Command::new("kill")
        .args(["-HUP", &std::process::id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let now = wait_for_hash_change(&g, &before).await;
    assert_eq!(now["lastReload"]["trigger"], "sighup");
}

#[tokio::test]
async fn an_argument_conditioned_forbid_denies_only_matching_calls() {
    let g = TestGateway::start_with_policy(
        "secrets.cedar",
        "@id(\"no-secrets-in-memory\")\n@advice(\"do not store credentials\")\nforbid (principal, action == Gateway::Action::\"af_memory_remember\", resource)\nwhen { context.args.content like \"*password*\" || (context.args has type && context.args.type == \"credential\") };\n",
    )
    .await;
    let t = g.tenant("initech").await;
    let denied = remember(&g, &t, "the db password is hunter2").await;
    assert_eq!(denied["error"]["code"], -32003, "{denied}");
    assert_eq!(
        denied["error"]["data"]["reasons"],
        json!(["no-secrets-in-memory"])
    );
    let typed = g
        .call_tool(
            &t,
            "af_memory_remember",
            json!({"content": "token abc", "type": "credential", "confidence": 0.5}),
        )
        .await;
    assert_eq!(typed["error"]["code"], -32003, "{typed}");
    let ok = g
        .call_tool(
            &t,
            "af_memory_remember",
            json!({"content": "we deploy on Tuesdays", "type": "decision", "confidence": 0.9}),
        )
        .await;
    assert!(ok["result"].is_object(), "{ok}");
    // Other tools are untouched by the typed policy.
    let recall = g
        .call_tool(
            &t,
            "af_memory_recall",
            json!({"query": "password", "workType": "chore"}),
        )
        .await;
    assert!(recall["result"].is_object(), "{recall}");

    // The record carries the typed arguments it was decided with (numbers
    // as Cedar decimals), under the `call_tool` action.
    let records = g.decisions().await;
    let call = records
        .iter()
        .rev()
        .find(|d| d.record.action == "call_tool" && d.record.resource.contains("remember"))
        .unwrap();
    let context: Value = serde_json::from_str(&call.record.context).unwrap();
    assert_eq!(context["args"]["content"], "we deploy on Tuesdays");
    assert_eq!(context["args"]["confidence"]["__extn"]["arg"], "0.9000");
    assert!(context["args"].get("context").is_none());
}

#[tokio::test]
async fn shadow_mode_records_divergences_and_decides_nothing() {
    let g = TestGateway::start().await;
    let t = g.tenant("initech").await;
    let holder = tempfile::tempdir().unwrap();
    let candidate = copy_policies_with_tests(holder.path());
    std::fs::write(candidate.join("freeze.cedar"), FREEZE).unwrap();

    // A broken candidate is refused with its diagnostics.
    let broken = holder.path().join("broken");
    std::fs::create_dir_all(&broken).unwrap();
    std::fs::write(
        broken.join("x.cedar"),
        "@id(\"x\") permit(principal, action, resource) when { nope };",
    )
    .unwrap();
    let (s, body) = g
        .admin(
            Method::PUT,
            "/admin/shadow",
            Some(json!({"policiesDir": broken})),
        )
        .await;
    assert_eq!(s, 422, "{body}");
    assert!(
        body["diagnostics"][0]
            .as_str()
            .unwrap()
            .contains("x.cedar:1:")
    );
    let (s, _) = g.admin(Method::DELETE, "/admin/shadow", None).await;
    assert_eq!(s, 404);

    let (s, body) = g
        .admin(
            Method::PUT,
            "/admin/shadow",
            Some(json!({"policiesDir": candidate})),
        )
        .await;
    assert_eq!(s, 200, "{body}");
    let candidate_hash = body["candidate"]["candidateHash"]
        .as_str()
        .unwrap()
        .to_string();

    // Live: allowed (the candidate would deny).
    assert!(remember(&g, &t, "shadowed").await["result"].is_object());
    g.call_tool(
        &t,
        "af_memory_recall",
        json!({"query": "x", "workType": "chore"}),
    )
    .await;

    let (s, body) = g.admin(Method::GET, "/admin/shadow", None).await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(body["active"], true);
    let c = &body["candidate"];
    assert_eq!(c["divergences"], 1, "{body}");
    assert_eq!(c["allowToDeny"], 1);
    assert_eq!(c["denyToAllow"], 0);
    assert!(c["evaluated"].as_u64().unwrap() >= 4, "{body}");
    let d = &body["divergences"][0];
    assert_eq!(d["action"], "call_tool");
    assert_eq!(d["resource"], "Gateway::Tool::\"af_memory_remember\"");
    assert_eq!(d["liveDecision"], "allow");
    assert_eq!(
        d["liveReasons"],
        json!(["memory-tools-visible-when-memory-enabled"])
    );
    assert_eq!(d["candidateDecision"], "deny");
    assert_eq!(d["candidateReasons"], json!(["freeze-remember"]));
    assert_eq!(d["candidateHash"], candidate_hash.as_str());
    // The divergence names the live record.
    let records = g.decisions().await;
    assert!(
        records
            .iter()
            .any(|r| r.record.id == d["decisionId"].as_str().unwrap())
    );
    // While shadow mode runs no decision rides in another's prelude: each
    // keeps the row its id names (both calls' access_session among them).
    assert!(
        records
            .iter()
            .filter(|r| r.record.action == "access_session")
            .count()
            >= 2
    );
    assert!(
        records
            .iter()
            .all(|r| !r.record.notes.contains("\"prelude\""))
    );

    let metrics = g.metrics_text().await;
    assert!(
        metrics.contains(
            "cedargate_shadow_divergences_total{action=\"call_tool\",flip=\"allow_to_deny\"} 1"
        ),
        "{metrics}"
    );

    let (s, body) = g.admin(Method::DELETE, "/admin/shadow", None).await;
    assert_eq!((s, body["active"].as_bool()), (200, Some(false)));
    assert!(remember(&g, &t, "no longer shadowed").await["result"].is_object());
}

#[tokio::test]
async fn decisions_are_listed_with_filters_and_cursor_pages() {
    let g = TestGateway::start_with_policy("freeze.cedar", FREEZE).await;
    let a = g.tenant("initech").await;
    let b = g.tenant("globex").await;
    for i in 0..3 {
        remember(&g, &a, &format!("a{i}")).await;
    }
    g.call_tool(
        &b,
        "af_memory_recall",
        json!({"query": "x", "workType": "chore"}),
    )
    .await;
    let all = g.decisions().await;

    // Cursor pages of 2 walk every acme decision exactly once, in order.
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/admin/decisions?org=initech&limit=2&cursor={c}"),
            None => "/admin/decisions?org=initech&limit=2".to_string(),
        };
        let (s, body) = g.admin(Method::GET, &path, None).await;
        assert_eq!(s, 200, "{body}");
        let page = body["decisions"].as_array().unwrap();
        assert!(page.len() <= 2);
        seen.extend(page.iter().map(|d| d["seq"].as_i64().unwrap()));
        match body["nextCursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    let expected: Vec<i64> = all
        .iter()
        .filter(|d| d.record.org_id.as_deref() == Some("initech"))
        .map(|d| d.seq)
        .collect();
    assert_eq!(seen, expected);

    let (_, body) = g
        .admin(
            Method::GET,
            "/admin/decisions?action=call_tool&decision=deny&order=desc",
            None,
        )
        .await;
    let denied = body["decisions"].as_array().unwrap();
    assert_eq!(denied.len(), 3, "{body}");
    assert!(
        denied
            .windows(2)
            .all(|w| w[0]["seq"].as_i64() > w[1]["seq"].as_i64())
    );
    assert!(
        denied
            .iter()
            .all(|d| d["orgId"] == "initech" && d["reasons"] == "[\"freeze-remember\"]")
    );

    let principal = format!("Gateway::Agent::\"{}\"", b.agent);
    let (_, body) = g
        .admin(
            Method::GET,
            &format!(
                "/admin/decisions?principal={}&session={}",
                urlencode(&principal),
                b.session_id
            ),
            None,
        )
        .await;
    let rows = body["decisions"].as_array().unwrap();
    assert!(!rows.is_empty());
    assert!(rows.iter().all(|d| d["principal"] == principal.as_str()));

    let first_time = all.first().unwrap().record.time.clone();
    let (_, body) = g
        .admin(
            Method::GET,
            &format!(
                "/admin/decisions?until={}&resource={}",
                urlencode(&first_time),
                urlencode("Gateway::Tool::\"af_memory_remember\"")
            ),
            None,
        )
        .await;
    assert_eq!(body["decisions"], json!([]), "until is exclusive");

    for bad in [
        "decision=maybe",
        "action=fly",
        "since=yesterday",
        "cursor=abc",
        "limit=0",
        "limit=100000",
        "order=sideways",
        "colour=blue",
    ] {
        let (s, body) = g
            .admin(Method::GET, &format!("/admin/decisions?{bad}"), None)
            .await;
        assert_eq!(s, 400, "{bad}: {body}");
        assert_eq!(body["error"]["code"], "bad_request", "{bad}");
    }
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[tokio::test]
async fn metrics_count_decisions_reloads_and_the_active_set() {
    let (g, dir, _keep) = gateway(false).await;
    let t = g.tenant("initech").await;
    remember(&g, &t, "one").await;
    std::fs::write(dir.join("bad.cedar"), "permit(").unwrap();
    reload(&g).await;
    std::fs::remove_file(dir.join("bad.cedar")).unwrap();
    std::fs::write(dir.join("freeze.cedar"), FREEZE).unwrap();
    reload(&g).await;
    remember(&g, &t, "two").await;

    let resp = g
        .http
        .get(format!("{}/metrics", g.base))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert!(
        resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/openmetrics-text")
    );
    let text = resp.text().await.unwrap();
    let hash = policies(&g).await["hash"].as_str().unwrap().to_string();
    for line in [
        "cedargate_decisions_total{action=\"call_tool\",outcome=\"allow\"} 1".to_string(),
        "cedargate_decisions_total{action=\"call_tool\",outcome=\"deny\"} 1".to_string(),
        "cedargate_decision_duration_seconds_count{action=\"call_tool\"} 2".to_string(),
        "cedargate_policy_reloads_total{result=\"rejected\"} 1".to_string(),
        "cedargate_policy_reloads_total{result=\"applied\"} 2".to_string(),
        format!("cedargate_policy_set_info{{hash=\"{hash}\"}} 1"),
    ] {
        assert!(text.contains(&line), "missing `{line}` in\n{text}");
    }
    assert_eq!(
        text.matches("cedargate_policy_set_info{").count(),
        1,
        "{text}"
    );

    // Metrics can be turned off.
    let off = TestGateway::start_with(|c| c.lifecycle.metrics = false).await;
    let resp = off
        .http
        .get(format!("{}/metrics", off.base))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 404);
}

#[tokio::test]
async fn the_reload_api_needs_the_admin_token() {
    let g = TestGateway::start().await;
    let resp = g
        .http
        .post(format!("{}/admin/policies/reload", g.base))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 401);
}

/// A minimal A2A 1.0 peer: its card declares one skill, `deploy`, with a
/// JSON Schema, and every `SendMessage` completes with the arguments echoed.
async fn deploy_peer() -> (String, tokio::task::JoinHandle<()>) {
    use axum::routing::{get, post};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let rpc = format!("{base}/rpc");
    let app = axum::Router::new()
        .route(
            "/.well-known/agent-card.json",
            get(move || {
                let rpc = rpc.clone();
                async move {
                    axum::Json(json!({
                        "name": "Vercel Ops",
                        "description": "Deploys things.",
                        "version": "1.0.0",
                        "supportedInterfaces": [{"url": rpc, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
                        "skills": [{"id": "deploy", "name": "Deploy", "description": "Deploys a branch.",
                                    "inputSchema": {"type": "object", "properties": {"branch": {"type": "string"}}, "required": ["branch"]}}],
                    }))
                }
            }),
        )
        .route(
            "/rpc",
            post(|body: String| async move {
                let req: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
                let data = req["params"]["message"]["parts"][0]["data"].clone();
                axum::Json(json!({"jsonrpc": "2.0", "id": req["id"], "result": {"task": {
                    "id": "t", "status": {"state": "TASK_STATE_COMPLETED"},
                    "artifacts": [{"artifactId": "a", "parts": [{"data": data}]}]}}}))
            }),
        );
    let handle = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    (base, handle)
}

#[tokio::test]
async fn a_hand_typed_a2a_tool_and_replay_of_every_record_kind() {
    // The schema declares a typed action for the dynamic A2A tool
    // `vercel_ops.deploy`, so the brief's example policy validates and
    // decides on `context.args.branch`.
    let holder = tempfile::tempdir().unwrap();
    let policies = copy_policies_with_tests(holder.path());
    let schema = holder.path().join("gateway.cedarschema");
    let base = std::fs::read_to_string(repo().join("schemas/gateway.cedarschema")).unwrap();
    let typed = "  action \"vercel_ops.deploy\" in [a2a_invoke] appliesTo {\n    principal: [Agent],\n    resource: [Tool],\n    context: { session: Session, time: datetime, args: { branch?: String } },\n  };\n}\n";
    let end = base.rfind('}').unwrap();
    std::fs::write(&schema, format!("{}{typed}", &base[..end])).unwrap();
    std::fs::write(
        policies.join("deploys.cedar"),
        "@id(\"no-friday-prod\")\nforbid (principal, action == Gateway::Action::\"vercel_ops.deploy\", resource == Gateway::Tool::\"vercel_ops.deploy\")\nwhen { context.args has branch && context.args.branch == \"main\" };\n",
    )
    .unwrap();
    let (p, s) = (policies.clone(), schema.clone());
    let g = TestGateway::start_with(move |c| {
        c.policies_dir = p;
        c.schema_file = s;
        c.lifecycle.watch = false;
    })
    .await;
    let (s, _) = g
        .admin(
            Method::POST,
            "/admin/orgs",
            Some(json!({"id": "kg", "name": "KG", "entitlements": ["kg_enabled"]})),
        )
        .await;
    assert_eq!(s, 201);
    let t = g.tenant("kg").await;
    let (peer, handle) = deploy_peer().await;
    let (s, agent) = g
        .admin(
            Method::POST,
            "/admin/orgs/kg/a2a-agents",
            Some(json!({"url": peer})),
        )
        .await;
    assert_eq!(s, 201, "{agent}");

    let main = g
        .call_tool(&t, "vercel_ops.deploy", json!({"branch": "main"}))
        .await;
    assert_eq!(main["error"]["code"], -32003, "{main}");
    assert_eq!(main["error"]["data"]["reasons"], json!(["no-friday-prod"]));
    let dev = g
        .call_tool(&t, "vercel_ops.deploy", json!({"branch": "dev"}))
        .await;
    assert!(dev["result"].is_object(), "{dev}");

    // Graph traffic: batched read_node records and write_node.
    g.call_tool(
        &t,
        "af_memory_remember",
        json!({"content": "AuthService calls UserRepository, which reads PostgresDB."}),
    )
    .await;
    let ingest = g.call_tool(&t, "graph_ingest", json!({"limit": 20})).await;
    assert!(ingest["result"].is_object(), "{ingest}");
    let query = g
        .call_tool(&t, "graph_query", json!({"query": "auth"}))
        .await;
    assert!(query["result"].is_object(), "{query}");
    handle.abort();

    let records = g.decisions().await;
    let flat = common::flat(&records);
    let kinds: std::collections::BTreeSet<&str> = flat.iter().map(|d| d.action.as_str()).collect();
    for k in [
        "access_session",
        "view_tool",
        "call_tool",
        "a2a_invoke",
        "read_node",
        "write_node",
    ] {
        assert!(kinds.contains(k), "no {k} record in {kinds:?}");
    }
    assert!(
        records
            .iter()
            .any(|d| d.record.notes.contains("readNodeBatch"))
    );
    let invoke = records
        .iter()
        .find(|d| d.record.action == "a2a_invoke" && d.record.decision == "allow")
        .unwrap();
    let context: Value = serde_json::from_str(&invoke.record.context).unwrap();
    assert_eq!(context["args"], json!({"branch": "dev"}));

    // Replay under the recorded set reproduces every record exactly;
    // under a candidate without the forbid only the `main` deploy flips.
    let report = g.replay_recorded().await;
    assert_eq!(report.records as usize, records.len());
    assert_eq!(
        report.identical as usize,
        records.len(),
        "{:?}",
        report.flips
    );
    std::fs::remove_file(policies.join("deploys.cedar")).unwrap();
    let lifted = cedargate::policy::load::load_bundle_with_tools(
        &schema,
        &policies,
        &g.gw.lifecycle.tools(),
    )
    .unwrap();
    let report =
        g.gw.store
            .read(move |c| {
                Ok(cedargate::replay::replay(
                    c,
                    &Default::default(),
                    &cedargate::replay::Against::Candidate(std::sync::Arc::new(lifted)),
                )
                .unwrap())
            })
            .await
            .unwrap();
    assert_eq!(report.deny_to_allow, 1, "{:?}", report.flips);
    assert_eq!(report.allow_to_deny, 0);
    assert_eq!(report.flips[0].action, "a2a_invoke");
    assert_eq!(
        report.flips[0].old_reasons,
        vec!["no-friday-prod".to_string()]
    );
}

/// A session's repeated `tools/list` is recorded once per
/// `audit.listing_record_secs` (`audit::repeated_listing`): the repeats
/// are the same decisions as the recorded one (same policies, entities and
/// verdicts, no policy reading the time), so replaying it re-runs each.
/// A tool call is recorded as always; a reload that changes a verdict is
/// recorded at the next listing; another session records its own.
#[tokio::test]
async fn a_repeated_listing_is_recorded_once_until_a_verdict_can_differ() {
    let (g, dir, _keep) = gateway(false).await;
    let t = g.tenant("initech").await;
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let before = g.decisions().await.len();
    let first = g.mcp(&t, list.clone()).await;
    assert_eq!(first.0, 200, "{first:?}");
    for _ in 0..3 {
        assert_eq!(
            g.mcp(&t, list.clone()).await,
            first,
            "a repeat answers the same tools"
        );
    }
    let new = |records: &[cedargate::store::decisions::StoredDecision]| -> Vec<String> {
        records[before..]
            .iter()
            .map(|d| d.record.action.clone())
            .collect()
    };
    assert_eq!(new(&g.decisions().await), ["view_tool"]);
    let repeated = |text: String| -> String {
        text.lines()
            .find(|l| l.starts_with("cedargate_listings_repeated_total"))
            .unwrap_or_else(|| panic!("no listings counter in {text}"))
            .to_string()
    };
    assert_eq!(
        repeated(g.metrics_text().await),
        "cedargate_listings_repeated_total 3"
    );

    // A call is recorded; the listing after it still repeats.
    assert!(remember(&g, &t, "one").await["result"].is_object());
    g.mcp(&t, list.clone()).await;
    assert_eq!(new(&g.decisions().await), ["view_tool", "call_tool"]);

    // A forbid hides a tool: the next listing differs and is recorded,
    // then repeats again.
    let body = apply(
        &g,
        &dir,
        "hide.cedar",
        "@id(\"hide-remember\")\nforbid (principal in Gateway::Org::\"initech\", action == Gateway::Action::\"view_tool\", resource == Gateway::Tool::\"af_memory_remember\");\n",
    )
    .await;
    for _ in 0..2 {
        let (s, body) = g.mcp(&t, list.clone()).await;
        assert_eq!(s, 200);
        let names: Vec<&str> = body["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|t| t["name"].as_str())
            .collect();
        assert!(!names.contains(&"af_memory_remember"), "{names:?}");
    }
    let records = g.decisions().await;
    assert_eq!(new(&records), ["view_tool", "call_tool", "view_tool"]);
    let last = records.last().unwrap();
    assert_eq!(
        last.record.decision, "deny",
        "the hidden tool is in the record"
    );
    assert_eq!(last.record.policy_hash, body["hash"].as_str().unwrap());

    // Another session records its own first listing.
    let other = g.tenant("globex").await;
    g.mcp(&other, list.clone()).await;
    g.mcp(&other, list.clone()).await;
    let records = g.decisions().await;
    assert_eq!(
        new(&records),
        ["view_tool", "call_tool", "view_tool", "view_tool"]
    );
    assert_eq!(
        records.last().unwrap().record.session_id.as_deref(),
        Some(other.session_id.as_str())
    );
    // Every recorded listing replays to its verdicts.
    let report = g.replay_recorded().await;
    assert_eq!(report.identical, report.records, "{report:?}");
}

/// With `audit.listing_record_secs = 0` every listing is recorded.
#[tokio::test]
async fn every_listing_is_recorded_when_repeats_are_not_skipped() {
    let g = TestGateway::start_with(|c| c.audit.listing_record_secs = 0).await;
    let t = g.tenant("initech").await;
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let before = g.decisions().await.len();
    for _ in 0..3 {
        assert_eq!(g.mcp(&t, list.clone()).await.0, 200);
    }
    let records = g.decisions().await;
    let actions: Vec<&str> = records[before..]
        .iter()
        .map(|d| d.record.action.as_str())
        .collect();
    assert_eq!(actions, ["view_tool"; 3]);
}
