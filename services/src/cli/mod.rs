//! Command-line parsing: the top-level [`Cli`] and its subcommands, each in its own file.
//!
//! To add a subcommand, add a file with an `Args` struct and a `run` function, and one variant to
//! [`Command`].

mod database;
mod embed;
mod eval;
mod eval_retrieval;
mod generate;
mod generator;
mod ingest_worker;
mod keys;
mod model_arg;
pub mod models;
mod perplexity;
mod perplexity_plot;
pub mod prompt_dump;
mod reindex;
mod serve;

use clap::{Parser, Subcommand};

/// docqa: question answering over long documents.
#[derive(Debug, Parser)]
#[command(name = "docqa", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
enum Command {
    /// Run the HTTP service (API, ingestion, question answering).
    Serve(crate::config::ServeConfig),
    /// Manage the local models (fetch, convert).
    Models(models::ModelsArgs),
    /// Answer one prompt with the generator (CPU engine), streaming the text.
    Generate(generate::GenerateArgs),
    /// Print MiniLM sentence embeddings of texts as JSON lines.
    Embed(embed::EmbedArgs),
    /// Answer quality against latency per route (rag, long, auto) on QA datasets, with reports.
    Eval(eval::EvalArgs),
    /// Create or list API keys on the server's database (a key for the local user by default).
    Keys(keys::KeysArgs),
    /// Rebuild the search indexes from the database's chunks and stored vectors.
    Reindex(reindex::ReindexArgs),
    /// Retrieval quality (nDCG@10, recall@100) of BM25, dense and hybrid on a BEIR-style dataset.
    EvalRetrieval(eval_retrieval::EvalRetrievalArgs),
    /// Perplexity of the generator over a long text, per segment: dense, RoPE-scaled or through a sink
    /// window.
    Perplexity(perplexity::PerplexityArgs),
    /// Draw the per-segment curves of `docqa perplexity --json` reports on one chart (SVG and PNG).
    PerplexityPlot(perplexity_plot::PerplexityPlotArgs),
    /// Render prompts exactly as the service builds them (for the reader's training pipeline).
    PromptDump(prompt_dump::PromptDumpArgs),
    /// Parse and chunk one upload for `docqa serve`, under a memory ceiling (started by the service).
    #[command(hide = true)]
    IngestWorker(ingest_worker::IngestWorkerArgs),
}

impl Cli {
    /// Runs the chosen subcommand.
    pub fn run(self) -> anyhow::Result<()> {
        match self.command {
            Command::Serve(config) => serve::run(config),
            Command::Eval(args) => eval::run(args),
            Command::Reindex(args) => reindex::run(args),
            Command::Keys(args) => keys::run(args),
            Command::Models(args) => models::run(args),
            Command::Generate(args) => generate::run(args),
            Command::Embed(args) => embed::run(args),
            Command::EvalRetrieval(args) => eval_retrieval::run(args),
            Command::Perplexity(args) => perplexity::run(args),
            Command::PerplexityPlot(args) => perplexity_plot::run(args),
            Command::PromptDump(args) => prompt_dump::run(args),
            Command::IngestWorker(args) => ingest_worker::run(args),
        }
    }
}
