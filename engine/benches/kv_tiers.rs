//! The tiered KV cache's benchmark: on a KV pool that holds only a few documents, ask about N documents
//! in turn, twice over. The first round reads every document from scratch; in the second each document's
//! KV has left the pool and comes back from host memory, from disk, or from disk after a restart (a
//! new engine on the same directory). Prints the median time to first token of both rounds and their
//! ratio, per tier.
//!
//! `cargo bench -p docqa-engine --bench kv_tiers` runs on the CPU with SmolLM2 (as `docqa models fetch`
//! fetched it); settings by
//! environment:
//! - `DOCQA_BENCH_DEVICE`: `cpu` (default) or `cuda` (built with `--features cuda`);
//! - `DOCQA_BENCH_SHAPE`: a random checkpoint at a named shape (`llama-3.1-8b`...) instead of SmolLM2,
//!   with `DOCQA_BENCH_LAYERS` layers if set;
//! - `DOCQA_BENCH_DOCS` (6), `DOCQA_BENCH_DOC_TOKENS` (1024), `DOCQA_BENCH_POOL_DOCS` (2, what the pool
//!   holds), `DOCQA_BENCH_CHUNK` (prefill tokens per step, 512), `DOCQA_BENCH_TIERS` (`none,host,disk,restart`;
//!   `none` is the anchor: no lower tier, so the second round reads every document again;
//!   `host-through` and `disk-through` are `host` and `disk` with blocks copied down as they are
//!   computed; `serve` is `docqa serve`'s default: 2 GiB of host memory, then disk, written through),
//!   `DOCQA_BENCH_DIR` (where the disk tier and a synthesised model go; a temporary directory).
//!
//! On a GPU machine, `DOCQA_BENCH_KV_TIERS=1 DOCQA_BENCH_DEVICE=cuda gpu-check` runs the same code.

use std::error::Error;
use std::path::{Path, PathBuf};
use std::time::Instant;

use docqa_engine::backend::{Backend, KvDtype};
use docqa_engine::kv::tiers::{TierSettings, TierStats};
use docqa_engine::models::llama::Llama;
use docqa_engine::sampling::SamplingParams;
use docqa_engine::serving::{EngineConfig, EngineCore, GenerateRequest, GenerationEvent, KvBudget};
use docqa_engine::test_rng::Rng;
use docqa_engine::text::TextTokenizer;

pub type Res<T> = Result<T, Box<dyn Error>>;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Plan {
    docs: usize,
    doc_tokens: usize,
    pool_docs: usize,
    chunk: usize,
    tiers: Vec<String>,
    dir: PathBuf,
}

/// Runs the benchmark as the environment describes (the module docs); `gpu-check` runs it too, with
/// `DOCQA_BENCH_KV_TIERS=1`, so it can travel as one small executable.
pub fn main() -> Res<()> {
    let scratch = tempfile::tempdir()?;
    let plan = Plan {
        docs: env_or("DOCQA_BENCH_DOCS", 6),
        doc_tokens: env_or("DOCQA_BENCH_DOC_TOKENS", 1024),
        pool_docs: env_or("DOCQA_BENCH_POOL_DOCS", 2),
        chunk: env_or("DOCQA_BENCH_CHUNK", 512),
        tiers: env_or("DOCQA_BENCH_TIERS", "none,host,disk,restart".to_string())
            .split(',')
            .map(str::to_string)
            .collect(),
        dir: std::env::var("DOCQA_BENCH_DIR")
            .map_or_else(|_| scratch.path().to_path_buf(), PathBuf::from),
    };
    let model = model_dir(&plan.dir)?;
    let device = env_or("DOCQA_BENCH_DEVICE", "cpu".to_string());
    println!(
        "device {device}, model {}, {} documents of {} tokens, pool of {} documents, chunk {}",
        model.display(),
        plan.docs,
        plan.doc_tokens,
        plan.pool_docs,
        plan.chunk
    );
    match device.as_str() {
        "cpu" => bench(
            || Ok(docqa_engine::backend::cpu::CpuBackend::new()),
            &model,
            &plan,
        ),
        #[cfg(feature = "cuda")]
        "cuda" => bench(
            || Ok(docqa_engine::backend::cuda::CudaBackend::new(0)?),
            &model,
            &plan,
        ),
        other => Err(format!("no device {other} in this build").into()),
    }
}

