//! Latency statistics: count, p50, p99, mean and maximum of a set of
//! samples, in microseconds.
//!
//! The benches were written at different times with three percentile
//! rules ([`Rank`]); each bench keeps the rule it has always used, so that
//! its figures stay comparable with the ones it printed before.

use std::time::Duration;

/// Which sample stands for the quantile `q` of `n` sorted samples.
#[derive(Debug, Clone, Copy)]
pub enum Rank {
    /// The `ceil(q·n)`-th smallest (nearest rank): `gateway`, `graph`.
    Nearest,
    /// The one at index `round((n - 1)·q)`: `a2a`, `lifecycle`.
    Rounded,
    /// The one at index `floor(q·n)`, capped at the last: `transports`,
    /// `backends`.
    Floor,
}

impl Rank {
    /// The index of the quantile `q` among `n > 0` sorted samples.
    fn index(self, n: usize, q: f64) -> usize {
        match self {
            Rank::Nearest => ((q * n as f64).ceil() as usize).clamp(1, n) - 1,
            Rank::Rounded => ((n as f64 - 1.0) * q).round() as usize,
            Rank::Floor => ((n as f64 * q) as usize).min(n - 1),
        }
    }
}

/// Summary of a set of samples, in microseconds; `NaN` when there were
/// none.
#[derive(Debug, Clone, Copy)]
pub struct Stats {
    pub n: usize,
    pub p50: f64,
    pub p99: f64,
    pub mean: f64,
    pub max: f64,
}

impl Stats {
    /// Sorts `samples` and summarises them, percentiles by `rank`.
    pub fn of(mut samples: Vec<Duration>, rank: Rank) -> Stats {
        let n = samples.len();
        if n == 0 {
            return Stats {
                n,
                p50: f64::NAN,
                p99: f64::NAN,
                mean: f64::NAN,
                max: f64::NAN,
            };
        }
        samples.sort_unstable();
        let us = |d: &Duration| d.as_secs_f64() * 1e6;
        let at = |q: f64| samples.get(rank.index(n, q)).map_or(f64::NAN, us);
        let total: f64 = samples.iter().map(us).sum();
        Stats {
            n,
            p50: at(0.50),
            p99: at(0.99),
            mean: total / n as f64,
            max: samples.last().map_or(f64::NAN, us),
        }
    }
}
