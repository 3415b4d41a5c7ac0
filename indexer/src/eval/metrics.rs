//! Ranking metrics with the trec_eval / pytrec_eval definitions used by BEIR.
//!
//! - nDCG@k (`ndcg_cut_k`): DCG = Σ_{i ≤ k} rel_i / log2(i + 1) over the ranked list (linear gain,
//!   1-based rank i), divided by the DCG of the ideal ordering of the judged relevances.
//! - recall@k (`recall_k`): relevant documents (rel > 0) in the top k / all relevant documents.
//!
//! A query without any relevant document is not scored (trec_eval skips it too).

use std::collections::HashMap;

/// Relevance judgements of one query: document id → graded relevance (> 0 = relevant).
pub type Judgements = HashMap<String, i32>;

/// nDCG@k of `ranking` (document ids, best first); `None` when nothing is relevant.
pub fn ndcg_at_k(ranking: &[String], qrels: &Judgements, k: usize) -> Option<f64> {
    let mut ideal: Vec<i32> = qrels.values().copied().filter(|&r| r > 0).collect();
    if ideal.is_empty() {
        return None;
    }
    ideal.sort_unstable_by(|a, b| b.cmp(a));
    let discount = |i: usize| 1.0 / ((i + 2) as f64).log2();
    let dcg: f64 = ranking
        .iter()
        .take(k)
        .enumerate()
        .map(|(i, d)| qrels.get(d).copied().unwrap_or(0).max(0) as f64 * discount(i))
        .sum();
    let idcg: f64 = ideal
        .iter()
        .take(k)
        .enumerate()
        .map(|(i, &r)| r as f64 * discount(i))
        .sum();
    Some(dcg / idcg)
}

/// recall@k of `ranking`; `None` when nothing is relevant.
pub fn recall_at_k(ranking: &[String], qrels: &Judgements, k: usize) -> Option<f64> {
    let relevant = qrels.values().filter(|&&r| r > 0).count();
    if relevant == 0 {
        return None;
    }
    let found = ranking
        .iter()
        .take(k)
        .filter(|d| qrels.get(*d).is_some_and(|&r| r > 0))
        .count();
    Some(found as f64 / relevant as f64)
}

/// Mean of the defined values (0 when there are none).
pub fn mean(values: impl IntoIterator<Item = Option<f64>>) -> f64 {
    let (sum, n) = values
        .into_iter()
        .flatten()
        .fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    if n == 0 { 0.0 } else { sum / n as f64 }
}
