//! `docqa perplexity`: perplexity of the generator over a long real text, per segment of the stream:
//! dense attention (optionally past the trained context, with a RoPE scaling), or streaming through a
//! sink window. Prints one line per segment and a summary; `--json` writes the whole report.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use docqa_engine::adapter::Adapter;
use docqa_engine::config::RopeScaling;
use docqa_engine::kv::manager::SinkWindow;
use docqa_engine::models::perplexity::{PerplexityOptions, PerplexityReport, perplexity_split};
use docqa_engine::parallel::Grouped;
use docqa_engine::text::TextTokenizer;
use serde_json::json;

use super::generator::GeneratorArgs;
use crate::adapter::AdapterInfo;
use crate::device::{GeneratorBackend, KvType, load_generator};

/// Position encodings to read past the trained context with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Rope {
    /// The model's own RoPE (extrapolates past the trained context).
    Plain,
    /// Linear position interpolation.
    Linear,
    /// NTK-aware dynamic scaling.
    Dynamic,
    /// YaRN.
    Yarn,
}

/// `docqa perplexity`.
#[derive(Debug, Args)]
pub struct PerplexityArgs {
    /// A text file, or a JSON Lines file of documents with a `text` field (read in order and joined).
    #[arg(long)]
    text: PathBuf,
    /// Tokens of the stream to read.
    #[arg(long, default_value_t = 50_000)]
    tokens: usize,
    /// Stream through a sink window of this many recent tokens (0: dense attention).
    #[arg(long, default_value_t = 0)]
    window: usize,
    /// Sink tokens kept besides the window.
    #[arg(long, default_value_t = 4)]
    sinks: usize,
    /// Position encoding for dense reads past the trained context.
    #[arg(long, value_enum, default_value_t = Rope::Plain)]
    rope: Rope,
    /// Scale factor of the RoPE scaling.
    #[arg(long, default_value_t = 2.0)]
    rope_factor: f64,
    /// Tokens per forward pass.
    #[arg(long, default_value_t = 256)]
    chunk: usize,
    /// Tokens per reported segment.
    #[arg(long, default_value_t = 1000)]
    segment: usize,
    /// Element type of the KV cache.
    #[arg(long, value_enum, default_value_t = KvType::F32)]
    kv_dtype: KvType,
    /// Write the report as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Split the generator over this many ranks (tensor parallelism): on CUDA one GPU a rank (GPUs
    /// 0..N, joined by NCCL), on the CPU threads. N must divide the model's attention and KV heads,
    /// MLP width and vocabulary.
    #[arg(long, value_name = "N")]
    tensor_parallel: Option<usize>,
    #[command(flatten)]
    generator: GeneratorArgs,
}

/// Runs `docqa perplexity`.
pub fn run(args: PerplexityArgs) -> anyhow::Result<()> {
    let (backend, dir, adapter) = args.generator.resolve(args.tensor_parallel)?;
    let adapter = adapter.as_ref();
    match backend {
        GeneratorBackend::Cpu(cpu) => run_on(cpu, &dir, adapter, &args),
        #[cfg(feature = "cuda")]
        GeneratorBackend::Cuda(cuda) => run_on(cuda, &dir, adapter, &args),
    }
}

