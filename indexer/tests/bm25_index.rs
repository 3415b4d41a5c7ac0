//! BM25 index behaviour: persistence, deletes, filters, replacement by chunk id.

use crate::common;

use common::chunk;
use docqa_indexer::SearchFilter;
use docqa_indexer::bm25::{Bm25Config, Bm25Index};

fn corpus() -> Vec<docqa_indexer::ChunkRecord> {
    let mut v = vec![
        chunk(1, "cats", "Cats are small carnivorous mammals that purr."),
        chunk(2, "cats", "A domestic cat sleeps most of the day."),
        chunk(
            3,
            "dogs",
            "Dogs were domesticated from wolves; a dog barks.",
        ),
        chunk(4, "dogs", "Running dogs need exercise every day."),
        chunk(5, "birds", "Birds have feathers and most of them fly."),
    ];
    v[4].collection = Some("wildlife".into());
    v[2].collection = Some("pets".into());
    v
}

fn ids(hits: &[docqa_indexer::ScoredChunk]) -> Vec<u64> {
    hits.iter().map(|h| h.chunk_id).collect()
}

#[test]
fn stemming_matches_inflected_forms_and_stop_words_match_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let index = Bm25Index::open(dir.path(), Bm25Config::default()).unwrap();
    index.add(&corpus()).unwrap();
    index.commit().unwrap();
    let mut hits = ids(&index.search("cat", 10, &SearchFilter::default()).unwrap());
    hits.sort();
    assert_eq!(
        hits,
        vec![1, 2],
        "'cat' must match 'Cats' (stemmed) and 'cat'"
    );
    let hits = index
        .search("the dog running", 10, &SearchFilter::default())
        .unwrap();
    assert_eq!(hits[0].chunk_id, 4);
    assert!(
        index
            .search("the of and", 10, &SearchFilter::default())
            .unwrap()
            .is_empty(),
        "stop words only"
    );
}

#[test]
fn a_reopened_index_returns_the_same_results() {
    let dir = tempfile::tempdir().unwrap();
    let before = {
        let index = Bm25Index::open(dir.path(), Bm25Config::default()).unwrap();
        index.add(&corpus()).unwrap();
        index.commit().unwrap();
        index
            .search("domestic day", 10, &SearchFilter::default())
            .unwrap()
    };
    let index = Bm25Index::open(dir.path(), Bm25Config::default()).unwrap();
    assert_eq!(index.len(), 5);
    assert_eq!(
        index
            .search("domestic day", 10, &SearchFilter::default())
            .unwrap(),
        before
    );
    assert!(!before.is_empty());
}

#[test]
fn deleting_a_document_removes_all_its_hits_after_commit() {
    let dir = tempfile::tempdir().unwrap();
    let index = Bm25Index::open(dir.path(), Bm25Config::default()).unwrap();
    index.add(&corpus()).unwrap();
    index.commit().unwrap();
    index.delete_document("dogs").unwrap();
    index.commit().unwrap();
    let hits = index
        .search("dogs day", 10, &SearchFilter::default())
        .unwrap();
    assert!(hits.iter().all(|h| h.document_id != "dogs"));
    assert_eq!(ids(&hits), vec![2], "only the cat chunk mentions 'day'");
    assert_eq!(index.len(), 3);
}

#[test]
fn filters_restrict_hits_without_changing_scores() {
    let dir = tempfile::tempdir().unwrap();
    let index = Bm25Index::open(dir.path(), Bm25Config::default()).unwrap();
    index.add(&corpus()).unwrap();
    index.commit().unwrap();
    let all = index
        .search("day most", 10, &SearchFilter::default())
        .unwrap();
    let cats = index
        .search("day most", 10, &SearchFilter::document("cats"))
        .unwrap();
    assert!(!cats.is_empty() && cats.iter().all(|h| h.document_id == "cats"));
    for h in &cats {
        let same = all.iter().find(|a| a.chunk_id == h.chunk_id).unwrap();
        assert!(
            (same.score - h.score).abs() < 1e-6,
            "filter clauses must not score"
        );
    }
    let two = SearchFilter {
        document_ids: Some(vec!["cats".into(), "birds".into()]),
        collection: None,
    };
    let hits = index.search("most", 10, &two).unwrap();
    assert_eq!(
        {
            let mut v = ids(&hits);
            v.sort();
            v
        },
        vec![2, 5]
    );
    let wild = SearchFilter {
        document_ids: None,
        collection: Some("wildlife".into()),
    };
    assert_eq!(
        ids(&index.search("most day feathers", 10, &wild).unwrap()),
        vec![5]
    );
    let none = SearchFilter {
        document_ids: Some(vec![]),
        collection: None,
    };
    assert!(index.search("most", 10, &none).unwrap().is_empty());
}

#[test]
fn adding_a_chunk_id_again_replaces_the_old_text() {
    let dir = tempfile::tempdir().unwrap();
    let index = Bm25Index::open(dir.path(), Bm25Config::default()).unwrap();
    index.add(&corpus()).unwrap();
    index
        .add(&[chunk(1, "cats", "Lions roar loudly.")])
        .unwrap();
    index.commit().unwrap();
    assert_eq!(index.len(), 5);
    assert!(ids(&index.search("purr", 10, &SearchFilter::default()).unwrap()).is_empty());
    assert_eq!(
        ids(&index.search("lion", 10, &SearchFilter::default()).unwrap()),
        vec![1]
    );
}
