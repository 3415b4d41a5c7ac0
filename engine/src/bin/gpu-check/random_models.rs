//! Random checkpoints for gpu-check: Llamas at SmolLM2-135M's and Llama-3.2-1B's shapes written by the
//! engine's [`docqa_engine::synth`], and a random LoRA adapter and MiniLM-shaped BERT written here
//! through its safetensors writer.

use std::path::Path;

use docqa_engine::synth::named::{LLAMA_3_2_1B, SMOLLM2_135M};
use docqa_engine::synth::{DEFAULT_SHARD_BYTES, Shape, TensorSpec, synthesize, write_safetensors};
use docqa_engine::weights::WeightDtype;
use docqa_engine::{EngineError, Result};

use crate::inputs::Rng;

/// SmolLM2-135M's vocabulary size.
pub const SMOLLM2_VOCAB: usize = SMOLLM2_135M.vocab;
/// all-MiniLM-L6-v2's vocabulary size.
pub const MINILM_VOCAB: usize = 30522;

/// A tensor to draw: name, shape, uniform scale, offset.
type Spec = (String, Vec<usize>, f32, f32);

/// Draws every tensor of `specs` and writes them as one safetensors file of `dtype`.
fn write_specs(path: &Path, specs: Vec<Spec>, dtype: WeightDtype, rng: &mut Rng) -> Result<()> {
    let specs: Vec<TensorSpec> = specs
        .into_iter()
        .map(|(name, shape, scale, offset)| TensorSpec {
            name,
            shape,
            scale,
            offset,
        })
        .collect();
    write_safetensors(path, &specs, dtype, rng)
}

fn write_config(dir: &Path, config: serde_json::Value) -> Result<()> {
    let path = dir.join("config.json");
    std::fs::write(&path, config.to_string()).map_err(|e| EngineError::io(path, e))
}

/// SmolLM2-135M: 30 layers, hidden 576, FFN 1536, 9 heads, 3 KV heads, tied embeddings.
pub const SMOLLM2: Shape = SMOLLM2_135M;

/// Llama-3.2-1B: 16 layers, hidden 2048, FFN 8192, 32 heads, 8 KV heads, tied embeddings (its RoPE
/// frequency scaling is left out: speed does not depend on it).
pub const LLAMA32_1B: Shape = Shape {
    rope_scaling: None,
    ..LLAMA_3_2_1B
};

/// A random Llama with SmolLM2-135M's shapes, bf16.
pub fn write_smollm2(dir: &Path, rng: &mut Rng) -> Result<()> {
    write_llama(dir, SMOLLM2, rng)
}

/// A random Llama of `shape`, bf16.
pub fn write_llama(dir: &Path, shape: Shape, rng: &mut Rng) -> Result<()> {
    synthesize(dir, &shape, rng, DEFAULT_SHARD_BYTES).map(|_| ())
}

/// A random PEFT LoRA adapter of rank `rank` (lora_alpha 2·rank) on the seven projections of every layer
/// of a SmolLM2-135M-shaped model, bf16, with lora_B not zero (so merging it changes the model).
pub fn write_smollm2_lora(dir: &Path, rank: usize, rng: &mut Rng) -> Result<()> {
    let Shape {
        hidden,
        intermediate: ffn,
        layers,
        heads,
        kv_heads,
        ..
    } = SMOLLM2;
    let targets = [
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
    ];
    let config = serde_json::json!({
        "peft_type": "LORA", "r": rank, "lora_alpha": 2 * rank, "target_modules": targets,
        "bias": "none", "fan_in_fan_out": false, "use_dora": false, "use_rslora": false
    });
    let path = dir.join("adapter_config.json");
    std::fs::write(&path, config.to_string()).map_err(|e| EngineError::io(path, e))?;
    let kv = kv_heads * hidden / heads;
    let shapes = [
        ("self_attn.q_proj", hidden, hidden),
        ("self_attn.k_proj", kv, hidden),
        ("self_attn.v_proj", kv, hidden),
        ("self_attn.o_proj", hidden, hidden),
        ("mlp.gate_proj", ffn, hidden),
        ("mlp.up_proj", ffn, hidden),
        ("mlp.down_proj", hidden, ffn),
    ];
    let mut specs: Vec<Spec> = Vec::new();
    for i in 0..layers {
        for (module, out, inp) in shapes {
            let key = format!("base_model.model.model.layers.{i}.{module}");
            let a_scale = 1.0 / (inp as f32).sqrt();
            specs.push((
                format!("{key}.lora_A.weight"),
                vec![rank, inp],
                a_scale,
                0.0,
            ));
            specs.push((format!("{key}.lora_B.weight"), vec![out, rank], 0.1, 0.0));
        }
    }
    write_specs(
        &dir.join("adapter_model.safetensors"),
        specs,
        WeightDtype::Bf16,
        rng,
    )
}

