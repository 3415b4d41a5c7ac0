//! Parity of the persistent decode (`decode_step.cu`, every layer of a batch-1 decode step in one
//! launch) against the same steps run op by op on the GPU: random Llamas at SmolLM2-135M's and
//! Llama-3.2-1B's shapes (head_dim 64, groups of 3 and 4 query heads) and a small one of head_dim 128,
//! a prompt, then decoded tokens fed one at a time, after a short prompt (one key split a KV head or
//! two) and a long one (32 splits of several tiles of keys). The two paths differ in the order of
//! their sums and in attention's rounding (the op-by-op decode rounds q and the probabilities to bf16
//! for its tensor cores; the persistent one keeps them in f32). After each shape's check, a profiled
//! timing of its steps says where their time goes ([`print_profile`]).

use docqa_engine::Result;
use docqa_engine::backend::KvDtype;
use docqa_engine::backend::cuda::{CudaBackend, PHASE_NAMES, PHASES};
use docqa_engine::models::LogitsMode;
use docqa_engine::models::generate::SingleSequence;
use docqa_engine::models::llama::Llama;
use docqa_engine::synth::Shape;

use crate::inputs::Rng;
use crate::random_models::{LLAMA32_1B, SMOLLM2, write_llama};
use crate::report::{Report, rel_err};

/// Tolerance on each step's logits (bf16 products through every layer, attention rounded
/// differently).
const TOL: f64 = 2e-2;
/// Tokens decoded after each prompt.
const STEPS: usize = 6;

/// A small Llama of head_dim 128 (8 query heads on 2 KV heads, as Llama-3.1-8B groups 4).
const HEAD_DIM_128: Shape = Shape {
    name: "head_dim-128",
    hidden: 1024,
    intermediate: 2816,
    layers: 4,
    heads: 8,
    kv_heads: 2,
    head_dim: Some(128),
    ..LLAMA32_1B
};

/// The logits of feeding `prompt`, then each of `tokens` alone, with the persistent decode `on`.
fn logits(
    model: &Llama<CudaBackend>,
    prompt: &[u32],
    tokens: &[u32],
    on: bool,
) -> Result<Vec<Vec<f32>>> {
    model.backend.set_persistent_decode(on);
    let mut seq = SingleSequence::new(model, prompt.len() + tokens.len() + 1, 512, KvDtype::Bf16)?;
    seq.feed(prompt, LogitsMode::LastPerSequence)?;
    let mut out = Vec::with_capacity(tokens.len());
    for &t in tokens {
        out.push(seq.feed(&[t], LogitsMode::LastPerSequence)?.to_vec());
    }
    Ok(out)
}

/// Chunks a warp keeps prefetched into L2 past its ring in the lab's last parity row and profile.
const LAB_AHEAD: usize = 6;

/// Checks one shape after prompts of each length (the long one again with the L2 prefetch past the
/// rings), then prints its step profile without and with that prefetch.
fn check_shape(shape: Shape, rng: &mut Rng, report: &mut Report) -> Result<()> {
    let dir = tempfile::tempdir().map_err(|e| docqa_engine::EngineError::io("temp dir", e))?;
    write_llama(dir.path(), shape, rng)?;
    let model = Llama::load(CudaBackend::new(0)?, dir.path())?;
    let vocab = model.config.vocab_size;
    let was = model.backend.persistent_l2_ahead();
    for (len, ahead) in [(37, was), (1500, was), (1500, Some(LAB_AHEAD))] {
        model.backend.set_persistent_l2_ahead(ahead);
        let prompt = crate::decode::prompt(len, vocab, rng);
        let tokens = crate::decode::prompt(STEPS, vocab, rng);
        let reference = logits(&model, &prompt, &tokens, false)?;
        let runs = model.backend.persistent_decode_runs();
        let persistent = logits(&model, &prompt, &tokens, true)?;
        model.backend.set_persistent_decode(false);
        let ran = model.backend.persistent_decode_runs() > runs;
        let err = reference
            .iter()
            .zip(&persistent)
            .fold(0f64, |m, (r, p)| m.max(rel_err(p, r)));
        let lead = ahead.map_or(String::new(), |c| format!(", L2 {c} ahead"));
        let what = format!("{}, {STEPS} steps after {len}{lead}", shape.name);
        match ran {
            true => report.row("persistent decode vs op by op", &what, err, TOL),
            false => report.note("persistent decode vs op by op", &what, "not taken", false),
        }
    }
    for ahead in [was, Some(LAB_AHEAD)] {
        model.backend.set_persistent_l2_ahead(ahead);
        print_profile(&model, rng, (1, crate::decode::PROMPT))?;
    }
    model.backend.set_persistent_l2_ahead(was);
    Ok(())
}

