//! The vector index of one project graph: every node's vector in `f32`
//! (the exact scores) and a copy quantized to `i8` (the scan), searched
//! exactly.
//!
//! A flat `f32` scan reads 512 bytes per node of 128 dimensions: 512 MB
//! per query at a million nodes, far over the 20 ms budget. The scan
//! reads the `i8` copy instead (a quarter of the bytes, integer dot
//! products that vectorize) and bounds each node's exact score from it:
//! with `q̂`, `v̂` the dequantized query and vector, Cauchy–Schwarz gives
//! `|q·v − q̂·v̂| ≤ ‖q − q̂‖·‖v‖ + ‖q̂‖·‖v − v̂‖`, both norms and both errors
//! known (the node's at insertion, the query's per search). The nodes with
//! the best upper bounds are rescored with the exact `f32` dot product (the
//! same function as before, so scores are bit-identical), and the answer is
//! accepted only when the `limit`-th exact score beats the best bound left
//! out; otherwise (never seen on real data, kept for correctness) the
//! search falls back to the full exact scan. Results therefore equal the
//! exhaustive search, ties included.
//!
//! Trade-off: 1.25× the memory of the `f32` vectors alone (one byte per
//! dimension plus three floats per node). The scan splits into slices of
//! [`PARALLEL_FROM`] vectors (at most [`MAX_PARTS`]) on the rayon pool, so
//! its parallelism is bounded by the pool (one thread per core) however
//! many queries run at once; several slices per thread rather than one
//! half each let the thread that was not preempted take over the other's
//! share on a busy machine instead of waiting for it.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use rayon::prelude::*;

use super::embed::dot;
use super::rank::top_k;

/// Nodes rescored exactly per result wanted.
const RESCORE_PER_RESULT: usize = 4;
/// Fewest nodes rescored exactly.
const RESCORE_MIN: usize = 64;
/// Vectors per slice of the parallel scan (smaller graphs scan on the
/// calling thread).
const PARALLEL_FROM: usize = 65_536;
/// Most slices of one scan.
const MAX_PARTS: usize = 8;
/// Slack on every bound for the rounding of the `f32` dot product.
const ROUNDING_SLACK: f64 = 1e-4;

/// The vectors of one model, one slot per node.
#[derive(Debug, Default)]
pub struct VectorIndex {
    dims: usize,
    /// `dims` floats per node (zeros when the node has no vector).
    exact: Vec<f32>,
    /// `dims` quantized values per node.
    quantized: Vec<i8>,
    /// Per node: dequantization scale, `‖v‖` and `‖v − v̂‖` (`NaN` scale:
    /// no vector).
    meta: Vec<Meta>,
}

#[derive(Debug, Clone, Copy)]
struct Meta {
    scale: f32,
    norm: f32,
    error: f32,
}

const NO_VECTOR: Meta = Meta {
    scale: f32::NAN,
    norm: 0.0,
    error: 0.0,
};

/// A vector quantized to `i8` with one scale, its norm and its error.
fn quantize(v: &[f32]) -> (Vec<i8>, Meta) {
    let max = v.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    let scale = if max > 0.0 && max.is_finite() {
        max / 127.0
    } else {
        1.0
    };
    let q: Vec<i8> = v
        .iter()
        .map(|x| (x / scale).round().clamp(-127.0, 127.0) as i8)
        .collect();
    let norm = v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    let error = v
        .iter()
        .zip(&q)
        .map(|(x, y)| (f64::from(*x) - f64::from(*y) * f64::from(scale)).powi(2))
        .sum::<f64>()
        .sqrt();
    let finite = norm.is_finite() && error.is_finite();
    let meta = Meta {
        scale,
        norm: if finite { norm as f32 } else { f32::INFINITY },
        error: if finite { error as f32 } else { f32::INFINITY },
    };
    (q, meta)
}

/// Independent sums of [`dot_i8`]: one per SIMD lane.
const LANES: usize = 16;

