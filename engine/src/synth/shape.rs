//! [`Shape`]: the numbers of a Llama-family checkpoint, the `config.json` they make, and the list of
//! tensors (names, shapes, and the uniform scale each is drawn with) that [`super::synthesize`] writes.

use serde_json::{Value, json};

use crate::error::{EngineError, Result};

/// The architecture a shape belongs to: it names `architectures[0]` and `model_type`, and decides the
/// family-specific config fields and whether q/k/v carry biases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// `LlamaForCausalLM` (Llama, SmolLM2).
    Llama,
    /// `MistralForCausalLM`.
    Mistral,
    /// `Qwen2ForCausalLM`: biases on the q/k/v projections.
    Qwen2,
}

impl Family {
    /// `architectures[0]` of the config.
    pub fn architecture(self) -> &'static str {
        match self {
            Family::Llama => "LlamaForCausalLM",
            Family::Mistral => "MistralForCausalLM",
            Family::Qwen2 => "Qwen2ForCausalLM",
        }
    }

    /// `model_type` of the config.
    pub fn model_type(self) -> &'static str {
        match self {
            Family::Llama => "llama",
            Family::Mistral => "mistral",
            Family::Qwen2 => "qwen2",
        }
    }
}

/// Llama 3's RoPE frequency scaling (`rope_type: llama3`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Llama3Rope {
    /// `factor`.
    pub factor: f64,
    /// `low_freq_factor`.
    pub low_freq_factor: f64,
    /// `high_freq_factor`.
    pub high_freq_factor: f64,
    /// `original_max_position_embeddings`.
    pub original_max_position_embeddings: usize,
}

/// The shape of a Llama-family checkpoint, with the config values its family publishes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shape {
    /// The name `docqa models synth --shape` knows it by.
    pub name: &'static str,
    /// Architecture.
    pub family: Family,
    /// `hidden_size`.
    pub hidden: usize,
    /// `intermediate_size`.
    pub intermediate: usize,
    /// `num_hidden_layers`.
    pub layers: usize,
    /// `num_attention_heads`.
    pub heads: usize,
    /// `num_key_value_heads`.
    pub kv_heads: usize,
    /// `head_dim`, written only where the family's config gives it (else `hidden / heads`).
    pub head_dim: Option<usize>,
    /// `rms_norm_eps`.
    pub rms_norm_eps: f64,
    /// `rope_theta`.
    pub rope_theta: f64,
    /// `rope_scaling`.
    pub rope_scaling: Option<Llama3Rope>,
    /// `max_position_embeddings`.
    pub max_position_embeddings: usize,
    /// `sliding_window`, where the config has one.
    pub sliding_window: Option<usize>,
    /// `use_sliding_window` and `max_window_layers` (Qwen2).
    pub window_layers: Option<(bool, usize)>,
    /// `vocab_size`.
    pub vocab: usize,
    /// `tie_word_embeddings` (an untied model has `lm_head.weight`).
    pub tied: bool,
    /// `bos_token_id`.
    pub bos: u32,
    /// `eos_token_id` (a number when there is one, a list otherwise).
    pub eos: &'static [u32],
    /// The family's special tokens at their ids, for `tokenizer.json`.
    pub special_tokens: &'static [(u32, &'static str)],
}

/// A tensor to draw: uniform in `[-scale, scale)` plus `offset`.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorSpec {
    /// HF name.
    pub name: String,
    /// Shape, outermost first.
    pub shape: Vec<usize>,
    /// Half-width of the uniform distribution.
    pub scale: f32,
    /// Added to every value (1 for norm weights).
    pub offset: f32,
}

impl TensorSpec {
    fn new(name: String, shape: Vec<usize>, scale: f32, offset: f32) -> Self {
        Self {
            name,
            shape,
            scale,
            offset,
        }
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}

impl Shape {
    /// The same shape with `layers` decoder layers (a cut-down model of the real width).
    pub fn with_layers(self, layers: usize) -> Self {
        Self { layers, ..self }
    }

    /// Width of one attention head.
    pub fn head_width(&self) -> usize {
        self.head_dim.unwrap_or(self.hidden / self.heads.max(1))
    }

    /// Refuses shapes the loader could not read or the tokenizer could not fit.
    pub fn validate(&self) -> Result<()> {
        let bad = |reason: String| Err(EngineError::Synth(format!("{}: {reason}", self.name)));
        if self.hidden == 0 || self.intermediate == 0 || self.layers == 0 || self.vocab == 0 {
            return bad("hidden, intermediate, layers and vocab must be positive".into());
        }
        if self.heads == 0 || self.kv_heads == 0 || !self.heads.is_multiple_of(self.kv_heads) {
            return bad(format!(
                "{} heads cannot be grouped over {} KV heads",
                self.heads, self.kv_heads
            ));
        }
        let hd = self.head_width();
        if hd == 0 || !hd.is_multiple_of(2) {
            return bad(format!("head_dim {hd} must be even and positive"));
        }
        if let Some((id, token)) = self
            .special_tokens
            .iter()
            .find(|(id, _)| *id as usize >= self.vocab)
        {
            return bad(format!(
                "special token {token} has id {id}, past the vocabulary"
            ));
        }
        if self.vocab < 256 + self.special_tokens.len() {
            return bad(format!(
                "vocab {} cannot hold 256 byte tokens and the special tokens",
                self.vocab
            ));
        }
        Ok(())
    }