/// The bytes each phase of a layer reads: q/k/v, attention over `context` keys, output, gate/up,
/// down (bf16 weights and KV).
fn phase_bytes(model: &Llama<CudaBackend>, context: usize) -> [f64; PHASES] {
    let c = &model.config;
    let (h, hd) = (c.hidden_size, c.head_dim);
    let (q, kv) = (c.num_attention_heads * hd, c.num_key_value_heads * hd);
    let i = c.intermediate_size;
    [h * (q + 2 * kv), 2 * context * kv, q * h, 2 * i * h, i * h].map(|n| 2.0 * n as f64)
}

/// Times persistent decode steps with their phases noted (the decode row it prints is that run's:
/// the notes are a few timer writes a block and barrier, against barriers of a microsecond), then
/// prints where the last step's time went: each phase's mean and slowest block's work, the
/// barrier after it, and the bytes it reads over the slowest block's time.
pub fn print_profile(
    model: &Llama<CudaBackend>,
    rng: &mut Rng,
    (seqs, context): (usize, usize),
) -> Result<()> {
    let be = &model.backend;
    be.set_persistent_decode(true);
    be.set_persistent_profile(true)?;
    let timed = crate::decode::report_after(model, rng, (seqs, context), true);
    let profile = be.persistent_profile();
    be.set_persistent_profile(false)?;
    be.set_persistent_decode(false);
    timed?;
    let Some(p) = profile? else {
        println!("  persistent profile: no step ran in one launch");
        return Ok(());
    };
    let depth = be
        .persistent_depth()
        .map_or("as deep as fits".to_string(), |d| format!("{d} a warp"));
    let depth = match be.persistent_l2_ahead() {
        Some(c) => format!("{depth}, L2 {c} chunks ahead"),
        None => depth,
    };
    println!(
        "  persistent profile, batch {seqs} after {context}, ring {depth}: layers {:.1} µs over {} blocks; a layer's phases (mean of {} layers):",
        p.total_ns() as f64 * 1e-3,
        p.blocks,
        p.layers
    );
    let bytes = phase_bytes(model, context);
    for (k, t) in p.phases().iter().enumerate() {
        println!(
            "    {:<9} work {:>7.2} µs mean {:>7.2} µs slowest  barrier {:>5.2} µs  {:>6.0} GB/s over the slowest",
            PHASE_NAMES[k],
            t.mean_work * 1e-3,
            t.max_work * 1e-3,
            t.barrier * 1e-3,
            bytes[k] / t.max_work.max(1.0),
        );
    }
    let work = p.product_work_by_block();
    let mut order: Vec<usize> = (0..work.len()).collect();
    order.sort_by(|&x, &y| work[x].total_cmp(&work[y]));
    let us = |b: usize| work[b] * 1e-3;
    if let (Some(&fast), Some(&slow)) = (order.first(), order.last()) {
        println!(
            "    product work by block over the step: fastest {:.1} µs (block {fast}), median {:.1}, slowest {:.1} (block {slow}); slowest eight: {:?}",
            us(fast),
            us(order[order.len() / 2]),
            us(slow),
            order.iter().rev().take(8).collect::<Vec<_>>()
        );
    }
    let m = p.attention_marks().map(|ns| ns * 1e-3);
    println!(
        "    attention of KV head 0, µs after its split 0 began: query loaded {:.2}, split done {:.2}, fenced {:.2}, counted {:.2}; its merging warp's split began {:.2}, merge began {:.2}, merged {:.2}",
        m[1], m[2], m[3], m[4], m[7], m[5], m[6]
    );
    Ok(())
}

/// Every shape's check.
pub fn run(rng: &mut Rng, report: &mut Report) -> Result<()> {
    for shape in [SMOLLM2, LLAMA32_1B, HEAD_DIM_128] {
        check_shape(shape, rng, report)?;
    }
    Ok(())
}
