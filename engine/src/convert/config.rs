//! HF `config.json`, `generation_config.json` and `tokenizer_config.json` built from GGUF metadata.
//!
//! The GGUF `llama.*` and `qwen2.*` keys map one to one onto `LlamaForCausalLM` and `Qwen2ForCausalLM`
//! hyper-parameters; RoPE scaling comes from `{arch}.rope.scaling.*` (linear, YaRN) or, for Llama 3.x,
//! from the `rope_freqs` tensor ([`super::llama3_rope`]); special token ids come from `tokenizer.ggml.*`.
//! Only the fields HF loaders read are written.

use serde::Serialize;
use serde_json::{Value, json};

use super::tokenizer::{GgufVocab, VocabModel};
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

/// The GGUF architectures the converter reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Architecture {
    /// `llama`: Llama 2 and 3.x, SmolLM2, and Mistral 7B as llama.cpp writes it.
    Llama,
    /// `qwen2`: Qwen2 and Qwen2.5, with q/k/v biases.
    Qwen2,
}

impl Architecture {
    /// The architecture `general.architecture` names.
    pub fn from_gguf(gguf: &GgufFile) -> Result<Self> {
        match gguf.get_str("general.architecture")? {
            "llama" => Ok(Self::Llama),
            "qwen2" => Ok(Self::Qwen2),
            other => Err(EngineError::Convert(format!(
                "architecture {other} is not supported (llama and qwen2 are)"
            ))),
        }
    }

    /// The metadata key `{arch}.{name}`.
    pub fn key(self, name: &str) -> String {
        let arch = match self {
            Self::Llama => "llama",
            Self::Qwen2 => "qwen2",
        };
        format!("{arch}.{name}")
    }

    /// Whether llama.cpp stored the q and k rows of each head in adjacent RoPE pairs (it does for
    /// `llama`, whose RoPE rotates pairs; `qwen2` rotates halves, as HF does, and keeps HF's rows).
    pub fn pairs_rope_rows(self) -> bool {
        self == Self::Llama
    }
}

/// The HF `LlamaForCausalLM` or `Qwen2ForCausalLM` configuration.
#[derive(Debug, Clone, Serialize)]
pub struct HfConfig {
    #[serde(skip)]
    architecture: Architecture,
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
    #[serde(skip_serializing_if = "Option::is_none")]
    use_sliding_window: Option<bool>,
    mlp_bias: bool,
    attention_dropout: f64,
    initializer_range: f64,
    pretraining_tp: u32,
    use_cache: bool,
    torch_dtype: &'static str,
}

impl HfConfig {
    /// Builds the config from a `general.architecture = llama` or `qwen2` GGUF.
    pub fn from_gguf(gguf: &GgufFile, special: &SpecialTokens, tied: bool) -> Result<Self> {
        let arch = Architecture::from_gguf(gguf)?;
        let key = |name: &str| arch.key(name);
        let hidden = gguf.get_u64(&key("embedding_length"))?;
        let heads = gguf.get_u64(&key("attention.head_count"))?;
        let head_dim = match gguf
            .get(&key("rope.dimension_count"))
            .and_then(|v| v.as_u64())
        {
            Some(d) => d,
            None if heads > 0 => hidden / heads,
            None => {
                return Err(EngineError::metadata(
                    &key("attention.head_count"),
                    "is zero",
                ));
            }
        };
        let vocab_size = match gguf.get(&key("vocab_size")).and_then(|v| v.as_u64()) {
            Some(v) => v,
            None => gguf.get_array("tokenizer.ggml.tokens")?.len() as u64,
        };
        let rope_theta = shortest_f32(gguf.get_f64(&key("rope.freq_base")).unwrap_or(10_000.0));
        let (class, model_type) = match arch {
            Architecture::Llama => ("LlamaForCausalLM", "llama"),
            Architecture::Qwen2 => ("Qwen2ForCausalLM", "qwen2"),
        };
        Ok(Self {
            architecture: arch,
            architectures: [class],
            model_type,
            hidden_size: hidden,
            intermediate_size: gguf.get_u64(&key("feed_forward_length"))?,
            num_hidden_layers: gguf.get_u64(&key("block_count"))?,
            num_attention_heads: heads,
            num_key_value_heads: gguf
                .get_u64(&key("attention.head_count_kv"))
                .unwrap_or(heads),
            head_dim,
            max_position_embeddings: gguf.get_u64(&key("context_length"))?,
            rms_norm_eps: shortest_f32(gguf.get_f64(&key("attention.layer_norm_rms_epsilon"))?),
            rope_theta,
            rope_scaling: rope_scaling(gguf, arch, rope_theta, head_dim as usize)?,
            vocab_size,
            tie_word_embeddings: tied,
            bos_token_id: special.bos,
            eos_token_id: special.eos,
            pad_token_id: special.pad,
            hidden_act: "silu",
            attention_bias: arch == Architecture::Qwen2,
            use_sliding_window: (arch == Architecture::Qwen2).then_some(false),
            mlp_bias: false,
            attention_dropout: 0.0,
            initializer_range: 0.02,
            pretraining_tp: 1,
            use_cache: true,
            torch_dtype: "bfloat16",
        })
    }

