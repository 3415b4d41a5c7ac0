//! Model configuration: a serde mirror of the fields of HF `config.json` the engine uses.
//!
//! [`LlamaConfig`] covers the Llama family (`LlamaForCausalLM`, `MistralForCausalLM`, `Qwen2ForCausalLM`),
//! [`BertConfig`] the embedder. RoPE scaling (none / linear / NTK-aware dynamic / YaRN) is parsed from
//! `rope_scaling` in either spelling (`type` or `rope_type`); [`RopeScaling::inv_freq`] turns it into the
//! inverse frequencies, following the formulas of the respective papers as HF implements them.

use std::path::Path;

use serde::Deserialize;

use crate::error::{EngineError, Result};

mod rope;

use rope::RawRopeScaling;
pub use rope::{RopeFreqs, RopeScaling, yarn_mscale};

/// Architectures [`LlamaConfig`] accepts (the `architectures[0]` of `config.json`).
pub const LLAMA_ARCHITECTURES: &[&str] =
    &["LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM"];
/// Architectures [`BertConfig`] accepts.
pub const BERT_ARCHITECTURES: &[&str] = &["BertModel", "BertForMaskedLM", "BertForPreTraining"];

/// A token id or a list of them (HF allows both for `eos_token_id`).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(untagged)]
pub enum TokenIds {
    /// A single id.
    One(u32),
    /// Several ids.
    Many(Vec<u32>),
}

impl TokenIds {
    /// The ids as a vector.
    pub fn to_vec(&self) -> Vec<u32> {
        match self {
            TokenIds::One(id) => vec![*id],
            TokenIds::Many(ids) => ids.clone(),
        }
    }
}

#[derive(Debug, Deserialize)]
struct RawLlamaConfig {
    #[serde(default)]
    architectures: Vec<String>,
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    num_key_value_heads: Option<usize>,
    head_dim: Option<usize>,
    #[serde(default = "default_rms_eps")]
    rms_norm_eps: f64,
    #[serde(default = "default_rope_theta")]
    rope_theta: f64,
    rope_scaling: Option<RawRopeScaling>,
    max_position_embeddings: usize,
    sliding_window: Option<usize>,
    use_sliding_window: Option<bool>,
    max_window_layers: Option<usize>,
    layer_types: Option<Vec<String>>,
    #[serde(default)]
    tie_word_embeddings: bool,
    vocab_size: usize,
    bos_token_id: Option<u32>,
    eos_token_id: Option<TokenIds>,
    #[serde(default)]
    attention_bias: bool,
}

fn default_rms_eps() -> f64 {
    1e-6
}
fn default_rope_theta() -> f64 {
    10_000.0
}

/// The Llama-family decoder configuration.
#[derive(Debug, Clone)]
pub struct LlamaConfig {
    /// `architectures[0]` of the config.
    pub architecture: String,
    /// Model width.
    pub hidden_size: usize,
    /// MLP width.
    pub intermediate_size: usize,
    /// Decoder layers.
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key/value heads (GQA).
    pub num_key_value_heads: usize,
    /// Width of one head.
    pub head_dim: usize,
    /// RMSNorm epsilon.
    pub rms_norm_eps: f32,
    /// RoPE base.
    pub rope_theta: f64,
    /// RoPE scaling.
    pub rope_scaling: RopeScaling,
    /// Context window in tokens.
    pub max_position_embeddings: usize,
    /// Sliding-window attention (Mistral, Qwen2 with `use_sliding_window`): a query at position `p`
    /// sees keys `p + 1 - window..=p` on the layers [`LlamaConfig::sliding_layers`] marks; None when no
    /// layer uses one.
    pub sliding_window: Option<usize>,
    /// `[num_hidden_layers]` whether each layer attends through [`LlamaConfig::sliding_window`].
    pub sliding_layers: Vec<bool>,
    /// Whether the LM head is the embedding matrix.
    pub tie_word_embeddings: bool,
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Beginning-of-sequence token.
    pub bos_token_id: Option<u32>,
    /// End-of-sequence tokens.
    pub eos_token_ids: Vec<u32>,
    /// Whether q/k/v projections carry a bias (Qwen2).
    pub qkv_bias: bool,
}

