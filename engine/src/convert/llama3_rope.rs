//! Llama 3's RoPE scaling recovered from a GGUF's `rope_freqs` tensor.
//!
//! llama.cpp does not keep Llama 3.1's `rope_scaling` parameters: its converter stores, for each RoPE
//! pair, the number its frequency is divided by (1 for short wavelengths, `factor` for long ones, a blend
//! between). HF's `llama3` scaling says the same with four numbers, of which only three are independent
//! (the blend depends on `original / low_freq_factor` and `original / high_freq_factor`), so the low
//! frequency factor is taken as 1, as every Llama 3.x checkpoint has it, and the other three are fitted
//! to the divisors. The fit is accepted only if the engine's own `llama3` scaling, given those numbers,
//! gives back every divisor.

use serde_json::{Value, json};

use crate::config::RopeScaling;
use crate::error::{EngineError, Result};

/// The GGUF tensor of per-pair frequency divisors.
pub const ROPE_FREQS: &str = "rope_freqs.weight";

/// The high frequency factor of every Llama 3.x checkpoint, assumed where the divisors blend at fewer
/// than two pairs and so cannot tell it.
const DEFAULT_HIGH_FREQ_FACTOR: f64 = 4.0;

/// Largest relative difference between a divisor and the fitted scaling's.
const TOLERANCE: f64 = 1e-4;

/// The `rope_scaling` object whose divisors are `divisors`, for RoPE over `head_dim` with `rope_theta`.
pub fn scaling_of(divisors: &[f32], rope_theta: f64, head_dim: usize) -> Result<Value> {
    let unsupported = |why: &str| {
        EngineError::Convert(format!(
            "the rope_freqs tensor is not Llama 3's RoPE scaling ({why})"
        ))
    };
    if divisors.len() != head_dim / 2 {
        return Err(unsupported(&format!(
            "{} divisors for a head of {head_dim}",
            divisors.len()
        )));
    }
    let divisors: Vec<f64> = divisors.iter().map(|&d| f64::from(d)).collect();
    let factor = divisors.iter().cloned().fold(f64::MIN, f64::max);
    if factor <= 1.0 {
        return Err(unsupported("no pair is divided"));
    }
    let wavelengths = plain_wavelengths(rope_theta, head_dim);
    let (original, high) = fit(&divisors, &wavelengths, factor)
        .ok_or_else(|| unsupported("the divisors do not rise with the wavelength"))?;
    let scaling = RopeScaling::Llama3 {
        factor,
        low_freq_factor: 1.0,
        high_freq_factor: high,
        original_max_position_embeddings: original,
    };
    let worst = worst_difference(&scaling, &divisors, rope_theta, head_dim);
    if worst > TOLERANCE {
        return Err(unsupported(&format!(
            "the closest factor {factor}, context {original} and high frequency factor {high} miss a \
             divisor by {worst:.1e}"
        )));
    }
    Ok(json!({
        "rope_type": "llama3",
        "factor": factor,
        "low_freq_factor": 1.0,
        "high_freq_factor": high,
        "original_max_position_embeddings": original,
    }))
}

/// Each pair's wavelength without scaling.
fn plain_wavelengths(rope_theta: f64, head_dim: usize) -> Vec<f64> {
    (0..head_dim / 2)
        .map(|i| 2.0 * std::f64::consts::PI * rope_theta.powf((2 * i) as f64 / head_dim as f64))
        .collect()
}

/// The pre-training context and the high frequency factor, with a low frequency factor of 1. Where a
/// pair blends, its share `s` of the unscaled frequency satisfies `s = (original / wavelength - 1) /
/// (high - 1)`, a line in `1 / wavelength`: two blending pairs or more fix it; one fixes the context
/// once the high factor is taken as Llama 3's; none leave the context between the last kept wavelength
/// (times the high factor) and the first divided one, where the smallest whole number is taken.
fn fit(divisors: &[f64], wavelengths: &[f64], factor: f64) -> Option<(usize, f64)> {
    let share = |d: f64| (1.0 / d - 1.0 / factor) / (1.0 - 1.0 / factor);
    let blends: Vec<(f64, f64)> = divisors
        .iter()
        .zip(wavelengths)
        .filter(|&(&d, _)| d > 1.0 + TOLERANCE && d < factor * (1.0 - TOLERANCE))
        .map(|(&d, &w)| (1.0 / w, share(d)))
        .collect();
    let (original, high) = match blends.as_slice() {
        [] => {
            let kept = wavelengths
                .iter()
                .zip(divisors)
                .filter(|&(_, &d)| d <= 1.0 + TOLERANCE)
                .map(|(&w, _)| w)
                .fold(0.0, f64::max);
            (
                (kept * DEFAULT_HIGH_FREQ_FACTOR).floor() + 1.0,
                DEFAULT_HIGH_FREQ_FACTOR,
            )
        }
        [(inverse, s)] => {
            let high = DEFAULT_HIGH_FREQ_FACTOR;
            ((1.0 + s * (high - 1.0)) / inverse, high)
        }
        points => {
            let (slope, intercept) = least_squares(points)?;
            let high = 1.0 - 1.0 / intercept;
            (slope * (high - 1.0), high)
        }
    };
    (original.is_finite() && original >= 1.0 && high > 1.0)
        .then(|| (original.round() as usize, (high * 1e3).round() / 1e3))
}

