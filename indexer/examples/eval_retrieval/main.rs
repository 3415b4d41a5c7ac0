//! Retrieval evaluation with the real embedder (all-MiniLM-L6-v2 on the engine's CPU backend).
//!
//! Prints the BEIR-protocol report (nDCG@10, recall@100 for bm25, dense, hybrid) of a retrieval
//! dataset under several fusions, then the within-document evidence recall of QA files.
//! Embeddings are cached under `.cache/embeddings/` (keyed by model and text hash), so only the
//! first run pays for embedding.
//!
//! ```text
//! cargo run -p docqa-indexer --release --example eval_retrieval -- \
//!     [--dataset DIR] [--qa FILE]... [--model DIR] [--cache DIR] [--chunk-chars N]
//! ```
//! `--dataset` defaults to `retrieval/scifact` in the evaluation data (`$DOCQA_DATA`, else
//! `../shared/data` beside the checkout).
//! `--model` defaults to `all-minilm-l6-v2` in the engine's models directory (`DOCQA_MODELS_DIR`).

mod cache;
#[path = "../../benches/support/engine_embedder.rs"]
#[allow(dead_code)]
mod engine_embedder;
#[path = "../../../tests/support/test_data.rs"]
mod test_data;

use std::path::PathBuf;
use std::sync::Arc;

use docqa_indexer::eval::{
    EvalOptions, evaluate_retrieval, evaluate_within_document, sentence_windows,
};
use docqa_indexer::{Embedder, Fusion};
use engine_embedder::EngineEmbedder;

const MODEL: &str = "all-MiniLM-L6-v2";

struct Args {
    dataset: PathBuf,
    qa: Vec<PathBuf>,
    model: PathBuf,
    cache: PathBuf,
    chunk_chars: usize,
}

fn parse_args() -> std::result::Result<Args, String> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut args = Args {
        dataset: test_data::evaluation_dir().join("retrieval/scifact"),
        qa: Vec::new(),
        model: docqa_engine::fetch::default_models_dir().join("all-minilm-l6-v2"),
        cache: root.join(".cache"),
        chunk_chars: 1000,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--dataset" => args.dataset = value.into(),
            "--qa" => args.qa.push(value.into()),
            "--model" => args.model = value.into(),
            "--cache" => args.cache = value.into(),
            "--chunk-chars" => {
                args.chunk_chars = value.parse().map_err(|_| "--chunk-chars: not a number")?
            }
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    Ok(args)
}

fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    let args = parse_args()?;
    let engine = EngineEmbedder::load(&args.model, true)?;
    let dim = engine.dim();
    let cached = cache::CachedEmbedder::open(&args.cache, MODEL, dim, Some(Box::new(engine)))?;
    eprintln!(
        "{} cached embeddings in {}",
        cached.len(),
        args.cache.display()
    );
    let embedder: Arc<dyn Embedder> = Arc::new(cached);
    let fusions = [
        ("rrf k=60", Fusion::default()),
        ("weighted bm25=0.3", Fusion::Weighted { bm25_weight: 0.3 }),
        ("weighted bm25=0.5", Fusion::Weighted { bm25_weight: 0.5 }),
        ("weighted bm25=0.7", Fusion::Weighted { bm25_weight: 0.7 }),
    ];
    for (name, fusion) in fusions {
        let options = EvalOptions {
            fusion,
            ..EvalOptions::default()
        };
        let report = evaluate_retrieval(&args.dataset, Some(embedder.clone()), options)?;
        eprintln!();
        println!("fusion: {name}\n{report}");
    }
    let chunker = |t: &str| sentence_windows(t, args.chunk_chars);
    for file in &args.qa {
        let report = evaluate_within_document(
            file,
            &chunker,
            Some(embedder.clone()),
            EvalOptions::default(),
        )?;
        eprintln!();
        println!(
            "chunks of at most {} characters\n{report}",
            args.chunk_chars
        );
    }
    Ok(())
}
