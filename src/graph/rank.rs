//! Top-k selection shared by the graph's searches and rankings.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

#[derive(PartialEq)]
struct Scored(f64, u32);

impl Eq for Scored {}

impl PartialOrd for Scored {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Scored {
    // Reversed: the heap's top is the worst kept score (ties: larger index).
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .0
            .total_cmp(&self.0)
            .then_with(|| self.1.cmp(&other.1))
    }
}

/// The `k` best `(index, score)` pairs, best first (ties: lower index).
pub fn top_k(items: impl Iterator<Item = (u32, f64)>, k: usize) -> Vec<(u32, f64)> {
    if k == 0 {
        return Vec::new();
    }
    let mut heap: BinaryHeap<Scored> = BinaryHeap::with_capacity(k + 1);
    for (i, s) in items {
        if !s.is_finite() {
            continue;
        }
        if heap.len() < k {
            heap.push(Scored(s, i));
        } else if let Some(worst) = heap.peek()
            && Scored(s, i) < *worst
        {
            heap.pop();
            heap.push(Scored(s, i));
        }
    }
    let mut out: Vec<(u32, f64)> = heap.into_iter().map(|Scored(s, i)| (i, s)).collect();
    out.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    out
}
