//! The `docqa` command line: fetch models, generate, embed (later: serve, eval).

use clap::Parser;

/// docqa: question answering over long documents.
#[derive(Debug, Parser)]
#[command(name = "docqa", version, about)]
struct Cli {}

fn main() -> anyhow::Result<()> {
    let _cli = Cli::parse();
    Ok(())
}