    /// The HF `config.json` of this shape, with the fields its family publishes.
    pub fn config_json(&self) -> Value {
        let eos = match self.eos {
            [one] => json!(one),
            many => json!(many),
        };
        let mut c = json!({
            "architectures": [self.family.architecture()],
            "model_type": self.family.model_type(),
            "hidden_act": "silu",
            "hidden_size": self.hidden,
            "intermediate_size": self.intermediate,
            "num_hidden_layers": self.layers,
            "num_attention_heads": self.heads,
            "num_key_value_heads": self.kv_heads,
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "max_position_embeddings": self.max_position_embeddings,
            "vocab_size": self.vocab,
            "tie_word_embeddings": self.tied,
            "bos_token_id": self.bos,
            "eos_token_id": eos,
            "torch_dtype": "bfloat16",
        });
        let fields = c.as_object_mut().expect("a JSON object");
        if self.family == Family::Llama {
            fields.insert("attention_bias".into(), json!(false));
            fields.insert("mlp_bias".into(), json!(false));
        }
        if let Some(hd) = self.head_dim {
            fields.insert("head_dim".into(), json!(hd));
        }
        fields.insert(
            "rope_scaling".into(),
            match self.rope_scaling {
                Some(r) => json!({
                    "rope_type": "llama3",
                    "factor": r.factor,
                    "low_freq_factor": r.low_freq_factor,
                    "high_freq_factor": r.high_freq_factor,
                    "original_max_position_embeddings": r.original_max_position_embeddings,
                }),
                None => Value::Null,
            },
        );
        if let Some(window) = self.sliding_window {
            fields.insert("sliding_window".into(), json!(window));
        }
        if let Some((used, layers)) = self.window_layers {
            fields.insert("use_sliding_window".into(), json!(used));
            fields.insert("max_window_layers".into(), json!(layers));
        }
        c
    }

    /// Every tensor of the checkpoint in HF's order (embeddings, layers, final norm, LM head), with the
    /// scales that keep activations finite through many layers: projections `1/√hidden` (q and k twice
    /// that), norm weights `1 ± 0.1`, embeddings and LM head `±1`, biases `±0.1`.
    pub fn tensors(&self) -> Vec<TensorSpec> {
        let (h, ffn) = (self.hidden, self.intermediate);
        let (q, kv) = (
            self.heads * self.head_width(),
            self.kv_heads * self.head_width(),
        );
        let s = 1.0 / (h as f32).sqrt();
        let mut specs = vec![TensorSpec::new(
            "model.embed_tokens.weight".into(),
            vec![self.vocab, h],
            1.0,
            0.0,
        )];
        for i in 0..self.layers {
            let p = format!("model.layers.{i}");
            let norm =
                |name: &str| TensorSpec::new(format!("{p}.{name}.weight"), vec![h], 0.1, 1.0);
            let linear = |name: &str, out: usize, inp: usize, scale: f32| {
                TensorSpec::new(format!("{p}.{name}.weight"), vec![out, inp], scale, 0.0)
            };
            let bias = |name: &str, out: usize| {
                TensorSpec::new(format!("{p}.{name}.bias"), vec![out], 0.1, 0.0)
            };
            specs.push(norm("input_layernorm"));
            specs.push(linear("self_attn.q_proj", q, h, 2.0 * s));
            specs.push(linear("self_attn.k_proj", kv, h, 2.0 * s));
            specs.push(linear("self_attn.v_proj", kv, h, s));
            if self.family == Family::Qwen2 {
                specs.push(bias("self_attn.q_proj", q));
                specs.push(bias("self_attn.k_proj", kv));
                specs.push(bias("self_attn.v_proj", kv));
            }
            specs.push(linear("self_attn.o_proj", h, q, s));
            specs.push(norm("post_attention_layernorm"));
            specs.push(linear("mlp.gate_proj", ffn, h, s));
            specs.push(linear("mlp.up_proj", ffn, h, s));
            specs.push(linear("mlp.down_proj", h, ffn, s));
        }
        specs.push(TensorSpec::new(
            "model.norm.weight".into(),
            vec![h],
            0.1,
            1.0,
        ));
        if !self.tied {
            specs.push(TensorSpec::new(
                "lm_head.weight".into(),
                vec![self.vocab, h],
                1.0,
                0.0,
            ));
        }
        specs
    }

    /// Number of parameters (what the family's model card counts).
    pub fn parameters(&self) -> u64 {
        self.tensors().iter().map(|t| t.numel() as u64).sum()
    }
}