impl LlamaConfig {
    /// Reads and validates `config.json`.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = read(path)?;
        Self::from_json(&text).map_err(|reason| config_error(path, reason))
    }

    pub(crate) fn from_json(text: &str) -> std::result::Result<Self, String> {
        let raw: RawLlamaConfig = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let architecture = raw.architectures.first().cloned().unwrap_or_default();
        let heads = raw.num_attention_heads;
        let kv_heads = raw.num_key_value_heads.unwrap_or(heads);
        if heads == 0 || kv_heads == 0 || !heads.is_multiple_of(kv_heads) {
            return Err(format!(
                "{heads} attention heads cannot be grouped over {kv_heads} KV heads"
            ));
        }
        let head_dim = raw.head_dim.unwrap_or(raw.hidden_size / heads);
        if head_dim == 0 || !head_dim.is_multiple_of(2) {
            return Err(format!("head_dim {head_dim} must be even and positive"));
        }
        let sliding_layers = sliding_layers(&raw, &architecture)?;
        let sliding_window = raw
            .sliding_window
            .filter(|_| sliding_layers.contains(&true));
        if sliding_window == Some(0) {
            return Err("sliding_window must be positive".into());
        }
        Ok(LlamaConfig {
            rope_scaling: RopeScaling::from_raw(raw.rope_scaling, raw.max_position_embeddings)?,
            qkv_bias: raw.attention_bias || architecture == "Qwen2ForCausalLM",
            architecture,
            hidden_size: raw.hidden_size,
            intermediate_size: raw.intermediate_size,
            num_hidden_layers: raw.num_hidden_layers,
            num_attention_heads: heads,
            num_key_value_heads: kv_heads,
            head_dim,
            rms_norm_eps: raw.rms_norm_eps as f32,
            rope_theta: raw.rope_theta,
            max_position_embeddings: raw.max_position_embeddings,
            sliding_window,
            sliding_layers,
            tie_word_embeddings: raw.tie_word_embeddings,
            vocab_size: raw.vocab_size,
            bos_token_id: raw.bos_token_id,
            eos_token_ids: raw.eos_token_id.map(|e| e.to_vec()).unwrap_or_default(),
        })
    }

    /// Reads `config.json`, refusing architectures outside [`LLAMA_ARCHITECTURES`] with
    /// [`EngineError::UnknownArchitecture`].
    pub fn load(path: &Path) -> Result<Self> {
        check_architecture(path, LLAMA_ARCHITECTURES)?;
        Self::from_file(path)
    }

    /// The context the model serves: `max_position_embeddings`, or the trained context stretched by a
    /// YaRN `rope_scaling` when that reaches further (Qwen2.5's card adds YaRN with factor 4 over its
    /// 32,768 tokens and leaves `max_position_embeddings` as it was: 131,072 tokens, as vLLM reads it).
    pub fn context_window(&self) -> usize {
        match self.rope_scaling {
            RopeScaling::Yarn {
                factor,
                original_max_position_embeddings,
                ..
            } => self
                .max_position_embeddings
                .max((original_max_position_embeddings as f64 * factor) as usize),
            _ => self.max_position_embeddings,
        }
    }

    /// RoPE frequencies for a batch whose longest sequence is `seq_len` tokens.
    pub fn rope_freqs(&self, seq_len: usize) -> RopeFreqs {
        self.rope_scaling.inv_freq(
            self.head_dim,
            self.rope_theta,
            self.max_position_embeddings,
            seq_len,
        )
    }
}

/// Which layers attend through the sliding window, as HF decides it: `layer_types` when the config lists
/// them; else every layer of a Mistral config with a `sliding_window`; a Qwen2 config's layers from
/// `max_window_layers` on when `use_sliding_window` is true; no layer of a Llama config.
fn sliding_layers(
    raw: &RawLlamaConfig,
    architecture: &str,
) -> std::result::Result<Vec<bool>, String> {
    let n = raw.num_hidden_layers;
    if let Some(types) = &raw.layer_types {
        if types.len() != n {
            return Err(format!("layer_types lists {} layers of {n}", types.len()));
        }
        return types
            .iter()
            .map(|t| match t.as_str() {
                "sliding_attention" => Ok(raw.sliding_window.is_some()),
                "full_attention" => Ok(false),
                other => Err(format!("unsupported layer type {other:?}")),
            })
            .collect();
    }
    let on = raw.sliding_window.is_some();
    Ok(match architecture {
        "MistralForCausalLM" => vec![on; n],
        "Qwen2ForCausalLM" if on && raw.use_sliding_window == Some(true) => {
            let first = raw.max_window_layers.unwrap_or(n);
            (0..n).map(|i| i >= first).collect()
        }
        _ => vec![false; n],
    })
}

