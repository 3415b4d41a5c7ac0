//! Fusion arithmetic on hand-made rankings, and the combined index's attribution of hits.

use crate::common;

use std::sync::Arc;

use common::chunk;
use docqa_indexer::hybrid::{Fusion, fuse};
use docqa_indexer::{Embedder, Retriever, ScoredChunk, SearchFilter, SearchIndex, SearchMode};

fn list(items: &[(u64, f32)]) -> Vec<ScoredChunk> {
    items
        .iter()
        .map(|&(id, s)| ScoredChunk {
            chunk_id: id,
            document_id: format!("d{id}"),
            score: s,
        })
        .collect()
}

#[test]
fn rrf_sums_one_over_sixty_plus_rank_across_retrievers() {
    let bm25 = list(&[(1, 12.0), (2, 9.0), (3, 1.0)]);
    let dense = list(&[(3, 0.9), (1, 0.8), (4, 0.1)]);
    let hits = fuse(
        &[(Retriever::Bm25, &bm25), (Retriever::Dense, &dense)],
        Fusion::default(),
        10,
    );
    let expect = |id: u64| match id {
        1 => 1.0 / 61.0 + 1.0 / 62.0,
        3 => 1.0 / 63.0 + 1.0 / 61.0,
        2 => 1.0 / 62.0,
        4 => 1.0 / 63.0,
        _ => unreachable!(),
    };
    let order: Vec<u64> = hits.iter().map(|h| h.chunk_id).collect();
    assert_eq!(order, vec![1, 3, 2, 4]);
    for h in &hits {
        assert!(
            (h.score as f64 - expect(h.chunk_id)).abs() < 1e-7,
            "chunk {} score {}",
            h.chunk_id,
            h.score
        );
    }
}

#[test]
fn weighted_fusion_min_max_normalises_each_list() {
    let bm25 = list(&[(1, 10.0), (2, 6.0), (3, 2.0)]);
    let dense = list(&[(2, 0.9), (3, 0.5)]);
    let hits = fuse(
        &[(Retriever::Bm25, &bm25), (Retriever::Dense, &dense)],
        Fusion::Weighted { bm25_weight: 0.3 },
        3,
    );
    // bm25 normalised: 1 → 1.0, 2 → 0.5, 3 → 0.0; dense: 2 → 1.0, 3 → 0.0.
    let score = |id| hits.iter().find(|h| h.chunk_id == id).unwrap().score;
    assert!((score(1) - 0.3).abs() < 1e-6);
    assert!((score(2) - (0.3 * 0.5 + 0.7)).abs() < 1e-6);
    assert!(score(3).abs() < 1e-6);
    assert_eq!(hits[0].chunk_id, 2);
}

#[test]
fn fused_hits_record_rank_and_raw_score_of_every_retriever_that_found_them() {
    let bm25 = list(&[(5, 3.5), (6, 2.0)]);
    let dense = list(&[(6, 0.7)]);
    let hits = fuse(
        &[(Retriever::Bm25, &bm25), (Retriever::Dense, &dense)],
        Fusion::default(),
        2,
    );
    let six = hits.iter().find(|h| h.chunk_id == 6).unwrap();
    assert_eq!(six.sources.len(), 2);
    assert_eq!(
        (
            six.sources[0].retriever,
            six.sources[0].rank,
            six.sources[0].score
        ),
        (Retriever::Bm25, 2, 2.0)
    );
    assert_eq!(
        (
            six.sources[1].retriever,
            six.sources[1].rank,
            six.sources[1].score
        ),
        (Retriever::Dense, 1, 0.7)
    );
    let five = hits.iter().find(|h| h.chunk_id == 5).unwrap();
    assert_eq!(five.sources.len(), 1);
    assert_eq!(five.sources[0].retriever, Retriever::Bm25);
}

/// A toy embedder: counts of a few topic words (enough to make dense differ from BM25).
struct TopicEmbedder;

impl Embedder for TopicEmbedder {
    fn dim(&self) -> usize {
        3
    }
    fn embed(&self, texts: &[&str]) -> docqa_indexer::Result<Vec<Vec<f32>>> {
        let topics = [
            ["cat", "kitten", "feline"],
            ["dog", "puppy", "canine"],
            ["bird", "feather", "wing"],
        ];
        Ok(texts
            .iter()
            .map(|t| {
                let t = t.to_lowercase();
                topics
                    .iter()
                    .map(|ws| ws.iter().map(|w| t.matches(w).count() as f32).sum::<f32>() + 0.01)
                    .collect()
            })
            .collect())
    }
}

#[test]
fn search_index_attributes_hits_filters_and_deletes_across_both_retrievers() {
    let dir = tempfile::tempdir().unwrap();
    let mut index = SearchIndex::open(dir.path(), Arc::new(TopicEmbedder)).unwrap();
    index
        .add(&[
            chunk(1, "a", "The kitten is a young feline."),
            chunk(2, "a", "A cat chased a mouse."),
            chunk(3, "b", "The puppy is a young canine."),
            chunk(4, "c", "Feathers cover each wing of a bird."),
        ])
        .unwrap();
    let f = SearchFilter::default();
    let hits = index.search("cat", 4, SearchMode::Hybrid, &f).unwrap();
    let one = hits.iter().find(|h| h.chunk_id == 1).unwrap();
    assert_eq!(
        one.sources.iter().map(|s| s.retriever).collect::<Vec<_>>(),
        vec![Retriever::Dense],
        "only dense knows kittens are cats"
    );
    let two = hits.iter().find(|h| h.chunk_id == 2).unwrap();
    assert_eq!(two.sources.len(), 2);
    assert_eq!(hits[0].chunk_id, 2, "found by both, first in both");
    let only_b = index
        .search("young", 4, SearchMode::Hybrid, &SearchFilter::document("b"))
        .unwrap();
    assert!(only_b.iter().all(|h| h.document_id == "b") && !only_b.is_empty());
    index.delete_document("a").unwrap();
    for mode in [SearchMode::Bm25, SearchMode::Dense, SearchMode::Hybrid] {
        assert!(
            index
                .search("cat kitten", 4, mode, &f)
                .unwrap()
                .iter()
                .all(|h| h.document_id != "a")
        );
    }
    drop(index);
    let reopened = SearchIndex::open(dir.path(), Arc::new(TopicEmbedder)).unwrap();
    assert_eq!(
        reopened.search("puppy", 1, SearchMode::Bm25, &f).unwrap()[0].chunk_id,
        3
    );
    assert_eq!(reopened.dense().len(), 2);
}

#[test]
fn rebuild_from_replaces_everything() {
    let dir = tempfile::tempdir().unwrap();
    let mut index = SearchIndex::open(dir.path(), Arc::new(TopicEmbedder)).unwrap();
    index
        .add(&[chunk(1, "a", "cat"), chunk(2, "b", "dog")])
        .unwrap();
    index
        .rebuild_from(&[chunk(7, "z", "bird feather")])
        .unwrap();
    let f = SearchFilter::default();
    assert!(
        index
            .search("cat dog", 5, SearchMode::Bm25, &f)
            .unwrap()
            .is_empty()
    );
    let hits = index.search("bird", 5, SearchMode::Hybrid, &f).unwrap();
    assert_eq!(hits.iter().map(|h| h.chunk_id).collect::<Vec<_>>(), vec![7]);
    assert_eq!(index.bm25().len(), 1);
    assert_eq!(index.dense().len(), 1);
}