    /// The GGUF architecture it was built from.
    pub fn architecture(&self) -> Architecture {
        self.architecture
    }

    /// The context the model serves, in tokens.
    pub fn max_position_embeddings(&self) -> u64 {
        self.max_position_embeddings
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

/// `rope_scaling` from `{arch}.rope.scaling.*` (null when absent or `none`; `linear` and `yarn` as
/// stated), else Llama 3's scaling where a `rope_freqs` tensor holds its per-pair divisors.
fn rope_scaling(
    gguf: &GgufFile,
    arch: Architecture,
    rope_theta: f64,
    head_dim: usize,
) -> Result<Option<Value>> {
    let Some(kind) = gguf
        .get(&arch.key("rope.scaling.type"))
        .and_then(|v| v.as_str())
    else {
        return match gguf.tensor_info(super::llama3_rope::ROPE_FREQS) {
            Some(_) => {
                let divisors = gguf.tensor_f32(super::llama3_rope::ROPE_FREQS)?;
                super::llama3_rope::scaling_of(&divisors, rope_theta, head_dim).map(Some)
            }
            None => Ok(None),
        };
    };
    let factor = || gguf.get_f64(&arch.key("rope.scaling.factor"));
    match kind {
        "none" => Ok(None),
        "linear" => Ok(Some(json!({ "rope_type": "linear", "factor": factor()? }))),
        "yarn" => Ok(Some(json!({
            "rope_type": "yarn",
            "factor": factor()?,
            "original_max_position_embeddings":
                gguf.get_u64(&arch.key("rope.scaling.original_context_length"))?,
        }))),
        other => Err(EngineError::Convert(format!(
            "rope scaling {other} is not supported by the converter"
        ))),
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
pub fn tokenizer_config(
    gguf: &GgufFile,
    config: &HfConfig,
    special: &SpecialTokens,
    vocab: &GgufVocab,
) -> Result<Value> {
    let text = |id: Option<u32>| id.and_then(|i| vocab.tokens.get(i as usize)).cloned();
    let (class, prefix_space) = match vocab.model {
        VocabModel::ByteLevel { .. } => ("GPT2Tokenizer", false),
        VocabModel::SentencePiece {
            add_space_prefix, ..
        } => ("LlamaTokenizer", add_space_prefix),
    };
    let chat_template = gguf.get("tokenizer.chat_template").and_then(|v| v.as_str());
    Ok(json!({
        "tokenizer_class": class,
        "add_bos_token": special.add_bos,
        "add_eos_token": false,
        "add_prefix_space": prefix_space,
        "bos_token": text(special.bos),
        "eos_token": text(Some(special.eos)),
        "pad_token": text(special.pad),
        "unk_token": text(special.unk),
        "chat_template": chat_template,
        "clean_up_tokenization_spaces": false,
        "model_max_length": config.max_position_embeddings(),
    }))
}