/// The integer dot product of the scan: the query widened to `i16` once
/// per search, a node's `i8` values, summed in [`LANES`] independent `i32`
/// lanes over fixed-size chunks. Written this way the compiler turns the
/// loop into packed multiply-adds (`pmaddwd` on the baseline x86-64
/// target); the plain `zip().map().sum()` over two `i8` slices kept one
/// dependency chain per element and ran 2.5–3× slower over a million
/// vectors. Integer sums are exact in any order, so the result is the
/// same as that loop's.
fn dot_i8(q: &[i16], v: &[i8]) -> i32 {
    let (q_chunks, v_chunks) = (q.chunks_exact(LANES), v.chunks_exact(LANES));
    let tail: i32 = q_chunks
        .remainder()
        .iter()
        .zip(v_chunks.remainder())
        .map(|(x, y)| i32::from(*x) * i32::from(*y))
        .sum();
    let mut lanes = [0i32; LANES];
    for (qc, vc) in q_chunks.zip(v_chunks) {
        for ((lane, x), y) in lanes.iter_mut().zip(qc).zip(vc) {
            *lane += i32::from(*x) * i32::from(*y);
        }
    }
    lanes.iter().sum::<i32>() + tail
}

impl VectorIndex {
    /// Dimensions (0 until the first vector).
    pub fn dims(&self) -> usize {
        self.dims
    }

    /// Appends the next node's slot, with `v` when it has the index's
    /// dimensions (the first vector sets them). Whether `v` was indexed.
    pub fn push(&mut self, v: Option<&[f32]>) -> bool {
        let v = v.filter(|v| !v.is_empty());
        if let Some(v) = v
            && self.dims == 0
        {
            self.dims = v.len();
            self.exact = vec![0.0; self.meta.len() * self.dims];
            self.quantized = vec![0; self.meta.len() * self.dims];
        }
        match v.filter(|v| v.len() == self.dims) {
            Some(v) => {
                let (q, meta) = quantize(v);
                self.exact.extend_from_slice(v);
                self.quantized.extend_from_slice(&q);
                self.meta.push(meta);
                true
            }
            None => {
                self.exact.extend(std::iter::repeat_n(0.0, self.dims));
                self.quantized.extend(std::iter::repeat_n(0, self.dims));
                self.meta.push(NO_VECTOR);
                false
            }
        }
    }

    /// Replaces the vector of node `i` (ignored for another dimension).
    pub fn set(&mut self, i: u32, v: &[f32]) {
        if v.is_empty() {
            return;
        }
        if self.dims == 0 {
            self.dims = v.len();
            self.exact = vec![0.0; self.meta.len() * self.dims];
            self.quantized = vec![0; self.meta.len() * self.dims];
        }
        if v.len() != self.dims {
            return;
        }
        let start = i as usize * self.dims;
        let (q, meta) = quantize(v);
        if let (Some(e), Some(s), Some(m)) = (
            self.exact.get_mut(start..start + self.dims),
            self.quantized.get_mut(start..start + self.dims),
            self.meta.get_mut(i as usize),
        ) {
            e.copy_from_slice(v);
            s.copy_from_slice(&q);
            *m = meta;
        }
    }

    /// The `limit` nodes whose vectors have the largest dot product with
    /// `query`, best first (ties: lower index); exactly the exhaustive
    /// answer.
    pub fn search(&self, query: &[f32], limit: usize) -> Vec<(u32, f64)> {
        if self.dims == 0 || query.len() != self.dims || limit == 0 {
            return Vec::new();
        }
        self.bounded(query, limit)
            .unwrap_or_else(|| self.exhaustive(query, limit))
    }

