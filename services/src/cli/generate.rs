//! `docqa generate`: answer a prompt (or several, in turn) with the generator on the CPU or CUDA
//! engine, streaming the text; each answer's report says how long the engine expected its prompt to
//! take to read, beside the time it took.

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use anyhow::Context;
use clap::Args;
use docqa_engine::adapter::Adapter;
use docqa_engine::backend::Backend;
use docqa_engine::kv::manager::SinkWindow;
use docqa_engine::parallel::Grouped;
use docqa_engine::sampling::SamplingParams;
use docqa_engine::serving::stats::{EngineStats, PromptRead};
use docqa_engine::serving::{
    EngineConfig, EngineCore, GenerateRequest, GenerationEvent, Usage, WINDOWED_CALIBRATION_WITHIN,
};
use docqa_engine::text::{ChatMessage, TextTokenizer};

use super::generator::GeneratorArgs;
use crate::device::{GeneratorBackend, load_generator};
use crate::qa::prompt::STREAMING_SINK_TOKENS;

/// `docqa generate`.
#[derive(Debug, Args)]
pub struct GenerateArgs {
    /// The question or instruction.
    #[arg(
        long,
        required_unless_present = "prompt_file",
        conflicts_with = "prompt_file"
    )]
    prompt: Option<String>,
    /// Read the prompt from this file (for prompts longer than a command line holds); given more
    /// than once, each file is a prompt, asked in turn.
    #[arg(long, value_name = "PATH")]
    prompt_file: Vec<std::path::PathBuf>,
    /// Memory for the KV cache, in MiB [default: as `docqa serve`: 512 on the CPU, on CUDA what
    /// `--gpu-memory-share` leaves].
    #[arg(long, env = "DOCQA_KV_CACHE_MIB")]
    kv_cache_mib: Option<usize>,
    /// On CUDA without `--kv-cache-mib`: the share of the GPU's memory the model, its workspace and
    /// the KV cache may fill together.
    #[arg(long, env = "DOCQA_GPU_MEMORY_SHARE", default_value_t = 0.85)]
    gpu_memory_share: f64,
    /// Element type of the KV cache [default: as `docqa serve`: bf16].
    #[arg(long, env = "DOCQA_KV_DTYPE", value_enum)]
    kv_dtype: Option<crate::device::KvType>,
    /// Prompt tokens computed per engine step [default: as `docqa serve`: 256 on the CPU, 2,048 on CUDA].
    #[arg(long)]
    prefill_chunk: Option<usize>,
    /// Ask the same prompts this many times, one after the other: from the second time on their KV
    /// comes from the prefix cache, as a second question on a document read before.
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// Before the timed requests, warm the engine up as `docqa serve` does before it listens, then
    /// read a prompt of the first one's length once (its tokens in reverse order, so the prefix cache
    /// serves none of it), as an engine that has served before: the first pass on a device pays
    /// one-off costs (kernel loading, library heuristics, clocks). Neither read counts in the
    /// engine's measures. Then it calibrates the reading estimates, as `docqa serve` does on a GPU:
    /// a prompt of eight steps and three short ones, whose steps the first timed request's estimate
    /// rests on.
    #[arg(long)]
    warm_up: bool,
    /// Read every prompt through a sink window of this many recent tokens beside 4 sink tokens, as
    /// the long path reads a document longer than the model's context: prompts may then be longer
    /// than the context, and the warm-up's calibration reads through the window too where quick.
    #[arg(long, value_name = "TOKENS")]
    sink_window: Option<usize>,
    /// A system message to put before the prompt.
    #[arg(long)]
    system: Option<String>,
    /// Send the prompt as it is, without the model's chat template.
    #[arg(long)]
    raw: bool,
    /// Most tokens to generate.
    #[arg(long, default_value_t = 256)]
    max_tokens: usize,
    /// Sampling temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    /// Nucleus sampling: keep the most likely tokens up to this probability mass.
    #[arg(long, default_value_t = 1.0)]
    top_p: f32,
    /// Keep only this many most likely tokens (0: all).
    #[arg(long, default_value_t = 0)]
    top_k: usize,
    /// HF-style repetition penalty (1: none).
    #[arg(long, default_value_t = 1.0)]
    repetition_penalty: f32,
    /// Random seed, for repeatable sampling.
    #[arg(long)]
    seed: Option<u64>,
    /// Stop when this text appears (repeatable).
    #[arg(long)]
    stop: Vec<String>,
    /// Split the generator over this many ranks (tensor parallelism): on CUDA one GPU a rank (GPUs
    /// 0..N, joined by NCCL), on the CPU threads. N must divide the model's attention and KV heads,
    /// MLP width and vocabulary.
    #[arg(long, value_name = "N")]
    tensor_parallel: Option<usize>,
    #[command(flatten)]
    generator: GeneratorArgs,
}

