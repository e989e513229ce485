//! Every environment variable the README documents, each given to the real
//! binary on its own: the command still starts and the variable takes
//! effect. `CEDARGATE_*` is shared by config keys and by variables that are
//! not (`CEDARGATE_LOG`, `CEDARGATE_CONFIG`); neither kind may stop the
//! other from working.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::cli::{banner, bin, stderr, stdout, write_config};
use common::repo;
use serde_json::{Value, json};

/// The variables this file tests, one test each; the README may document
/// no other (see [`the_readme_documents_only_tested_variables`]).
const TESTED: &[&str] = &[
    "CEDARGATE_CONFIG",
    "CEDARGATE_LISTEN",
    "CEDARGATE_DATA_DIR",
    "CEDARGATE_LOG_FORMAT",
    "CEDARGATE_LIMITS__MAX_BODY_BYTES",
    "CEDARGATE_ADMIN_TOKEN",
    "CEDARGATE_AUDITOR_TOKEN",
    "CEDARGATE_DATABASE__URL",
    "CEDARGATE_LOG",
    "CEDARGATE_WORKER_THREADS",
    "CEDARGATE_CHECKPOINTS__KEY_FILE",
];

/// The binary in `dir` with none of the documented variables inherited.
fn command(dir: &Path) -> Command {
    let mut cmd = bin();
    cmd.current_dir(dir);
    for var in TESTED {
        cmd.env_remove(var);
    }
    cmd
}

/// A running `serve`, with the demo tenant its banner printed.
struct Served {
    child: Child,
    /// `http://127.0.0.1:PORT`
    base: String,
    /// The demo session's MCP URL.
    url: String,
    /// The demo key.
    key: String,
    stderr: std::thread::JoinHandle<String>,
}

/// Starts `serve` in `dir` with `--config config` (if given) and `envs`,
/// and waits until it answers `/healthz`.
async fn serve(dir: &Path, config: Option<&Path>, envs: &[(&str, &str)]) -> Served {
    let mut cmd = command(dir);
    if let Some(config) = config {
        cmd.arg("--config").arg(config);
    }
    let mut child = cmd
        .arg("serve")
        .envs(envs.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = child.stderr.take().unwrap();
    let stderr = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = err.read_to_string(&mut text);
        text
    });
    let (url, key) = banner(&mut child);
    let base = url.split("/api/mcp/").next().unwrap().to_string();
    let status = reqwest::get(format!("{base}/healthz"))
        .await
        .unwrap()
        .status();
    assert_eq!(status, 200, "{envs:?}");
    Served {
        child,
        base,
        url,
        key,
        stderr,
    }
}

impl Served {
    /// Stops the server with SIGTERM and returns what it logged.
    fn stop(mut self) -> String {
        let status = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status()
            .unwrap();
        assert!(status.success());
        for _ in 0..200 {
            if let Some(s) = self.child.try_wait().unwrap() {
                assert!(s.success(), "serve exited with {s}");
                return self.stderr.join().unwrap();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.child.kill().unwrap();
        panic!("serve did not stop within 10 s of SIGTERM");
    }

    /// POSTs `body` to the demo session's MCP URL with the demo key.
    async fn post_mcp(&self, body: String) -> u16 {
        reqwest::Client::new()
            .post(&self.url)
            .bearer_auth(&self.key)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .body(body)
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    }
}

/// A temporary directory with a config file serving the shipped policies
/// on an ephemeral port, on the suite's backend.
fn setup() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &repo().join("policies"));
    (dir, config)
}

#[test]
fn the_readme_documents_only_tested_variables() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let mut documented: Vec<String> = readme
        .split("CEDARGATE_")
        .skip(1)
        .map(|rest| {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            format!("CEDARGATE_{name}")
        })
        .filter(|v| v != "CEDARGATE_")
        .collect();
    documented.sort();
    documented.dedup();
    let mut tested: Vec<String> = TESTED.iter().map(|v| v.to_string()).collect();
    tested.sort();
    assert_eq!(documented, tested);
}

#[tokio::test]
async fn cedargate_log_sets_the_level_and_breaks_no_command() {
    let (dir, config) = setup();
    let out = command(dir.path())
        .arg("--config")
        .arg(&config)
        .args(["policy", "validate"])
        .env("CEDARGATE_LOG", "warn")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("policy set valid"),
        "{}",
        stdout(&out)
    );

    let log = serve(dir.path(), Some(&config), &[("CEDARGATE_LOG", "info")])
        .await
        .stop();
    assert!(log.contains("cedargate listening"), "{log}");

    let (dir, config) = setup();
    let log = serve(dir.path(), Some(&config), &[("CEDARGATE_LOG", "warn")])
        .await
        .stop();
    assert!(!log.contains("cedargate listening"), "{log}");
    assert!(!log.contains("INFO"), "{log}");
}

