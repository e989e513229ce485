//! The keyword index of one project graph: BM25 over each node's name,
//! type and description, searched for the exact top `limit` without
//! scoring every match.
//!
//! Scoring every posting of every query term costs one hash update per
//! match: at a million nodes a common word (`service`, a domain name)
//! matches 50,000–100,000 nodes and that alone exceeds the query budget.
//! The search is term-at-a-time in the order of each term's best possible
//! contribution (its `idf` times the BM25 term part at its largest term
//! frequency and shortest document, both kept per term as postings are
//! appended), and stops collecting new candidates as soon as the `limit`-th
//! best partial score is above what the remaining terms could add to a node
//! not yet seen: such a node can no longer reach the top. The remaining
//! terms are then only looked up (binary search: postings are in node
//! order) for the candidates that can still make it. The result equals the
//! exhaustive ranking, ties included; each node's score sums its terms in
//! query order, exactly as before.

use std::collections::{HashMap, HashSet};

use super::rank::top_k;

/// BM25 parameters.
const BM25_K1: f64 = 1.2;
const BM25_B: f64 = 0.75;

/// One term's postings.
#[derive(Debug, Default)]
struct Postings {
    /// `(node, term frequency)`, in node order.
    list: Vec<(u32, u16)>,
    max_tf: u16,
    min_len: u32,
}

/// BM25 postings of one graph.
#[derive(Debug, Default)]
pub struct KeywordIndex {
    postings: HashMap<String, Postings>,
    doc_len: Vec<u32>,
    total_len: u64,
}

/// A query term as searched.
struct Term<'a> {
    /// Position in the query (scores sum in this order).
    order: usize,
    idf: f64,
    bound: f64,
    postings: &'a [(u32, u16)],
}

impl KeywordIndex {
    /// Indexes node `i` (the next one) with its text's tokens.
    pub fn push(&mut self, i: u32, tokens: impl Iterator<Item = String>) {
        let mut tf: HashMap<String, u16> = HashMap::new();
        let mut len = 0u32;
        for t in tokens {
            len += 1;
            let c = tf.entry(t).or_insert(0);
            *c = c.saturating_add(1);
        }
        for (t, c) in tf {
            let p = self.postings.entry(t).or_insert_with(|| Postings {
                min_len: u32::MAX,
                ..Postings::default()
            });
            p.list.push((i, c));
            p.max_tf = p.max_tf.max(c);
            p.min_len = p.min_len.min(len);
        }
        self.doc_len.push(len);
        self.total_len += u64::from(len);
    }

    /// One term's BM25 contribution (written as it always was, so scores
    /// stay bit-identical).
    fn score(idf: f64, tf: u16, len: u32, avg: f64) -> f64 {
        let (tf, len) = (f64::from(tf), f64::from(len));
        idf * tf * (BM25_K1 + 1.0) / (tf + BM25_K1 * (1.0 - BM25_B + BM25_B * len / avg))
    }

    /// The `limit` best nodes for `terms` by BM25, best first (ties: lower
    /// index).
    pub fn search(&self, terms: &[String], limit: usize) -> Vec<(u32, f64)> {
        let n = self.doc_len.len() as f64;
        if n == 0.0 || limit == 0 {
            return Vec::new();
        }
        let avg = (self.total_len as f64 / n).max(1.0);
        let mut seen: HashSet<&str> = HashSet::new();
        let mut query: Vec<Term<'_>> = Vec::new();
        for term in terms {
            if !seen.insert(term.as_str()) {
                continue;
            }
            let Some(p) = self.postings.get(term) else {
                continue;
            };
            let df = p.list.len() as f64;
            let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
            query.push(Term {
                order: query.len(),
                idf,
                bound: Self::score(idf, p.max_tf, p.min_len, avg) * (1.0 + 1e-9),
                postings: &p.list,
            });
        }
        let found = self.collect(&mut query, limit, avg);
        let scored = found.nodes.iter().enumerate().map(|(c, node)| {
            // Sum in query order, as an exhaustive search would.
            (
                *node,
                found.parts(c).iter().filter(|x| !x.is_nan()).sum::<f64>(),
            )
        });
        top_k(scored, limit)
    }