/// Runs `docqa generate`.
pub fn run(args: GenerateArgs) -> anyhow::Result<()> {
    let (backend, dir, adapter) = args.generator.resolve(args.tensor_parallel)?;
    let adapter = adapter.as_ref();
    match backend {
        GeneratorBackend::Cpu(cpu) => generate_on(cpu, &dir, adapter, &args),
        #[cfg(feature = "cuda")]
        GeneratorBackend::Cuda(cuda) => generate_on(cuda, &dir, adapter, &args),
    }
}

fn generate_on<B: Grouped>(
    backends: Vec<B>,
    dir: &Path,
    adapter: Option<&Adapter>,
    args: &GenerateArgs,
) -> anyhow::Result<()> {
    let load = Instant::now();
    let split = args.tensor_parallel.is_some();
    let ranks = load_generator(backends, split, dir, adapter)?;
    let tokenizer = TextTokenizer::from_model_dir(dir)?;
    let prompts = prompt_ids(&tokenizer, args)?;
    let device = args.generator.device;
    let engine_config = EngineConfig {
        kv_dtype: device.kv_dtype(args.kv_dtype),
        kv_cache: device.kv_budget(
            args.kv_cache_mib,
            args.gpu_memory_share,
            args.tensor_parallel.unwrap_or(1),
        ),
        max_num_batched_tokens: args
            .prefill_chunk
            .unwrap_or(device.defaults().prefill_chunk),
        ..EngineConfig::default()
    };
    let mut core = EngineCore::with_ranks(ranks, tokenizer, &engine_config)?;
    let loaded = load.elapsed();
    eprintln!(
        "[KV cache: {} tokens]",
        core.stats().total_blocks * engine_config.block_size
    );
    let params = SamplingParams {
        temperature: args.temperature,
        top_k: args.top_k,
        top_p: args.top_p,
        repetition_penalty: args.repetition_penalty,
        seed: args.seed,
        max_tokens: args.max_tokens,
        stop_strings: args.stop.clone(),
        ..SamplingParams::default()
    };
    let window = args.sink_window.map(|window| SinkWindow {
        num_sink_tokens: STREAMING_SINK_TOKENS,
        window,
    });
    if args.warm_up {
        let engine = core.warm_up()?;
        let reversed: Vec<u32> = prompts[0].iter().rev().copied().collect();
        let tokens = reversed.len();
        let took = core.warm_up_on(reversed, window)?;
        let calibration = core.calibrate(window, WINDOWED_CALIBRATION_WITHIN)?;
        eprintln!(
            "[warm-up: {tokens} prompt tokens in {:.3} s, after the engine's own warm-up ({} prompt \
             tokens, then halves down to 8) in {:.3} s; neither counts in the reading estimates, \
             which the calibration's {} prompt tokens ({} through the window) read in {:.3} s \
             start from]",
            took.as_secs_f64(),
            engine.prompt_tokens,
            engine.took.as_secs_f64(),
            calibration.dense_tokens,
            calibration.windowed_tokens,
            calibration.took.as_secs_f64()
        );
    }
    for _ in 0..args.repeat.max(1) {
        for prompt in &prompts {
            let before = core.stats();
            let request = GenerateRequest::new(prompt.clone(), params.clone());
            core.add_request(match window {
                Some(w) => request.with_sink_window(w),
                None => request,
            })?;
            let usage = run_to_end(&mut core)?;
            report(&usage, loaded, &before, window);
        }
    }
    Ok(())
}