fn run_on<B: Grouped>(
    backends: Vec<B>,
    dir: &Path,
    adapter: Option<&Adapter>,
    args: &PerplexityArgs,
) -> anyhow::Result<()> {
    let tokenizer = TextTokenizer::from_model_dir(dir)?;
    let tokens = read_tokens(&args.text, &tokenizer, args.tokens)?;
    let mut ranks = load_generator(backends, args.tensor_parallel.is_some(), dir, adapter)?;
    let trained = ranks[0].config.max_position_embeddings;
    let sink_window = (args.window > 0).then_some(SinkWindow {
        num_sink_tokens: args.sinks,
        window: args.window,
    });
    let span = sink_window.map_or(tokens.len(), |w| w.dense_prefix());
    for model in &mut ranks {
        model.extend_context(
            rope_scaling(args.rope, args.rope_factor, trained),
            span.max(trained),
        );
    }
    let opts = PerplexityOptions {
        sink_window,
        chunk: args.chunk,
        segment: args.segment,
        kv_dtype: args.kv_dtype.dtype(),
    };
    let report = perplexity_split(ranks, &tokens, &opts)?;
    print_report(&report);
    if let Some(path) = &args.json {
        let mut value = report_json(&report, args, tokens.len(), trained);
        value["adapter"] = json!(AdapterInfo::of(adapter).label());
        std::fs::write(path, serde_json::to_string_pretty(&value)? + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

fn rope_scaling(rope: Rope, factor: f64, trained: usize) -> RopeScaling {
    match rope {
        Rope::Plain => RopeScaling::None,
        Rope::Linear => RopeScaling::Linear { factor },
        Rope::Dynamic => RopeScaling::Dynamic { factor },
        Rope::Yarn => RopeScaling::yarn(factor, trained),
    }
}

/// The first `limit` tokens of the file's text (documents of a JSON Lines file joined by blank lines).
fn read_tokens(path: &Path, tokenizer: &TextTokenizer, limit: usize) -> anyhow::Result<Vec<u32>> {
    let raw =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let is_jsonl = path.extension().is_some_and(|e| e == "jsonl");
    let mut tokens = Vec::new();
    let texts: Box<dyn Iterator<Item = anyhow::Result<String>>> = if is_jsonl {
        Box::new(raw.lines().filter(|l| !l.trim().is_empty()).map(|line| {
            let doc: serde_json::Value = serde_json::from_str(line)?;
            match doc["text"].as_str() {
                Some(t) => Ok(t.to_string()),
                None => bail!("a line of {} has no text field", path.display()),
            }
        }))
    } else {
        Box::new(std::iter::once(Ok(raw.clone())))
    };
    for text in texts {
        tokens.extend(tokenizer.encode(&format!("{}\n\n", text?), false)?);
        if tokens.len() >= limit {
            tokens.truncate(limit);
            return Ok(tokens);
        }
    }
    if tokens.len() < 2 {
        bail!("{} holds fewer than two tokens", path.display());
    }
    Ok(tokens)
}

fn print_report(report: &PerplexityReport) {
    println!("tokens\tperplexity");
    for s in &report.segments {
        println!("{}\t{:.3}", s.end, s.perplexity());
    }
    println!(
        "perplexity {:.3} over {} segments; peak KV blocks {} during a step, {} between steps; {:.1} s",
        report.perplexity(),
        report.segments.len(),
        report.peak_blocks,
        report.peak_blocks_between_steps,
        report.seconds
    );
}

fn report_json(
    report: &PerplexityReport,
    args: &PerplexityArgs,
    tokens: usize,
    trained: usize,
) -> serde_json::Value {
    json!({
        "text": args.text.display().to_string(),
        "tokens": tokens,
        "trained_context": trained,
        "window": args.window,
        "sinks": if args.window > 0 { args.sinks } else { 0 },
        "rope": format!("{:?}", args.rope).to_lowercase(),
        "rope_factor": args.rope_factor,
        "kv_dtype": format!("{:?}", args.kv_dtype).to_lowercase(),
        "chunk": args.chunk,
        "tensor_parallel": args.tensor_parallel.unwrap_or(1),
        "perplexity": report.perplexity(),
        "peak_blocks": report.peak_blocks,
        "peak_blocks_between_steps": report.peak_blocks_between_steps,
        "seconds": report.seconds,
        "segments": report.segments.iter().map(|s| json!({
            "end": s.end, "tokens": s.tokens, "nll": s.nll, "perplexity": s.perplexity(),
        })).collect::<Vec<_>>(),
    })
}