/// The fetched SmolLM2, or a random checkpoint at `DOCQA_BENCH_SHAPE`.
fn model_dir(scratch: &Path) -> Res<PathBuf> {
    let Ok(name) = std::env::var("DOCQA_BENCH_SHAPE") else {
        // Looked up, not fetched: `docqa models fetch` (or any test run) fetches it.
        let dir = docqa_engine::fetch::default_models_dir().join("smollm2-135m-instruct");
        return match dir.join("config.json").exists() {
            true => Ok(dir),
            false => Err(format!("no model at {}: run `docqa models fetch`", dir.display()).into()),
        };
    };
    let mut shape = docqa_engine::synth::shape_named(&name).ok_or(format!("no shape {name}"))?;
    if let Some(layers) = std::env::var("DOCQA_BENCH_LAYERS")
        .ok()
        .and_then(|l| l.parse().ok())
    {
        shape = shape.with_layers(layers);
    }
    let dir = scratch.join(format!("model-{name}"));
    if !dir.join("config.json").exists() {
        docqa_engine::synth::synthesize(
            &dir,
            &shape,
            &mut Rng::seeded(7),
            docqa_engine::synth::DEFAULT_SHARD_BYTES,
        )?;
    }
    Ok(dir)
}

fn bench<B: Backend + 'static>(backend: impl Fn() -> Res<B>, model: &Path, plan: &Plan) -> Res<()> {
    println!(
        "| tier | round 1 (read) median s | round 2 (reloaded) median s | round 2 / round 1 | blocks back (host, disk) | KV per document MiB |"
    );
    println!("|---|---|---|---|---|---|");
    for tier in &plan.tiers {
        let settings = tier_settings(tier, &plan.dir.join(format!("kv-{tier}")))?;
        let mut core = engine(backend()?, model, plan, &settings)?;
        let vocab = core_vocab(model)?;
        let docs: Vec<Vec<u32>> = (0..plan.docs)
            .map(|d| document(d, plan.doc_tokens, vocab))
            .collect();
        let first: Vec<f64> = docs
            .iter()
            .map(|d| ttft(&mut core, question(d, 0, vocab)))
            .collect::<Res<_>>()?;
        eprintln!("  round 1, each document: {}", seconds(&first));
        // Between the rounds the engine is idle, as a server's engine thread is between questions:
        // it copies down what write-through has not reached yet, and the disk writes what it holds.
        while core.copy_down_while_idle()? {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        core.flush_kv_tiers();
        if tier == "restart" {
            core.persist_kv()?;
            drop(core);
            core = engine(backend()?, model, plan, &settings)?;
        }
        let before = core.stats().tiers;
        let (second, forward): (Vec<f64>, Vec<f64>) = docs
            .iter()
            .map(|d| ttft_split(&mut core, question(d, 1, vocab)))
            .collect::<Res<Vec<_>>>()?
            .into_iter()
            .unzip();
        let after = core.stats().tiers;
        eprintln!("  round 2, each document: {}", seconds(&second));
        let (m1, m2) = (median(first), median(second));
        let per_doc = kv_bytes_per_token(&core) * plan.doc_tokens as f64 / (1 << 20) as f64;
        println!(
            "| {tier} | {m1:.4} | {m2:.4} | {:.3} | {}, {} | {per_doc:.0} |",
            m2 / m1,
            after.host_hits - before.host_hits,
            after.disk_hits - before.disk_hits,
        );
        report_moves(&after);
        eprintln!(
            "  round 2: {:.1} ms of forward passes (batch made to logits read) in the median",
            median(forward) * 1e3
        );
    }
    Ok(())
}

