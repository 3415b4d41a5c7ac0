//! Row-wise and element-wise CPU ops: embedding lookup, RMSNorm, LayerNorm, RoPE, SiLU·mul, GELU, add.
//!
//! Plain loops over rows, parallel on rayon where the work is large enough to pay for it; the compiler
//! vectorises the inner loops.

use rayon::prelude::*;

use super::matmul::bf16_to_f32;
use crate::config::RopeFreqs;

/// Rows below which row-wise ops stay on the calling thread.
const PAR_ROWS: usize = 16;

fn rows_mut(out: &mut [f32], width: usize, rows: usize, f: impl Fn(usize, &mut [f32]) + Sync) {
    let out = &mut out[..rows * width];
    if rows < PAR_ROWS {
        out.chunks_mut(width).enumerate().for_each(|(r, o)| f(r, o));
    } else {
        out.par_chunks_mut(width)
            .enumerate()
            .for_each(|(r, o)| f(r, o));
    }
}

/// Copies row `ids[t]` of a bf16 or f32 table into row `t` of `out`.
pub fn embedding_bf16(table: &[u16], width: usize, ids: &[u32], out: &mut [f32]) {
    rows_mut(out, width, ids.len(), |t, o| {
        let row = &table[ids[t] as usize * width..][..width];
        o.iter_mut()
            .zip(row)
            .for_each(|(y, &b)| *y = bf16_to_f32(b));
    });
}

/// f32-table variant of [`embedding_bf16`].
pub fn embedding_f32(table: &[f32], width: usize, ids: &[u32], out: &mut [f32]) {
    rows_mut(out, width, ids.len(), |t, o| {
        o.copy_from_slice(&table[ids[t] as usize * width..][..width])
    });
}

/// RMSNorm of `rows` rows of width `w.len()`.
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32, rows: usize, out: &mut [f32]) {
    let d = w.len();
    rows_mut(out, d, rows, |r, o| {
        let xr = &x[r * d..(r + 1) * d];
        let ms = xr.iter().map(|v| v * v).sum::<f32>() / d as f32;
        let inv = 1.0 / (ms + eps).sqrt();
        o.iter_mut()
            .zip(xr)
            .zip(w)
            .for_each(|((y, v), g)| *y = v * inv * g);
    });
}

/// LayerNorm of `rows` rows of width `w.len()`.
pub fn layer_norm(x: &[f32], w: &[f32], b: &[f32], eps: f32, rows: usize, out: &mut [f32]) {
    let d = w.len();
    rows_mut(out, d, rows, |r, o| {
        let xr = &x[r * d..(r + 1) * d];
        let mean = xr.iter().sum::<f32>() / d as f32;
        let var = xr.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / d as f32;
        let inv = 1.0 / (var + eps).sqrt();
        for (((y, v), g), bb) in o.iter_mut().zip(xr).zip(w).zip(b) {
            *y = (v - mean) * inv * g + bb;
        }
    });
}

/// Fills `table[rows, 2 * freqs.len()]` with `mscale·cos` then `mscale·sin` of `position · inv_freq`.
pub fn rope_table(positions: &[u32], freqs: &RopeFreqs, table: &mut [f32]) {
    let half = freqs.inv_freq.len();
    rows_mut(table, 2 * half, positions.len(), |r, o| {
        let (cos, sin) = o.split_at_mut(half);
        for (i, f) in freqs.inv_freq.iter().enumerate() {
            // Angles in f64: positions reach 10⁵ and f32 would lose the low bits of pos·f.
            let (s, c) = (positions[r] as f64 * *f as f64).sin_cos();
            cos[i] = c as f32 * freqs.mscale;
            sin[i] = s as f32 * freqs.mscale;
        }
    });
}

/// Rotates every head of `x[rows, heads * head_dim]` in place (HF half-split convention).
pub fn rope(x: &mut [f32], table: &[f32], rows: usize, heads: usize, head_dim: usize) {
    let half = head_dim / 2;
    rows_mut(x, heads * head_dim, rows, |r, row| {
        let (cos, sin) = table[r * head_dim..(r + 1) * head_dim].split_at(half);
        for head in row.chunks_exact_mut(head_dim) {
            let (a, b) = head.split_at_mut(half);
            for i in 0..half {
                let (x1, x2) = (a[i], b[i]);
                a[i] = x1 * cos[i] - x2 * sin[i];
                b[i] = x2 * cos[i] + x1 * sin[i];
            }
        }
    });
}

/// `out = silu(gate) * up`.
pub fn silu_mul(gate: &[f32], up: &[f32], out: &mut [f32]) {
    out.par_chunks_mut(4096)
        .zip(gate.par_chunks(4096))
        .zip(up.par_chunks(4096))
        .for_each(|((o, g), u)| {
            for ((y, &g), &u) in o.iter_mut().zip(g).zip(u) {
                *y = g / (1.0 + (-g).exp()) * u;
            }
        });
}

/// Exact GELU, `x · Φ(x)`, in place.
pub fn gelu(x: &mut [f32]) {
    x.par_chunks_mut(4096).for_each(|c| {
        for v in c {
            *v = 0.5 * *v * (1.0 + erf(*v as f64 / std::f64::consts::SQRT_2) as f32);
        }
    });
}

/// `x += y`.
pub fn add(x: &mut [f32], y: &[f32]) {
    x.iter_mut().zip(y).for_each(|(a, b)| *a += b);
}

/// The error function in f64: Maclaurin series below 2.5 (terms stay below ~10², so f64 keeps ~14
/// digits), the continued fraction of erfc above; far more precise than GELU in f32 needs.
fn erf(x: f64) -> f64 {
    let ax = x.abs();
    let r = if ax < 2.5 {
        let (mut term, mut sum, x2) = (ax, ax, ax * ax);
        for n in 1..80 {
            term *= -x2 / n as f64;
            let add = term / (2 * n + 1) as f64;
            sum += add;
            if add.abs() < 1e-17 {
                break;
            }
        }
        sum * std::f64::consts::FRAC_2_SQRT_PI
    } else {
        1.0 - erfc_cf(ax)
    };
    if x < 0.0 { -r } else { r }
}

/// `erfc(x) = exp(-x²)/√π · 1/(x + (1/2)/(x + 1/(x + (3/2)/(x + ...))))`, for `x >= 2.5`.
fn erfc_cf(x: f64) -> f64 {
    let mut f = x;
    for k in (1..40).rev() {
        f = x + (k as f64 / 2.0) / f;
    }
    (-x * x).exp() / (f * std::f64::consts::PI.sqrt())
}

#[cfg(test)]
mod tests {
    #[test]
    fn erf_matches_tabulated_values() {
        // Values from Abramowitz & Stegun, table 7.1.
        for (x, want) in [
            (0.5, 0.520_499_877_8),
            (1.0, 0.842_700_792_9),
            (2.0, 0.995_322_265_0),
            (3.0, 0.999_977_909_5),
        ] {
            assert!(
                (super::erf(x) - want).abs() < 1e-9,
                "erf({x}) = {}",
                super::erf(x)
            );
            assert!((super::erf(-x) + want).abs() < 1e-9);
        }
    }
}
