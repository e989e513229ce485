//! A test that cannot run here says so where `cargo test` shows it.
//!
//! libtest keeps what a passing test prints with `eprintln!` to itself, so
//! a skip reported that way vanished, and "N passed" counted tests that
//! never ran. A skip is written to the process's stderr directly, which
//! libtest does not capture: it shows among the test lines of every run,
//! with how many tests of this binary have skipped so far. Under `CI=true`
//! a skip is a failure instead (a test that needs a service must run).

use std::io::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Tests of this binary skipped so far.
static SKIPPED: AtomicUsize = AtomicUsize::new(0);

/// Whether we run under CI (`CI=true`).
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// Fails the test under `CI=true`; elsewhere reports it skipped (visibly)
/// and why. The caller returns right after.
pub fn skipped(why: &str) {
    assert!(!in_ci(), "cannot run under CI=true: {why}");
    let count = SKIPPED.fetch_add(1, Ordering::Relaxed) + 1;
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("a test");
    let _ = writeln!(
        std::io::stderr().lock(),
        "SKIPPED {test}: {why} [{count} skipped in this binary so far; CI=true makes it a failure]"
    );
}
