//! Where the CPU went, and what machine the figures come from, read from
//! procfs (Linux). Where there is no procfs the readings are empty or `?`,
//! so a bench still runs, with fewer figures.
//!
//! CPU is accounted per thread group: this process's threads are summed
//! by a [`Grouping`] of their names (the runtimes of [`super::runtime`]
//! name theirs `srv-*`, `cli-*`, `peer-*`). Two clocks exist because the
//! benches always used different ones and their figures must stay
//! comparable: `gateway` reads `schedstat` (ns), `a2a` the `utime +
//! stime` ticks of `stat` (10 ms).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

/// Nanoseconds in one clock tick: ticks are 100 Hz (`USER_HZ`) on every
/// Linux the benches target.
const TICK_NS: u64 = 10_000_000;

/// Which per-thread CPU counter to read.
#[derive(Debug, Clone, Copy)]
pub enum Clock {
    /// `/proc/self/task/*/schedstat`: time on CPU, in ns.
    Schedstat,
    /// `utime + stime` from `/proc/self/task/*/stat`, in 10 ms ticks.
    Ticks,
}

/// The group a thread's CPU is counted in, from the thread's name.
pub type Grouping = fn(&str) -> &str;

/// `gateway`'s groups: server workers, server blocking threads, the
/// group-commit writer, the load generator, and everything else.
pub fn runtime_roles(name: &str) -> &str {
    if name.starts_with("srv-worker") {
        "srv workers"
    } else if name.starts_with("srv-blocking") {
        "srv blocking"
    } else if name.starts_with("cedargate-write") {
        "writer"
    } else if name.starts_with("cli-") {
        "client"
    } else {
        "main"
    }
}

/// `a2a`'s groups: the name up to its first `-` (`srv`, `peer`, `cli`),
/// the group-commit writer as `writer`.
pub fn name_prefix(name: &str) -> &str {
    if name.starts_with("cedargate-write") {
        "writer"
    } else {
        name.split('-').next().unwrap_or(name)
    }
}

/// What to read and how to group it.
#[derive(Debug, Clone, Copy)]
pub struct Threads {
    pub clock: Clock,
    pub group: Grouping,
}

impl Threads {
    /// CPU ns used so far by this process's threads, by group.
    pub fn read(&self) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
            return out;
        };
        for task in tasks.flatten() {
            if let Some((name, ns)) = thread_cpu(&task.path(), self.clock) {
                *out.entry((self.group)(&name).to_string()).or_insert(0) += ns;
            }
        }
        out
    }

    /// A reading to measure a window from.
    pub fn mark(&self) -> CpuMark {
        CpuMark {
            threads: *self,
            groups: self.read(),
            machine: machine_busy_ns(),
            at: Instant::now(),
        }
    }
}

/// One thread's name and CPU ns, from its `/proc/self/task/<tid>` folder;
/// `None` once the thread is gone.
fn thread_cpu(dir: &Path, clock: Clock) -> Option<(String, u64)> {
    let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
    // The name sits in parentheses and may itself hold spaces or `)`.
    let (open, close) = (stat.find('(')?, stat.rfind(')')?);
    let name = stat.get(open + 1..close).unwrap_or_default().to_string();
    let ns = match clock {
        Clock::Schedstat => std::fs::read_to_string(dir.join("schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next().and_then(|x| x.parse().ok()))
            .unwrap_or(0),
        Clock::Ticks => {
            let fields: Vec<&str> = stat
                .get(close + 2..)
                .unwrap_or_default()
                .split(' ')
                .collect();
            // utime and stime are fields 14 and 15 of stat (11 and 12 after the name).
            let ticks: u64 = [11, 12]
                .iter()
                .filter_map(|i| fields.get(*i).and_then(|v| v.parse::<u64>().ok()))
                .sum();
            ticks * TICK_NS
        }
    };
    Some((name, ns))
}

/// Busy CPU time of the whole machine in ns (`/proc/stat`, 10 ms ticks).
pub fn machine_busy_ns() -> u64 {
    let Ok(stat) = std::fs::read_to_string("/proc/stat") else {
        return 0;
    };
    let fields: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal
    let busy: u64 = [0usize, 1, 2, 5, 6, 7]
        .iter()
        .filter_map(|i| fields.get(*i))
        .sum();
    busy * TICK_NS
}

/// The start of a measured window.
pub struct CpuMark {
    threads: Threads,
    groups: BTreeMap<String, u64>,
    machine: u64,
    at: Instant,
}

impl CpuMark {
    /// The CPU used since the mark, by group, and by the whole machine.
    pub fn since(&self) -> CpuWindow {
        let after = self.threads.read();
        CpuWindow {
            groups: after
                .into_iter()
                .map(|(k, v)| {
                    let before = self.groups.get(&k).copied().unwrap_or(0);
                    (k, v.saturating_sub(before))
                })
                .collect(),
            machine: machine_busy_ns().saturating_sub(self.machine),
            wall: self.at.elapsed(),
        }
    }
}

/// CPU used during a window: ns by group, ns busy on the machine, wall time.
#[derive(Debug, Clone)]
pub struct CpuWindow {
    pub groups: BTreeMap<String, u64>,
    pub machine: u64,
    pub wall: Duration,
}

impl CpuWindow {
    /// ns this process used.
    pub fn ours(&self) -> u64 {
        self.groups.values().sum()
    }

    /// Cores other processes kept busy on average (10 ms resolution).
    pub fn foreign_cores(&self) -> f64 {
        self.machine.saturating_sub(self.ours()) as f64 / 1e9 / self.wall.as_secs_f64().max(1e-9)
    }
}

/// CPU each group spent on one target, summed over several windows.
#[derive(Debug, Default)]
pub struct CpuTotal {
    ns: BTreeMap<String, u64>,
    requests: usize,
}

impl CpuTotal {
    /// Adds a window in which `requests` requests were sent.
    pub fn add(&mut self, window: &CpuWindow, requests: usize) {
        for (k, v) in &window.groups {
            *self.ns.entry(k.clone()).or_insert(0) += v;
        }
        self.requests += requests;
    }

    /// `group µs` per request, for every group that spent any.
    pub fn per_request(&self) -> String {
        self.ns
            .iter()
            .filter(|(_, ns)| **ns > 0)
            .map(|(k, ns)| format!("{k} {:.0}", *ns as f64 / 1e3 / self.requests.max(1) as f64))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Filesystem type of the mount holding `path` (from /proc/self/mounts).
pub fn fs_type(path: &Path) -> String {
    let Ok(mounts) = std::fs::read_to_string("/proc/self/mounts") else {
        return "?".into();
    };
    let path = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    mounts
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let _device = f.next()?;
            let mount = f.next()?;
            let ty = f.next()?;
            path.starts_with(mount)
                .then(|| (mount.len(), ty.to_string()))
        })
        .max_by_key(|(len, _)| *len)
        .map_or_else(|| "?".into(), |(_, ty)| ty)
}

/// The 1, 5 and 15 minute load averages.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The CPU's model name.
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map_or_else(|| "?".into(), |m| m.trim().to_string())
}

/// The kernel's clock source (what `Instant::now` costs depends on it).
pub fn clocksource() -> String {
    std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
        .map_or_else(|_| "?".into(), |s| s.trim().to_string())
}
