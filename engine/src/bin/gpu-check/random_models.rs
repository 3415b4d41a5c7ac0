//! Random checkpoints at real models' shapes, written as HF-style directories (config.json +
//! model.safetensors) so both backends load them through the ordinary model code.

use std::path::Path;

use docqa_engine::weights::WeightDtype;
use docqa_engine::{EngineError, Result};

use crate::inputs::{Rng, tensor_bytes};

/// SmolLM2-135M's vocabulary size.
pub const SMOLLM2_VOCAB: usize = 49152;
/// all-MiniLM-L6-v2's vocabulary size.
pub const MINILM_VOCAB: usize = 30522;

/// A tensor to draw: name, shape, uniform scale, offset.
type Spec = (String, Vec<usize>, f32, f32);

/// Draws every tensor of `specs` and writes them as one safetensors file of `dtype`.
fn write_safetensors(
    path: &Path,
    specs: Vec<Spec>,
    dtype: WeightDtype,
    rng: &mut Rng,
) -> Result<()> {
    let tag = if dtype == WeightDtype::Bf16 {
        "BF16"
    } else {
        "F32"
    };
    let mut header = serde_json::Map::new();
    let mut data = Vec::new();
    for (name, shape, scale, offset) in specs {
        let n: usize = shape.iter().product();
        let values: Vec<f32> = rng.vec(n, scale).iter().map(|v| v + offset).collect();
        let start = data.len();
        data.extend(tensor_bytes(&values, dtype));
        let info =
            serde_json::json!({"dtype": tag, "shape": shape, "data_offsets": [start, data.len()]});
        header.insert(name, info);
    }
    let mut text = serde_json::Value::Object(header).to_string();
    while !text.len().is_multiple_of(8) {
        text.push(' ');
    }
    let mut bytes = (text.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(text.as_bytes());
    bytes.extend_from_slice(&data);
    std::fs::write(path, bytes).map_err(|e| EngineError::io(path, e))
}

fn write_config(dir: &Path, config: serde_json::Value) -> Result<()> {
    let path = dir.join("config.json");
    std::fs::write(&path, config.to_string()).map_err(|e| EngineError::io(path, e))
}

/// The shapes of a Llama-family checkpoint.
#[derive(Debug, Clone, Copy)]
pub struct LlamaShape {
    /// A name for reports and directories.
    pub name: &'static str,
    hidden: usize,
    ffn: usize,
    layers: usize,
    heads: usize,
    kv_heads: usize,
    /// Vocabulary size.
    pub vocab: usize,
    rope_theta: f64,
    max_positions: usize,
}

/// SmolLM2-135M: 30 layers, hidden 576, FFN 1536, 9 heads, 3 KV heads, tied embeddings.
pub const SMOLLM2: LlamaShape = LlamaShape {
    name: "SmolLM2-135M",
    hidden: 576,
    ffn: 1536,
    layers: 30,
    heads: 9,
    kv_heads: 3,
    vocab: SMOLLM2_VOCAB,
    rope_theta: 100000.0,
    max_positions: 8192,
};

/// Llama-3.2-1B: 16 layers, hidden 2048, FFN 8192, 32 heads, 8 KV heads, tied embeddings (its RoPE
/// frequency scaling is left out: speed does not depend on it).
pub const LLAMA32_1B: LlamaShape = LlamaShape {
    name: "Llama-3.2-1B",
    hidden: 2048,
    ffn: 8192,
    layers: 16,
    heads: 32,
    kv_heads: 8,
    vocab: 128256,
    rope_theta: 500000.0,
    max_positions: 131072,
};

/// A random Llama with SmolLM2-135M's shapes, bf16.
pub fn write_smollm2(dir: &Path, rng: &mut Rng) -> Result<()> {
    write_llama(dir, SMOLLM2, rng)
}

/// A random Llama of `shape`, bf16, with tied embeddings.
pub fn write_llama(dir: &Path, shape: LlamaShape, rng: &mut Rng) -> Result<()> {
    let LlamaShape {
        hidden,
        ffn,
        layers,
        heads,
        kv_heads,
        vocab,
        ..
    } = shape;
    write_config(
        dir,
        serde_json::json!({
            "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
            "intermediate_size": ffn, "num_hidden_layers": layers, "num_attention_heads": heads,
            "num_key_value_heads": kv_heads, "rms_norm_eps": 1e-5, "rope_theta": shape.rope_theta,
            "max_position_embeddings": shape.max_positions, "tie_word_embeddings": true,
            "vocab_size": vocab, "eos_token_id": 2, "bos_token_id": 1
        }),
    )?;
    let s = 1.0 / (hidden as f32).sqrt();
    let (q, kv) = (hidden, kv_heads * hidden / heads);
    let mut specs: Vec<Spec> = vec![
        (
            "model.embed_tokens.weight".into(),
            vec![vocab, hidden],
            1.0,
            0.0,
        ),
        ("model.norm.weight".into(), vec![hidden], 0.1, 1.0),
    ];
    for i in 0..layers {
        let p = format!("model.layers.{i}");
        let norm = |name: &str| (format!("{p}.{name}.weight"), vec![hidden], 0.1, 1.0);
        let linear = |name: &str, out: usize, inp: usize, scale: f32| {
            (format!("{p}.{name}.weight"), vec![out, inp], scale, 0.0)
        };
        specs.extend([
            norm("input_layernorm"),
            norm("post_attention_layernorm"),
            linear("self_attn.q_proj", q, hidden, 2.0 * s),
            linear("self_attn.k_proj", kv, hidden, 2.0 * s),
            linear("self_attn.v_proj", kv, hidden, s),
            linear("self_attn.o_proj", hidden, q, s),
            linear("mlp.gate_proj", ffn, hidden, s),
            linear("mlp.up_proj", ffn, hidden, s),
            linear("mlp.down_proj", hidden, ffn, s),
        ]);
    }
    write_safetensors(
        &dir.join("model.safetensors"),
        specs,
        WeightDtype::Bf16,
        rng,
    )
}

/// A random PEFT LoRA adapter of rank `rank` (lora_alpha 2·rank) on the seven projections of every layer
/// of a SmolLM2-135M-shaped model, bf16, with lora_B not zero (so merging it changes the model).
pub fn write_smollm2_lora(dir: &Path, rank: usize, rng: &mut Rng) -> Result<()> {
    let LlamaShape {
        hidden,
        ffn,
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
    write_safetensors(
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
    write_safetensors(&dir.join("model.safetensors"), specs, WeightDtype::F32, rng)
}