/// The BERT encoder configuration.
#[derive(Debug, Clone, Deserialize)]
pub struct BertConfig {
    /// Model width.
    pub hidden_size: usize,
    /// MLP width.
    pub intermediate_size: usize,
    /// Encoder layers.
    pub num_hidden_layers: usize,
    /// Attention heads.
    pub num_attention_heads: usize,
    /// LayerNorm epsilon.
    #[serde(default = "default_ln_eps")]
    pub layer_norm_eps: f64,
    /// Longest input in tokens.
    pub max_position_embeddings: usize,
    /// Token-type vocabulary size.
    #[serde(default = "default_type_vocab")]
    pub type_vocab_size: usize,
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Activation (only `gelu` is supported).
    #[serde(default = "default_act")]
    pub hidden_act: String,
}

fn default_ln_eps() -> f64 {
    1e-12
}
fn default_type_vocab() -> usize {
    2
}
fn default_act() -> String {
    "gelu".into()
}

impl BertConfig {
    /// Reads and validates `config.json`, refusing non-BERT architectures.
    pub fn load(path: &Path) -> Result<Self> {
        check_architecture(path, BERT_ARCHITECTURES)?;
        let cfg: BertConfig =
            serde_json::from_str(&read(path)?).map_err(|e| config_error(path, e.to_string()))?;
        if cfg.hidden_act != "gelu" {
            return Err(config_error(
                path,
                format!("hidden_act {:?} is not supported", cfg.hidden_act),
            ));
        }
        if cfg.num_attention_heads == 0 || !cfg.hidden_size.is_multiple_of(cfg.num_attention_heads)
        {
            return Err(config_error(
                path,
                "hidden_size is not a multiple of the head count".into(),
            ));
        }
        Ok(cfg)
    }
}

#[derive(Deserialize)]
struct ArchitectureOnly {
    #[serde(default)]
    architectures: Vec<String>,
    #[serde(default)]
    model_type: Option<String>,
}

fn check_architecture(path: &Path, supported: &[&str]) -> Result<()> {
    let arch: ArchitectureOnly =
        serde_json::from_str(&read(path)?).map_err(|e| config_error(path, e.to_string()))?;
    let name = arch
        .architectures
        .first()
        .cloned()
        .or(arch.model_type)
        .unwrap_or_default();
    if supported.contains(&name.as_str()) {
        Ok(())
    } else {
        Err(EngineError::UnknownArchitecture {
            architecture: name,
            supported: supported.join(", "),
        })
    }
}

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|source| EngineError::Io {
        path: path.to_path_buf(),
        source,
    })
}

