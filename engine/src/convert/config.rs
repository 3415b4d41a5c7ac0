//! HF `config.json`, `generation_config.json` and `tokenizer_config.json` built from GGUF metadata.
//!
//! The GGUF `llama.*` keys map one to one onto `LlamaForCausalLM` hyper-parameters; special token ids
//! come from `tokenizer.ggml.*`. Only the fields HF Llama loaders read are written.

use serde::Serialize;
use serde_json::{Value, json};

use crate::error::{EngineError, Result};
use crate::gguf::GgufFile;

/// Special tokens of a GGUF vocabulary: ids and their text.
#[derive(Debug, Clone)]
pub struct SpecialTokens {
    /// Beginning-of-sequence id (`tokenizer.ggml.bos_token_id`), if any.
    pub bos: Option<u32>,
    /// End-of-sequence id (`tokenizer.ggml.eos_token_id`).
    pub eos: u32,
    /// Padding id, if any.
    pub pad: Option<u32>,
    /// Unknown-token id, if any.
    pub unk: Option<u32>,
    /// Whether the tokenizer prepends BOS (`tokenizer.ggml.add_bos_token`).
    pub add_bos: bool,
}

impl SpecialTokens {
    /// Reads the special token ids from GGUF metadata.
    pub fn from_gguf(gguf: &GgufFile) -> Result<Self> {
        let id = |key: &str| -> Result<Option<u32>> {
            match gguf.get(key) {
                None => Ok(None),
                Some(v) => v
                    .as_u64()
                    .and_then(|x| u32::try_from(x).ok())
                    .map(Some)
                    .ok_or_else(|| EngineError::metadata(key, "expected a token id")),
            }
        };
        Ok(Self {
            bos: id("tokenizer.ggml.bos_token_id")?,
            eos: id("tokenizer.ggml.eos_token_id")?
                .ok_or_else(|| EngineError::metadata("tokenizer.ggml.eos_token_id", "missing"))?,
            pad: id("tokenizer.ggml.padding_token_id")?,
            unk: id("tokenizer.ggml.unknown_token_id")?,
            add_bos: gguf
                .get("tokenizer.ggml.add_bos_token")
                .and_then(|v| v.as_bool())
                .unwrap_or(false),
        })
    }
}

/// The HF `LlamaForCausalLM` configuration.
#[derive(Debug, Clone, Serialize)]
pub struct LlamaHfConfig {
    architectures: [&'static str; 1],
    model_type: &'static str,
    hidden_size: u64,
    intermediate_size: u64,
    num_hidden_layers: u64,
    num_attention_heads: u64,
    num_key_value_heads: u64,
    head_dim: u64,
    max_position_embeddings: u64,
    rms_norm_eps: f64,
    rope_theta: f64,
    rope_scaling: Option<Value>,
    vocab_size: u64,
    tie_word_embeddings: bool,
    bos_token_id: Option<u32>,
    eos_token_id: u32,
    pad_token_id: Option<u32>,
    hidden_act: &'static str,
    attention_bias: bool,
    mlp_bias: bool,
    attention_dropout: f64,
    initializer_range: f64,
    pretraining_tp: u32,
    use_cache: bool,
    torch_dtype: &'static str,
}

impl LlamaHfConfig {
    /// Builds the config from a `general.architecture = llama` GGUF.
    pub fn from_gguf(gguf: &GgufFile, special: &SpecialTokens, tied: bool) -> Result<Self> {
        let arch = gguf.get_str("general.architecture")?;
        if arch != "llama" {
            return Err(EngineError::Convert(format!("architecture {arch} is not supported (only llama)")));
        }
        let hidden = gguf.get_u64("llama.embedding_length")?;
        let heads = gguf.get_u64("llama.attention.head_count")?;
        let head_dim = match gguf.get("llama.rope.dimension_count").and_then(|v| v.as_u64()) {
            Some(d) => d,
            None if heads > 0 => hidden / heads,
            None => return Err(EngineError::metadata("llama.attention.head_count", "is zero")),
        };
        let vocab_size = match gguf.get("llama.vocab_size").and_then(|v| v.as_u64()) {
            Some(v) => v,
            None => gguf.get_array("tokenizer.ggml.tokens")?.len() as u64,
        };
        Ok(Self {
            architectures: ["LlamaForCausalLM"],
            model_type: "llama",
            hidden_size: hidden,
            intermediate_size: gguf.get_u64("llama.feed_forward_length")?,
            num_hidden_layers: gguf.get_u64("llama.block_count")?,
            num_attention_heads: heads,
            num_key_value_heads: gguf.get_u64("llama.attention.head_count_kv").unwrap_or(heads),
            head_dim,
            max_position_embeddings: gguf.get_u64("llama.context_length")?,
            rms_norm_eps: shortest_f32(gguf.get_f64("llama.attention.layer_norm_rms_epsilon")?),
            rope_theta: shortest_f32(gguf.get_f64("llama.rope.freq_base").unwrap_or(10_000.0)),
            rope_scaling: rope_scaling(gguf)?,
            vocab_size,
            tie_word_embeddings: tied,
            bos_token_id: special.bos,
            eos_token_id: special.eos,
            pad_token_id: special.pad,
            hidden_act: "silu",
            attention_bias: false,
            mlp_bias: false,
            attention_dropout: 0.0,
            initializer_range: 0.02,
            pretraining_tp: 1,
            use_cache: true,
            torch_dtype: "bfloat16",
        })
    }

