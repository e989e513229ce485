//! The web console in a real browser: Debian's `chromium`, headless,
//! driven by `playwright-core` (installed by `tests/console/setup.sh`) over
//! the real server on 127.0.0.1:0. The gateway runs the shipped policies
//! plus a forbid; one call is denied by it; `tests/console/browser.mjs`
//! signs in, filters to the denial, opens it and reads the deciding policy
//! id, replays a candidate without the forbid and sees the flip, and
//! checks the auditor can neither reload nor approve. Screenshots of each
//! page are kept under `target/console-screenshots/`.
//!
//! A second test signs a person in with a real OpenID provider
//! (`tests/oidc/provider.mjs` showing its HTML sign-in form):
//! `tests/console/browser_oidc.mjs` clicks "Sign in with …", fills the
//! provider's form and lands on the overview signed in as Alice, an admin.
//!
//! A third runs the real solver (`solver/build.sh`) under `[lifecycle]
//! prove = "refuse-widening"`: a candidate that lets deployers write any
//! graph is refused; `tests/console/browser_proof.mjs` reads the proof on
//! the Policy set page as an auditor (outcome, the widening environment's
//! verdict, the counterexample with both sets' decisions), opens the
//! counterexample in what-if and sees the flip (candidate allow, active set
//! deny).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use std::process::Command;
use std::sync::OnceLock;

use cedargate::config::ProveMode;
use cedargate::console::oidc::config::OidcConfig;
use common::oidc::{CONSOLE, OidcProvider, Options};
use common::{ADMIN_TOKEN, TestGateway, repo};
use reqwest::Method;
use serde_json::json;

const AUDITOR_TOKEN: &str = "browser-auditor-token-0123456789abcdef";
const POLICY_ID: &str = "no-remembering";
const FORBID: &str = r#"@id("no-remembering")
@advice("memory writes are frozen during the audit")
forbid (principal, action in Gateway::Action::"call_tool", resource == Gateway::Tool::"af_memory_remember");
"#;

static SETUP: OnceLock<Result<(), String>> = OnceLock::new();

