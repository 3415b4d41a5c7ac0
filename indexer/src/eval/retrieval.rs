//! Corpus-level retrieval evaluation (BEIR protocol): nDCG@10 and recall@100 per retriever.
//!
//! Each passage is indexed as one chunk (title, newline, text); each query is searched 100 deep
//! in bm25, dense and hybrid; passage ids are scored against the qrels with [`super::metrics`],
//! averaged over the queries that have a relevant passage.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use super::dataset::RetrievalDataset;
use super::metrics::{mean, ndcg_at_k, recall_at_k};
use super::runner::{EvalIndex, EvalOptions};
use crate::Result;
use crate::dense::Embedder;
use crate::record::{ChunkRecord, SearchFilter};

/// Scores of one retriever on a dataset.
#[derive(Debug, Clone, PartialEq)]
pub struct RetrieverScores {
    /// `bm25`, `dense` or `hybrid`.
    pub retriever: String,
    /// Mean nDCG@10.
    pub ndcg_at_10: f64,
    /// Mean recall@100.
    pub recall_at_100: f64,
    /// Mean search time per query in milliseconds (query embedding excluded).
    pub mean_query_ms: f64,
}

/// The result of [`evaluate_retrieval`]: one line per retriever.
#[derive(Debug, Clone, PartialEq)]
pub struct RetrievalReport {
    /// Dataset folder name.
    pub dataset: String,
    /// Passages indexed.
    pub passages: usize,
    /// Queries scored.
    pub queries: usize,
    /// One line per retriever (bm25 first).
    pub lines: Vec<RetrieverScores>,
}

impl RetrievalReport {
    /// The line of a retriever, by name.
    pub fn line(&self, retriever: &str) -> Option<&RetrieverScores> {
        self.lines.iter().find(|l| l.retriever == retriever)
    }
}

impl fmt::Display for RetrievalReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "dataset {} ({} passages, {} queries)",
            self.dataset, self.passages, self.queries
        )?;
        writeln!(
            f,
            "{:<8} {:>8} {:>10} {:>10}",
            "retriever", "nDCG@10", "recall@100", "ms/query"
        )?;
        for l in &self.lines {
            writeln!(
                f,
                "{:<9} {:>7.4} {:>10.4} {:>10.3}",
                l.retriever, l.ndcg_at_10, l.recall_at_100, l.mean_query_ms
            )?;
        }
        Ok(())
    }
}

/// Per-query scores of one retriever.
struct Tally {
    name: &'static str,
    ndcg: Vec<Option<f64>>,
    recall: Vec<Option<f64>>,
}

/// Evaluates bm25 (and dense and hybrid when an embedder is given) on the dataset in `dir`.
pub fn evaluate_retrieval(
    dir: &Path,
    embedder: Option<Arc<dyn Embedder>>,
    options: EvalOptions,
) -> Result<RetrievalReport> {
    let data = RetrievalDataset::load(dir)?;
    let records: Vec<ChunkRecord> = data
        .corpus
        .iter()
        .enumerate()
        .map(|(i, p)| ChunkRecord {
            chunk_id: i as u64,
            document_id: p.id.clone(),
            collection: None,
            text: p.indexed_text(),
        })
        .collect();
    let mut index = EvalIndex::build(&records, embedder, options)?;
    let queries = data.judged_queries();
    let texts: Vec<&str> = queries.iter().map(|q| q.text.as_str()).collect();
    let vectors = index.embed_queries(&texts)?;
    let mut tallies: Vec<Tally> = Vec::new();
    for (i, q) in queries.iter().enumerate() {
        let rankings = index.rank(
            &q.text,
            vectors.get(i).map(Vec::as_slice),
            100,
            &SearchFilter::default(),
        )?;
        let Some(judged) = data.qrels.get(&q.id) else {
            continue;
        };
        for (j, (name, list)) in rankings.lists.into_iter().enumerate() {
            if tallies.len() <= j {
                tallies.push(Tally {
                    name,
                    ndcg: Vec::new(),
                    recall: Vec::new(),
                });
            }
            let ids: Vec<String> = list.into_iter().map(|c| c.document_id).collect();
            tallies[j].ndcg.push(ndcg_at_k(&ids, judged, 10));
            tallies[j].recall.push(recall_at_k(&ids, judged, 100));
        }
    }
    let n = queries.len().max(1) as f64;
    let ms = |name: &str| match name {
        "bm25" => index.seconds[0] * 1e3 / n,
        "dense" => index.seconds[1] * 1e3 / n,
        _ => (index.seconds.iter().sum::<f64>()) * 1e3 / n,
    };
    let lines = tallies
        .into_iter()
        .map(|t| RetrieverScores {
            retriever: t.name.to_string(),
            ndcg_at_10: mean(t.ndcg),
            recall_at_100: mean(t.recall),
            mean_query_ms: ms(t.name),
        })
        .collect();
    let scored = queries.len();
    Ok(RetrievalReport {
        dataset: data.name.clone(),
        passages: data.corpus.len(),
        queries: scored,
        lines,
    })
}
