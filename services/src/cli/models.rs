//! `docqa models …`: fetch the shipped models into the models directory, with a progress display.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};
use docqa_engine::fetch::{FetchProgress, default_models_dir, ensure_models};
use indicatif::{ProgressBar, ProgressStyle};

/// `docqa models`.
#[derive(Debug, Args)]
pub struct ModelsArgs {
    #[command(subcommand)]
    command: ModelsCommand,
}

#[derive(Debug, Subcommand)]
enum ModelsCommand {
    /// Download and convert the generator and the embedder (does nothing when they are already valid).
    Fetch {
        /// Directory holding the model directories [default: $XDG_CACHE_HOME/docqa/models or
        /// ~/.cache/docqa/models].
        #[arg(long, env = "DOCQA_MODELS_DIR")]
        models_dir: Option<PathBuf>,
    },
}

/// Runs `docqa models …`.
pub fn run(args: ModelsArgs) -> anyhow::Result<()> {
    match args.command {
        ModelsCommand::Fetch { models_dir } => fetch(models_dir.unwrap_or_else(default_models_dir)),
    }
}

fn fetch(models_dir: PathBuf) -> anyhow::Result<()> {
    let progress = BarProgress::new();
    let paths = ensure_models(&models_dir, &progress)
        .with_context(|| format!("fetching models into {}", models_dir.display()))?;
    progress.bar.finish_and_clear();
    println!("generator: {}", paths.generator.display());
    println!("embedder:  {}", paths.embedder.display());
    Ok(())
}

/// Shows fetch stages and byte counts on one indicatif bar.
struct BarProgress {
    bar: ProgressBar,
}

impl BarProgress {
    fn new() -> Self {
        let bar = ProgressBar::new(0);
        let style = ProgressStyle::with_template("{msg:<40} [{bar:30}] {bytes}/{total_bytes}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ");
        bar.set_style(style);
        Self { bar }
    }
}

impl FetchProgress for BarProgress {
    fn stage(&self, name: &str) {
        self.bar.set_message(name.to_owned());
        self.bar.set_length(0);
        self.bar.set_position(0);
    }

    fn advance(&self, done: u64, total: u64) {
        self.bar.set_length(total);
        self.bar.set_position(done);
    }
}
