//! The named shapes of `docqa models synth --shape`, with the config values each family publishes in its
//! HF `config.json` (the instruct releases' end-of-sequence ids).

use super::shape::{Family, Llama3Rope, Shape};

const LLAMA3_SPECIALS: &[(u32, &str)] = &[
    (128000, "<|begin_of_text|>"),
    (128001, "<|end_of_text|>"),
    (128006, "<|start_header_id|>"),
    (128007, "<|end_header_id|>"),
    (128008, "<|eom_id|>"),
    (128009, "<|eot_id|>"),
];

const CHATML_SPECIALS: &[(u32, &str)] =
    &[(0, "<|endoftext|>"), (1, "<|im_start|>"), (2, "<|im_end|>")];

/// Llama-3.1-8B.
pub const LLAMA_3_1_8B: Shape = Shape {
    name: "llama-3.1-8b",
    family: Family::Llama,
    hidden: 4096,
    intermediate: 14336,
    layers: 32,
    heads: 32,
    kv_heads: 8,
    head_dim: None,
    rms_norm_eps: 1e-5,
    rope_theta: 500_000.0,
    rope_scaling: Some(Llama3Rope {
        factor: 8.0,
        low_freq_factor: 1.0,
        high_freq_factor: 4.0,
        original_max_position_embeddings: 8192,
    }),
    max_position_embeddings: 131_072,
    sliding_window: None,
    window_layers: None,
    vocab: 128_256,
    tied: false,
    bos: 128_000,
    eos: &[128_001, 128_008, 128_009],
    special_tokens: LLAMA3_SPECIALS,
};

/// Llama-3.2-1B.
pub const LLAMA_3_2_1B: Shape = Shape {
    name: "llama-3.2-1b",
    hidden: 2048,
    intermediate: 8192,
    layers: 16,
    head_dim: Some(64),
    rope_scaling: Some(Llama3Rope {
        factor: 32.0,
        low_freq_factor: 1.0,
        high_freq_factor: 4.0,
        original_max_position_embeddings: 8192,
    }),
    tied: true,
    ..LLAMA_3_1_8B
};

/// Qwen2.5-7B.
pub const QWEN_2_5_7B: Shape = Shape {
    name: "qwen2.5-7b",
    family: Family::Qwen2,
    hidden: 3584,
    intermediate: 18944,
    layers: 28,
    heads: 28,
    kv_heads: 4,
    head_dim: None,
    rms_norm_eps: 1e-6,
    rope_theta: 1_000_000.0,
    rope_scaling: None,
    max_position_embeddings: 32768,
    sliding_window: Some(131_072),
    window_layers: Some((false, 28)),
    vocab: 152_064,
    tied: false,
    bos: 151_643,
    eos: &[151_645],
    special_tokens: &[
        (151_643, "<|endoftext|>"),
        (151_644, "<|im_start|>"),
        (151_645, "<|im_end|>"),
    ],
};

/// Mistral-7B (v0.1).
pub const MISTRAL_7B: Shape = Shape {
    name: "mistral-7b",
    family: Family::Mistral,
    hidden: 4096,
    intermediate: 14336,
    layers: 32,
    heads: 32,
    kv_heads: 8,
    head_dim: None,
    rms_norm_eps: 1e-5,
    rope_theta: 10_000.0,
    rope_scaling: None,
    max_position_embeddings: 32768,
    sliding_window: Some(4096),
    window_layers: None,
    vocab: 32000,
    tied: false,
    bos: 1,
    eos: &[2],
    special_tokens: &[(0, "<unk>"), (1, "<s>"), (2, "</s>")],
};

/// SmolLM2-135M (the instruct release's ids).
pub const SMOLLM2_135M: Shape = Shape {
    name: "smollm2-135m",
    family: Family::Llama,
    hidden: 576,
    intermediate: 1536,
    layers: 30,
    heads: 9,
    kv_heads: 3,
    head_dim: None,
    rms_norm_eps: 1e-5,
    rope_theta: 100_000.0,
    rope_scaling: None,
    max_position_embeddings: 8192,
    sliding_window: None,
    window_layers: None,
    vocab: 49152,
    tied: true,
    bos: 1,
    eos: &[2],
    special_tokens: CHATML_SPECIALS,
};

/// Every named shape.
pub const SHAPES: &[Shape] = &[
    LLAMA_3_1_8B,
    LLAMA_3_2_1B,
    QWEN_2_5_7B,
    MISTRAL_7B,
    SMOLLM2_135M,
];

/// The named shape called `name`.
pub fn shape_named(name: &str) -> Option<Shape> {
    SHAPES.iter().copied().find(|s| s.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_named_shape_counts_the_parameters_its_family_publishes() {
        let published = [
            ("llama-3.1-8b", 8.03e9),
            ("llama-3.2-1b", 1.24e9),
            ("qwen2.5-7b", 7.62e9),
            ("mistral-7b", 7.24e9),
            ("smollm2-135m", 134.5e6),
        ];
        for (name, count) in published {
            let shape = shape_named(name).expect("a named shape");
            shape.validate().expect("a valid shape");
            let params = shape.parameters() as f64;
            assert!(
                (params / count - 1.0).abs() < 0.01,
                "{name}: {params} parameters, published {count}"
            );
        }
        assert_eq!(SHAPES.len(), published.len());
    }

    #[test]
    fn each_named_shape_writes_the_config_its_family_publishes() {
        let c = LLAMA_3_1_8B.config_json();
        assert_eq!(c["architectures"][0], "LlamaForCausalLM");
        assert_eq!(c["rope_scaling"]["rope_type"], "llama3");
        assert_eq!(c["rope_scaling"]["factor"], 8.0);
        assert_eq!(
            c["eos_token_id"],
            serde_json::json!([128001, 128008, 128009])
        );
        assert_eq!(c["tie_word_embeddings"], false);
        assert!(c.get("head_dim").is_none());
        let c = LLAMA_3_2_1B.config_json();
        assert_eq!(
            (c["head_dim"].as_u64(), c["tie_word_embeddings"].as_bool()),
            (Some(64), Some(true))
        );
        assert_eq!(c["rope_scaling"]["factor"], 32.0);
        let c = QWEN_2_5_7B.config_json();
        assert_eq!(c["model_type"], "qwen2");
        assert_eq!(
            (
                c["sliding_window"].as_u64(),
                c["use_sliding_window"].as_bool()
            ),
            (Some(131072), Some(false))
        );
        assert_eq!(
            (c["max_window_layers"].as_u64(), c["eos_token_id"].as_u64()),
            (Some(28), Some(151645))
        );
        assert_eq!(c["rms_norm_eps"], 1e-6);
        assert!(
            QWEN_2_5_7B
                .tensors()
                .iter()
                .any(|t| t.name == "model.layers.0.self_attn.k_proj.bias")
        );
        let c = MISTRAL_7B.config_json();
        assert_eq!(
            (c["sliding_window"].as_u64(), c["rope_theta"].as_f64()),
            (Some(4096), Some(10000.0))
        );
        assert!(
            MISTRAL_7B
                .tensors()
                .iter()
                .any(|t| t.name == "lm_head.weight")
        );
        assert!(
            !SMOLLM2_135M
                .tensors()
                .iter()
                .any(|t| t.name == "lm_head.weight")
        );
        assert_eq!(
            SMOLLM2_135M.config_json()["rope_scaling"],
            serde_json::Value::Null
        );
    }
}
