//! The model families against Hugging Face transformers on the GPU: the tiny checkpoints of
//! `tests/golden/families/` (Llama 3.1's RoPE scaling, Qwen2 with biases, YaRN and sharded weights,
//! Mistral's sliding window, Qwen2's sliding window on its upper layers) loaded on the CUDA backend,
//! their logits at every position against the float32 logits transformers gave, in one prefill and in
//! a prefill followed by single-token steps. The CPU test (`engine/tests/family_parity.rs`) allows
//! max |Δlogit| ≤ 0.3; here the same bound is written relative to the largest reference logit.
//!
//! The goldens are read from `$DOCQA_GOLDEN_DIR`, else `tests/golden/families` under the current
//! directory (the repository root); without them the check says so and is skipped.

use std::path::PathBuf;

use docqa_engine::Result;
use docqa_engine::backend::KvDtype;
use docqa_engine::backend::cuda::CudaBackend;
use docqa_engine::models::LogitsMode;
use docqa_engine::models::generate::SingleSequence;
use docqa_engine::models::llama::Llama;
use docqa_engine::weights::Weights;

use crate::report::{Report, rel_err};

/// The CPU test's bound on |Δlogit|.
const TOLERANCE: f64 = 0.3;
const FAMILIES: [&str; 4] = ["llama3", "qwen2-yarn", "mistral-sliding", "qwen2-sliding"];

pub fn golden_dir() -> PathBuf {
    std::env::var_os("DOCQA_GOLDEN_DIR")
        .map_or_else(|| PathBuf::from("tests/golden/families"), PathBuf::from)
}

pub fn tokens(dir: &std::path::Path) -> Result<Vec<u32>> {
    let path = dir.join("meta.json");
    let text =
        std::fs::read_to_string(&path).map_err(|e| docqa_engine::EngineError::io(&path, e))?;
    let meta: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| docqa_engine::EngineError::json(&path, e))?;
    Ok(meta["tokens"]
        .as_array()
        .map(|ids| {
            ids.iter()
                .filter_map(|v| v.as_u64())
                .map(|v| v as u32)
                .collect()
        })
        .unwrap_or_default())
}

/// Logits of every position, the tokens fed in `pieces`.
fn logits(model: &Llama<CudaBackend>, tokens: &[u32], pieces: &[usize]) -> Result<Vec<f32>> {
    let mut seq = SingleSequence::new(model, 64, 64, KvDtype::F32)?;
    let mut out = Vec::new();
    let mut at = 0;
    for &n in pieces {
        out.extend_from_slice(seq.feed(&tokens[at..at + n], LogitsMode::All)?);
        at += n;
    }
    Ok(out)
}

/// Adds one row per family and feeding to the report.
pub fn run(r: &mut Report) -> Result<()> {
    let dir = golden_dir();
    if !dir.join("meta.json").exists() {
        println!("families: no goldens at {} (skipped)", dir.display());
        return Ok(());
    }
    let tokens = tokens(&dir)?;
    let reference = Weights::open_files(&[dir.join("logits.safetensors")])?;
    let mut decode = vec![20];
    decode.resize(tokens.len() - 19, 1);
    for family in FAMILIES {
        let model = Llama::load(CudaBackend::new(0)?, &dir.join(family))?;
        let want = reference.get(family)?.to_f32();
        let peak = want.iter().fold(0f64, |m, v| m.max(v.abs() as f64));
        for (how, pieces) in [
            ("one prefill", vec![tokens.len()]),
            ("prefill 20, then 1 by 1", decode.clone()),
        ] {
            let got = logits(&model, &tokens, &pieces)?;
            let shape = format!("{family}, {} tokens, {how}", tokens.len());
            r.row(
                "logits vs transformers",
                &shape,
                rel_err(&got, &want),
                TOLERANCE / peak,
            );
        }
    }
    Ok(())
}