fn config_error(path: &Path, reason: String) -> EngineError {
    EngineError::Config {
        path: path.to_path_buf(),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rope_scaling_accepts_both_spellings() {
        let a = RopeScaling::from_raw(
            serde_json::from_str(r#"{"type":"linear","factor":2.0}"#).ok(),
            8,
        );
        let b = RopeScaling::from_raw(
            serde_json::from_str(r#"{"rope_type":"linear","factor":2.0}"#).ok(),
            8,
        );
        assert_eq!(a, Ok(RopeScaling::Linear { factor: 2.0 }));
        assert_eq!(a, b);
    }

    fn parse(extra: &str, architecture: &str) -> std::result::Result<LlamaConfig, String> {
        LlamaConfig::from_json(&format!(
            r#"{{"architectures":["{architecture}"],"hidden_size":64,"intermediate_size":128,
            "num_hidden_layers":4,"num_attention_heads":4,"num_key_value_heads":2,
            "max_position_embeddings":128,"vocab_size":10{extra}}}"#
        ))
    }

    #[test]
    fn llama3_rope_scaling_loads_as_llama_3_1_publishes_it() {
        let cfg = parse(
            r#","rope_scaling":{"rope_type":"llama3","factor":8.0,"low_freq_factor":1.0,
            "high_freq_factor":4.0,"original_max_position_embeddings":8192}"#,
            "LlamaForCausalLM",
        );
        assert_eq!(
            cfg.map(|c| c.rope_scaling),
            Ok(RopeScaling::Llama3 {
                factor: 8.0,
                low_freq_factor: 1.0,
                high_freq_factor: 4.0,
                original_max_position_embeddings: 8192
            })
        );
        let missing = parse(
            r#","rope_scaling":{"rope_type":"llama3","factor":8.0}"#,
            "LlamaForCausalLM",
        );
        assert!(
            missing
                .unwrap_err()
                .contains("original_max_position_embeddings")
        );
    }

    #[test]
    fn yarn_in_the_config_stretches_the_served_context() {
        // Qwen2.5's card: YaRN over 32,768 tokens, max_position_embeddings left at 32,768.
        let cfg = LlamaConfig::from_json(
            r#"{"architectures":["Qwen2ForCausalLM"],"hidden_size":64,"intermediate_size":128,
            "num_hidden_layers":1,"num_attention_heads":4,"num_key_value_heads":2,
            "max_position_embeddings":32768,"vocab_size":10,"rope_scaling":{"type":"yarn","factor":4.0,
            "original_max_position_embeddings":32768}}"#,
        )
        .unwrap();
        assert_eq!(cfg.context_window(), 131_072);
        let plain = parse("", "LlamaForCausalLM").unwrap();
        assert_eq!(plain.context_window(), 128);
    }

    #[test]
    fn a_mistral_sliding_window_covers_every_layer() {
        let cfg = parse(r#","sliding_window":16"#, "MistralForCausalLM").unwrap();
        assert_eq!(cfg.sliding_window, Some(16));
        assert_eq!(cfg.sliding_layers, vec![true; 4]);
        let none = parse(r#","sliding_window":null"#, "MistralForCausalLM").unwrap();
        assert_eq!(none.sliding_window, None);
    }

    #[test]
    fn qwen2_slides_only_when_use_sliding_window_is_set_and_from_max_window_layers_on() {
        let off = parse(
            r#","sliding_window":131072,"use_sliding_window":false,"max_window_layers":28"#,
            "Qwen2ForCausalLM",
        )
        .unwrap();
        assert_eq!(
            (off.sliding_window, off.sliding_layers),
            (None, vec![false; 4])
        );
        let on = parse(
            r#","sliding_window":32,"use_sliding_window":true,"max_window_layers":2"#,
            "Qwen2ForCausalLM",
        )
        .unwrap();
        assert_eq!(on.sliding_window, Some(32));
        assert_eq!(on.sliding_layers, vec![false, false, true, true]);
    }

    #[test]
    fn layer_types_choose_the_sliding_layers_one_by_one() {
        let cfg = parse(
            r#","sliding_window":8,"layer_types":["sliding_attention","full_attention","sliding_attention","full_attention"]"#,
            "MistralForCausalLM",
        )
        .unwrap();
        assert_eq!(cfg.sliding_layers, vec![true, false, true, false]);
        let wrong = parse(
            r#","sliding_window":8,"layer_types":["full_attention"]"#,
            "MistralForCausalLM",
        );
        assert!(
            wrong
                .unwrap_err()
                .contains("layer_types lists 1 layers of 4")
        );
    }

    #[test]
    fn eos_may_be_a_list() {
        let cfg = LlamaConfig::from_json(
            r#"{"architectures":["LlamaForCausalLM"],"hidden_size":64,"intermediate_size":128,"num_hidden_layers":1,
            "num_attention_heads":4,"num_key_value_heads":2,"max_position_embeddings":128,"vocab_size":10,
            "eos_token_id":[2,3]}"#,
        );
        assert_eq!(cfg.map(|c| c.eos_token_ids), Ok(vec![2, 3]));
    }
}