    /// Number of query heads.
    pub fn num_attention_heads(&self) -> usize {
        self.num_attention_heads as usize
    }

    /// Number of key/value heads.
    pub fn num_key_value_heads(&self) -> usize {
        self.num_key_value_heads as usize
    }
}

/// GGUF stores hyper-parameters as f32; this gives the f64 of the shortest decimal that rounds to the
/// same f32, so `config.json` says `1e-5` rather than `9.999999747378752e-6`.
fn shortest_f32(value: f64) -> f64 {
    let text = (value as f32).to_string();
    text.parse().unwrap_or(value)
}

/// `rope_scaling` from `llama.rope.scaling.*`: null when absent or `none`, `linear` when stated.
fn rope_scaling(gguf: &GgufFile) -> Result<Option<Value>> {
    let Some(kind) = gguf.get("llama.rope.scaling.type").and_then(|v| v.as_str()) else {
        return Ok(None);
    };
    match kind {
        "none" => Ok(None),
        "linear" => {
            let factor = gguf.get_f64("llama.rope.scaling.factor")?;
            Ok(Some(json!({ "rope_type": "linear", "factor": factor })))
        }
        other => Err(EngineError::Convert(format!("rope scaling {other} is not supported by the converter"))),
    }
}

/// `generation_config.json`: end ids and the sampling defaults recommended for SmolLM2-Instruct.
///
/// `<|endoftext|>` (the unknown/document-end token) also ends generation when it is a distinct control
/// token, as llama.cpp treats it.
pub fn generation_config(special: &SpecialTokens, end_of_text: Option<u32>) -> Value {
    let mut eos = vec![special.eos];
    eos.extend(end_of_text.filter(|&id| id != special.eos));
    json!({
        "bos_token_id": special.bos,
        "eos_token_id": eos,
        "pad_token_id": special.pad,
        "do_sample": true,
        "temperature": 0.2,
        "top_p": 0.9,
        "max_new_tokens": 512,
    })
}

/// `tokenizer_config.json`: token strings, the chat template and the context length.
pub fn tokenizer_config(gguf: &GgufFile, special: &SpecialTokens, tokens: &[String]) -> Result<Value> {
    let text = |id: Option<u32>| id.and_then(|i| tokens.get(i as usize)).cloned();
    let chat_template = gguf.get("tokenizer.chat_template").and_then(|v| v.as_str());
    Ok(json!({
        "tokenizer_class": "GPT2Tokenizer",
        "add_bos_token": special.add_bos,
        "add_eos_token": false,
        "add_prefix_space": false,
        "bos_token": text(special.bos),
        "eos_token": text(Some(special.eos)),
        "pad_token": text(special.pad),
        "unk_token": text(special.unk),
        "chat_template": chat_template,
        "clean_up_tokenization_spaces": false,
        "model_max_length": gguf.get_u64("llama.context_length")?,
    }))
}
