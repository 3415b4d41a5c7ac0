//! Dense index mechanics on random unit vectors (the index, not a model, is under test):
//! recall against exact search, persistence, tombstones and compaction.

use crate::common;

use common::random_unit_vectors;
use docqa_indexer::SearchFilter;
use docqa_indexer::dense::{DenseConfig, DenseEntry, DenseIndex};

const DIM: usize = 384;

fn entries(n: usize, docs: usize) -> Vec<DenseEntry> {
    (0..n)
        .map(|i| DenseEntry {
            chunk_id: i as u64,
            document_id: format!("doc{}", i % docs),
            collection: None,
        })
        .collect()
}

/// Mean share of the exact top-k that the index returns.
fn recall_vs_exact(index: &DenseIndex, queries: &[Vec<f32>], k: usize) -> f64 {
    let f = SearchFilter::default();
    let mut sum = 0.0;
    for q in queries {
        let exact: Vec<u64> = index
            .exact_search(q, k, &f)
            .iter()
            .map(|h| h.chunk_id)
            .collect();
        let got: Vec<u64> = index
            .search(q, k, &f)
            .unwrap()
            .iter()
            .map(|h| h.chunk_id)
            .collect();
        sum += exact.iter().filter(|id| got.contains(id)).count() as f64 / k as f64;
    }
    sum / queries.len() as f64
}

fn build(dir: &std::path::Path, n: usize) -> DenseIndex {
    let mut index = DenseIndex::open(dir, DIM, DenseConfig::default()).unwrap();
    index
        .add(&entries(n, 50), &random_unit_vectors(n, DIM, 1))
        .unwrap();
    index.commit().unwrap();
    index
}

#[test]
fn hnsw_finds_at_least_95_percent_of_the_exact_top10_on_random_vectors() {
    let dir = tempfile::tempdir().unwrap();
    let index = build(dir.path(), 5000);
    let recall = recall_vs_exact(&index, &random_unit_vectors(100, DIM, 2), 10);
    println!("recall@10 vs exact search, 5000 random unit vectors of dim {DIM}: {recall:.4}");
    assert!(recall >= 0.95, "recall {recall}");
}

#[test]
fn scores_are_cosine_similarities_of_the_normalised_vectors() {
    let dir = tempfile::tempdir().unwrap();
    let mut index = DenseIndex::open(dir.path(), 3, DenseConfig::default()).unwrap();
    index
        .add(&entries(2, 2), &[vec![3.0, 0.0, 4.0], vec![0.0, 2.0, 0.0]])
        .unwrap();
    let hits = index
        .search(&[0.0, 0.0, 10.0], 2, &SearchFilter::default())
        .unwrap();
    assert_eq!(hits[0].chunk_id, 0);
    assert!(
        (hits[0].score - 0.8).abs() < 1e-6,
        "cos = 4/5, got {}",
        hits[0].score
    );
    assert!(hits[1].score.abs() < 1e-6);
}

#[test]
fn a_reopened_index_returns_the_same_results_without_reembedding() {
    let dir = tempfile::tempdir().unwrap();
    let queries = random_unit_vectors(20, DIM, 3);
    let f = SearchFilter::default();
    let before: Vec<_> = {
        let index = build(dir.path(), 2000);
        queries
            .iter()
            .map(|q| index.search(q, 10, &f).unwrap())
            .collect()
    };
    let index = DenseIndex::open(dir.path(), DIM, DenseConfig::default()).unwrap();
    assert_eq!(index.len(), 2000);
    let after: Vec<_> = queries
        .iter()
        .map(|q| index.search(q, 10, &f).unwrap())
        .collect();
    // The rebuilt graph may order near-ties differently: compare sets and top hits.
    for (b, a) in before.iter().zip(&after) {
        let bi: Vec<u64> = b.iter().map(|h| h.chunk_id).collect();
        let overlap = a.iter().filter(|h| bi.contains(&h.chunk_id)).count();
        assert!(overlap >= 9, "reopened index lost results: {overlap}/10");
        assert_eq!(a[0].chunk_id, b[0].chunk_id);
    }
}