/// The prompts as token ids: `--prompt`, or each `--prompt-file` in turn.
fn prompt_ids(tokenizer: &TextTokenizer, args: &GenerateArgs) -> anyhow::Result<Vec<Vec<u32>>> {
    if let Some(prompt) = &args.prompt {
        return Ok(vec![prompt_from(tokenizer, args, prompt)?]);
    }
    anyhow::ensure!(
        !args.prompt_file.is_empty(),
        "give --prompt or --prompt-file"
    );
    args.prompt_file
        .iter()
        .map(|path| {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading the prompt from {}", path.display()))?;
            prompt_from(tokenizer, args, &text)
        })
        .collect()
}

/// One prompt's ids: as it is with `--raw`, else in the model's chat template.
fn prompt_from(
    tokenizer: &TextTokenizer,
    args: &GenerateArgs,
    prompt: &str,
) -> anyhow::Result<Vec<u32>> {
    if args.raw {
        return Ok(tokenizer.encode(prompt, false)?);
    }
    let mut messages = Vec::new();
    if let Some(system) = &args.system {
        messages.push(ChatMessage::new("system", system.as_str()));
    }
    messages.push(ChatMessage::new("user", prompt));
    let text = tokenizer.apply_chat_template(&messages, true)?;
    Ok(tokenizer.encode(&text, false)?)
}

/// Steps the engine until its one request ends, streaming the text to stdout.
fn run_to_end<B: Backend>(core: &mut EngineCore<B>) -> anyhow::Result<Usage> {
    let mut out = std::io::stdout().lock();
    while core.has_work() {
        for (_, event) in core.step()? {
            match event {
                GenerationEvent::Token { text, .. } => write!(out, "{text}")?,
                GenerationEvent::Progress { .. } => {}
                GenerationEvent::Finished { text, usage, .. } => {
                    writeln!(out, "{text}")?;
                    return Ok(usage);
                }
                GenerationEvent::Failed { message } => {
                    anyhow::bail!("generation failed: {message}")
                }
            }
            out.flush()?;
        }
    }
    anyhow::bail!("the engine stopped without finishing the request")
}

/// The answer's report line: its tokens, the load time, its first token (with what the engine
/// expected reading its prompt past the cached prefix to take, from its stats `before` it), and the
/// decode rate.
fn report(
    usage: &Usage,
    loaded: std::time::Duration,
    before: &EngineStats,
    window: Option<SinkWindow>,
) {
    let decode = usage
        .total_time
        .saturating_sub(usage.time_to_first_token)
        .as_secs_f64();
    let rate = if decode > 0.0 {
        (usage.completion_tokens.saturating_sub(1)) as f64 / decode
    } else {
        0.0
    };
    let expected = before
        .prefill_seconds(PromptRead {
            cached: usage.cached_prompt_tokens,
            tokens: usage.prompt_tokens - usage.cached_prompt_tokens,
            window,
        })
        .map_or("none yet".to_string(), |s| format!("{s:.3} s"));
    eprintln!(
        "[{} prompt tokens ({} from the prefix cache), {} generated; load {:.2} s, first token {:.3} s, {:.1} tokens/s; reading estimated: {expected}]",
        usage.prompt_tokens,
        usage.cached_prompt_tokens,
        usage.completion_tokens,
        loaded.as_secs_f64(),
        usage.time_to_first_token.as_secs_f64(),
        rate
    );
}
