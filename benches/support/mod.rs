//! What the benches share, so that each bench file holds only what it
//! measures.
//!
//! - this file: the `--bench` gate, knobs from the environment, the
//!   repository root and tokio runtimes whose threads carry a role name;
//! - [`stats`]: percentiles and means of latency samples;
//! - [`fsync`]: the fsync floor (a bare durable SQLite commit);
//! - [`server`]: the real server over a temporary data directory;
//! - [`tenant`]: one org with a project, an agent, a key and a session;
//! - [`http`]: a minimal keep-alive HTTP/1.1 client for load generation;
//! - [`procfs`]: CPU accounting by thread group and facts about the machine.
//!
//! A bench includes the folder with `mod support;` and uses the part it
//! needs; the rest is unused in that binary, hence the allowance below.

#![allow(dead_code, reason = "each bench binary uses a different part")]

pub mod fsync;
pub mod http;
pub mod procfs;
pub mod server;
pub mod stats;
pub mod tenant;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::runtime::Runtime;

/// Any error a bench stops at.
pub type Error = Box<dyn std::error::Error + Send + Sync>;
/// A bench step's result.
pub type Res<T> = Result<T, Error>;

/// Whether `cargo bench` started this binary. `cargo test --all-targets`
/// also runs bench targets, without `--bench`; they skip then, so a bench
/// never adds to test time.
pub fn bench_requested(name: &str) -> bool {
    if std::env::args().any(|a| a == "--bench") {
        return true;
    }
    eprintln!("{name} bench: run it with `cargo bench --bench {name}`; skipped");
    false
}

/// The knob `name` from the environment, or `default` when it is unset or
/// does not parse.
pub fn env_num<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The repository root: `policies/` and `schemas/` live there.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Cores this process may use.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// A multi-thread runtime with `workers` workers named `{prefix}-worker`
/// and blocking threads named `{prefix}-blocking`, so that the CPU
/// accounting in [`procfs`] can tell server, client and peer apart.
pub fn runtime(prefix: &'static str, workers: usize) -> Res<Runtime> {
    let spawned = Arc::new(AtomicUsize::new(0));
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name_fn(move || {
            // Workers are started first, when the runtime is built.
            if spawned.fetch_add(1, Ordering::Relaxed) < workers {
                format!("{prefix}-worker")
            } else {
                format!("{prefix}-blocking")
            }
        })
        .enable_all()
        .build()?)
}
