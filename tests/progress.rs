//! The trail-walking CLI commands draw a progress bar on a terminal and
//! nothing when their standard error is piped: `audit verify`, `audit
//! export` and `audit replay` over a gateway's real trail, piped (what
//! scripts and CI see) and, with util-linux `script`, on a pseudo-terminal.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use std::path::{Path, PathBuf};

use common::TestGateway;
use serde_json::json;

/// A config file for the CLI over `g`'s database.
fn config_for(g: &TestGateway, dir: &Path) -> PathBuf {
    let config = dir.join("cedargate.toml");
    let mut text = format!(
        "data_dir = {:?}\npolicies_dir = {:?}\nschema_file = {:?}\n",
        g.dir.path().join("data"),
        common::repo().join("policies"),
        common::repo().join("schemas/gateway.cedarschema"),
    );
    if let Some(url) = common::database_url_for(g.dir.path()) {
        text.push_str(&format!("[database]\nurl = {url:?}\n"));
    }
    std::fs::write(&config, text).unwrap();
    config
}

/// A gateway whose trail holds a few records.
async fn with_records() -> TestGateway {
    let g = TestGateway::start().await;
    let t = g.tenant("acme").await;
    for id in 0..5 {
        g.mcp(
            &t,
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"}),
        )
        .await;
    }
    g.gw.store.writer().flush().await.unwrap();
    g
}

const COMMANDS: [&[&str]; 3] = [
    &["audit", "verify"],
    &["audit", "export"],
    &["audit", "replay", "--recorded"],
];

#[tokio::test]
async fn piped_commands_draw_nothing() {
    let g = with_records().await;
    let dir = tempfile::tempdir().unwrap();
    let config = config_for(&g, dir.path());
    for args in COMMANDS {
        let out = common::cli::run(&config, args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            common::cli::stderr(&out)
        );
        let err = common::cli::stderr(&out);
        assert!(
            !err.contains('\r') && !err.contains("records ("),
            "{args:?}: {err}"
        );
        assert!(!common::cli::stdout(&out).contains('\r'), "{args:?}");
    }
}

#[tokio::test]
async fn on_a_terminal_a_bar_is_drawn_and_cleared() {
    let Ok(script) = which("script") else {
        common::skip::skipped("util-linux `script` is not installed");
        return;
    };
    let g = with_records().await;
    let dir = tempfile::tempdir().unwrap();
    let config = config_for(&g, dir.path());
    let command = format!(
        "{} --config {} audit verify",
        env!("CARGO_BIN_EXE_cedargate"),
        config.display()
    );
    let out = std::process::Command::new(script)
        .args(["-qec", &command, "/dev/null"])
        .env_remove("CEDARGATE_ADMIN_TOKEN")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("verifying ["), "{text}");
    // Cleared before the result is printed.
    assert!(text.contains("\u{1b}[2K"), "{text:?}");
    assert!(text.contains("decision trail intact"), "{text}");
}

fn which(name: &str) -> Result<PathBuf, ()> {
    std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|p| p.join(name))
                .find(|p| p.is_file())
        })
        .ok_or(())
}
