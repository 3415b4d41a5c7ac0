//! Int8-weight matmul for decode-sized batches (a few activation rows), where the bf16 path is bound by
//! memory bandwidth: weights are read once per step, so halving their bytes nearly doubles the speed.
//!
//! Weights are quantised per row in blocks of [`QBLOCK`] with one f32 scale per block (`w ≈ s·q`,
//! `q ∈ [-127, 127]`). Activations are quantised per block to int16 (relative error ~2⁻¹⁶, negligible
//! next to the weights'), and each block's dot product runs in exact integer arithmetic with AVX-512
//! VNNI `vpdpwssd`, then is scaled by `s_w·s_x` into an f32 accumulator.

use std::arch::x86_64::*;

use rayon::prelude::*;

use super::{MatmulDims, OutPtr};

/// Elements per quantisation block.
pub const QBLOCK: usize = 64;

/// A weight matrix `[n, k]` quantised to int8 in blocks of [`QBLOCK`] along `k`.
#[derive(Debug, Clone)]
pub struct Q8Matrix {
    /// `[n, k]` quantised values.
    pub q: Vec<i8>,
    /// `[n, k / QBLOCK]` scales.
    pub scales: Vec<f32>,
}

impl Q8Matrix {
    /// Quantises `w[n, k]` (`k` a multiple of [`QBLOCK`]); `None` otherwise.
    pub fn quantize(w: &[f32], k: usize) -> Option<Self> {
        if k == 0 || !k.is_multiple_of(QBLOCK) {
            return None;
        }
        let mut q = vec![0i8; w.len()];
        let mut scales = Vec::with_capacity(w.len() / QBLOCK);
        for (src, dst) in w.chunks_exact(QBLOCK).zip(q.chunks_exact_mut(QBLOCK)) {
            let max = src.iter().fold(0f32, |m, v| m.max(v.abs()));
            let s = if max > 0.0 { max / 127.0 } else { 1.0 };
            dst.iter_mut()
                .zip(src)
                .for_each(|(d, v)| *d = (v / s).round().clamp(-127.0, 127.0) as i8);
            scales.push(s);
        }
        Some(Q8Matrix { q, scales })
    }
}

/// Whether the int8 kernel can run on this CPU.
pub fn available() -> bool {
    is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vnni")
}

/// `out[rows, n] = x[rows, k] · Wᵀ (+ bias)` with int8 weights; `rows <= 4`. `xq` and `xs` are scratch.
pub fn matmul(
    x: &[f32],
    w: &Q8Matrix,
    bias: Option<&[f32]>,
    d: MatmulDims,
    out: &mut [f32],
    xq: &mut Vec<i16>,
    xs: &mut Vec<f32>,
) {
    assert!(
        available(),
        "the int8 kernel needs AVX-512 (F, BW, VNNI): check int8::available() first"
    );
    assert!(
        d.rows <= 4
            && d.k.is_multiple_of(QBLOCK)
            && w.q.len() == d.n * d.k
            && out.len() >= d.rows * d.n
    );
    let nb = d.k / QBLOCK;
    xq.resize(d.rows * d.k, 0);
    xs.resize(d.rows * nb, 0.0);
    for (src, (dst, s)) in x[..d.rows * d.k]
        .chunks_exact(QBLOCK)
        .zip(xq.chunks_exact_mut(QBLOCK).zip(xs.iter_mut()))
    {
        let max = src.iter().fold(0f32, |m, v| m.max(v.abs()));
        *s = if max > 0.0 { max / 32767.0 } else { 1.0 };
        dst.iter_mut()
            .zip(src)
            .for_each(|(q, v)| *q = (v / *s).round() as i16);
    }
    let (xq, xs) = (&xq[..], &xs[..]);
    let out_ptr = OutPtr(out.as_mut_ptr());
    let chunk = 16;
    (0..d.n.div_ceil(chunk)).into_par_iter().for_each(|c| {
        for r in c * chunk..((c + 1) * chunk).min(d.n) {
            for t in 0..d.rows {
                // SAFETY: features checked by `available` (the caller's precondition); indices in bounds.
                let v = unsafe {
                    row_dot(
                        &xq[t * d.k..(t + 1) * d.k],
                        &xs[t * nb..(t + 1) * nb],
                        w,
                        r,
                        d.k,
                    )
                };
                // SAFETY: (t, r) belongs to this task only.
                unsafe { *out_ptr.ptr().add(t * d.n + r) = v + bias.map_or(0.0, |b| b[r]) };
            }
        }
    });
}

/// Dot product of one quantised activation row with weight row `r`.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn row_dot(xq: &[i16], xs: &[f32], w: &Q8Matrix, r: usize, k: usize) -> f32 {
    let nb = k / QBLOCK;
    let wq = &w.q[r * k..(r + 1) * k];
    let ws = &w.scales[r * nb..(r + 1) * nb];
    let mut acc = _mm512_setzero_ps();
    for b in 0..nb {
        // SAFETY: block b spans 64 elements inside both rows.
        unsafe {
            let wv = _mm512_loadu_si512(wq.as_ptr().add(b * QBLOCK) as *const _);
            let lo = _mm512_cvtepi8_epi16(_mm512_castsi512_si256(wv));
            let hi = _mm512_cvtepi8_epi16(_mm512_extracti64x4_epi64::<1>(wv));
            let x0 = _mm512_loadu_si512(xq.as_ptr().add(b * QBLOCK) as *const _);
            let x1 = _mm512_loadu_si512(xq.as_ptr().add(b * QBLOCK + 32) as *const _);
            let dot =
                _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(_mm512_setzero_si512(), lo, x0), hi, x1);
            acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_set1_ps(ws[b] * xs[b]), acc);
        }
    }
    _mm512_reduce_add_ps(acc)
}

/// Portable reference of the same arithmetic (quantised weights, exact f32 activations).
pub fn matmul_ref(x: &[f32], w: &Q8Matrix, d: MatmulDims, out: &mut [f32]) {
    let nb = d.k / QBLOCK;
    for t in 0..d.rows {
        for r in 0..d.n {
            out[t * d.n + r] = (0..d.k)
                .map(|i| x[t * d.k + i] * w.q[r * d.k + i] as f32 * w.scales[r * nb + i / QBLOCK])
                .sum();
        }
    }
}
