//! BM25 on SciFact (BEIR protocol): the published anchor is nDCG@10 = 0.665. A statistic over the
//! whole corpus, so it runs when the evaluation data is there (`common::test_data`).

use crate::common;

use docqa_indexer::eval::{EvalOptions, evaluate_retrieval};

#[test]
fn bm25_reaches_ndcg10_of_0_66_on_scifact() {
    let Some(dir) = common::test_data::evaluation_data("retrieval/scifact") else {
        return;
    };
    let report = evaluate_retrieval(&dir, None, EvalOptions::default()).unwrap();
    println!("{report}");
    assert_eq!((report.passages, report.queries), (5183, 300));
    let bm25 = report.line("bm25").unwrap();
    assert!(bm25.ndcg_at_10 >= 0.66, "nDCG@10 {}", bm25.ndcg_at_10);
    assert!(
        bm25.recall_at_100 >= 0.85,
        "recall@100 {}",
        bm25.recall_at_100
    );
}