    /// The search through the quantized scan; `None` when its bounds
    /// cannot prove the answer exact.
    fn bounded(&self, query: &[f32], limit: usize) -> Option<Vec<(u32, f64)>> {
        let (q, qmeta) = quantize(query);
        if !qmeta.error.is_finite() {
            return None;
        }
        let wanted = (limit * RESCORE_PER_RESULT).max(RESCORE_MIN);
        let (candidates, left_out) = self.bounded_candidates(&q, qmeta, wanted);
        let rescored = candidates
            .iter()
            .map(|&i| (i, f64::from(dot(self.exact_of(i), query))));
        let best = top_k(rescored, limit);
        let nothing_left_out = left_out == f64::NEG_INFINITY;
        match best.get(limit - 1) {
            _ if nothing_left_out => Some(best),
            Some(&(_, kth)) if kth > left_out => Some(best),
            _ => None,
        }
    }

    fn exact_of(&self, i: u32) -> &[f32] {
        let start = i as usize * self.dims;
        self.exact.get(start..start + self.dims).unwrap_or(&[])
    }

    /// The `wanted` nodes with the best upper bounds on their exact score,
    /// and the best upper bound left out (`-∞` when none was).
    fn bounded_candidates(&self, q: &[i8], qmeta: Meta, wanted: usize) -> (Vec<u32>, f64) {
        let q: Vec<i16> = q.iter().map(|x| i16::from(*x)).collect();
        let q = q.as_slice();
        // ‖q̂‖ ≤ ‖q‖ + ‖q − q̂‖.
        let (q_error, q_norm) = (f64::from(qmeta.error), f64::from(qmeta.norm + qmeta.error));
        let scan = |first: usize, end: usize| {
            let vectors = self.quantized.get(first * self.dims..end * self.dims);
            let metas = self.meta.get(first..end);
            let bounds = vectors
                .unwrap_or(&[])
                .chunks_exact(self.dims)
                .zip(metas.unwrap_or(&[]))
                .zip(first..)
                .filter(|((_, m), _)| !m.scale.is_nan())
                .map(|((v, m), i)| {
                    let scale = f64::from(m.scale) * f64::from(qmeta.scale);
                    let approx = f64::from(dot_i8(q, v)) * scale;
                    let (norm, error) = (f64::from(m.norm), f64::from(m.error));
                    let slack =
                        q_error * norm + q_norm * error + ROUNDING_SLACK * (1.0 + q_norm * norm);
                    (i as u32, approx + slack)
                });
            top_k_with_rest(bounds, wanted)
        };
        let n = self.meta.len();
        let slices = n.div_ceil(PARALLEL_FROM).clamp(1, MAX_PARTS);
        let per = n.div_ceil(slices);
        let parts: Vec<(Vec<(u32, f64)>, f64)> = (0..slices)
            .into_par_iter()
            .map(|h| scan(h * per, ((h + 1) * per).min(n)))
            .collect();
        let mut rest = f64::NEG_INFINITY;
        let mut all = Vec::new();
        for (kept, r) in parts {
            rest = rest.max(r);
            all.extend(kept);
        }
        let (kept, r) = top_k_with_rest(all.into_iter(), wanted);
        (kept.into_iter().map(|(i, _)| i).collect(), rest.max(r))
    }

    /// The full exact scan: the reference [`VectorIndex::search`] is
    /// tested and measured against.
    pub fn exhaustive(&self, query: &[f32], limit: usize) -> Vec<(u32, f64)> {
        let scores = self
            .exact
            .chunks_exact(self.dims)
            .zip(&self.meta)
            .enumerate()
            .filter(|(_, (_, m))| !m.scale.is_nan())
            .map(|(i, (v, _))| (i as u32, f64::from(dot(v, query))));
        top_k(scores, limit)
    }
}

/// The `k` best items and the best score among those dropped (`-∞` when
/// none was; a non-finite score counts as `+∞`, so it is never dropped
/// silently). A bounded heap: one comparison per item, no copy of the
/// scan.
fn top_k_with_rest(items: impl Iterator<Item = (u32, f64)>, k: usize) -> (Vec<(u32, f64)>, f64) {
    let mut rest = f64::NEG_INFINITY;
    let mut heap: BinaryHeap<Worst> = BinaryHeap::with_capacity(k + 1);
    for (i, s) in items {
        if !s.is_finite() {
            rest = f64::INFINITY;
            continue;
        }
        if heap.len() < k {
            heap.push(Worst(s, i));
            continue;
        }
        match heap.peek() {
            Some(worst) if Worst(s, i) < *worst => {
                rest = rest.max(worst.0);
                heap.pop();
                heap.push(Worst(s, i));
            }
            _ => rest = rest.max(s),
        }
    }
    (heap.into_iter().map(|Worst(s, i)| (i, s)).collect(), rest)
}

