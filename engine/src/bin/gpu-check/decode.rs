//! End-to-end decode throughput of a batch of sequences: each sequence's 512-token prompt is
//! prefilled on its own, then every step brings one greedy token per sequence, picked on the device
//! (`argmax_rows`) and read back as token ids. Wall clock over 128 steps after two warm-up steps (the
//! first step of a graph key runs op by op and records the graph).

use docqa_engine::Result;
use docqa_engine::backend::cuda::CudaBackend;
use docqa_engine::backend::{Backend, KvDtype, KvShape};
use docqa_engine::models::generate::argmax;
use docqa_engine::models::llama::{Llama, WorkspaceSize};
use docqa_engine::models::workspace::LlamaWorkspace;
use docqa_engine::models::{Batch, KvPool, LogitsMode, SeqInput};

use crate::inputs::Rng;

/// Tokens per KV block.
pub const BLOCK: usize = 16;
/// Prompt tokens before the decode rows that name no context.
pub const PROMPT: usize = 512;
/// A split target past any launch's blocks: splits of one step of keys.
pub const ONE_STEP_SPLITS: usize = 1 << 30;
pub const STEPS: usize = 128;
pub const WARM_UP: usize = 2;

/// `n` random token ids below `vocab`, avoiding the special ids 0..3.
pub fn prompt(n: usize, vocab: usize, rng: &mut Rng) -> Vec<u32> {
    (0..n).map(|_| 3 + rng.below(vocab - 3) as u32).collect()
}

/// A KV pool, a workspace, and each sequence's blocks.
type Sequences = (
    KvPool<CudaBackend>,
    LlamaWorkspace<CudaBackend>,
    Vec<Vec<u32>>,
);

/// The KV pools' type for the decode benchmarks: bf16, or int8 with `DOCQA_BENCH_KV_DTYPE=int8`.
pub fn kv_dtype() -> KvDtype {
    match std::env::var("DOCQA_BENCH_KV_DTYPE").as_deref() {
        Ok("int8") => KvDtype::Int8,
        _ => KvDtype::Bf16,
    }
}

/// A KV pool ([`kv_dtype`]) of `per` blocks for each of `seqs` sequences, a workspace for them (at most
/// `max_tokens` tokens a pass), and each sequence's blocks (contiguous ids).
pub fn sequences(
    model: &Llama<CudaBackend>,
    (seqs, per): (usize, usize),
    max_tokens: usize,
) -> Result<Sequences> {
    let cfg = model.part_config();
    let shape = KvShape {
        num_blocks: seqs * per,
        block_size: BLOCK,
        num_kv_heads: cfg.num_key_value_heads,
        head_dim: cfg.head_dim,
        dtype: kv_dtype(),
    };
    let kv = KvPool::new(&model.backend, cfg.num_hidden_layers, shape)?;
    let ws = model.workspace(WorkspaceSize {
        max_num_batched_tokens: max_tokens,
        max_num_seqs: seqs,
        max_blocks_per_seq: per,
        max_logit_rows: seqs,
    })?;
    let blocks = (0..seqs)
        .map(|s| ((s * per) as u32..((s + 1) * per) as u32).collect())
        .collect();
    Ok((kv, ws, blocks))
}

/// Times decode at `seqs` sequences after 512-token prompts and prints one line.
pub fn report(model: &Llama<CudaBackend>, rng: &mut Rng, seqs: usize, graphs: bool) -> Result<()> {
    report_after(model, rng, (seqs, PROMPT), graphs)
}

