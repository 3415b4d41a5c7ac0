//! Metrics checked against values computed by hand, and the within-document hit rule.

use std::collections::HashMap;

use docqa_indexer::eval::metrics::{mean, ndcg_at_k, recall_at_k};
use docqa_indexer::eval::sentence_windows;
use docqa_indexer::eval::within_doc::covers;

fn ranking(ids: &[&str]) -> Vec<String> {
    ids.iter().map(|s| s.to_string()).collect()
}

fn qrels(pairs: &[(&str, i32)]) -> HashMap<String, i32> {
    pairs.iter().map(|&(d, r)| (d.to_string(), r)).collect()
}

#[test]
fn ndcg_matches_a_hand_computed_binary_case() {
    // Relevant: a, c. Ranked: b a d c. DCG = 1/log2(3) + 1/log2(5); IDCG = 1 + 1/log2(3).
    let dcg = 1.0 / 3f64.log2() + 1.0 / 5f64.log2();
    let idcg = 1.0 + 1.0 / 3f64.log2();
    let got = ndcg_at_k(
        &ranking(&["b", "a", "d", "c"]),
        &qrels(&[("a", 1), ("c", 1)]),
        10,
    )
    .unwrap();
    assert!((got - dcg / idcg).abs() < 1e-12, "{got} vs {}", dcg / idcg);
    assert!((got - 0.6509209298).abs() < 1e-9);
}

#[test]
fn ndcg_uses_linear_gains_and_the_cutoff() {
    // Graded: a=2, b=1. Ranked b a: DCG = 1 + 2/log2(3); ideal a b: 2 + 1/log2(3).
    let q = qrels(&[("a", 2), ("b", 1)]);
    let got = ndcg_at_k(&ranking(&["b", "a"]), &q, 10).unwrap();
    let want = (1.0 + 2.0 / 3f64.log2()) / (2.0 + 1.0 / 3f64.log2());
    assert!((got - want).abs() < 1e-12);
    // At k = 1 only b counts: 1 / 2.
    assert!((ndcg_at_k(&ranking(&["b", "a"]), &q, 1).unwrap() - 0.5).abs() < 1e-12);
    assert_eq!(ndcg_at_k(&ranking(&["x"]), &q, 10), Some(0.0));
    assert_eq!(
        ndcg_at_k(&ranking(&["a"]), &qrels(&[("a", 0)]), 10),
        None,
        "no relevant document: not scored"
    );
}

#[test]
fn recall_counts_relevant_documents_within_the_cutoff() {
    let q = qrels(&[("a", 1), ("b", 1), ("c", 1), ("z", 0)]);
    let r = ranking(&["a", "z", "x", "c", "b"]);
    assert!((recall_at_k(&r, &q, 2).unwrap() - 1.0 / 3.0).abs() < 1e-12);
    assert!((recall_at_k(&r, &q, 4).unwrap() - 2.0 / 3.0).abs() < 1e-12);
    assert!((recall_at_k(&r, &q, 100).unwrap() - 1.0).abs() < 1e-12);
    assert!((mean([Some(1.0), None, Some(0.0)]) - 0.5).abs() < 1e-12);
}

#[test]
fn a_chunk_covers_evidence_when_half_of_the_shorter_span_overlaps() {
    assert!(covers(&(0..100), &(40..60)), "evidence inside the chunk");
    assert!(covers(&(0..100), &(90..110)), "half the evidence inside");
    assert!(!covers(&(0..100), &(91..111)), "less than half inside");
    assert!(
        covers(&(100..150), &(0..1000)),
        "chunk inside a long evidence paragraph"
    );
    assert!(!covers(&(0..10), &(10..20)), "touching is not overlapping");
}

#[test]
fn sentence_windows_pack_whole_sentences_up_to_the_budget() {
    let text = "One two. Three four five!  Six?\n第一句。第二句。";
    let chunks = sentence_windows(text, 20);
    let parts: Vec<&str> = chunks.iter().map(|r| &text[r.clone()]).collect();
    assert_eq!(
        parts,
        vec!["One two.", "Three four five!", "Six?\n第一句。第二句。"]
    );
    for p in &parts {
        assert!(p.chars().count() <= 20);
    }
    let long = "x".repeat(45);
    let cut: Vec<usize> = sentence_windows(&long, 20)
        .iter()
        .map(|r| r.len())
        .collect();
    assert_eq!(cut, vec![20, 20, 5]);
}