fn seconds(times: &[f64]) -> String {
    times
        .iter()
        .map(|t| format!("{t:.4} s"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn report_moves(s: &TierStats) {
    eprintln!(
        "  moved: {} MiB down, {} MiB to disk, {} MiB back; {} disk errors",
        s.bytes_offloaded >> 20,
        s.bytes_to_disk >> 20,
        s.bytes_reloaded >> 20,
        s.disk_errors
    );
}

fn tier_settings(tier: &str, dir: &Path) -> Res<TierSettings> {
    let _ = std::fs::remove_dir_all(dir);
    let big = 1usize << 40;
    Ok(match tier {
        "none" => TierSettings::default(),
        "host" => TierSettings {
            host_bytes: big,
            ..TierSettings::default()
        },
        "host-through" => TierSettings {
            host_bytes: big,
            write_through: true,
            ..TierSettings::default()
        },
        // What `docqa serve` sets by default: 2 GiB of host memory, then disk, written through.
        "serve" => TierSettings {
            host_bytes: 2 << 30,
            disk: Some((dir.to_path_buf(), big)),
            write_through: true,
            ..TierSettings::default()
        },
        "disk" | "restart" | "disk-through" => TierSettings {
            host_bytes: 0,
            disk: Some((dir.to_path_buf(), big)),
            write_through: tier == "disk-through",
            ..TierSettings::default()
        },
        other => {
            return Err(format!(
                "no tier {other}: none, host, host-through, disk, disk-through or restart"
            )
            .into());
        }
    })
}

/// An engine whose KV pool holds `plan.pool_docs` documents (and the questions beside them).
fn engine<B: Backend + 'static>(
    backend: B,
    model: &Path,
    plan: &Plan,
    tiers: &TierSettings,
) -> Res<EngineCore<B>> {
    let llama = Llama::load(backend, model)?;
    let tokenizer = TextTokenizer::from_model_dir(model)?;
    let mut cfg = EngineConfig {
        kv_dtype: KvDtype::Bf16,
        max_num_batched_tokens: plan.chunk,
        max_num_seqs: 1,
        ..EngineConfig::default()
    };
    let block_bytes = cfg.kv_block_bytes(&llama.config);
    let doc_blocks = (plan.doc_tokens + 64).div_ceil(cfg.block_size);
    cfg.kv_cache = KvBudget::Bytes((plan.pool_docs * doc_blocks + 2) * block_bytes);
    let mut core = EngineCore::new(llama, tokenizer, &cfg)?;
    // Host memory holds every document, at most.
    let tiers = TierSettings {
        host_bytes: tiers.host_bytes.min(plan.docs * doc_blocks * block_bytes),
        ..tiers.clone()
    };
    core.attach_tiers(&tiers)?;
    // Host memory is allocated (pinned, on CUDA) in the background from the start; a server does
    // it while it loads and waits for its first question, the benchmark before its first round.
    let started = Instant::now();
    let ready = core.wait_for_kv_host_memory(std::time::Duration::from_secs(600));
    eprintln!(
        "  host memory for the tiers {} after {:.2} s",
        if ready { "ready" } else { "not ready" },
        started.elapsed().as_secs_f64()
    );
    Ok(core)
}

fn core_vocab(model: &Path) -> Res<u32> {
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(model.join("config.json"))?)?;
    Ok(config["vocab_size"].as_u64().ok_or("no vocab_size")? as u32)
}

fn kv_bytes_per_token<B: Backend>(core: &EngineCore<B>) -> f64 {
    core.kv_block_bytes() as f64 / EngineConfig::default().block_size as f64
}

/// Document `d`: `tokens` random ids from the middle of the vocabulary (no special tokens).
fn document(d: usize, tokens: usize, vocab: u32) -> Vec<u32> {
    let mut rng = Rng::seeded(1000 + d as u64);
    (0..tokens)
        .map(|_| 100 + (rng.next_u64() % (vocab as u64 - 200)) as u32)
        .collect()
}

/// Question `q` about `doc`: the document, then 32 tokens of its own.
fn question(doc: &[u32], q: u64, vocab: u32) -> Vec<u32> {
    let mut rng = Rng::seeded(5000 + q);
    let mut out = doc.to_vec();
    out.extend((0..32).map(|_| 100 + (rng.next_u64() % (vocab as u64 - 200)) as u32));
    out
}

/// Seconds from admission to the first token of a one-token answer to `prompt`, and of those the
/// seconds the engine spent in forward passes (from the batch's making to the logits' reading).
fn ttft_split<B: Backend>(core: &mut EngineCore<B>, prompt: Vec<u32>) -> Res<(f64, f64)> {
    let before = core.stats().prefill_micros + core.stats().decode_micros;
    let took = ttft(core, prompt)?;
    let after = core.stats().prefill_micros + core.stats().decode_micros;
    Ok((took, (after - before) as f64 / 1e6))
}

/// Seconds from admission to the first token of a one-token answer to `prompt`.
fn ttft<B: Backend>(core: &mut EngineCore<B>, prompt: Vec<u32>) -> Res<f64> {
    let params = SamplingParams {
        max_tokens: 1,
        temperature: 0.0,
        ..SamplingParams::default()
    };
    let started = Instant::now();
    core.add_request(GenerateRequest::new(prompt, params))?;
    let mut first = None;
    while core.has_work() {
        for (_, event) in core.step()? {
            if matches!(event, GenerationEvent::Token { .. }) && first.is_none() {
                first = Some(started.elapsed().as_secs_f64());
            }
        }
    }
    first.ok_or_else(|| "no token came".into())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
