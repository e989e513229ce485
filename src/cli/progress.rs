//! Progress of the CLI commands that walk the trail (`audit replay`,
//! `verify`, `archive`, `export`): a bar on standard error while it is a
//! terminal, nothing at all when it is piped or redirected (scripts and CI
//! read only the commands' own output). The work counts what it walked in
//! an atomic counter; a watcher thread moves the bar from it, so the walk
//! itself never draws.

use std::io::IsTerminal as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

/// How often the bar is redrawn.
const TICK: Duration = Duration::from_millis(100);

/// A bar over `total` records (`None`: a count without an end), hidden
/// unless standard error is a terminal.
fn bar(what: &str, total: Option<u64>) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let (bar, template) = match total {
        Some(n) => (
            ProgressBar::new(n),
            "{msg} [{bar:40}] {pos}/{len} records ({per_sec}, {eta} left)",
        ),
        None => (
            ProgressBar::new_spinner(),
            "{spinner} {msg}: {pos} records ({per_sec})",
        ),
    };
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(what.to_string());
    bar
}

/// Runs `work`, showing the records it counts in `counter` as `what`
/// (out of `total`, when known); the bar is cleared when it ends.
pub fn watched<T>(
    what: &str,
    total: Option<u64>,
    counter: &AtomicU64,
    work: impl FnOnce() -> T,
) -> T {
    watched_by(what, total, || counter.load(Ordering::Relaxed), work)
}

/// [`watched`], reading the position from `position`.
pub fn watched_by<T>(
    what: &str,
    total: Option<u64>,
    position: impl Fn() -> u64 + Sync,
    work: impl FnOnce() -> T,
) -> T {
    let bar = bar(what, total);
    if bar.is_hidden() {
        return work();
    }
    let done = AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            while !done.load(Ordering::Acquire) {
                bar.set_position(position());
                std::thread::sleep(TICK);
            }
        });
        let out = work();
        done.store(true, Ordering::Release);
        bar.finish_and_clear();
        out
    })
}
