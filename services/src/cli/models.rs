//! `docqa models …`: fetch the shipped models into the models directory (with a progress display),
//! convert a GGUF file of one's own, or synthesize a random checkpoint at a real model's shape.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, Subcommand};
use docqa_engine::convert::convert_gguf_to_hf;
use docqa_engine::fetch::{
    EMBEDDER, FetchProgress, ModelPaths, default_models_dir, ensure_model, ensure_models,
};
use docqa_engine::synth::{DEFAULT_SHARD_BYTES, SHAPES, shape_named, synthesize};
use docqa_engine::test_rng::Rng;
use indicatif::{ProgressBar, ProgressStyle};

/// `docqa models`.
#[derive(Debug, Args)]
pub struct ModelsArgs {
    #[command(subcommand)]
    command: ModelsCommand,
}

#[derive(Debug, Subcommand)]
enum ModelsCommand {
    /// Download and convert the generator and the embedder, and install the reader adapter this binary
    /// ships (does nothing when they are already valid).
    Fetch {
        /// Directory holding the model directories [default: $XDG_CACHE_HOME/docqa/models or
        /// ~/.cache/docqa/models].
        #[arg(long, env = "DOCQA_MODELS_DIR")]
        models_dir: Option<PathBuf>,
    },
    /// Convert a GGUF file of the llama (SmolLM2, Llama 2, Llama 3.x, Mistral) or qwen2 (Qwen2, Qwen2.5)
    /// architecture, with a byte-level BPE or SentencePiece vocabulary and float, Q4_0 … Q8_0, IQ4_NL,
    /// IQ4_XS or K-quant (Q2_K … Q6_K) tensors, into an HF-style directory of bf16 weights.
    Convert {
        /// The GGUF file to read.
        gguf: PathBuf,
        /// The directory to write (created if needed; existing files are overwritten).
        out_dir: PathBuf,
    },
    /// Write a checkpoint of random bf16 weights at a real model's shape (config.json as the family
    /// publishes it, sharded safetensors, a byte-level tokenizer.json, the family's chat format in
    /// tokenizer_config.json): for timing and memory at full size without downloading, and for
    /// `docqa serve --model`; it generates noise.
    Synth {
        /// The shape: llama-3.1-8b, llama-3.2-1b, qwen2.5-7b, mistral-7b or smollm2-135m.
        #[arg(long)]
        shape: String,
        /// The directory to write (created if needed; existing weight files are replaced).
        #[arg(long)]
        out: PathBuf,
        /// Seed of the weights; the same seed writes the same files.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Number of decoder layers instead of the shape's (a cut-down model of the real width).
        #[arg(long)]
        layers: Option<usize>,
    },
}

/// Runs `docqa models …`.
pub fn run(args: ModelsArgs) -> anyhow::Result<()> {
    match args.command {
        ModelsCommand::Fetch { models_dir } => fetch(models_dir.unwrap_or_else(default_models_dir)),
        ModelsCommand::Convert { gguf, out_dir } => {
            convert_gguf_to_hf(&gguf, &out_dir)
                .with_context(|| format!("converting {}", gguf.display()))?;
            println!("converted: {}", out_dir.display());
            Ok(())
        }
        ModelsCommand::Synth {
            shape,
            out,
            seed,
            layers,
        } => synth(&shape, &out, seed, layers),
    }
}

fn synth(name: &str, out: &Path, seed: u64, layers: Option<usize>) -> anyhow::Result<()> {
    let Some(mut shape) = shape_named(name) else {
        let names: Vec<&str> = SHAPES.iter().map(|s| s.name).collect();
        anyhow::bail!("unknown shape {name:?} (known: {})", names.join(", "));
    };
    if let Some(layers) = layers {
        shape = shape.with_layers(layers);
    }
    eprintln!(
        "writing {} with {} layers: {:.3}B bf16 parameters into {}",
        shape.name,
        shape.layers,
        shape.parameters() as f64 / 1e9,
        out.display()
    );
    let written = synthesize(out, &shape, &mut Rng::seeded(seed), DEFAULT_SHARD_BYTES)
        .with_context(|| format!("synthesizing {name} into {}", out.display()))?;
    for file in &written.files {
        println!("wrote: {}", file.display());
    }
    Ok(())
}

fn fetch(models_dir: PathBuf) -> anyhow::Result<()> {
    let paths = fetch_with_progress(&models_dir)?;
    println!("generator: {}", paths.generator.display());
    println!("embedder:  {}", paths.embedder.display());
    println!("reader:    {}", paths.reader.display());
    Ok(())
}

/// Fetches (or verifies) the models into `models_dir`, showing progress on stderr.
pub fn fetch_with_progress(models_dir: &Path) -> anyhow::Result<ModelPaths> {
    let progress = BarProgress::new();
    let paths = ensure_models(models_dir, &progress)
        .with_context(|| format!("fetching models into {}", models_dir.display()))?;
    progress.bar.finish_and_clear();
    Ok(paths)
}

/// The models `docqa serve` loads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServedModels {
    /// The generator's directory.
    pub generator: PathBuf,
    /// The embedder's directory.
    pub embedder: PathBuf,
    /// The shipped reader, merged by default into the default generator only.
    pub reader: Option<PathBuf>,
}

/// The models `docqa serve` loads, fetched (or verified) into `models_dir`: the default generator with
/// the shipped reader, or `model` (a user's own generator, checked to hold a config.json) with no
/// reader; and the embedder.
pub fn fetch_for_serve(models_dir: &Path, model: Option<&Path>) -> anyhow::Result<ServedModels> {
    let Some(model) = model else {
        let paths = fetch_with_progress(models_dir)?;
        return Ok(ServedModels {
            generator: paths.generator,
            embedder: paths.embedder,
            reader: Some(paths.reader),
        });
    };
    let generator = super::model_arg::model_dir(models_dir, model)?;
    let progress = BarProgress::new();
    let embedder = ensure_model(models_dir, &EMBEDDER, &progress)
        .with_context(|| format!("fetching the embedder into {}", models_dir.display()))?;
    progress.bar.finish_and_clear();
    Ok(ServedModels {
        generator,
        embedder,
        reader: None,
    })
}

/// The models directory from a flag, or the default.
pub fn models_dir_or_default(flag: Option<PathBuf>) -> PathBuf {
    flag.unwrap_or_else(default_models_dir)
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