#[tokio::test]
async fn cedargate_log_format_json_logs_json_lines() {
    let (dir, config) = setup();
    let log = serve(
        dir.path(),
        Some(&config),
        &[("CEDARGATE_LOG_FORMAT", "json")],
    )
    .await
    .stop();
    let lines: Vec<Value> = log
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert!(
        lines
            .iter()
            .any(|l| l["fields"]["message"] == "cedargate listening"),
        "{log}"
    );
}

#[tokio::test]
async fn cedargate_listen_sets_the_address() {
    let (dir, config) = setup();
    let port = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().port()
    };
    let listen = format!("127.0.0.1:{port}");
    let served = serve(dir.path(), Some(&config), &[("CEDARGATE_LISTEN", &listen)]).await;
    assert_eq!(served.base, format!("http://{listen}"));
    served.stop();
}

/// The async workers a stopped `serve` logged (JSON lines) it ran with.
fn workers(log: &str) -> u64 {
    log.lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .find(|entry| entry["fields"]["message"] == "cedargate listening")
        .and_then(|entry| entry["fields"]["workers"].as_u64())
        .unwrap_or_else(|| panic!("no worker count in {log}"))
}

#[tokio::test]
async fn cedargate_worker_threads_sets_the_async_workers() {
    let (dir, config) = setup();
    let cores = std::thread::available_parallelism().unwrap().get();
    let json = ("CEDARGATE_LOG_FORMAT", "json");
    let served = serve(dir.path(), Some(&config), &[json]).await;
    assert_eq!(workers(&served.stop()), (cores as u64 - 1).max(1));
    let three = ("CEDARGATE_WORKER_THREADS", "3");
    let served = serve(dir.path(), Some(&config), &[json, three]).await;
    assert_eq!(workers(&served.stop()), 3);
    let out = command(dir.path())
        .arg("--config")
        .arg(&config)
        .arg("serve")
        .env("CEDARGATE_WORKER_THREADS", "0")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("invalid configuration"), "{stderr}");
    assert!(stderr.contains("WORKER_THREADS"), "{stderr}");
}

#[tokio::test]
async fn cedargate_data_dir_sets_the_data_directory() {
    let (dir, config) = setup();
    let elsewhere = dir.path().join("elsewhere");
    let served = serve(
        dir.path(),
        Some(&config),
        &[("CEDARGATE_DATA_DIR", elsewhere.to_str().unwrap())],
    )
    .await;
    served.stop();
    assert!(elsewhere.join("demo-tenant.json").exists());
    assert!(!dir.path().join("data/demo-tenant.json").exists());
}

#[tokio::test]
async fn cedargate_checkpoints_key_file_places_the_checkpoint_key() {
    let (dir, config) = setup();
    let key_file = dir.path().join("keys/trail.key");
    let var = (
        "CEDARGATE_CHECKPOINTS__KEY_FILE",
        key_file.to_str().unwrap(),
    );
    let served = serve(dir.path(), Some(&config), &[var]).await;
    served.stop();
    assert!(key_file.exists());
    assert!(!dir.path().join("data/checkpoint.key").exists());
    let out = command(dir.path())
        .arg("--config")
        .arg(&config)
        .args(["audit", "key"])
        .env(var.0, var.1)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).starts_with("cedargate+"), "{}", stdout(&out));
}

#[tokio::test]
async fn cedargate_admin_token_serves_the_admin_api() {
    let (dir, config) = setup();
    let served = serve(
        dir.path(),
        Some(&config),
        &[(
            "CEDARGATE_ADMIN_TOKEN",
            "env-admin-token-0123456789abcdef01234",
        )],
    )
    .await;
    let http = reqwest::Client::new();
    let orgs = format!("{}/admin/orgs", served.base);
    let ok = http
        .get(&orgs)
        .bearer_auth("env-admin-token-0123456789abcdef01234")
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    let body: Value = ok.json().await.unwrap();
    assert!(body.to_string().contains("demo"), "{body}");
    let wrong = http.get(&orgs).bearer_auth("other").send().await.unwrap();
    assert_eq!(wrong.status(), 401);
    served.stop();
}

/// `serve` with `envs` stops before serving; what it printed on stderr.
fn refused_to_start(envs: &[(&str, &str)]) -> String {
    let (dir, config) = setup();
    let out = command(dir.path())
        .arg("--config")
        .arg(&config)
        .arg("serve")
        .envs(envs.iter().copied())
        .output()
        .unwrap();
    assert!(!out.status.success(), "{envs:?} started");
    stderr(&out)
}

