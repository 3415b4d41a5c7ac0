//! Model configuration: a serde mirror of the fields of HF `config.json` the engine uses.
//!
//! [`LlamaConfig`] covers the Llama family (`LlamaForCausalLM`, `MistralForCausalLM`, `Qwen2ForCausalLM`),
//! [`BertConfig`] the embedder. RoPE scaling (none / linear / NTK-aware dynamic / YaRN) is parsed from
//! `rope_scaling` in either spelling (`type` or `rope_type`); [`RopeScaling::inv_freq`] turns it into the
//! inverse frequencies, following the formulas of the respective papers as HF implements them.

use std::path::Path;

use serde::Deserialize;

use crate::error::{EngineError, Result};

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

/// The raw `rope_scaling` object of `config.json`.
#[derive(Debug, Clone, Deserialize, Default)]
struct RawRopeScaling {
    #[serde(rename = "type")]
    kind: Option<String>,
    rope_type: Option<String>,
    factor: Option<f64>,
    original_max_position_embeddings: Option<usize>,
    beta_fast: Option<f64>,
    beta_slow: Option<f64>,
    attention_factor: Option<f64>,
}

/// How rotary position embeddings are scaled beyond the trained context.
#[derive(Debug, Clone, PartialEq)]
pub enum RopeScaling {
    /// Plain RoPE.
    None,
    /// Position interpolation: every frequency divided by `factor`.
    Linear {
        /// Scale factor (> 1 stretches the context).
        factor: f64,
    },
    /// NTK-aware dynamic scaling: the base grows with the sequence length once it passes the trained
    /// context.
    Dynamic {
        /// Scale factor.
        factor: f64,
    },
    /// YaRN: per-dimension blend of interpolation and extrapolation plus an attention temperature.
    Yarn {
        /// Scale factor.
        factor: f64,
        /// The context the model was trained with.
        original_max_position_embeddings: usize,
        /// Rotations above which a dimension is extrapolated (default 32).
        beta_fast: f64,
        /// Rotations below which a dimension is interpolated (default 1).
        beta_slow: f64,
        /// Multiplier on cos/sin (default `0.1 ln(factor) + 1`).
        attention_factor: f64,
    },
}

/// Inverse frequencies and the cos/sin multiplier RoPE uses for one forward pass.
#[derive(Debug, Clone, PartialEq)]
pub struct RopeFreqs {
    /// `head_dim / 2` inverse frequencies.
    pub inv_freq: Vec<f32>,
    /// Multiplier applied to cos and sin (1 except for YaRN).
    pub mscale: f32,
}

impl RopeScaling {
    fn from_raw(raw: Option<RawRopeScaling>, max_pos: usize) -> std::result::Result<Self, String> {
        let Some(raw) = raw else {
            return Ok(RopeScaling::None);
        };
        let kind = raw
            .rope_type
            .clone()
            .or(raw.kind.clone())
            .unwrap_or_else(|| "default".into());
        let factor = || {
            raw.factor
                .ok_or_else(|| format!("rope_scaling {kind} needs a factor"))
        };
        match kind.as_str() {
            "default" | "none" => Ok(RopeScaling::None),
            "linear" => Ok(RopeScaling::Linear { factor: factor()? }),
            "dynamic" => Ok(RopeScaling::Dynamic { factor: factor()? }),
            "yarn" => {
                let factor = factor()?;
                Ok(RopeScaling::Yarn {
                    factor,
                    original_max_position_embeddings: raw
                        .original_max_position_embeddings
                        .unwrap_or(max_pos),
                    beta_fast: raw.beta_fast.unwrap_or(32.0),
                    beta_slow: raw.beta_slow.unwrap_or(1.0),
                    attention_factor: raw.attention_factor.unwrap_or_else(|| yarn_mscale(factor)),
                })
            }
            other => Err(format!("unsupported rope_scaling type {other:?}")),
        }
    }

    /// Inverse frequencies for `head_dim` and `base`, for a batch whose longest sequence is `seq_len`
    /// tokens (only the dynamic variant depends on it); `max_pos` is the trained context.
    pub fn inv_freq(
        &self,
        head_dim: usize,
        base: f64,
        max_pos: usize,
        seq_len: usize,
    ) -> RopeFreqs {
        let plain = |base: f64| -> Vec<f64> {
            (0..head_dim / 2)
                .map(|i| 1.0 / base.powf((2 * i) as f64 / head_dim as f64))
                .collect()
        };
        let (freqs, mscale) = match *self {
            RopeScaling::None => (plain(base), 1.0),
            RopeScaling::Linear { factor } => {
                (plain(base).iter().map(|f| f / factor).collect(), 1.0)
            }
            RopeScaling::Dynamic { factor } => {
                let base = if seq_len > max_pos {
                    let d = head_dim as f64;
                    base * ((factor * seq_len as f64 / max_pos as f64) - (factor - 1.0))
                        .powf(d / (d - 2.0))
                } else {
                    base
                };
                (plain(base), 1.0)
            }
            RopeScaling::Yarn {
                factor,
                original_max_position_embeddings,
                beta_fast,
                beta_slow,
                attention_factor,
            } => {
                let orig = original_max_position_embeddings as f64;
                (
                    yarn_inv_freq(head_dim, base, factor, orig, beta_fast, beta_slow),
                    attention_factor,
                )
            }
        };
        RopeFreqs {
            inv_freq: freqs.iter().map(|&f| f as f32).collect(),
            mscale: mscale as f32,
        }
    }
}

/// YaRN's default attention temperature: `0.1 ln(s) + 1` for `s > 1`.
pub fn yarn_mscale(factor: f64) -> f64 {
    if factor <= 1.0 {
        1.0
    } else {
        0.1 * factor.ln() + 1.0
    }
}

fn yarn_inv_freq(
    head_dim: usize,
    base: f64,
    factor: f64,
    orig: f64,
    beta_fast: f64,
    beta_slow: f64,
) -> Vec<f64> {
    let d = head_dim as f64;
    // The dimension index whose wavelength makes `rotations` turns over the trained context.
    let correction_dim = |rotations: f64| {
        (d * (orig / (rotations * 2.0 * std::f64::consts::PI)).ln()) / (2.0 * base.ln())
    };
    let low = correction_dim(beta_fast).floor().max(0.0);
    let high = correction_dim(beta_slow).ceil().min(d - 1.0);
    let high = if low == high { high + 0.001 } else { high };
    (0..head_dim / 2)
        .map(|i| {
            let pos_freq = base.powf((2 * i) as f64 / d);
            let ramp = ((i as f64 - low) / (high - low)).clamp(0.0, 1.0);
            let extrapolation = 1.0 - ramp;
            (1.0 / (factor * pos_freq)) * (1.0 - extrapolation) + (1.0 / pos_freq) * extrapolation
        })
        .collect()
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
    /// Sliding-window attention span, if the model uses one (parsed, not yet applied).
    pub sliding_window: Option<usize>,
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

    fn from_json(text: &str) -> std::result::Result<Self, String> {
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
            sliding_window: raw.sliding_window,
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