    /// Each candidate's contribution per query term, for every node that
    /// can reach the top `limit`.
    fn collect(&self, query: &mut [Term<'_>], limit: usize, avg: f64) -> Found {
        query.sort_by(|a, b| b.bound.total_cmp(&a.bound));
        let mut found = Found {
            width: query.len(),
            ..Found::default()
        };
        for (j, term) in query.iter().enumerate() {
            let rest: f64 = query.get(j..).unwrap_or(&[]).iter().map(|t| t.bound).sum();
            if found.nodes.len() >= limit && found.kth_partial(limit) > rest {
                self.look_up(&mut found, query.get(j..).unwrap_or(&[]), limit, avg);
                return found;
            }
            found = self.merge(found, term, avg);
        }
        found
    }

    /// The candidates plus every node `term` matches (both in node order,
    /// merged in one pass), with the term's contributions.
    fn merge(&self, found: Found, term: &Term<'_>, avg: f64) -> Found {
        let width = found.width;
        let mut out = Found {
            width,
            nodes: Vec::with_capacity(found.nodes.len() + term.postings.len()),
            parts: Vec::with_capacity((found.nodes.len() + term.postings.len()) * width),
        };
        let (mut a, mut b) = (0usize, 0usize);
        loop {
            let old = found.nodes.get(a).copied();
            let new = term.postings.get(b).copied();
            let (node, from_old, posting) = match (old, new) {
                (None, None) => break,
                (Some(n), Some((m, tf))) if n == m => (n, true, Some(tf)),
                (Some(n), Some((m, _))) if n < m => (n, true, None),
                (Some(n), None) => (n, true, None),
                (_, Some((m, tf))) => (m, false, Some(tf)),
            };
            out.nodes.push(node);
            if from_old {
                out.parts.extend_from_slice(found.parts(a));
                a += 1;
            } else {
                out.parts.extend(std::iter::repeat_n(f64::NAN, width));
            }
            if let Some(tf) = posting {
                let len = self.doc_len.get(node as usize).copied().unwrap_or(1);
                let slot = (out.nodes.len() - 1) * width + term.order;
                if let Some(x) = out.parts.get_mut(slot) {
                    *x = Self::score(term.idf, tf, len, avg);
                }
                b += 1;
            }
        }
        out
    }

    /// Adds the contributions of `terms` to the candidates that can still
    /// reach the top `limit` (the others are dropped).
    fn look_up(&self, found: &mut Found, terms: &[Term<'_>], limit: usize, avg: f64) {
        let kth = found.kth_partial(limit);
        let rest: f64 = terms.iter().map(|t| t.bound).sum();
        found.retain(|partial| partial + rest >= kth);
        let width = found.width;
        for term in terms {
            let mut from = 0usize;
            for (c, node) in found.nodes.iter().enumerate() {
                from = seek(term.postings, from, *node);
                let Some(&(n, tf)) = term.postings.get(from) else {
                    break;
                };
                if n != *node {
                    continue;
                }
                let len = self.doc_len.get(n as usize).copied().unwrap_or(1);
                if let Some(x) = found.parts.get_mut(c * width + term.order) {
                    *x = Self::score(term.idf, tf, len, avg);
                }
            }
        }
    }

    /// The exhaustive ranking (every posting scored): the reference
    /// [`KeywordIndex::search`] is tested and measured against.
    pub fn exhaustive(&self, terms: &[String], limit: usize) -> Vec<(u32, f64)> {
        let index = self;
        let n = index.doc_len.len() as f64;
        if n == 0.0 || limit == 0 {
            return Vec::new();
        }
        let avg = (index.total_len as f64 / n).max(1.0);
        let mut scores: HashMap<u32, f64> = HashMap::new();
        let mut seen = HashSet::new();
        for term in terms {
            if !seen.insert(term) {
                continue;
            }
            let Some(p) = index.postings.get(term) else {
                continue;
            };
            let df = p.list.len() as f64;
            let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
            for &(node, tf) in &p.list {
                let len = index.doc_len.get(node as usize).copied().unwrap_or(1);
                *scores.entry(node).or_insert(0.0) += Self::score(idf, tf, len, avg);
            }
        }
        top_k(scores.into_iter(), limit)
    }
}

/// The first position at or after `from` in `list` whose node is not
/// below `node`, every posting before `from` being below it. Galloping
/// (steps of 1, 2, 4, … then a binary search of the last step): the
/// candidates looked up are in node order too, so each seek costs the
/// logarithm of the distance from the previous one. A binary search of
/// the whole rest instead cost the logarithm of the list for every
/// candidate: with tens of thousands of candidates against a common term
/// (a domain word matching a tenth of a million nodes) that was most of
/// the keyword search.
fn seek(list: &[(u32, u16)], from: usize, node: u32) -> usize {
    let (mut low, mut high, mut step) = (from, from, 1usize);
    while let Some(&(n, _)) = list.get(high) {
        if n >= node {
            break;
        }
        low = high + 1;
        high = high.saturating_add(step);
        step = step.saturating_mul(2);
    }
    let high = high.min(list.len()).max(low);
    low + list
        .get(low..high)
        .unwrap_or(&[])
        .partition_point(|(n, _)| *n < node)
}

/// Candidates in node order, with `width` contributions each (`NaN`: the
/// term does not match the node).
#[derive(Debug, Default)]
struct Found {
    width: usize,
    nodes: Vec<u32>,
    parts: Vec<f64>,
}

impl Found {
    fn parts(&self, c: usize) -> &[f64] {
        self.parts
            .get(c * self.width..(c + 1) * self.width)
            .unwrap_or(&[])
    }

    fn partial(&self, c: usize) -> f64 {
        self.parts(c).iter().filter(|x| !x.is_nan()).sum()
    }

    /// The `limit`-th best partial score (`-∞` with fewer candidates).
    fn kth_partial(&self, limit: usize) -> f64 {
        let mut scores: Vec<f64> = (0..self.nodes.len()).map(|c| self.partial(c)).collect();
        if scores.len() < limit || limit == 0 {
            return f64::NEG_INFINITY;
        }
        let (_, kth, _) = scores.select_nth_unstable_by(limit - 1, |a, b| b.total_cmp(a));
        *kth
    }

    /// Keeps the candidates whose partial score passes `keep`.
    fn retain(&mut self, keep: impl Fn(f64) -> bool) {
        let mut out = Found {
            width: self.width,
            ..Found::default()
        };
        for c in 0..self.nodes.len() {
            if keep(self.partial(c))
                && let Some(n) = self.nodes.get(c)
            {
                out.nodes.push(*n);
                out.parts.extend_from_slice(self.parts(c));
            }
        }
        *self = out;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pruned_search_equals_the_exhaustive_one() {
        let words = [
            "billing", "service", "user", "cache", "queue", "auth", "ledger",
        ];
        let mut seed = 11u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut index = KeywordIndex::default();
        for i in 0..20_000u32 {
            let len = 1 + (next() % 6) as usize;
            // Long-tailed: low-index words are common.
            let doc: Vec<String> = (0..len)
                .map(|_| words[(next() % 7).min(next() % 7) as usize].to_string())
                .collect();
            index.push(i, doc.into_iter());
        }
        for q in [
            "service",
            "billing service",
            "user cache ledger",
            "auth auth queue nothing",
            "ledger queue cache user service billing auth",
        ] {
            let terms: Vec<String> = q.split(' ').map(String::from).collect();
            for limit in [1, 10, 30, 1000] {
                assert_eq!(
                    index.search(&terms, limit),
                    index.exhaustive(&terms, limit),
                    "{q} / {limit}"
                );
            }
        }
        assert!(index.search(&["nothing".into()], 10).is_empty());
    }

    #[test]
    fn seek_finds_the_first_posting_not_below_the_node() {
        let list: Vec<(u32, u16)> = (0..1000u32).map(|i| (i * 3, 1)).collect();
        let mut from = 0;
        for node in [0u32, 1, 2, 3, 4, 299, 300, 301, 1500, 2997, 2998, 5000] {
            let expected = list.partition_point(|(n, _)| *n < node);
            from = seek(&list, from, node);
            assert_eq!(from, expected, "{node}");
        }
        assert_eq!(seek(&[], 0, 5), 0);
    }
}