#[test]
fn reopening_with_another_dimension_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    drop(build(dir.path(), 10));
    assert!(DenseIndex::open(dir.path(), 128, DenseConfig::default()).is_err());
}

#[test]
fn deleted_chunks_are_never_returned_and_survive_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let config = DenseConfig {
        rebuild_tombstone_share: 0.9,
        ..DenseConfig::default()
    };
    let mut index = DenseIndex::open(dir.path(), DIM, config).unwrap();
    let vectors = random_unit_vectors(1000, DIM, 4);
    index.add(&entries(1000, 10), &vectors).unwrap();
    assert_eq!(index.delete_document("doc3"), 100);
    index.commit().unwrap();
    assert_eq!(index.tombstones(), 100);
    // Query with the deleted vectors themselves: each would be its own nearest neighbour.
    let dead: Vec<&Vec<f32>> = vectors.iter().skip(3).step_by(10).collect();
    for q in &dead {
        let hits = index.search(q, 10, &SearchFilter::default()).unwrap();
        assert_eq!(hits.len(), 10);
        assert!(hits.iter().all(|h| h.document_id != "doc3"));
    }
    let reopened = DenseIndex::open(dir.path(), DIM, config).unwrap();
    assert_eq!(reopened.len(), 900);
    assert!(
        reopened
            .search(dead[0], 50, &SearchFilter::default())
            .unwrap()
            .iter()
            .all(|h| h.document_id != "doc3")
    );
}

#[test]
fn compaction_after_many_deletes_keeps_recall_and_drops_tombstones() {
    let dir = tempfile::tempdir().unwrap();
    let mut index = build(dir.path(), 3000);
    for d in 0..15 {
        index.delete_document(&format!("doc{d}"));
    }
    index.commit().unwrap(); // 30% tombstones > 20% threshold: compacts
    assert_eq!(index.tombstones(), 0);
    assert_eq!(index.len(), 2100);
    let recall = recall_vs_exact(&index, &random_unit_vectors(50, DIM, 5), 10);
    assert!(recall >= 0.95, "recall after rebuild {recall}");
    let reopened = DenseIndex::open(dir.path(), DIM, DenseConfig::default()).unwrap();
    assert_eq!(reopened.len(), 2100);
    let files: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        !files.iter().any(|f| f.starts_with("vectors-0")),
        "old generation left behind: {files:?}"
    );
}

#[test]
fn document_filters_return_only_that_document_exactly_ranked() {
    let dir = tempfile::tempdir().unwrap();
    let index = build(dir.path(), 1000);
    let q = &random_unit_vectors(1, DIM, 6)[0];
    let f = SearchFilter::document("doc7");
    let hits = index.search(q, 5, &f).unwrap();
    let exact = index.exact_search(q, 5, &f);
    assert_eq!(
        hits.iter().map(|h| h.chunk_id).collect::<Vec<_>>(),
        exact.iter().map(|h| h.chunk_id).collect::<Vec<_>>()
    );
    assert!(
        hits.iter()
            .zip(&exact)
            .all(|(a, b)| (a.score - b.score).abs() < 1e-5)
    );
    assert!(hits.len() == 5 && hits.iter().all(|h| h.document_id == "doc7"));
}

#[test]
fn re_adding_a_chunk_id_replaces_its_vector() {
    let dir = tempfile::tempdir().unwrap();
    let mut index = DenseIndex::open(dir.path(), 2, DenseConfig::default()).unwrap();
    index
        .add(&entries(2, 1), &[vec![1.0, 0.0], vec![0.0, 1.0]])
        .unwrap();
    index.add(&entries(1, 1), &[vec![0.0, 1.0]]).unwrap();
    assert_eq!(index.len(), 2);
    let hits = index
        .search(&[1.0, 0.0], 2, &SearchFilter::default())
        .unwrap();
    assert!(
        hits.iter().all(|h| h.score.abs() < 1e-6),
        "old vector of chunk 0 still indexed: {hits:?}"
    );
}
