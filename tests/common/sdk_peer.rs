//! A2A peers built with the reference SDKs (`tests/peers/`): installed once
//! per test binary by `setup.sh`, started as processes, killed on drop.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::Value;

/// Where the peer scripts and their installs live.
pub fn peers_dir() -> PathBuf {
    super::repo().join("tests/peers")
}

/// Runs the installer once per test binary; None when it failed outside CI.
pub fn installed() -> Option<()> {
    static RESULT: OnceLock<Result<(), String>> = OnceLock::new();
    super::setup::install_once(
        &RESULT,
        &peers_dir().join("setup.sh"),
        "the reference A2A SDKs",
    )
    .then_some(())
}

/// A peer process; killed on drop.
pub struct SdkPeer {
    child: Child,
    pub base: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for SdkPeer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl SdkPeer {
    async fn start(program: &str, script: &str) -> SdkPeer {
        let dir = tempfile::tempdir().unwrap();
        let port_file = dir.path().join("port");
        let child = Command::new(program)
            .arg(peers_dir().join(script))
            .arg(&port_file)
            .current_dir(peers_dir())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {script}: {e}"));
        let mut peer = SdkPeer {
            child,
            base: String::new(),
            log: dir.path().join("port.log"),
            _dir: dir,
        };
        for _ in 0..600 {
            if let Ok(port) = std::fs::read_to_string(&port_file) {
                peer.base = format!("http://127.0.0.1:{}", port.trim());
                return peer;
            }
            if let Some(status) = peer.child.try_wait().unwrap() {
                panic!("{script} exited early: {status}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("{script} did not start listening within 30 s");
    }

    pub async fn python() -> SdkPeer {
        let python = peers_dir().join(".venv/bin/python");
        Self::start(python.to_str().unwrap(), "python_peer.py").await
    }

    pub async fn js() -> SdkPeer {
        Self::start("node", "js_peer.mjs").await
    }

    /// `(method, A2A-Version header)` of every RPC the peer received.
    pub fn rpcs(&self) -> Vec<(String, Option<String>)> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| {
                let v: Value = serde_json::from_str(l).unwrap();
                (
                    v["method"].as_str().unwrap_or_default().to_string(),
                    v["version"].as_str().map(str::to_string),
                )
            })
            .collect()
    }
}