#[tokio::test]
async fn an_auditor_and_an_admin_in_a_real_browser() {
    let setup = repo().join("tests/console/setup.sh");
    if !common::setup::install_once(&SETUP, &setup, "playwright-core and chromium") {
        return;
    }
    let policy_dir = tempfile::tempdir().unwrap();
    let policies = common::copy_policies(policy_dir.path());
    std::fs::write(policies.join("audit.cedar"), FORBID).unwrap();
    let g = TestGateway::start_with(|c| {
        c.policies_dir = policies;
        c.auditor_token = Some(AUDITOR_TOKEN.into());
    })
    .await;
    let t = g.tenant("acme").await;
    g.call_tool(
        &t,
        "af_memory_recall",
        json!({"query": "x", "workType": "chore"}),
    )
    .await;
    let body = g
        .call_tool(&t, "af_memory_remember", json!({"content": "x"}))
        .await;
    let denied = body["error"]["data"]["decisionId"]
        .as_str()
        .unwrap()
        .to_string();
    let candidate: String =
        g.gw.pep
            .current()
            .files
            .iter()
            .filter(|f| !f.path.ends_with("audit.cedar"))
            .map(|f| f.text.clone())
            .collect::<Vec<_>>()
            .join("\n");
    let shots = repo().join("target/console-screenshots");
    let base = g.base.clone();
    let out = tokio::task::spawn_blocking(move || {
        Command::new("node")
            .arg(repo().join("tests/console/browser.mjs"))
            .env("CG_BASE", base)
            .env("CG_SHOTS", &shots)
            .env("CG_DENIED_ID", denied)
            .env("CG_POLICY_ID", POLICY_ID)
            .env("CG_CANDIDATE", candidate)
            .env("CG_ADMIN_TOKEN", ADMIN_TOKEN)
            .env("CG_AUDITOR_TOKEN", AUDITOR_TOKEN)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let log = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{log}");
    assert!(log.contains("console browser checks passed"), "{log}");
    for name in [
        "01-sign-in",
        "04-decision",
        "06-replay-flips",
        "09-policies-auditor",
    ] {
        let shot = repo().join(format!("target/console-screenshots/{name}.png"));
        assert!(std::fs::metadata(&shot).unwrap().len() > 1000, "{name}");
    }
    // Nothing the auditor tried changed anything.
    assert!(
        g.decisions()
            .await
            .iter()
            .all(|d| !d.record.action.starts_with("console:"))
    );
    drop(policy_dir);
}

#[tokio::test]
async fn a_person_signs_in_with_the_identity_provider_in_a_real_browser() {
    let setup = repo().join("tests/console/setup.sh");
    if !common::setup::install_once(&SETUP, &setup, "playwright-core and chromium")
        || !common::oidc::installed()
    {
        return;
    }
    let provider = OidcProvider::start(Options {
        login_page: true,
        ..Options::default()
    })
    .await;
    let secrets = tempfile::tempdir().unwrap();
    let secret_file = secrets.path().join("console-secret");
    std::fs::write(&secret_file, CONSOLE.secret.unwrap()).unwrap();
    let issuer = provider.issuer.clone();
    let g = TestGateway::start_with(|c| {
        c.console.shared_tokens = false;
        c.console.oidc = Some(OidcConfig {
            issuer,
            display_name: Some("Example SSO".into()),
            client_id: CONSOLE.id.into(),
            client_secret_file: Some(secret_file),
            admin_groups: vec!["sre".into()],
            ..OidcConfig::default()
        });
    })
    .await;
    provider
        .set_console_redirects(&[&format!("{}/console/callback", g.base)])
        .await;
    let (base, issuer) = (g.base.clone(), provider.issuer.clone());
    let out = tokio::task::spawn_blocking(move || {
        Command::new("node")
            .arg(repo().join("tests/console/browser_oidc.mjs"))
            .env("CG_BASE", base)
            .env("CG_ISSUER", issuer)
            .env("CG_SHOTS", repo().join("target/console-screenshots"))
            .env("CG_USER", "alice")
            .env("CG_EXPECT_PERSON", "Alice Example (alice@example.com)")
            .env("CG_EXPECT_ROLE", "admin")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let log = format!(
        "{}\n{}\nprovider:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        provider.log()
    );
    assert!(out.status.success(), "{log}");
    assert!(log.contains("console oidc browser checks passed"), "{log}");
    let shot = repo().join("target/console-screenshots/oidc-03-overview.png");
    assert!(std::fs::metadata(&shot).unwrap().len() > 1000);
}

/// The widening candidate: deployers may write any project's graph.
const WIDER: &str = "@id(\"deployers-write-any-graph\")\npermit (principal in Gateway::Role::\"deployers\", action == Gateway::Action::\"write_node\", resource);\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_widening_and_its_counterexample_in_what_if_in_a_real_browser() {
    let setup = repo().join("tests/console/setup.sh");
    if !common::setup::install_once(&SETUP, &setup, "playwright-core and chromium") {
        return;
    }
    let Some(solver) = common::setup::solver() else {
        return;
    };
    let policy_dir = tempfile::tempdir().unwrap();
    let policies = common::copy_policies(policy_dir.path());
    let for_config = policies.clone();
    let g = TestGateway::start_with(move |c| {
        c.policies_dir = for_config;
        c.lifecycle.watch = false;
        c.lifecycle.prove = ProveMode::RefuseWidening;
        c.prove.solver = Some(solver);
        c.auditor_token = Some(AUDITOR_TOKEN.into());
    })
    .await;
    let active = g.gw.pep.current().hash.clone();
    std::fs::write(policies.join("deployers.cedar"), WIDER).unwrap();
    let (status, body) = g.admin(Method::POST, "/admin/policies/reload", None).await;
    assert_eq!(status, 422, "{body:#}");
    assert_eq!(body["error"]["code"], "policy_set_refused", "{body:#}");
    let candidate = body["attempt"]["hash"].as_str().unwrap().to_string();
    let example = &body["proof"]["counterexamples"][0];
    assert_eq!(example["direction"], "widening", "{body:#}");
    let env = example["env"].as_str().unwrap().to_string();
    let principal = example["witness"]["principal"]
        .as_str()
        .unwrap()
        .to_string();
    let base = g.base.clone();
    let out = tokio::task::spawn_blocking(move || {
        Command::new("node")
            .arg(repo().join("tests/console/browser_proof.mjs"))
            .env("CG_BASE", base)
            .env("CG_SHOTS", repo().join("target/console-screenshots"))
            .env("CG_AUDITOR_TOKEN", AUDITOR_TOKEN)
            .env("CG_ACTIVE_HASH", active)
            .env("CG_CANDIDATE_HASH", candidate)
            .env("CG_WIDENING_ENV", env)
            .env("CG_PRINCIPAL", principal)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let log = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{log}");
    assert!(log.contains("console proof browser checks passed"), "{log}");
    for name in [
        "proof-01-policies",
        "proof-02-whatif-form",
        "proof-03-whatif-flip",
    ] {
        let shot = repo().join(format!("target/console-screenshots/{name}.png"));
        assert!(std::fs::metadata(&shot).unwrap().len() > 1000, "{name}");
    }
    // Asking a question changed nothing: the refused candidate stays refused.
    assert_ne!(
        g.gw.pep.current().hash,
        body["attempt"]["hash"].as_str().unwrap()
    );
    drop(policy_dir);
}
