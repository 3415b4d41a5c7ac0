//! End-to-end parity on random checkpoints (written to a temp directory, loaded on both backends):
//! greedy decoding with a Llama of SmolLM2-135M's shapes (bf16), the same Llama with a random LoRA
//! adapter merged at load, and a BERT of MiniLM's shapes (f32).
//!
//! Both models are fed the CPU's token at every step (teacher forcing), so one disagreement does not
//! hide the steps after it. A step whose arg-max differs counts as a near-tie when the CPU's logit gap
//! between its pick and the GPU's pick is within twice that step's largest logit difference.

use docqa_engine::adapter::Adapter;
use docqa_engine::backend::KvDtype;
use docqa_engine::backend::cpu::CpuBackend;
use docqa_engine::backend::cuda::CudaBackend;
use docqa_engine::models::LogitsMode;
use docqa_engine::models::bert::Bert;
use docqa_engine::models::generate::{SingleSequence, argmax};
use docqa_engine::models::llama::Llama;
use docqa_engine::{EngineError, Result};

use crate::inputs::Rng;
use crate::random_models::{
    MINILM_VOCAB, SMOLLM2_VOCAB, write_minilm, write_smollm2, write_smollm2_lora,
};
use crate::report::{Report, rel_err};

/// Tolerance on the logits after a whole forward pass (bf16 matmuls through 30 layers).
const TOL_LOGITS: f64 = 2e-2;
/// Tolerance on BERT's hidden states (f32 matmuls through 6 layers).
const TOL_BERT: f64 = 1e-4;

/// How one prompt went.
struct Outcome {
    steps: usize,
    mismatches: Vec<(usize, f32, f32)>,
    prompt_logits_err: f64,
}

/// Greedy decoding of `new` tokens after `prompt` on both models, fed the CPU's tokens.
fn decode(
    cpu: &Llama<CpuBackend>,
    gpu: &Llama<CudaBackend>,
    prompt: &[u32],
    new: usize,
    dtype: KvDtype,
) -> Result<Outcome> {
    let ctx = prompt.len() + new + 1;
    let mut cs = SingleSequence::new(cpu, ctx, 512, dtype)?;
    let mut gs = SingleSequence::new(gpu, ctx, 512, dtype)?;
    let mut out = Outcome {
        steps: new,
        mismatches: Vec::new(),
        prompt_logits_err: 0.0,
    };
    let mut feed: Vec<u32> = prompt.to_vec();
    for step in 0..new {
        let cl = cs.feed(&feed, LogitsMode::LastPerSequence)?.to_vec();
        let gl = gs.feed(&feed, LogitsMode::LastPerSequence)?;
        let err = rel_err(gl, &cl);
        if step == 0 {
            out.prompt_logits_err = err;
        }
        let (ct, gt) = (argmax(&cl), argmax(gl));
        if ct != gt {
            let gap = cl[ct as usize] - cl[gt as usize];
            let diff = gl
                .iter()
                .zip(&cl)
                .fold(0f32, |m, (g, c)| m.max((g - c).abs()));
            out.mismatches.push((step, gap, diff));
        }
        feed = vec![ct];
    }
    Ok(out)
}

/// Tolerance of replayed decode steps against the same steps launched op by op: the same kernels on
/// the same inputs.
const TOL_REPLAY: f64 = 1e-6;

/// The logits of each step of feeding `prompt`, then `tokens` one at a time, on the GPU model.
fn step_logits(
    gpu: &Llama<CudaBackend>,
    prompt: &[u32],
    tokens: &[u32],
) -> Result<(Vec<Vec<f32>>, u64, Option<String>)> {
    let ctx = prompt.len() + tokens.len() + 1;
    let mut seq = SingleSequence::new(gpu, ctx, 512, KvDtype::Bf16)?;
    let mut out = vec![seq.feed(prompt, LogitsMode::LastPerSequence)?.to_vec()];
    for &t in tokens {
        out.push(seq.feed(&[t], LogitsMode::LastPerSequence)?.to_vec());
    }
    let graphs = seq.graphs();
    Ok((out, graphs.replays, graphs.failed.clone()))
}

/// Decode steps replayed from recorded CUDA graphs against the same steps launched op by op.
fn check_replay(gpu: &Llama<CudaBackend>, rng: &mut Rng, r: &mut Report) -> Result<()> {
    let prompt: Vec<u32> = (0..250)
        .map(|_| 3 + rng.below(SMOLLM2_VOCAB - 3) as u32)
        .collect();
    let tokens: Vec<u32> = (0..40)
        .map(|_| 3 + rng.below(SMOLLM2_VOCAB - 3) as u32)
        .collect();
    gpu.backend.set_graphs(false);
    let eager = step_logits(gpu, &prompt, &tokens);
    gpu.backend.set_graphs(true);
    let (eager, _, _) = eager?;
    let (replayed, replays, failed) = step_logits(gpu, &prompt, &tokens)?;
    let err = eager
        .iter()
        .zip(&replayed)
        .map(|(e, g)| rel_err(g, e))
        .fold(0.0, f64::max);
    let shape = "prompt 250 + 40 steps, bf16 KV";
    r.row(
        "decode replayed from graphs vs op by op",
        shape,
        err,
        TOL_REPLAY,
    );
    let what = match failed {
        Some(why) => format!("recording failed: {why}"),
        None => format!("{replays} of {} steps replayed", tokens.len()),
    };
    // The first step of each bucket runs op by op and records; 250 → 290 tokens spans two buckets.
    r.note(
        "decode steps replayed",
        shape,
        &what,
        replays + 2 >= tokens.len() as u64,
    );
    Ok(())
}

