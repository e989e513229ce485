//! The gateway bench's report: one table of scenarios with their goals,
//! one of breakdown steps, and the CPU each thread group spent per
//! request. Everything is printed at the end, after the server stopped, so
//! printing never runs during a measurement.

use crate::support::procfs::CpuWindow;
use crate::support::stats::Stats;

#[derive(Debug, Clone, Copy)]
pub enum Goal {
    None,
    P50AtMost(f64),
    RpsAtLeast(f64),
}

#[derive(Debug)]
pub struct Row {
    pub label: String,
    pub conc: Option<usize>,
    pub lat: Stats,
    pub rps: Option<f64>,
    pub errors: u64,
    pub goal: Goal,
}

impl Row {
    fn goal_text(&self) -> String {
        match self.goal {
            Goal::None => String::new(),
            Goal::P50AtMost(us) => format!("p50 <= {us} µs"),
            Goal::RpsAtLeast(r) => format!(">= {} req/s", thousands(r)),
        }
    }

    fn verdict(&self) -> &'static str {
        let ok = match self.goal {
            Goal::None => return "",
            Goal::P50AtMost(us) => self.lat.p50 <= us,
            Goal::RpsAtLeast(r) => self.rps.is_some_and(|x| x >= r),
        };
        if ok && self.errors == 0 {
            "PASS"
        } else {
            "MISS"
        }
    }
}

pub fn thousands(x: f64) -> String {
    let s = (x.round() as u64).to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn fmt_us(x: f64) -> String {
    if x.is_nan() {
        "-".into()
    } else if x < 100.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.0}")
    }
}

pub fn print_rows(title: &str, rows: &[Row]) {
    println!();
    println!("{title}");
    println!(
        "  {:<48} {:>4} {:>7} {:>8} {:>8} {:>8} {:>8} {:>4}  {:<19} result",
        "scenario", "conc", "n", "p50 µs", "p99 µs", "mean µs", "req/s", "err", "goal"
    );
    println!("  {}", "-".repeat(129));
    for r in rows {
        println!(
            "  {:<48} {:>4} {:>7} {:>8} {:>8} {:>8} {:>8} {:>4}  {:<19} {}",
            r.label,
            r.conc.map_or("-".into(), |c| c.to_string()),
            r.lat.n,
            fmt_us(r.lat.p50),
            fmt_us(r.lat.p99),
            fmt_us(r.lat.mean),
            r.rps.map_or("-".into(), thousands),
            r.errors,
            r.goal_text(),
            r.verdict(),
        );
    }
}

pub fn print_parts(title: &str, parts: &[(String, Stats)]) {
    println!();
    println!("{title}");
    println!(
        "  {:<72} {:>8} {:>8} {:>8} {:>8}",
        "step", "p50 µs", "p99 µs", "mean µs", "max µs"
    );
    println!("  {}", "-".repeat(108));
    for (label, s) in parts {
        println!(
            "  {label:<72} {:>8} {:>8} {:>8} {:>8}",
            fmt_us(s.p50),
            fmt_us(s.p99),
            fmt_us(s.mean),
            fmt_us(s.max)
        );
    }
}

const CPU_GROUPS: [&str; 5] = ["srv workers", "srv blocking", "writer", "client", "main"];

pub fn print_cpu(rows: &[(String, u64, CpuWindow)], cores: usize) {
    println!();
    println!(
        "CPU per request (µs of CPU per completed request by thread group; util = busy share of {cores} cores; \
         other = cores used by other processes)"
    );
    print!("  {:<40}", "scenario");
    for g in CPU_GROUPS {
        print!(" {g:>12}");
    }
    println!(" {:>9} {:>6} {:>6}", "total", "util", "other");
    println!("  {}", "-".repeat(40 + 13 * CPU_GROUPS.len() + 24));
    for (label, requests, w) in rows {
        let per = |ns: u64| ns as f64 / 1e3 / (*requests).max(1) as f64;
        print!("  {label:<40}");
        for g in CPU_GROUPS {
            print!(" {:>12.1}", per(w.groups.get(g).copied().unwrap_or(0)));
        }
        let util = w.ours() as f64 / 1e9 / w.wall.as_secs_f64().max(1e-9) / cores as f64;
        println!(
            " {:>9.1} {:>5.0}% {:>6.2}",
            per(w.ours()),
            util * 100.0,
            w.foreign_cores()
        );
    }
}