/// Times decode at `seqs` sequences after prompts of `context` tokens and prints one line.
pub fn report_after(
    model: &Llama<CudaBackend>,
    rng: &mut Rng,
    (seqs, context): (usize, usize),
    graphs: bool,
) -> Result<()> {
    let (secs, replays) = time_decode(model, rng, seqs, context)?;
    let step_ms = secs * 1e3 / STEPS as f64;
    let be = &model.backend;
    let on_off = |on: bool| if on { "on" } else { "off" };
    let splits = match be.decode_block_target() {
        None => "policy".to_string(),
        Some(b) if b >= ONE_STEP_SPLITS => "one step".to_string(),
        Some(b) => format!("{b} blocks"),
    };
    println!(
        "  decode batch {seqs:>3}, {STEPS} steps after {context}, graphs {:<3} pdl {:<3} persistent {:<3} splits {splits:<11} {step_ms:>7.3} ms/step  {:>8.0} tok/s  ({replays} steps replayed)",
        on_off(graphs),
        on_off(be.pdl_on()),
        on_off(be.persistent_decode()),
        (seqs * STEPS) as f64 / secs,
    );
    Ok(())
}

/// Seconds for [`STEPS`] decode steps of `seqs` sequences after `context`-token prompts (each
/// prefilled in one pass), and how many steps replayed a graph. The ranks of a tensor-parallel group
/// run it together, each with a clone of one `rng`: they draw the same prompts, and each picks the
/// same tokens from the same gathered logits.
pub fn time_decode(
    model: &Llama<CudaBackend>,
    rng: &mut Rng,
    seqs: usize,
    context: usize,
) -> Result<(f64, u64)> {
    let per = (context + WARM_UP + STEPS + 1).div_ceil(BLOCK);
    let (mut kv, mut ws, blocks) = sequences(model, (seqs, per), context.max(seqs))?;
    let vocab = model.config.vocab_size;
    let mut logits = vec![0f32; vocab];
    let mut next = vec![0u32; seqs];
    let mut ids = model.backend.alloc_ids(seqs)?;
    for (s, row) in blocks.iter().enumerate() {
        let p = prompt(context, vocab, rng);
        let input = SeqInput {
            tokens: &p,
            num_computed_tokens: 0,
            blocks: row,
            sink_window: None,
        };
        let batch = Batch::build(&[input], BLOCK, LogitsMode::LastPerSequence)?;
        model.forward(&batch, &mut kv, &mut ws)?;
        model.backend.read(&ws.logits, &mut logits[..vocab])?;
        next[s] = argmax(&logits[..vocab]);
    }
    // With DOCQA_PROFILE_DECODE set, one step at batch 1 runs between cuProfilerStart and Stop, for
    // `ncu --profile-from-start off` to time each of its kernels.
    let profile = std::env::var_os("DOCQA_PROFILE_DECODE").is_some() && seqs == 1;
    let mut start = std::time::Instant::now();
    for step in 0..WARM_UP + STEPS {
        if step == WARM_UP {
            start = std::time::Instant::now();
        }
        let profiled = profile && step == WARM_UP + 4;
        if profiled {
            // SAFETY: takes no arguments; only marks where a profiler attached to this process starts.
            unsafe { cudarc::driver::sys::cuProfilerStart() };
        }
        let tokens: Vec<[u32; 1]> = next.iter().map(|&t| [t]).collect();
        let inputs: Vec<SeqInput<'_>> = tokens
            .iter()
            .zip(&blocks)
            .map(|(t, row)| SeqInput {
                tokens: t,
                num_computed_tokens: context + step,
                blocks: row,
                sink_window: None,
            })
            .collect();
        let batch = Batch::build(&inputs, BLOCK, LogitsMode::LastPerSequence)?;
        model.forward(&batch, &mut kv, &mut ws)?;
        model
            .backend
            .argmax_rows(&ws.logits, (seqs, vocab), &mut ids)?;
        model.backend.read_ids(&ids, &mut next)?;
        if profiled {
            // SAFETY: as for cuProfilerStart.
            unsafe { cudarc::driver::sys::cuProfilerStop() };
        }
    }
    if let Some(why) = &ws.graphs.failed {
        println!("  (graph recording failed: {why})");
    }
    Ok((start.elapsed().as_secs_f64(), ws.graphs.replays))
}
