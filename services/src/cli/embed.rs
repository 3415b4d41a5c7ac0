//! `docqa embed`: MiniLM sentence embeddings of the given texts (or of stdin's lines), as JSON lines.

use std::io::{BufRead, Write};
use std::path::PathBuf;

use clap::Args;
use docqa_engine::models::bert::BertEmbedder;

use super::models::{fetch_with_progress, models_dir_or_default};

/// `docqa embed`.
#[derive(Debug, Args)]
pub struct EmbedArgs {
    /// Texts to embed; without any, each line of standard input is one text.
    texts: Vec<String>,
    /// Directory holding the model directories [default: $XDG_CACHE_HOME/docqa/models or ~/.cache/docqa/models].
    #[arg(long, env = "DOCQA_MODELS_DIR")]
    models_dir: Option<PathBuf>,
}

/// Runs `docqa embed`: one `{"text": ..., "embedding": [...]}` line per text.
pub fn run(args: EmbedArgs) -> anyhow::Result<()> {
    let paths = fetch_with_progress(&models_dir_or_default(args.models_dir))?;
    let embedder = BertEmbedder::load(&paths.embedder)?;
    let texts = if args.texts.is_empty() {
        std::io::stdin()
            .lock()
            .lines()
            .collect::<Result<Vec<_>, _>>()?
    } else {
        args.texts
    };
    let mut out = std::io::stdout().lock();
    for batch in texts.chunks(64) {
        let refs: Vec<&str> = batch.iter().map(String::as_str).collect();
        for (text, embedding) in batch.iter().zip(embedder.embed(&refs)?) {
            serde_json::to_writer(
                &mut out,
                &serde_json::json!({ "text": text, "embedding": embedding }),
            )?;
            writeln!(out)?;
        }
    }
    Ok(())
}