#[test]
fn short_or_equal_operator_tokens_stop_serve() {
    let short = "a".repeat(31);
    let long = "b".repeat(32);
    let err = refused_to_start(&[("CEDARGATE_ADMIN_TOKEN", &short)]);
    assert!(
        err.contains("CEDARGATE_ADMIN_TOKEN") && err.contains("31 characters"),
        "{err}"
    );
    let err = refused_to_start(&[("CEDARGATE_AUDITOR_TOKEN", "auditor")]);
    assert!(err.contains("CEDARGATE_AUDITOR_TOKEN"), "{err}");
    assert!(err.contains("at least 32"), "{err}");
    let err = refused_to_start(&[
        ("CEDARGATE_ADMIN_TOKEN", &long),
        ("CEDARGATE_AUDITOR_TOKEN", &long),
    ]);
    assert!(err.contains("are equal"), "{err}");
    assert!(err.contains("CEDARGATE_AUDITOR_TOKEN"), "{err}");
}

#[tokio::test]
async fn cedargate_auditor_token_serves_the_console_read_only() {
    let (dir, config) = setup();
    let served = serve(
        dir.path(),
        Some(&config),
        &[(
            "CEDARGATE_AUDITOR_TOKEN",
            "env-auditor-token-0123456789abcdef012",
        )],
    )
    .await;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let form = http
        .get(format!("{}/console/login", served.base))
        .send()
        .await
        .unwrap();
    assert_eq!(form.status(), 200);
    let cookie = form.headers()["set-cookie"].to_str().unwrap().to_string();
    let cookie = cookie.split(';').next().unwrap().to_string();
    let csrf = cookie.split('=').nth(1).unwrap().to_string();
    let signed_in = http
        .post(format!("{}/console/login", served.base))
        .header("Cookie", &cookie)
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(format!(
            "token=env-auditor-token-0123456789abcdef012&csrf={csrf}"
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(signed_in.status(), 303);
    let session = signed_in.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .to_string();
    let session = session.split(';').next().unwrap().to_string();
    let page = http
        .get(format!("{}/console/policies", served.base))
        .header("Cookie", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains("signed in as auditor"));
    // The admin API stays off: the auditor token is not an admin token.
    let admin = http
        .get(format!("{}/admin/orgs", served.base))
        .bearer_auth("env-auditor-token-0123456789abcdef012")
        .send()
        .await
        .unwrap();
    assert_eq!(admin.status(), 404);
    served.stop();
}

#[tokio::test]
async fn cedargate_limits_max_body_bytes_bounds_a_request() {
    let (dir, config) = setup();
    let served = serve(
        dir.path(),
        Some(&config),
        &[("CEDARGATE_LIMITS__MAX_BODY_BYTES", "2048")],
    )
    .await;
    let small = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    assert_eq!(served.post_mcp(small.to_string()).await, 200);
    let big = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "af_memory_remember", "arguments": {"content": "x".repeat(3000)}}});
    assert_eq!(served.post_mcp(big.to_string()).await, 413);
    served.stop();
}

#[tokio::test]
async fn cedargate_database_url_sets_the_store() {
    let (dir, config) = setup();
    let db = dir.path().join("from-env.db");
    let url = format!("sqlite://{}", db.display());
    let served = serve(
        dir.path(),
        Some(&config),
        &[("CEDARGATE_DATABASE__URL", &url)],
    )
    .await;
    served.stop();
    assert!(db.exists(), "{url} was not created");
}

#[tokio::test]
async fn cedargate_config_names_the_config_file() {
    let (dir, _) = setup();
    let policies = dir.path().join("one-policy");
    std::fs::create_dir_all(&policies).unwrap();
    std::fs::write(
        policies.join("all.cedar"),
        "@id(\"all\")\npermit (principal, action, resource);\n",
    )
    .unwrap();
    let config = write_config(dir.path(), &policies);
    let out = command(dir.path())
        .args(["policy", "validate"])
        .env("CEDARGATE_CONFIG", &config)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("policy set valid: 1 policies"),
        "{}",
        stdout(&out)
    );

    let out = command(dir.path())
        .args(["policy", "validate"])
        .env("CEDARGATE_CONFIG", dir.path().join("missing.toml"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("does not exist"), "{}", stderr(&out));

    let served = serve(
        dir.path(),
        None,
        &[("CEDARGATE_CONFIG", config.to_str().unwrap())],
    )
    .await;
    served.stop();
    assert!(dir.path().join("data/demo-tenant.json").exists());
}

#[test]
fn a_misspelt_config_variable_is_an_error() {
    let (dir, config) = setup();
    let out = command(dir.path())
        .arg("--config")
        .arg(&config)
        .args(["policy", "validate"])
        .env("CEDARGATE_LIMITS__MAX_BODY_BYTE", "10")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("max_body_byte"), "{}", stderr(&out));
}