/// Runs the Llama end-to-end check and adds its rows to the report.
pub fn run_llama(rng: &mut Rng, r: &mut Report) -> Result<()> {
    let dir = tempfile::tempdir().map_err(|e| EngineError::io("temp dir", e))?;
    let t = std::time::Instant::now();
    write_smollm2(dir.path(), rng)?;
    let cpu = Llama::load(CpuBackend::new(), dir.path())?;
    let gpu = Llama::load(CudaBackend::new(0)?, dir.path())?;
    println!(
        "e2e: random SmolLM2-135M-shaped model written and loaded on both backends in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let cases = [
        (5, KvDtype::F32),
        (40, KvDtype::F32),
        (300, KvDtype::F32),
        (1200, KvDtype::F32),
        (300, KvDtype::Bf16),
        (300, KvDtype::Int8),
    ];
    for (len, dtype) in cases {
        let prompt: Vec<u32> = (0..len)
            .map(|_| 3 + rng.below(SMOLLM2_VOCAB - 3) as u32)
            .collect();
        let t = std::time::Instant::now();
        let o = decode(&cpu, &gpu, &prompt, 32, dtype)?;
        let shape = format!("prompt {len}, 32 new, {dtype:?} KV");
        r.row(
            "llama logits after prompt",
            &shape,
            o.prompt_logits_err,
            TOL_LOGITS,
        );
        let near_ties = o.mismatches.iter().all(|&(_, gap, diff)| gap <= 2.0 * diff);
        let equal = o.steps - o.mismatches.len();
        let what = format!("{equal}/{} tokens equal", o.steps);
        r.note("greedy tokens (CPU vs CUDA)", &shape, &what, near_ties);
        for (step, gap, diff) in &o.mismatches {
            println!(
                "    step {step}: arg-max differs; CPU logit gap {gap:.3e}, largest logit diff {diff:.3e}"
            );
        }
        println!("    ({:.1} s)", t.elapsed().as_secs_f64());
    }
    check_replay(&gpu, rng, r)?;
    crate::batched::check(&cpu, &gpu, rng, r)?;
    drop(gpu);
    check_adapter(&cpu, dir.path(), rng, r)
}

/// The model with a random LoRA adapter merged at load: the CUDA forward against the CPU forward with
/// the same adapter, and a note that the adapter changed the CPU's logits (so the parity means something).
fn check_adapter(
    cpu_base: &Llama<CpuBackend>,
    model_dir: &std::path::Path,
    rng: &mut Rng,
    r: &mut Report,
) -> Result<()> {
    let adapter_dir = tempfile::tempdir().map_err(|e| EngineError::io("temp dir", e))?;
    write_smollm2_lora(adapter_dir.path(), 16, rng)?;
    let adapter = Adapter::load(adapter_dir.path())?;
    let cpu = Llama::load_with(CpuBackend::new(), model_dir, Some(&adapter))?;
    let gpu = Llama::load_with(CudaBackend::new(0)?, model_dir, Some(&adapter))?;
    let prompt: Vec<u32> = (0..300)
        .map(|_| 3 + rng.below(SMOLLM2_VOCAB - 3) as u32)
        .collect();
    let shape = "prompt 300, rank-16 LoRA on q/k/v/o/gate/up/down, bf16 KV";
    let last = |m: &Llama<CpuBackend>| -> Result<Vec<f32>> {
        let mut s = SingleSequence::new(m, prompt.len() + 1, 512, KvDtype::Bf16)?;
        Ok(s.feed(&prompt, LogitsMode::LastPerSequence)?.to_vec())
    };
    let (with, without) = (last(&cpu)?, last(cpu_base)?);
    let mut gs = SingleSequence::new(&gpu, prompt.len() + 1, 512, KvDtype::Bf16)?;
    let got = gs.feed(&prompt, LogitsMode::LastPerSequence)?;
    r.check(
        "llama logits with a merged adapter",
        shape,
        got,
        &with,
        TOL_LOGITS,
    );
    let moved = rel_err(&without, &with);
    let what = format!("the adapter moved the CPU logits by {moved:.2e} (relative)");
    r.note(
        "merged adapter changes the model",
        shape,
        &what,
        moved > 10.0 * TOL_LOGITS,
    );
    Ok(())
}

/// Encodes a packed batch of random texts with a random MiniLM-shaped BERT on both backends.
pub fn run_bert(rng: &mut Rng, r: &mut Report) -> Result<()> {
    let dir = tempfile::tempdir().map_err(|e| EngineError::io("temp dir", e))?;
    write_minilm(dir.path(), rng)?;
    let cpu = Bert::load(CpuBackend::new(), dir.path())?;
    let gpu = Bert::load(CudaBackend::new(0)?, dir.path())?;
    for lens in [&[9usize, 128, 40][..], &[256, 256, 1, 17, 200]] {
        let mut starts = vec![0u32];
        for &l in lens {
            starts.push(starts.last().copied().unwrap_or(0) + l as u32);
        }
        let n = *starts.last().unwrap_or(&0) as usize;
        let ids: Vec<u32> = (0..n).map(|_| rng.below(MINILM_VOCAB) as u32).collect();
        let (c, g) = (cpu.encode(&ids, &starts)?, gpu.encode(&ids, &starts)?);
        let lens: Vec<String> = lens.iter().map(usize::to_string).collect();
        let shape = format!("lens {}, f32 weights", lens.join(","));
        r.check("bert encoder hidden states", &shape, &g, &c, TOL_BERT);
    }
    Ok(())
}
