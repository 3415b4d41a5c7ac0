//! Query latency of each retriever, p50 / p99 over a second round of queries (the first warms up),
//! at two index sizes:
//! 1. **SciFact**: its 5,183 passages, queried corpus-wide with its 300 queries (the retrieval
//!    evaluation's setting);
//! 2. **at scale**: every QA document and every SciFact passage chunked at sentence boundaries into
//!    chunks of at most 32 generator tokens (over 100K chunks of real text), queried corpus-wide with
//!    the SciFact queries, and within one document (the service's question scope) with questions
//!    spread over the QA documents.
//!
//! What is timed: one search 100 deep (the hybrid fusion depth) for
//! - bm25: query analysis + tantivy BM25 top-100 + stored-field lookup of the ids,
//! - dense: HNSW top-100 (query embedding excluded: that is the engine's cost, measured there),
//! - hybrid: both of the above + reciprocal rank fusion.
//!
//! Vectors are all-MiniLM-L6-v2's, from the engine, kept in `.cache/embeddings/` so only the first
//! run pays for embedding (at scale that first run embeds every chunk: tens of minutes here).
//!
//! Run: `cargo bench -p docqa-indexer --bench retrieval_latency`.

#[path = "../examples/eval_retrieval/cache.rs"]
#[allow(dead_code)]
mod cache;
mod support;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use docqa_indexer::dense::embed_in_batches;
use docqa_indexer::hybrid::{Fusion, fuse};
use docqa_indexer::{
    ChunkRecord, ChunkerConfig, Embedder, Retriever, SearchFilter, SearchIndex, chunk_document,
    parse_document,
};
use support::corpus::{self, Document, Question};
use support::engine_embedder::EngineEmbedder;

const MODEL: &str = "all-MiniLM-L6-v2";
/// Search depth: the hybrid fusion's candidates per retriever.
const DEPTH: usize = 100;
/// Chunk budget at scale, in generator tokens.
const SCALE_CHUNK_TOKENS: usize = 32;
/// Within-document questions timed at scale.
const SCOPED_QUESTIONS: usize = 300;
/// Chunks added (and committed) per call when building the large index.
const ADD_BATCH: usize = 10_000;

type BoxResult<T> = Result<T, Box<dyn std::error::Error>>;

/// A timed query: its text, its vector, and its scope.
struct Query {
    text: String,
    vector: Vec<f32>,
    filter: SearchFilter,
}

fn main() -> BoxResult<()> {
    let data = corpus::data_dir()?;
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.cache");
    let engine = EngineEmbedder::load(&corpus::embedder_dir(), true)?;
    let dim = engine.dim();
    let embedder: Arc<dyn Embedder> = Arc::new(cache::CachedEmbedder::open(
        &root,
        MODEL,
        dim,
        Some(Box::new(engine)),
    )?);
    let (passages, scifact_queries) = corpus::scifact_corpus(&data)?;
    let (documents, questions) = corpus::qa_corpus(&data)?;
    let everywhere = vec![SearchFilter::default(); scifact_queries.len()];
    let corpus_wide = queries(embedder.as_ref(), &scifact_queries, everywhere)?;

    let records = whole_passages(&passages);
    println!("SciFact: {} chunks", records.len());
    let (index, _dir) = build(&records, embedder.clone())?;
    report("corpus-wide", &index, &corpus_wide)?;

    let mut all = documents;
    all.extend(passages);
    let records = small_chunks(&all)?;
    println!(
        "at scale: {} chunks of at most {SCALE_CHUNK_TOKENS} tokens from {} documents",
        records.len(),
        all.len()
    );
    let (index, dir) = build(&records, embedder.clone())?;
    drop(index);
    let start = Instant::now();
    let index = SearchIndex::open(dir.path(), embedder.clone())?;
    println!(
        "  reopened in {:.1} s (the HNSW graph is rebuilt from the stored vectors)",
        start.elapsed().as_secs_f64()
    );
    report("corpus-wide", &index, &corpus_wide)?;
    let spread = spread_questions(&questions);
    let texts: Vec<String> = spread.iter().map(|q| q.text.clone()).collect();
    let scopes = spread
        .iter()
        .map(|q| SearchFilter::document(q.document_id.clone()))
        .collect();
    let scoped = queries(embedder.as_ref(), &texts, scopes)?;
    report("one document", &index, &scoped)
}

