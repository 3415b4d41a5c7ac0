//! `docqa eval-retrieval`: nDCG@10 and recall@100 of BM25, dense and hybrid retrieval on a BEIR-style
//! dataset (corpus.jsonl, queries.jsonl, qrels.tsv), one line per retriever.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use docqa_engine::models::bert::BertEmbedder;
use docqa_indexer::Embedder;
use docqa_indexer::eval::{EvalOptions, evaluate_retrieval};

use super::models::{fetch_with_progress, models_dir_or_default};
use crate::embedder::EngineEmbedder;

/// `docqa eval-retrieval`.
#[derive(Debug, Args)]
pub struct EvalRetrievalArgs {
    /// Dataset directory holding corpus.jsonl, queries.jsonl and qrels.tsv.
    #[arg(long)]
    dataset: PathBuf,
    /// Evaluate BM25 alone (no embedding of the corpus).
    #[arg(long)]
    bm25_only: bool,
    /// Directory holding the model directories [default: $XDG_CACHE_HOME/docqa/models or ~/.cache/docqa/models].
    #[arg(long, env = "DOCQA_MODELS_DIR")]
    models_dir: Option<PathBuf>,
}

/// Runs `docqa eval-retrieval`.
pub fn run(args: EvalRetrievalArgs) -> anyhow::Result<()> {
    let embedder: Option<Arc<dyn Embedder>> = if args.bm25_only {
        None
    } else {
        let paths = fetch_with_progress(&models_dir_or_default(args.models_dir))?;
        Some(Arc::new(EngineEmbedder::new(BertEmbedder::load(
            &paths.embedder,
        )?)))
    };
    let report = evaluate_retrieval(&args.dataset, embedder, EvalOptions::default())
        .with_context(|| format!("evaluating retrieval on {}", args.dataset.display()))?;
    print!("{report}");
    Ok(())
}
