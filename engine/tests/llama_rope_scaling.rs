//! RoPE scaling variants against their formulas: inverse frequencies for plain RoPE, linear position
//! interpolation, NTK-aware dynamic scaling and YaRN, computed here independently in f64.

use docqa_engine::config::{RopeScaling, yarn_mscale};

const D: usize = 64;
const BASE: f64 = 10_000.0;

fn plain(base: f64) -> Vec<f64> {
    (0..D / 2)
        .map(|i| base.powf(-(2.0 * i as f64) / D as f64))
        .collect()
}

fn close(got: &[f32], want: &[f64]) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            ((*g as f64) - w).abs() <= 1e-6 * w.abs(),
            "dim {i}: {g} vs {w}"
        );
    }
}

#[test]
fn plain_rope_uses_base_to_the_minus_2i_over_d() {
    let f = RopeScaling::None.inv_freq(D, BASE, 2048, 100);
    close(&f.inv_freq, &plain(BASE));
    assert_eq!(f.mscale, 1.0);
}

#[test]
fn linear_scaling_divides_every_frequency_by_the_factor() {
    let f = RopeScaling::Linear { factor: 4.0 }.inv_freq(D, BASE, 2048, 100);
    close(
        &f.inv_freq,
        &plain(BASE).iter().map(|x| x / 4.0).collect::<Vec<_>>(),
    );
}

#[test]
fn dynamic_ntk_scaling_grows_the_base_only_past_the_trained_context() {
    let s = RopeScaling::Dynamic { factor: 2.0 };
    close(&s.inv_freq(D, BASE, 2048, 2048).inv_freq, &plain(BASE));
    // base' = base · (factor·L/L₀ − (factor − 1))^(d/(d−2)) with L = 8192, L₀ = 2048.
    let grown = BASE * (2.0f64 * 8192.0 / 2048.0 - 1.0).powf(D as f64 / (D as f64 - 2.0));
    close(&s.inv_freq(D, BASE, 2048, 8192).inv_freq, &plain(grown));
}

#[test]
fn yarn_extrapolates_high_frequencies_interpolates_low_ones_and_ramps_between() {
    let (factor, orig) = (8.0, 4096.0);
    let s = RopeScaling::Yarn {
        factor,
        original_max_position_embeddings: 4096,
        beta_fast: 32.0,
        beta_slow: 1.0,
        attention_factor: yarn_mscale(factor),
    };
    let f = s.inv_freq(D, BASE, 32768, 100);
    // Dimension i turns orig·θᵢ/2π times over the trained context; θᵢ = base^(−2i/d).
    let turns = |i: usize| orig * plain(BASE)[i] / (2.0 * std::f64::consts::PI);
    for (i, &g) in f.inv_freq.iter().enumerate() {
        let (p, g) = (plain(BASE)[i], g as f64);
        if turns(i) > 32.0 + 1e-9 && turns(i + 1) > 32.0 {
            assert!(
                (g - p).abs() <= 1e-6 * p,
                "dim {i} ({} turns) must be unscaled",
                turns(i)
            );
        } else if turns(i) < 1.0 && i > 0 && turns(i - 1) < 1.0 {
            assert!(
                (g - p / factor).abs() <= 1e-6 * p,
                "dim {i} ({} turns) must be interpolated",
                turns(i)
            );
        } else {
            assert!(
                g <= p * (1.0 + 1e-6) && g >= p / factor * (1.0 - 1e-6),
                "dim {i} blends"
            );
        }
    }
    assert!((f.mscale as f64 - (0.1 * factor.ln() + 1.0)).abs() < 1e-6);
}

#[test]
fn llama3_scaling_keeps_short_wavelengths_divides_long_ones_and_blends_between() {
    // Llama 3.1 8B: head_dim 128, base 500,000, factor 8, low 1, high 4, trained on 8,192 tokens.
    let (d, base, factor, orig) = (128usize, 500_000.0f64, 8.0, 8192.0);
    let s = RopeScaling::Llama3 {
        factor,
        low_freq_factor: 1.0,
        high_freq_factor: 4.0,
        original_max_position_embeddings: 8192,
    };
    let got = s.inv_freq(d, base, 131_072, 100);
    assert_eq!(got.mscale, 1.0);
    let (mut kept, mut divided, mut blended) = (0, 0, 0);
    for (i, &g) in got.inv_freq.iter().enumerate() {
        let p = base.powf(-(2.0 * i as f64) / d as f64);
        let wavelength = 2.0 * std::f64::consts::PI / p;
        // HF's form: a smooth factor clamped to [0, 1] mixes p/factor and p.
        let smooth = ((orig / wavelength - 1.0) / (4.0 - 1.0)).clamp(0.0, 1.0);
        let want = (1.0 - smooth) * p / factor + smooth * p;
        assert!(
            ((g as f64) - want).abs() <= 1e-6 * want,
            "dim {i}: {g} vs {want}"
        );
        match smooth {
            1.0 => kept += 1,
            0.0 => divided += 1,
            _ => blended += 1,
        }
    }
    // Wavelengths under 2,048 tokens are kept, over 8,192 divided: both kinds and a blend occur.
    assert!(
        kept > 0 && divided > 0 && blended > 0,
        "{kept} {divided} {blended}"
    );
    assert_eq!(got.inv_freq[0], 1.0);
}
