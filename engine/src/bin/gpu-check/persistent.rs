//! Parity of the persistent decode (`decode_step.cu`, every layer of a batch-1 decode step in one
//! launch) against the same steps run op by op on the GPU: random Llamas at SmolLM2-135M's and
//! Llama-3.2-1B's shapes (head_dim 64, groups of 3 and 4 query heads) and a small one of head_dim 128,
//! a prompt, then decoded tokens fed one at a time, after a short prompt (one key split a KV head or
//! two) and a long one (32 splits of several tiles of keys). The two paths differ in the order of
//! their sums and in attention's rounding (the op-by-op decode rounds q and the probabilities to bf16
//! for its tensor cores; the persistent one keeps them in f32).

use docqa_engine::Result;
use docqa_engine::backend::KvDtype;
use docqa_engine::backend::cuda::CudaBackend;
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

/// Checks one shape after prompts of each length.
fn check_shape(shape: Shape, rng: &mut Rng, report: &mut Report) -> Result<()> {
    let dir = tempfile::tempdir().map_err(|e| docqa_engine::EngineError::io("temp dir", e))?;
    write_llama(dir.path(), shape, rng)?;
    let model = Llama::load(CudaBackend::new(0)?, dir.path())?;
    let vocab = model.config.vocab_size;
    for len in [37, 1500] {
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
        let what = format!("{}, {STEPS} steps after {len}", shape.name);
        match ran {
            true => report.row("persistent decode vs op by op", &what, err, TOL),
            false => report.note("persistent decode vs op by op", &what, "not taken", false),
        }
    }
    Ok(())
}

/// Every shape's check.
pub fn run(rng: &mut Rng, report: &mut Report) -> Result<()> {
    for shape in [SMOLLM2, LLAMA32_1B, HEAD_DIM_128] {
        check_shape(shape, rng, report)?;
    }
    Ok(())
}
