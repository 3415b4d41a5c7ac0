//! Conversion of a llama.cpp GGUF model (`llama` or `qwen2` architecture) into an HF-style model
//! directory, and preparation of the embedder directory.
//!
//! [`convert_gguf_to_hf`] writes `model.safetensors` (bf16, HF tensor names and layouts, [`tensors`]),
//! `config.json`, `generation_config.json`, `tokenizer_config.json` ([`config`]) and `tokenizer.json`
//! ([`tokenizer`]). [`embedder::prepare_embedder_tokenizer`] fixes the shipped embedder tokenizer.

pub mod byte_level;
pub mod config;
pub mod embedder;
pub mod llama3_rope;
pub mod sentencepiece;
pub mod tensors;
pub mod tokenizer;

use std::path::Path;

use serde_json::Value;

use crate::error::{EngineError, Result};
use crate::gguf::GgufFile;
use config::{HfConfig, SpecialTokens};
use tensors::HeadCounts;
use tokenizer::GgufVocab;

/// The files [`convert_gguf_to_hf`] writes, in order.
pub const CONVERTED_FILES: [&str; 5] = [
    "model.safetensors",
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
];

/// Converts the GGUF file at `gguf_path` into an HF-style directory `out_dir` (created if needed).
pub fn convert_gguf_to_hf(gguf_path: &Path, out_dir: &Path) -> Result<()> {
    let gguf = GgufFile::open(gguf_path)?;
    std::fs::create_dir_all(out_dir).map_err(|e| EngineError::io(out_dir, e))?;
    let special = SpecialTokens::from_gguf(&gguf)?;
    let vocab = GgufVocab::from_gguf(&gguf)?;

    // Head counts come from the config so that tensors and config cannot disagree.
    let probe = HfConfig::from_gguf(&gguf, &special, true)?;
    let heads = HeadCounts {
        paired_rows: probe.architecture().pairs_rope_rows(),
        q_heads: probe.num_attention_heads(),
        kv_heads: probe.num_key_value_heads(),
    };
    let has_lm_head = tensors::write_safetensors(&gguf, heads, &out_dir.join("model.safetensors"))?;
    let config = HfConfig::from_gguf(&gguf, &special, !has_lm_head)?;
    write_json(
        &out_dir.join("config.json"),
        &serde_json::to_value(&config).map_err(|e| EngineError::json(out_dir, e))?,
    )?;

    let end_of_text = special.unk.filter(|&id| vocab.control_ids().contains(&id));
    write_json(
        &out_dir.join("generation_config.json"),
        &config::generation_config(&special, end_of_text),
    )?;
    write_json(
        &out_dir.join("tokenizer_config.json"),
        &config::tokenizer_config(&gguf, &config, &special, &vocab)?,
    )?;
    tokenizer::write_tokenizer(&vocab, &out_dir.join("tokenizer.json"))
}

/// Writes pretty-printed JSON followed by a newline.
pub fn write_json(path: &Path, value: &Value) -> Result<()> {
    let mut text = serde_json::to_string_pretty(value).map_err(|e| EngineError::json(path, e))?;
    text.push('\n');
    std::fs::write(path, text).map_err(|e| EngineError::io(path, e))
}
