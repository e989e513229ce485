//! Running the real MCP client scripts of `tests/clients/` (installed by
//! its `install.sh`) and reading the summary line each prints.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;

use super::setup::clients_dir;

/// Upper bound on one client run (a hang fails instead of blocking).
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(120);

/// What a client process did.
pub struct Run {
    pub status: std::process::ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// Runs a client with a clean proxy environment (they would route loopback
/// traffic away) and a private HOME.
pub async fn run(program: &Path, args: &[&str], env: &[(&str, &str)], home: &Path) -> Run {
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .current_dir(clients_dir())
        .env("HOME", home)
        .env("NO_PROXY", "127.0.0.1,localhost")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for var in [
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ] {
        cmd.env_remove(var);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", program.display()));
    let out = tokio::time::timeout(CLIENT_TIMEOUT, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("{} {args:?} hung", program.display()))
        .unwrap();
    Run {
        status: out.status,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The summary line a client script printed.
pub fn summary(run: &Run) -> Value {
    assert!(
        run.status.success(),
        "client failed ({}):\nstdout: {}\nstderr: {}",
        run.status,
        run.stdout,
        run.stderr
    );
    let line = run.stdout.lines().rev().find(|l| l.starts_with('{'));
    serde_json::from_str(line.unwrap_or_else(|| panic!("no summary in {}", run.stdout))).unwrap()
}
