//! Query latency of each retriever on SciFact: p50 / p99 over the 300 queries, after warm-up.
//!
//! What is timed: one search 100 deep (the depth of the retrieval evaluation) for
//! - bm25: query analysis + tantivy BM25 top-100 + stored-field lookup of the ids,
//! - dense: HNSW top-100 over the 5,183 passage vectors (query embedding excluded: that is the
//!   engine's cost, measured there),
//! - hybrid: both of the above + reciprocal rank fusion.
//!
//! Vectors: the MiniLM embeddings cached by `examples/eval_retrieval` under `.cache/` when they
//! are there, else random unit vectors of dimension 384 (HNSW cost barely depends on the data).
//!
//! Run: `cargo bench -p docqa-indexer --bench retrieval_latency` (DOCQA_DATA overrides the data
//! folder, default `../shared/data` beside the checkout).

#[path = "../examples/eval_retrieval/cache.rs"]
#[allow(dead_code)]
mod cache;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use docqa_indexer::eval::dataset::RetrievalDataset;
use docqa_indexer::hybrid::{Fusion, fuse};
use docqa_indexer::{ChunkRecord, Embedder, Retriever, SearchFilter, SearchIndex};

const MODEL: &str = "all-MiniLM-L6-v2";
const DIM: usize = 384;

/// Deterministic pseudo-random unit vectors (xorshift, uniform components), for when no
/// cached embeddings exist.
struct RandomEmbedder;

impl Embedder for RandomEmbedder {
    fn dim(&self) -> usize {
        DIM
    }
    fn embed(&self, texts: &[&str]) -> docqa_indexer::Result<Vec<Vec<f32>>> {
        Ok(texts
            .iter()
            .map(|t| {
                let mut s = t.bytes().fold(0x9E37_79B9_7F4A_7C15u64, |h, b| {
                    (h ^ b as u64).wrapping_mul(0x100_0000_01B3)
                }) | 1;
                (0..DIM)
                    .map(|_| {
                        s ^= s << 13;
                        s ^= s >> 7;
                        s ^= s << 17;
                        (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5
                    })
                    .collect()
            })
            .collect())
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

fn report(name: &str, mut micros: Vec<f64>) {
    micros.sort_by(f64::total_cmp);
    println!(
        "{name:<7} p50 {:>8.1} µs   p99 {:>8.1} µs   ({} queries)",
        percentile(&micros, 0.5),
        percentile(&micros, 0.99),
        micros.len()
    );
}

fn main() -> docqa_indexer::Result<()> {
    let data = std::env::var_os("DOCQA_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/data"));
    let set = RetrievalDataset::load(&data.join("retrieval/scifact"))?;
    let records: Vec<ChunkRecord> = set
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
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.cache");
    let cached = cache::CachedEmbedder::open(&root, MODEL, DIM, None)?;
    let embedder: Arc<dyn Embedder> = if cached.len() >= records.len() + set.queries.len() {
        println!("vectors: cached {MODEL} embeddings");
        Arc::new(cached)
    } else {
        println!("vectors: random unit vectors (no complete {MODEL} cache)");
        Arc::new(RandomEmbedder)
    };
    let dir = tempfile::tempdir()?;
    let mut index = SearchIndex::open(dir.path(), embedder.clone())?;
    index.add(&records)?;
    let texts: Vec<&str> = set.queries.iter().map(|q| q.text.as_str()).collect();
    let vectors = embedder.embed(&texts)?;
    let f = SearchFilter::default();
    let mut times = [Vec::new(), Vec::new(), Vec::new()];
    for round in 0..2 {
        for (q, v) in texts.iter().zip(&vectors) {
            let t0 = Instant::now();
            let lexical = index.bm25().search(q, 100, &f)?;
            let t1 = Instant::now();
            let semantic = index.dense().search(v, 100, &f)?;
            let t2 = Instant::now();
            let fused = fuse(
                &[(Retriever::Bm25, &lexical), (Retriever::Dense, &semantic)],
                Fusion::default(),
                100,
            );
            let t3 = Instant::now();
            std::hint::black_box(fused);
            if round == 1 {
                times[0].push((t1 - t0).as_secs_f64() * 1e6);
                times[1].push((t2 - t1).as_secs_f64() * 1e6);
                times[2].push((t3 - t0).as_secs_f64() * 1e6);
            }
        }
    }
    let [b, d, h] = times;
    report("bm25", b);
    report("dense", d);
    report("hybrid", h);
    Ok(())
}