/// Ordered so that a max-heap's top is the worst kept item (lowest score;
/// ties: larger index).
#[derive(PartialEq)]
struct Worst(f64, u32);

impl Eq for Worst {}

impl PartialOrd for Worst {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Worst {
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .0
            .total_cmp(&self.0)
            .then_with(|| self.1.cmp(&other.1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lcg(seed: &mut u64) -> f32 {
        *seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        ((*seed >> 33) as f32 / (1u64 << 31) as f32) - 0.5
    }

    fn unit(seed: &mut u64, dims: usize) -> Vec<f32> {
        let v: Vec<f32> = (0..dims).map(|_| lcg(seed)).collect();
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.into_iter().map(|x| x / n).collect()
    }

    #[test]
    fn bounded_search_equals_the_exhaustive_one() {
        let mut seed = 7;
        let mut index = VectorIndex::default();
        for i in 0..5000 {
            // Every fifth node has no vector; duplicates make ties.
            let v = (i % 5 != 0).then(|| unit(&mut seed, 32));
            index.push(v.as_deref());
            if i % 97 == 0 {
                index.push(v.as_deref());
            }
        }
        let mut proven = 0;
        for _ in 0..50 {
            let q = unit(&mut seed, 32);
            for limit in [1, 10, 30, 200] {
                let exact = index.exhaustive(&q, limit);
                assert_eq!(index.search(&q, limit), exact);
                if let Some(found) = index.bounded(&q, limit) {
                    assert_eq!(found, exact);
                    proven += 1;
                }
            }
        }
        // The quantized scan answers by itself nearly always.
        assert!(proven >= 180, "{proven} of 200");
        // A replaced vector is searched under its new value.
        let q = unit(&mut seed, 32);
        index.set(3, &q);
        assert_eq!(index.search(&q, 1).first().map(|(i, _)| *i), Some(3));
    }

    #[test]
    fn lane_dot_product_equals_the_plain_one() {
        let mut seed = 3;
        for dims in [0, 1, 2, 15, 16, 17, 31, 128, 130, 1536] {
            let a: Vec<i8> = (0..dims).map(|_| (lcg(&mut seed) * 254.0) as i8).collect();
            let b: Vec<i8> = (0..dims).map(|_| (lcg(&mut seed) * 254.0) as i8).collect();
            let wide: Vec<i16> = a.iter().map(|x| i16::from(*x)).collect();
            let plain: i32 = a
                .iter()
                .zip(&b)
                .map(|(x, y)| i32::from(*x) * i32::from(*y))
                .sum();
            assert_eq!(dot_i8(&wide, &b), plain, "{dims} dims");
        }
        let extreme = vec![-127i8; 1536];
        let wide: Vec<i16> = extreme.iter().map(|x| i16::from(*x)).collect();
        assert_eq!(dot_i8(&wide, &extreme), 127 * 127 * 1536);
    }

    #[test]
    fn other_dimensions_and_empty_queries_find_nothing() {
        let mut index = VectorIndex::default();
        assert!(index.push(Some(&[0.6, 0.8])));
        assert!(!index.push(Some(&[1.0, 0.0, 0.0])));
        assert!(!index.push(None));
        assert_eq!(index.search(&[1.0, 0.0], 5).len(), 1);
        assert!(index.search(&[1.0, 0.0, 0.0], 5).is_empty());
        assert!(index.search(&[1.0, 0.0], 0).is_empty());
        assert_eq!(
            index.search(&[0.0, 0.0], 5),
            index.exhaustive(&[0.0, 0.0], 5)
        );
    }
}
