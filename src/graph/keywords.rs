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

use super::model::top_k;

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
        let contributions = self.collect(&mut query, limit, avg);
        let scored = contributions.into_iter().map(|(node, parts)| {
            // Sum in query order, as an exhaustive search would.
            (node, parts.iter().flatten().sum::<f64>())
        });
        top_k(scored, limit)
    }

    /// Each candidate's contribution per query term (`None`: the term does
    /// not match it), for every node that can reach the top `limit`.
    fn collect(
        &self,
        query: &mut [Term<'_>],
        limit: usize,
        avg: f64,
    ) -> HashMap<u32, Vec<Option<f64>>> {
        query.sort_by(|a, b| b.bound.total_cmp(&a.bound));
        let width = query.len();
        let remaining: Vec<f64> = (0..=width)
            .map(|j| query.get(j..).unwrap_or(&[]).iter().map(|t| t.bound).sum())
            .collect();
        let mut found: HashMap<u32, Vec<Option<f64>>> = HashMap::new();
        for (j, term) in query.iter().enumerate() {
            let rest = remaining.get(j).copied().unwrap_or(0.0);
            if found.len() >= limit && kth_partial(&found, limit) > rest {
                self.look_up(&mut found, query.get(j..).unwrap_or(&[]), limit, avg);
                return found;
            }
            for &(node, tf) in term.postings {
                let parts = found.entry(node).or_insert_with(|| vec![None; width]);
                let len = self.doc_len.get(node as usize).copied().unwrap_or(1);
                if let Some(slot) = parts.get_mut(term.order) {
                    *slot = Some(Self::score(term.idf, tf, len, avg));
                }
            }
        }
        found
    }

    /// Adds the contributions of `terms` to the candidates that can still
    /// reach the top `limit` (the others are dropped).
    fn look_up(
        &self,
        found: &mut HashMap<u32, Vec<Option<f64>>>,
        terms: &[Term<'_>],
        limit: usize,
        avg: f64,
    ) {
        let kth = kth_partial(found, limit);
        let rest: f64 = terms.iter().map(|t| t.bound).sum();
        found.retain(|_, parts| partial(parts) + rest >= kth);
        let mut nodes: Vec<u32> = found.keys().copied().collect();
        nodes.sort_unstable();
        for term in terms {
            let mut from = 0usize;
            for node in &nodes {
                let list = term.postings.get(from..).unwrap_or(&[]);
                from += list.partition_point(|(n, _)| n < node);
                let Some(&(n, tf)) = term.postings.get(from) else {
                    break;
                };
                if n != *node {
                    continue;
                }
                let len = self.doc_len.get(n as usize).copied().unwrap_or(1);
                if let Some(slot) = found.get_mut(node).and_then(|p| p.get_mut(term.order)) {
                    *slot = Some(Self::score(term.idf, tf, len, avg));
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

fn partial(parts: &[Option<f64>]) -> f64 {
    parts.iter().flatten().sum()
}

/// The `limit`-th best partial score among the candidates.
fn kth_partial(found: &HashMap<u32, Vec<Option<f64>>>, limit: usize) -> f64 {
    let mut scores: Vec<f64> = found.values().map(|p| partial(p)).collect();
    if scores.len() < limit {
        return f64::NEG_INFINITY;
    }
    let (_, kth, _) = scores.select_nth_unstable_by(limit - 1, |a, b| b.total_cmp(a));
    *kth
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
}