/// Each passage as one chunk.
fn whole_passages(passages: &[Document]) -> Vec<ChunkRecord> {
    passages
        .iter()
        .enumerate()
        .map(|(i, p)| ChunkRecord {
            chunk_id: i as u64,
            document_id: p.id.clone(),
            collection: None,
            text: p.text.clone(),
        })
        .collect()
}

/// Every document chunked at [`SCALE_CHUNK_TOKENS`], without overlap.
fn small_chunks(docs: &[Document]) -> BoxResult<Vec<ChunkRecord>> {
    let tokenizer = corpus::generator_tokenizer()?;
    let count = |t: &str| tokenizer.encode(t, false).map_or(0, |e| e.len());
    let config = ChunkerConfig {
        max_tokens: SCALE_CHUNK_TOKENS,
        overlap_tokens: 0,
    };
    let mut records = Vec::new();
    for doc in docs {
        let parsed = parse_document(doc.text.as_bytes(), Some("document.txt"), None)?;
        for chunk in chunk_document(&parsed, &count, &config) {
            records.push(ChunkRecord {
                chunk_id: records.len() as u64,
                document_id: doc.id.clone(),
                collection: None,
                text: chunk.text,
            });
        }
    }
    Ok(records)
}

/// Up to [`SCOPED_QUESTIONS`] questions taken at even steps through the list.
fn spread_questions(questions: &[Question]) -> Vec<&Question> {
    let step = questions.len().div_ceil(SCOPED_QUESTIONS).max(1);
    questions.iter().step_by(step).collect()
}

/// Embeds the texts (through the cache) and pairs each with its scope.
fn queries(
    embedder: &dyn Embedder,
    texts: &[String],
    scopes: Vec<SearchFilter>,
) -> BoxResult<Vec<Query>> {
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let vectors = embed_in_batches(embedder, &refs, 64)?;
    Ok(texts
        .iter()
        .zip(vectors)
        .zip(scopes)
        .map(|((text, vector), filter)| Query {
            text: text.clone(),
            vector,
            filter,
        })
        .collect())
}

/// A fresh index of `records` in a temporary folder (kept alive by the returned guard).
fn build(
    records: &[ChunkRecord],
    embedder: Arc<dyn Embedder>,
) -> BoxResult<(SearchIndex, tempfile::TempDir)> {
    let dir = tempfile::tempdir()?;
    let mut index = SearchIndex::open(dir.path(), embedder.clone())?;
    let mut indexing = std::time::Duration::ZERO;
    for part in records.chunks(ADD_BATCH) {
        let texts: Vec<&str> = part.iter().map(|r| r.text.as_str()).collect();
        let vectors = embed_in_batches(embedder.as_ref(), &texts, 256)?;
        let start = Instant::now();
        index.add_embedded(part, &vectors)?;
        indexing += start.elapsed();
    }
    eprintln!();
    println!(
        "  indexed in {:.1} s (BM25 + HNSW, committed every {ADD_BATCH} chunks; embedding excluded)",
        indexing.as_secs_f64()
    );
    Ok((index, dir))
}

/// Times every query twice and prints the second round's p50 / p99 per retriever.
fn report(scope: &str, index: &SearchIndex, queries: &[Query]) -> BoxResult<()> {
    let mut times = [Vec::new(), Vec::new(), Vec::new()];
    for round in 0..2 {
        for q in queries {
            let t0 = Instant::now();
            let lexical = index.bm25().search(&q.text, DEPTH, &q.filter)?;
            let t1 = Instant::now();
            let semantic = index.dense().search(&q.vector, DEPTH, &q.filter)?;
            let t2 = Instant::now();
            let fused = fuse(
                &[(Retriever::Bm25, &lexical), (Retriever::Dense, &semantic)],
                Fusion::default(),
                DEPTH,
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
    for (name, mut micros) in ["bm25", "dense", "hybrid"].into_iter().zip(times) {
        micros.sort_by(f64::total_cmp);
        println!(
            "  {scope:<12} {name:<7} p50 {:>8.1} µs   p99 {:>8.1} µs   ({} queries)",
            percentile(&micros, 0.5),
            percentile(&micros, 0.99),
            micros.len()
        );
    }
    Ok(())
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}
