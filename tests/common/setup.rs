//! The installers of the real clients, peers, upstream servers and suites
//! the end-to-end tests drive (`tests/*/setup.sh`, `tests/clients/install.sh`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// Runs `script` once per test binary (`cell` keeps its outcome). A
/// failure fails the test under `CI=true` (a test that needs a service
/// must run there); elsewhere it is reported as a skip and `false` returned.
pub fn install_once(cell: &OnceLock<Result<(), String>>, script: &Path, what: &str) -> bool {
    let result = cell.get_or_init(|| {
        let out = Command::new("bash")
            .arg(script)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{} failed ({}):\n{}\n{}",
                script.display(),
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    });
    match result {
        Ok(()) => true,
        Err(e) => {
            super::skip::skipped(&format!("{what} could not be installed: {e}"));
            false
        }
    }
}

/// Where `tests/upstreams/setup.sh` installs the upstream MCP servers the
/// upstream tests front (npm packages, the Python SDK's venv).
pub fn upstreams_dir() -> PathBuf {
    super::repo().join("tests/upstreams")
}

/// Runs the upstream servers' installer once per test binary.
pub fn upstreams_installed() -> bool {
    static SETUP: OnceLock<Result<(), String>> = OnceLock::new();
    install_once(
        &SETUP,
        &upstreams_dir().join("setup.sh"),
        "upstream MCP servers",
    )
}

/// Where `tests/clients/install.sh` installs the real MCP clients the
/// tests drive (npm packages, the Python SDK's venv).
pub fn clients_dir() -> PathBuf {
    super::repo().join("tests/clients")
}

/// Runs the clients' installer once per test binary.
pub fn clients_installed() -> bool {
    static SETUP: OnceLock<Result<(), String>> = OnceLock::new();
    install_once(
        &SETUP,
        &clients_dir().join("install.sh"),
        "real MCP clients",
    )
}

/// Builds the cvc5 solver of the policy proofs once per test binary
/// (`solver/build.sh`: the pinned PyPI wheel's libraries and a small front
/// end); its path, or `None` (skip) outside CI when it cannot be built.
pub fn solver() -> Option<PathBuf> {
    static BUILD: OnceLock<Result<(), String>> = OnceLock::new();
    let built = install_once(
        &BUILD,
        &super::repo().join("solver/build.sh"),
        "the cvc5 solver (solver/build.sh)",
    );
    built.then(|| super::repo().join("target/solver/cvc5"))
}