/// The line through `points` by least squares: its slope and intercept.
fn least_squares(points: &[(f64, f64)]) -> Option<(f64, f64)> {
    let n = points.len() as f64;
    let (mx, my) = points
        .iter()
        .fold((0.0, 0.0), |(x, y), &(px, py)| (x + px / n, y + py / n));
    let sxx: f64 = points.iter().map(|&(x, _)| (x - mx).powi(2)).sum();
    let sxy: f64 = points.iter().map(|&(x, y)| (x - mx) * (y - my)).sum();
    (sxx > 0.0).then(|| (sxy / sxx, my - sxy / sxx * mx))
}

/// Each pair's frequency divisor under `scaling`: the unscaled frequency over the scaled one.
fn divisors_of(scaling: &RopeScaling, rope_theta: f64, head_dim: usize) -> Vec<f64> {
    let plain = RopeScaling::None
        .inv_freq(head_dim, rope_theta, 0, 0)
        .inv_freq;
    let scaled = scaling.inv_freq(head_dim, rope_theta, 0, 0).inv_freq;
    plain
        .iter()
        .zip(&scaled)
        .map(|(&p, &s)| f64::from(p) / f64::from(s))
        .collect()
}

/// The largest relative difference between `divisors` and those `scaling` gives.
fn worst_difference(
    scaling: &RopeScaling,
    divisors: &[f64],
    rope_theta: f64,
    head_dim: usize,
) -> f64 {
    divisors_of(scaling, rope_theta, head_dim)
        .iter()
        .zip(divisors)
        .map(|(&want, &got)| (want / got - 1.0).abs())
        .fold(0.0, f64::max)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn llama3(factor: f64, high: f64, original: usize) -> RopeScaling {
        RopeScaling::Llama3 {
            factor,
            low_freq_factor: 1.0,
            high_freq_factor: high,
            original_max_position_embeddings: original,
        }
    }

    /// The divisors llama.cpp's converter stores for `scaling` (f32, as in the GGUF).
    fn stored(scaling: &RopeScaling, theta: f64, head_dim: usize) -> Vec<f32> {
        divisors_of(scaling, theta, head_dim)
            .iter()
            .map(|&d| d as f32)
            .collect()
    }

    /// The `rope_scaling` recovered from the divisors of Llama 3's scaling with these numbers.
    fn recovered(factor: f64, original: usize, theta: f64, head_dim: usize) -> Value {
        let divisors = stored(&llama3(factor, 4.0, original), theta, head_dim);
        scaling_of(&divisors, theta, head_dim).expect("a Llama 3 scaling")
    }

    #[test]
    fn llama_3_1_8bs_divisors_give_back_its_rope_scaling() {
        let got = recovered(8.0, 8192, 500_000.0, 128);
        assert_eq!(got["rope_type"], "llama3");
        assert_eq!(got["factor"], 8.0);
        assert_eq!(got["low_freq_factor"], 1.0);
        assert_eq!(got["high_freq_factor"], 4.0);
        assert_eq!(got["original_max_position_embeddings"], 8192);
    }

    #[test]
    fn llama_3_2s_factor_of_32_is_read_from_the_divisors() {
        assert_eq!(recovered(32.0, 8192, 500_000.0, 64)["factor"], 32.0);
    }

    #[test]
    fn a_head_with_one_blending_pair_or_none_still_gives_a_scaling_that_reproduces_it() {
        for (theta, head_dim, original) in [(500_000.0, 32, 64), (1_000_000.0, 8, 64)] {
            let want = stored(&llama3(8.0, 4.0, original), theta, head_dim);
            let got = recovered(8.0, original, theta, head_dim);
            let original = got["original_max_position_embeddings"].as_u64().unwrap() as usize;
            let again = stored(&llama3(8.0, 4.0, original), theta, head_dim);
            for (a, b) in again.iter().zip(&want) {
                assert!((a / b - 1.0).abs() < 1e-5, "{again:?} against {want:?}");
            }
        }
    }

    #[test]
    fn divisors_that_are_not_llama_3s_are_refused() {
        let theta = 500_000.0;
        let mut odd = stored(&llama3(8.0, 4.0, 8192), theta, 128);
        odd[3] = 5.0;
        let err = scaling_of(&odd, theta, 128).unwrap_err().to_string();
        assert!(err.contains("not Llama 3's RoPE scaling"), "{err}");
        assert!(scaling_of(&[1.0; 64], theta, 128).is_err());
        assert!(scaling_of(&[8.0; 10], theta, 128).is_err());
    }
}
