//! The model families docqa loads, against Hugging Face transformers: tiny random checkpoints of each
//! family's exact architecture in `tests/golden/families/` (made by `tests/reference/families_golden.py`,
//! which ran them in float32 with eager attention), on the CPU backend.
//!
//! - `llama3`: Llama 3.1's `llama3` RoPE scaling, untied LM head;
//! - `qwen2-yarn`: Qwen2's q/k/v biases and YaRN scaling, weights in two shards with an index;
//! - `mistral-sliding`: Mistral's sliding window on every layer (8 tokens of 40);
//! - `qwen2-sliding`: Qwen2's `use_sliding_window` from `max_window_layers` on (the second layer only).
//!
//! Tolerance. The weights are bf16 on both sides; docqa's CPU matmuls round activations to bf16 where
//! the CPU has AVX-512 BF16, which the reference measured on the same models and tokens (`meta.json`,
//! `bf16_linear_inputs_shift`): at most 0.21 over logits spanning about -4.2 to 3.9. We allow max
//! |Δlogit| ≤ 0.3 (on an AVX2 machine, which keeps activations in f32, the differences are about 2e-5;
//! gpu-check runs the same checkpoints on CUDA within the same bound). Switching each family's feature
//! off moves the reference logits by 3.4 to 4.5, so the same comparison against the ablated logits must
//! miss by more than ten times the tolerance: the feature is what is being checked.

use crate::common;

use docqa_engine::backend::cpu::CpuBackend;
use docqa_engine::models::llama::Llama;

use common::families::{
    all_at_once, assert_matches_transformers, feed, golden, prefill_then_decode, tokens,
};

/// Largest |Δlogit| allowed against transformers (see the header).
const TOLERANCE: f32 = 0.3;

fn load(family: &str) -> Llama<CpuBackend> {
    Llama::load(CpuBackend::new(), &golden().join(family)).expect("load the family's checkpoint")
}

/// Logits of every position, the tokens fed in `pieces` (prefill, then one token at a time).
fn logits(family: &str, pieces: &[usize]) -> Vec<f32> {
    feed(&load(family), &tokens(), pieces)
}

fn matches_transformers(family: &str, pieces: &[usize]) {
    assert_matches_transformers(family, &logits(family, pieces), TOLERANCE);
}

#[test]
fn llama3_rope_scaling_gives_the_logits_of_transformers() {
    matches_transformers("llama3", &all_at_once());
}

#[test]
fn qwen2_with_biases_yarn_and_sharded_weights_gives_the_logits_of_transformers() {
    assert!(
        golden()
            .join("qwen2-yarn/model.safetensors.index.json")
            .exists()
    );
    matches_transformers("qwen2-yarn", &all_at_once());
}

#[test]
fn mistral_sliding_window_gives_the_logits_of_transformers_in_prefill_and_decode() {
    matches_transformers("mistral-sliding", &all_at_once());
    matches_transformers("mistral-sliding", &prefill_then_decode());
}

#[test]
fn qwen2_sliding_window_on_its_upper_layers_gives_the_logits_of_transformers() {
    matches_transformers("qwen2-sliding", &all_at_once());
    matches_transformers("qwen2-sliding", &prefill_then_decode());
}

#[test]
fn the_configs_read_as_transformers_read_them() {
    let llama3 = load("llama3").config;
    assert!(!llama3.tie_word_embeddings && llama3.sliding_window.is_none());
    let mistral = load("mistral-sliding").config;
    assert_eq!(
        (mistral.sliding_window, mistral.sliding_layers),
        (Some(8), vec![true, true])
    );
    let qwen = load("qwen2-sliding").config;
    assert_eq!(
        (qwen.sliding_window, qwen.sliding_layers, qwen.qkv_bias),
        (Some(6), vec![false, true], true)
    );
    assert_eq!(load("qwen2-yarn").config.sliding_window, None);
}
