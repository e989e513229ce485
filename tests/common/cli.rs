//! Helpers for tests that run the `cedargate` binary itself.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};

use super::repo;

/// The binary under test.
pub fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_cedargate"))
}

/// Writes `dir/cedargate.toml` using `policies`, the shipped schema and a
/// data dir inside `dir` (listening on an ephemeral port if served), on the
/// suite's backend.
pub fn write_config(dir: &Path, policies: &Path) -> PathBuf {
    let path = dir.join("cedargate.toml");
    let mut text = format!(
        "listen = \"127.0.0.1:0\"\ndata_dir = {:?}\npolicies_dir = {:?}\nschema_file = {:?}\n",
        dir.join("data"),
        policies,
        repo().join("schemas/gateway.cedarschema")
    );
    if let Some(url) = super::database_url_for(dir) {
        text.push_str(&format!("\n[database]\nurl = {url:?}\n"));
    }
    std::fs::write(&path, text).unwrap();
    path
}

/// The store URL a config written by [`write_config`] into `dir` uses.
pub fn database_url(dir: &Path) -> String {
    super::database_url_for(dir)
        .unwrap_or_else(|| format!("sqlite://{}", dir.join("data/cedargate.db").display()))
}

/// Runs one command with `config` (never with an admin token from the
/// environment) and waits for it.
pub fn run(config: &Path, args: &[&str]) -> Output {
    bin()
        .arg("--config")
        .arg(config)
        .args(args)
        .env_remove("CEDARGATE_ADMIN_TOKEN")
        .output()
        .unwrap()
}

/// A command's standard output as text.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A command's standard error as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Copies a directory tree (policies with their `tests/`).
pub fn copy_dir(from: &Path, to: &Path) {
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

/// The MCP URL and key of the demo banner on `child`'s stdout.
pub fn banner(child: &mut Child) -> (String, String) {
    let out = child.stdout.take().unwrap();
    let mut lines = BufReader::new(out).lines();
    let (mut url, mut key) = (None, None);
    for line in lines.by_ref() {
        let line = line.unwrap();
        if let Some(u) = line.strip_prefix("MCP URL:") {
            url = Some(u.trim().to_string());
        }
        if let Some(k) = line.strip_prefix("Bearer key:") {
            key = Some(k.trim().to_string());
        }
        if line.contains("mcpServers") {
            break;
        }
    }
    // Keep draining so the server never writes into a closed pipe.
    std::thread::spawn(move || for _ in lines {});
    (
        url.expect("serve prints the demo MCP URL (it did not start?)"),
        key.expect("serve prints the demo key"),
    )
}
