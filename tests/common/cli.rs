//! Helpers for tests that run the `cedargate` binary itself.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

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
