//! End-to-end parity: a Llama with SmolLM2-135M's shapes and random bf16 weights (written to a temp
//! directory and loaded on both backends), greedy decoding from random prompts.
//!
//! Both models are fed the CPU's token at every step (teacher forcing), so one disagreement does not
//! hide the steps after it. A step whose arg-max differs counts as a near-tie when the CPU's logit gap
//! between its pick and the GPU's pick is within twice that step's largest logit difference.

use std::path::Path;

use docqa_engine::backend::cpu::CpuBackend;
use docqa_engine::backend::cuda::CudaBackend;
use docqa_engine::backend::{Backend, KvDtype};
use docqa_engine::models::LogitsMode;
use docqa_engine::models::generate::{SingleSequence, argmax};
use docqa_engine::models::llama::Llama;
use docqa_engine::weights::WeightDtype;
use docqa_engine::{EngineError, Result};

use crate::inputs::{Rng, tensor_bytes};
use crate::report::{Report, rel_err};

const HIDDEN: usize = 576;
const FFN: usize = 1536;
const LAYERS: usize = 30;
const HEADS: usize = 9;
const KV_HEADS: usize = 3;
const VOCAB: usize = 49152;
const HEAD_DIM: usize = HIDDEN / HEADS;

/// Tolerance on the logits after a whole forward pass (bf16 matmuls through 30 layers).
const TOL_LOGITS: f64 = 2e-2;

/// Writes config.json and model.safetensors of a random SmolLM2-shaped model into `dir`.
fn write_model(dir: &Path, rng: &mut Rng) -> Result<()> {
    let config = serde_json::json!({
        "architectures": ["LlamaForCausalLM"], "hidden_size": HIDDEN, "intermediate_size": FFN,
        "num_hidden_layers": LAYERS, "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS,
        "rms_norm_eps": 1e-5, "rope_theta": 100000.0, "max_position_embeddings": 8192,
        "tie_word_embeddings": true, "vocab_size": VOCAB, "eos_token_id": 2, "bos_token_id": 1
    });
    let io = |e| EngineError::io(dir, e);
    std::fs::write(dir.join("config.json"), config.to_string()).map_err(io)?;
    let s = 1.0 / (HIDDEN as f32).sqrt();
    let (q, kv) = (HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM);
    let mut specs: Vec<(String, Vec<usize>, f32, f32)> = vec![
        (
            "model.embed_tokens.weight".into(),
            vec![VOCAB, HIDDEN],
            1.0,
            0.0,
        ),
        ("model.norm.weight".into(), vec![HIDDEN], 0.1, 1.0),
    ];
    for i in 0..LAYERS {
        let p = format!("model.layers.{i}");
        specs.extend([
            (
                format!("{p}.input_layernorm.weight"),
                vec![HIDDEN],
                0.1,
                1.0,
            ),
            (
                format!("{p}.post_attention_layernorm.weight"),
                vec![HIDDEN],
                0.1,
                1.0,
            ),
            (
                format!("{p}.self_attn.q_proj.weight"),
                vec![q, HIDDEN],
                2.0 * s,
                0.0,
            ),
            (
                format!("{p}.self_attn.k_proj.weight"),
                vec![kv, HIDDEN],
                2.0 * s,
                0.0,
            ),
            (
                format!("{p}.self_attn.v_proj.weight"),
                vec![kv, HIDDEN],
                s,
                0.0,
            ),
            (
                format!("{p}.self_attn.o_proj.weight"),
                vec![HIDDEN, q],
                s,
                0.0,
            ),
            (
                format!("{p}.mlp.gate_proj.weight"),
                vec![FFN, HIDDEN],
                s,
                0.0,
            ),
            (format!("{p}.mlp.up_proj.weight"), vec![FFN, HIDDEN], s, 0.0),
            (
                format!("{p}.mlp.down_proj.weight"),
                vec![HIDDEN, FFN],
                s,
                0.0,
            ),
        ]);
    }
    let mut header = serde_json::Map::new();
    let mut data = Vec::new();
    for (name, shape, scale, offset) in specs {
        let n: usize = shape.iter().product();
        let values: Vec<f32> = rng.vec(n, scale).iter().map(|v| v + offset).collect();
        let start = data.len();
        data.extend(tensor_bytes(&values, WeightDtype::Bf16));
        let info = serde_json::json!({"dtype": "BF16", "shape": shape, "data_offsets": [start, data.len()]});
        header.insert(name, info);
    }
    let mut text = serde_json::Value::Object(header).to_string();
    while !text.len().is_multiple_of(8) {
        text.push(' ');
    }
    let mut bytes = (text.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(text.as_bytes());
    bytes.extend_from_slice(&data);
    std::fs::write(dir.join("model.safetensors"), bytes).map_err(io)
}

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

/// Runs the end-to-end check and adds its rows to the report.
pub fn run(rng: &mut Rng, r: &mut Report) -> Result<()> {
    let dir = tempfile::tempdir().map_err(|e| EngineError::io("temp dir", e))?;
    let t = std::time::Instant::now();
    write_model(dir.path(), rng)?;
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
    ];
    for (len, dtype) in cases {
        let prompt: Vec<u32> = (0..len).map(|_| 3 + rng.below(VOCAB - 3) as u32).collect();
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
    gpu.backend.synchronize()?;
    let _ = gpu.backend.name();
    Ok(())
}