/// A random BERT with all-MiniLM-L6-v2's shapes (6 layers, hidden 384, 12 heads, FFN 1536), f32.
pub fn write_minilm(dir: &Path, rng: &mut Rng) -> Result<()> {
    let (hidden, ffn, layers, heads, max_pos) = (384, 1536, 6, 12, 512);
    write_config(
        dir,
        serde_json::json!({
            "architectures": ["BertModel"], "hidden_size": hidden, "intermediate_size": ffn,
            "num_hidden_layers": layers, "num_attention_heads": heads, "layer_norm_eps": 1e-12,
            "max_position_embeddings": max_pos, "type_vocab_size": 2, "vocab_size": MINILM_VOCAB,
            "hidden_act": "gelu"
        }),
    )?;
    let s = 1.0 / (hidden as f32).sqrt();
    let mut specs: Vec<Spec> = vec![
        (
            "embeddings.word_embeddings.weight".into(),
            vec![MINILM_VOCAB, hidden],
            1.0,
            0.0,
        ),
        (
            "embeddings.position_embeddings.weight".into(),
            vec![max_pos, hidden],
            0.3,
            0.0,
        ),
        (
            "embeddings.token_type_embeddings.weight".into(),
            vec![2, hidden],
            0.3,
            0.0,
        ),
        ("embeddings.LayerNorm.weight".into(), vec![hidden], 0.1, 1.0),
        ("embeddings.LayerNorm.bias".into(), vec![hidden], 0.1, 0.0),
    ];
    for i in 0..layers {
        let p = format!("encoder.layer.{i}");
        let linear = |name: &str, out: usize, inp: usize, scale: f32| -> [Spec; 2] {
            [
                (format!("{p}.{name}.weight"), vec![out, inp], scale, 0.0),
                (format!("{p}.{name}.bias"), vec![out], 0.1, 0.0),
            ]
        };
        let norm = |name: &str| -> [Spec; 2] {
            [
                (
                    format!("{p}.{name}.LayerNorm.weight"),
                    vec![hidden],
                    0.1,
                    1.0,
                ),
                (format!("{p}.{name}.LayerNorm.bias"), vec![hidden], 0.1, 0.0),
            ]
        };
        specs.extend(linear("attention.self.query", hidden, hidden, 2.0 * s));
        specs.extend(linear("attention.self.key", hidden, hidden, 2.0 * s));
        specs.extend(linear("attention.self.value", hidden, hidden, s));
        specs.extend(linear("attention.output.dense", hidden, hidden, s));
        specs.extend(norm("attention.output"));
        specs.extend(linear("intermediate.dense", ffn, hidden, s));
        specs.extend(linear(
            "output.dense",
            hidden,
            ffn,
            1.0 / (ffn as f32).sqrt(),
        ));
        specs.extend(norm("output"));
    }
    write_specs(&dir.join("model.safetensors"), specs, WeightDtype::F32, rng)
}
