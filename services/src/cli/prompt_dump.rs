//! `docqa prompt-dump`: renders prompts exactly as the service builds them (the texts of
//! `qa/prompts.json`, the model's chat template, the same layout code), for the reader's training
//! pipeline and for the test that keeps that pipeline's own renderer equal to the service's.
//!
//! Input: JSON lines, each a RAG example (`{"route": "rag", "question", "sources": [{"title", "pages":
//! [first, last], "text"}]}`, sources numbered in the order given) or a long one (`{"route": "long",
//! "question", "documents": [{"title", "text"}]}`). Output: one `{"prompt": ...}` line each, with
//! `"ids"` too under `--ids`.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use docqa_engine::text::TextTokenizer;
use serde::Deserialize;

use super::models::{fetch_with_progress, models_dir_or_default};
use crate::qa::prompt::{
    long_documents, long_system, long_user, messages, rag_system, rag_user, source_block,
};

/// `docqa prompt-dump`.
#[derive(Debug, Args)]
pub struct PromptDumpArgs {
    /// JSON lines of examples to render (`-` for standard input).
    #[arg(long, default_value = "-")]
    input: PathBuf,
    /// Also write each prompt's token ids.
    #[arg(long)]
    ids: bool,
    /// Directory holding the model directories [default: $XDG_CACHE_HOME/docqa/models or ~/.cache/docqa/models].
    #[arg(long, env = "DOCQA_MODELS_DIR")]
    models_dir: Option<PathBuf>,
}

/// One example to render.
#[derive(Debug, Deserialize)]
#[serde(tag = "route", rename_all = "lowercase")]
pub enum Example {
    /// Numbered sources, then the question.
    Rag {
        /// The question.
        question: String,
        /// The sources, numbered from 1 in this order.
        sources: Vec<SourceInput>,
    },
    /// Whole documents, then the question.
    Long {
        /// The question.
        question: String,
        /// The documents, in prompt order.
        documents: Vec<DocumentInput>,
    },
}

/// A source of a RAG example.
#[derive(Debug, Deserialize)]
pub struct SourceInput {
    /// Its document's title.
    pub title: String,
    /// First and last page.
    #[serde(default = "first_page")]
    pub pages: (i64, i64),
    /// The passage.
    pub text: String,
}

fn first_page() -> (i64, i64) {
    (1, 1)
}

/// A document of a long example.
#[derive(Debug, Deserialize)]
pub struct DocumentInput {
    /// Its title.
    pub title: String,
    /// Its whole text.
    pub text: String,
}

/// The chat prompt's text for `example`, as the service renders it.
pub fn render(tokenizer: &TextTokenizer, example: &Example) -> docqa_engine::Result<String> {
    let (system, user) = match example {
        Example::Rag { question, sources } => {
            let blocks: String = sources
                .iter()
                .enumerate()
                .map(|(i, s)| source_block(i + 1, &s.title, s.pages, &s.text))
                .collect();
            (rag_system(), rag_user(&blocks, question))
        }
        Example::Long {
            question,
            documents,
        } => {
            let docs: Vec<(String, String)> = documents
                .iter()
                .map(|d| (d.title.clone(), d.text.clone()))
                .collect();
            (long_system(), long_user(&long_documents(&docs), question))
        }
    };
    tokenizer.apply_chat_template(&messages(system, user), true)
}

/// Runs `docqa prompt-dump`.
pub fn run(args: PromptDumpArgs) -> anyhow::Result<()> {
    let paths = fetch_with_progress(&models_dir_or_default(args.models_dir))?;
    let tokenizer = TextTokenizer::from_model_dir(&paths.generator)?;
    let input: Box<dyn BufRead> = if args.input.as_os_str() == "-" {
        Box::new(std::io::stdin().lock())
    } else {
        let file = std::fs::File::open(&args.input)
            .with_context(|| format!("cannot open {}", args.input.display()))?;
        Box::new(BufReader::new(file))
    };
    let mut out = std::io::stdout().lock();
    for (n, line) in input.lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let example: Example = serde_json::from_str(&line)
            .with_context(|| format!("line {}: not an example", n + 1))?;
        let prompt = render(&tokenizer, &example)?;
        let mut value = serde_json::json!({ "prompt": prompt });
        if args.ids {
            value["ids"] = serde_json::json!(tokenizer.encode(&prompt, false)?);
        }
        serde_json::to_writer(&mut out, &value)?;
        writeln!(out)?;
    }
    Ok(())
}
