//! Ingestion throughput and footprint on real text: every document of `qa/*.jsonl` goes through
//! parse → chunk → embed → index one document at a time, as the service ingests an upload (the
//! database writes excepted), and each step is timed.
//!
//! Prints the corpus (documents, characters, generator tokens, chunks), each step's seconds and
//! share, the throughput in generator tokens/s with and without the embedding, then the index's
//! disk bytes and the resident memory it takes once reopened (measured in a fresh process, after
//! a round of queries), both per 1M generator tokens.
//!
//! - parse: format detection, UTF-8 and Unicode normalisation of the text (`parse_document`);
//! - chunk: the whole text's token count and the sentence-boundary chunking (default budget of 256
//!   generator tokens, 32 of overlap), both with the generator's tokenizer;
//! - embed: all-MiniLM-L6-v2 on the engine's CPU backend, 32 chunks per call as the service does;
//! - index: tantivy BM25 and the HNSW graph, committed after each document.
//!
//! Run: `cargo bench -p docqa-indexer --bench ingestion` (`DOCQA_BENCH_DOCUMENTS=N` keeps the first
//! N documents for a quick look).

mod support;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use docqa_indexer::dense::embed_in_batches;
use docqa_indexer::{
    ChunkRecord, ChunkerConfig, Embedder, SearchFilter, SearchIndex, SearchMode, chunk_document,
    parse_document,
};
use support::corpus::{self, Document};
use support::engine_embedder::EngineEmbedder;

/// Set in the child process that measures the reopened index's memory.
const REOPEN_ENV: &str = "DOCQA_BENCH_REOPEN_INDEX";
/// Chunks per embedder call, as in the service's ingestion.
const EMBED_BATCH: usize = 32;

type BoxResult<T> = Result<T, Box<dyn std::error::Error>>;

/// Time spent in each step, and what went through them.
#[derive(Default)]
struct Totals {
    parse: Duration,
    chunk: Duration,
    embed: Duration,
    index: Duration,
    chars: usize,
    tokens: usize,
    chunks: usize,
}

fn main() -> BoxResult<()> {
    if let Some(dir) = std::env::var_os(REOPEN_ENV) {
        return measure_reopened(Path::new(&dir));
    }
    let (mut docs, _) = corpus::qa_corpus(&corpus::data_dir()?)?;
    if let Some(n) = std::env::var("DOCQA_BENCH_DOCUMENTS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        docs.truncate(n);
    }
    let tokenizer = corpus::generator_tokenizer()?;
    let embedder = Arc::new(EngineEmbedder::load(&corpus::embedder_dir(), false)?);
    let dir = tempfile::tempdir()?;
    let mut index = SearchIndex::open(dir.path(), embedder.clone())?;
    let mut totals = Totals::default();
    let wall = Instant::now();
    for (i, doc) in docs.iter().enumerate() {
        ingest(doc, &tokenizer, embedder.as_ref(), &mut index, &mut totals)?;
        eprint!("\r{} / {} documents", i + 1, docs.len());
    }
    let wall = wall.elapsed();
    eprintln!();
    drop(index);
    report(docs.len(), &totals, wall);
    report_footprint(dir.path(), totals.tokens)
}

/// One document through the four steps, timed into `totals`.
fn ingest(
    doc: &Document,
    tokenizer: &tokenizers::Tokenizer,
    embedder: &dyn Embedder,
    index: &mut SearchIndex,
    totals: &mut Totals,
) -> BoxResult<()> {
    let count = |t: &str| tokenizer.encode(t, false).map_or(0, |e| e.len());
    let start = Instant::now();
    let parsed = parse_document(doc.text.as_bytes(), Some(&format!("{}.txt", doc.id)), None)?;
    let parsed_at = Instant::now();
    totals.tokens += count(&parsed.text);
    let chunks = chunk_document(&parsed, &count, &ChunkerConfig::default());
    let chunked_at = Instant::now();
    let texts: Vec<&str> = chunks.iter().map(|c| c.text.as_str()).collect();
    let vectors = embed_in_batches(embedder, &texts, EMBED_BATCH)?;
    let embedded_at = Instant::now();
    let records: Vec<ChunkRecord> = chunks
        .iter()
        .map(|c| ChunkRecord {
            chunk_id: (totals.chunks + c.ordinal as usize) as u64,
            document_id: doc.id.clone(),
            collection: None,
            text: c.text.clone(),
        })
        .collect();
    index.add_embedded(&records, &vectors)?;
    totals.parse += parsed_at - start;
    totals.chunk += chunked_at - parsed_at;
    totals.embed += embedded_at - chunked_at;
    totals.index += embedded_at.elapsed();
    totals.chars += parsed.char_len();
    totals.chunks += chunks.len();
    Ok(())
}

