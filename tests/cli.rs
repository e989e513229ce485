//! The `cedargate` binary as an operator uses it: `serve` with the demo
//! tenant and graceful shutdown, the operator commands, `policy validate`
//! and `audit tail` / `audit verify`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::cli::{banner, bin, database_url, run, stderr, stdout, write_config};
use common::{copy_policies, repo, tamper_decisions};
use serde_json::{Value, json};

/// Starts `serve`, returns the child and the demo URL and key it printed.
fn start_serve(config: &Path) -> (std::process::Child, String, String) {
    let mut child = bin()
        .arg("--config")
        .arg(config)
        .arg("serve")
        .env_remove("CEDARGATE_ADMIN_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (url, key) = banner(&mut child);
    (child, url, key)
}

fn terminate(child: &mut std::process::Child) -> std::process::ExitStatus {
    let status = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status()
        .unwrap();
    assert!(status.success());
    for _ in 0..100 {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.kill().unwrap();
    panic!("serve did not stop within 5 s of SIGTERM");
}

#[tokio::test]
async fn serve_prints_a_working_demo_tenant_and_shuts_down_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &repo().join("policies"));
    let (mut child, url, key) = start_serve(&config);
    assert!(key.starts_with("rsk_live_"));
    let http = reqwest::Client::new();
    let call = |body: Value| http.post(&url).bearer_auth(&key).json(&body).send();
    let resp = call(json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18"}})).await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let resp = call(json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"af_memory_remember","arguments":{"content":"demo works"}}}))
        .await
        .unwrap();
    let body: Value = resp.json().await.unwrap();
    assert!(
        body["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("Stored observation"),
        "{body}"
    );
    assert!(terminate(&mut child).success());

    // The trail was flushed and verifies; the call is in it.
    let verify = run(&config, &["audit", "verify"]);
    assert!(verify.status.success(), "{}", stderr(&verify));
    assert!(stdout(&verify).contains("records verified"));
    let tail = run(&config, &["audit", "tail", "-n", "50", "--json"]);
    let lines: Vec<Value> = stdout(&tail)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        lines.iter().any(|d| d["action"] == "call_tool"
            && d["resource"] == "Gateway::Tool::\"af_memory_remember\"")
    );

    // A second start reuses the tenant and prints the same credentials.
    let (mut child, url2, key2) = start_serve(&config);
    assert_eq!(key2, key);
    assert_eq!(url2.rsplit('/').next(), url.rsplit('/').next());
    assert!(terminate(&mut child).success());
}

#[test]
fn serve_refuses_an_invalid_policy_set() {
    let dir = tempfile::tempdir().unwrap();
    let policies = copy_policies(dir.path());
    std::fs::write(
        policies.join("broken.cedar"),
        "@id(\"broken\")\npermit (principal, action, resource)\nwhen { ;\n",
    )
    .unwrap();
    let config = write_config(dir.path(), &policies);
    let out = run(&config, &["serve"]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("refusing to start"), "{err}");
    assert!(err.contains("broken.cedar:3:"), "{err}");

    let out = run(&config, &["policy", "validate"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("broken.cedar:3:"), "{}", stderr(&out));
    std::fs::remove_file(policies.join("broken.cedar")).unwrap();
    let out = run(&config, &["policy", "validate"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("policy set valid"));
}

#[test]
fn operator_commands_manage_tenants() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &repo().join("policies"));
    let ok = |args: &[&str]| {
        let out = run(&config, args);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        stdout(&out)
    };
    ok(&[
        "org",
        "create",
        "--id",
        "acme",
        "--name",
        "Acme",
        "--entitlement",
        "kg_enabled",
    ]);
    ok(&[
        "project",
        "create",
        "--org",
        "acme",
        "--id",
        "web",
        "--graph-enabled",
        "true",
    ]);
    ok(&[
        "agent",
        "create",
        "--org",
        "acme",
        "--id",
        "claude",
        "--name",
        "Claude",
        "--role",
        "deployers",
    ]);
    let key: Value =
        serde_json::from_str(&ok(&["key", "create", "--org", "acme", "--label", "ci"])).unwrap();
    assert!(key["key"].as_str().unwrap().starts_with("rsk_live_"));
    let session: Value = serde_json::from_str(&ok(&[
        "session",
        "create",
        "--org",
        "acme",
        "--project",
        "web",
        "--agent",
        "claude",
    ]))
    .unwrap();
    assert!(
        session["mcpUrl"]
            .as_str()
            .unwrap()
            .contains(session["sessionId"].as_str().unwrap())
    );
    let orgs: Value = serde_json::from_str(&ok(&["org", "list"])).unwrap();
    assert_eq!(orgs[0]["entitlements"], json!(["kg_enabled"]));
    let projects: Value = serde_json::from_str(&ok(&["project", "list", "--org", "acme"])).unwrap();
    assert_eq!(projects[0]["graphEnabled"], true);
    let keys = ok(&["key", "list", "--org", "acme"]);
    assert!(!keys.contains(key["key"].as_str().unwrap()));

    let bad = run(
        &config,
        &["key", "create", "--org", "ghost", "--label", "x"],
    );
    assert_eq!(bad.status.code(), Some(1));
    assert!(
        stderr(&bad).contains("org `ghost` not found"),
        "{}",
        stderr(&bad)
    );
    let bad = run(
        &config,
        &["org", "create", "--id", "acme", "--name", "Again"],
    );
    assert!(stderr(&bad).contains("already exists"));
    ok(&[
        "key",
        "delete",
        "--org",
        "acme",
        key["id"].as_str().unwrap(),
    ]);
    assert_eq!(ok(&["key", "list", "--org", "acme"]).trim(), "[]");
}

#[test]
fn audit_verify_fails_on_a_tampered_trail() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &repo().join("policies"));
    // Produce a few records through the CLI-visible path: a served session.
    let (mut child, url, key) = start_serve(&config);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let http = reqwest::Client::new();
        // A listing, then a ping (its access_session, a record of its own).
        for (i, method) in ["tools/list", "ping"].into_iter().enumerate() {
            http.post(&url)
                .bearer_auth(&key)
                .json(&json!({"jsonrpc":"2.0","id":i,"method":method}))
                .send()
                .await
                .unwrap();
        }
    });
    assert!(terminate(&mut child).success());
    assert!(run(&config, &["audit", "verify"]).status.success());
    tamper_decisions(
        &database_url(dir.path()),
        "UPDATE decisions SET decision = 'allow', reasons = '[]' WHERE seq = 2;",
    );
    let out = run(&config, &["audit", "verify"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("seq 2"), "{}", stderr(&out));
}
