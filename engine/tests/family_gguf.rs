//! `docqa models convert` on GGUFs of the Llama 3 and Qwen2 architectures: two golden families
//! (`family_parity.rs`) written as llama.cpp lays them out (`tests/golden/families_gguf/`, made by
//! `tests/reference/families_gguf.py` with gguf-py), converted back to HF directories and run on the CPU
//! backend against transformers' logits of the same weights, with `family_parity.rs`'s tolerance.
//!
//! - `llama3.gguf`: q and k rows in adjacent RoPE pairs, Llama 3's scaling only as the `rope_freqs`
//!   tensor, the `llama-bpe` pre-tokenizer, BOS added;
//! - `qwen2-yarn.gguf`: rows as HF keeps them, q/k/v biases, YaRN as `qwen2.rope.scaling.*`, the `qwen2`
//!   pre-tokenizer.

use std::path::{Path, PathBuf};

use crate::common;

use docqa_engine::backend::cpu::CpuBackend;
use docqa_engine::convert::convert_gguf_to_hf;
use docqa_engine::models::llama::Llama;
use docqa_engine::text::TextTokenizer;

use common::families::{all_at_once, assert_matches_transformers, feed, tokens};

/// Largest |Δlogit| allowed against transformers (`family_parity.rs`'s bound).
const TOLERANCE: f32 = 0.3;

fn gguf(family: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(format!("../tests/golden/families_gguf/{family}.gguf"))
}

/// The HF directory `docqa models convert` makes of the family's GGUF, in a folder of the test's own.
fn converted(family: &str, test: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("family-gguf-{family}-{test}"));
    let _ = std::fs::remove_dir_all(&dir);
    convert_gguf_to_hf(&gguf(family), &dir).expect("convert the GGUF");
    dir
}

fn config(dir: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap()
}

fn matches_transformers(family: &str, dir: &Path) {
    let model = Llama::load(CpuBackend::new(), dir).expect("load the converted directory");
    let got = feed(&model, &tokens(), &all_at_once());
    assert_matches_transformers(family, &got, TOLERANCE);
}

#[test]
fn a_llama_3_gguf_converts_to_the_logits_of_transformers_with_its_rope_scaling_recovered() {
    let dir = converted("llama3", "logits");
    let rope = &config(&dir)["rope_scaling"];
    assert_eq!(rope["rope_type"], "llama3");
    assert_eq!(rope["factor"], 8.0);
    assert_eq!(rope["low_freq_factor"], 1.0);
    assert_eq!(rope["high_freq_factor"], 4.0);
    assert_eq!(rope["original_max_position_embeddings"], 64);
    matches_transformers("llama3", &dir);
}

#[test]
fn a_qwen2_gguf_converts_to_the_logits_of_transformers_with_biases_and_yarn() {
    let dir = converted("qwen2-yarn", "logits");
    let config = config(&dir);
    assert_eq!(config["architectures"][0], "Qwen2ForCausalLM");
    assert_eq!(config["rope_scaling"]["rope_type"], "yarn");
    assert_eq!(config["rope_scaling"]["factor"], 4.0);
    assert_eq!(
        config["rope_scaling"]["original_max_position_embeddings"],
        32
    );
    assert_eq!(config["use_sliding_window"], false);
    matches_transformers("qwen2-yarn", &dir);
}

/// Tokens of `text` under the converted tokenizer, each as the text it stands for.
fn pieces(dir: &Path, text: &str, special: bool) -> (Vec<u32>, Vec<String>) {
    let tokenizer = TextTokenizer::from_model_dir(dir).expect("tokenizer.json");
    let ids = tokenizer.encode(text, special).expect("encode");
    let texts = ids
        .iter()
        .map(|&id| tokenizer.decode(&[id]).expect("decode"))
        .collect();
    (ids, texts)
}

// The fixtures' vocabulary is the 256 bytes and three merges, `Ġ t`, `1 2` and `12 3`: a merge shows
// where the pre-tokenizer did not split.

#[test]
fn llama_3s_pre_tokenizer_keeps_up_to_three_digits_together_and_adds_bos() {
    let dir = converted("llama3", "tokens");
    let (ids, texts) = pieces(&dir, "12345 to", true);
    assert_eq!(ids[0], 1, "BOS first: {ids:?}");
    assert_eq!(texts[1..], ["123", "4", "5", " t", "o"], "{ids:?}");
}

#[test]
fn qwen2s_pre_tokenizer_splits_every_digit_and_adds_no_bos() {
    let dir = converted("qwen2-yarn", "tokens");
    let (ids, texts) = pieces(&dir, "12345 to", true);
    assert_eq!(texts, ["1", "2", "3", "4", "5", " t", "o"], "{ids:?}");
}
