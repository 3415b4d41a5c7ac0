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

/// `out[t] = table[ids[t] - first]` (bf16 table of width `width`), a zero row where `ids[t]` is not
/// among the table's rows `first..`.
pub fn embedding_bf16(table: &[u16], width: usize, first: u32, ids: &[u32], out: &mut [f32]) {
    rows_mut(out, width, ids.len(), |t, o| {
        match table_row(table, width, first, ids[t]) {
            Some(row) => o
                .iter_mut()
                .zip(row)
                .for_each(|(y, &b)| *y = bf16_to_f32(b)),
            None => o.fill(0.0),
        }
    });
}

/// f32-table variant of [`embedding_bf16`].
pub fn embedding_f32(table: &[f32], width: usize, first: u32, ids: &[u32], out: &mut [f32]) {
    rows_mut(out, width, ids.len(), |t, o| {
        match table_row(table, width, first, ids[t]) {
            Some(row) => o.copy_from_slice(row),
            None => o.fill(0.0),
        }
    });
}

/// Row `id - first` of `table`, if the table has it.
fn table_row<T>(table: &[T], width: usize, first: u32, id: u32) -> Option<&[T]> {
    let row = id.checked_sub(first)? as usize;
    table.get(row * width..(row + 1) * width)
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
            *v = 0.5 * *v * (1.0 + libm::erff(*v * std::f32::consts::FRAC_1_SQRT_2));
        }
    });
}

/// `x += y`.
pub fn add(x: &mut [f32], y: &[f32]) {
    x.iter_mut().zip(y).for_each(|(a, b)| *a += b);
}
