//! RoPE scaling: the `rope_scaling` object of HF `config.json` (none / linear / NTK-aware dynamic /
//! YaRN / Llama 3's frequency-dependent scaling, spelled with `type` or `rope_type`) and the inverse
//! frequencies each variant gives.

use serde::Deserialize;

/// The raw `rope_scaling` object of `config.json`.
#[derive(Debug, Clone, Deserialize, Default)]
pub(crate) struct RawRopeScaling {
    #[serde(rename = "type")]
    kind: Option<String>,
    rope_type: Option<String>,
    factor: Option<f64>,
    original_max_position_embeddings: Option<usize>,
    beta_fast: Option<f64>,
    beta_slow: Option<f64>,
    attention_factor: Option<f64>,
    low_freq_factor: Option<f64>,
    high_freq_factor: Option<f64>,
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
    /// Llama 3.1's scaling: long wavelengths interpolated by `factor`, short ones kept, and a smooth
    /// blend between (every Llama 3.1 / 3.2 / 3.3 checkpoint).
    Llama3 {
        /// Scale factor for the long wavelengths.
        factor: f64,
        /// Wavelengths above `original / low_freq_factor` are interpolated.
        low_freq_factor: f64,
        /// Wavelengths below `original / high_freq_factor` are kept.
        high_freq_factor: f64,
        /// The context the model was pre-trained with.
        original_max_position_embeddings: usize,
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
    /// YaRN by `factor` over a model trained on `original_max_position_embeddings` tokens, with the
    /// paper's defaults (extrapolate above 32 rotations, interpolate below 1, temperature
    /// `0.1 ln(factor) + 1`).
    pub fn yarn(factor: f64, original_max_position_embeddings: usize) -> Self {
        RopeScaling::Yarn {
            factor,
            original_max_position_embeddings,
            beta_fast: 32.0,
            beta_slow: 1.0,
            attention_factor: yarn_mscale(factor),
        }
    }

    pub(crate) fn from_raw(
        raw: Option<RawRopeScaling>,
        max_pos: usize,
    ) -> std::result::Result<Self, String> {
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
            "llama3" => {
                let factor = factor()?;
                let low = raw.low_freq_factor.unwrap_or(1.0);
                let high = raw.high_freq_factor.unwrap_or(4.0);
                if high <= low {
                    return Err(format!(
                        "rope_scaling llama3 needs high_freq_factor ({high}) above low_freq_factor ({low})"
                    ));
                }
                Ok(RopeScaling::Llama3 {
                    factor,
                    low_freq_factor: low,
                    high_freq_factor: high,
                    original_max_position_embeddings: raw
                        .original_max_position_embeddings
                        .ok_or("rope_scaling llama3 needs original_max_position_embeddings")?,
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
            RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings,
            } => {
                let orig = original_max_position_embeddings as f64;
                let blend =
                    |f: &f64| llama3_inv_freq(*f, factor, low_freq_factor, high_freq_factor, orig);
                (plain(base).iter().map(blend).collect(), 1.0)
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

/// One inverse frequency under Llama 3's scaling: a wavelength longer than `orig / low` is divided by
/// `factor`, one shorter than `orig / high` kept, and one between blended linearly in `orig / wavelength`.
fn llama3_inv_freq(inv_freq: f64, factor: f64, low: f64, high: f64, orig: f64) -> f64 {
    let wavelength = 2.0 * std::f64::consts::PI / inv_freq;
    if wavelength < orig / high {
        inv_freq
    } else if wavelength > orig / low {
        inv_freq / factor
    } else {
        let smooth = (orig / wavelength - low) / (high - low);
        (1.0 - smooth) * inv_freq / factor + smooth * inv_freq
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