fn report(documents: usize, t: &Totals, wall: Duration) {
    let tokens = t.tokens as f64;
    println!(
        "corpus: {documents} documents, {:.2} M characters, {:.3} M generator tokens, {} chunks",
        t.chars as f64 / 1e6,
        tokens / 1e6,
        t.chunks
    );
    let steps = t.parse + t.chunk + t.embed + t.index;
    for (name, d) in [
        ("parse", t.parse),
        ("chunk", t.chunk),
        ("embed", t.embed),
        ("index", t.index),
    ] {
        println!(
            "{name:<6} {:>8.1} s  {:>5.1} %  {:>10.0} tokens/s",
            d.as_secs_f64(),
            100.0 * d.as_secs_f64() / steps.as_secs_f64(),
            tokens / d.as_secs_f64()
        );
    }
    let without_embed = steps - t.embed;
    println!(
        "all    {:>8.1} s  (wall {:.1} s)  {:.0} tokens/s; without the embedding {:.0} tokens/s",
        steps.as_secs_f64(),
        wall.as_secs_f64(),
        tokens / steps.as_secs_f64(),
        tokens / without_embed.as_secs_f64()
    );
}

/// Disk bytes of the index, and the memory of a fresh process that reopens and queries it.
fn report_footprint(dir: &Path, tokens: usize) -> BoxResult<()> {
    let per_million = 1e6 / tokens as f64;
    let mib = |bytes: u64| bytes as f64 * per_million / (1 << 20) as f64;
    let (bm25, dense) = (
        corpus::disk_bytes(&dir.join("bm25")),
        corpus::disk_bytes(&dir.join("dense")),
    );
    println!(
        "disk per 1M tokens: bm25 {:.1} MiB, dense {:.1} MiB, total {:.1} MiB",
        mib(bm25),
        mib(dense),
        mib(bm25 + dense)
    );
    let child = Command::new(std::env::current_exe()?)
        .env(REOPEN_ENV, dir)
        .output()?;
    if !child.status.success() {
        return Err(String::from_utf8_lossy(&child.stderr).into_owned().into());
    }
    let text = String::from_utf8_lossy(&child.stdout);
    let mut fields = text.split_whitespace().map(str::parse::<u64>);
    let (Some(Ok(fixed)), Some(Ok(grown))) = (fields.next(), fields.next()) else {
        return Err(format!("unexpected report from the measuring process: {text}").into());
    };
    println!(
        "memory per 1M tokens: {:.1} MiB resident (index reopened, one query per document), \
         beyond a fixed {:.1} MiB (an empty index opened and queried the same way)",
        mib(grown),
        fixed as f64 / (1 << 20) as f64
    );
    Ok(())
}

/// Child process: the resident growth from opening and querying an empty index (the fixed cost:
/// tantivy's readers, the Chinese segmenter's dictionary), then from opening and querying the built
/// one, printed in bytes.
fn measure_reopened(dir: &Path) -> BoxResult<()> {
    let embedder: Arc<dyn Embedder> =
        Arc::new(EngineEmbedder::load(&corpus::embedder_dir(), false)?);
    let (_, questions) = corpus::qa_corpus(&corpus::data_dir()?)?;
    let mut seen = std::collections::HashSet::new();
    let questions: Vec<_> = questions
        .iter()
        .filter(|q| seen.insert(q.document_id.clone()))
        .collect();
    let query_all = |index: &SearchIndex| -> BoxResult<()> {
        for q in &questions {
            let filter = SearchFilter::document(q.document_id.clone());
            std::hint::black_box(index.search(&q.text, 20, SearchMode::Hybrid, &filter)?);
        }
        Ok(())
    };
    let (start, _) = corpus::resident_bytes();
    let empty_dir = tempfile::tempdir()?;
    let empty = SearchIndex::open(empty_dir.path(), embedder.clone())?;
    query_all(&empty)?;
    let (fixed, _) = corpus::resident_bytes();
    let index = SearchIndex::open(dir, embedder)?;
    query_all(&index)?;
    let (loaded, _) = corpus::resident_bytes();
    println!(
        "{} {}",
        fixed.saturating_sub(start),
        loaded.saturating_sub(fixed)
    );
    Ok(())
}
