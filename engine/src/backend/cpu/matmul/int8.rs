//! Int8-weight matmul for decode-sized batches (a few activation rows), where the bf16 path is bound by
//! memory bandwidth: weights are read once per step, so halving their bytes nearly doubles the speed.
//!
//! Weights are quantised per row in blocks of [`QBLOCK`] with one f32 scale per block (`w ≈ s·q`,
//! `q ∈ [-127, 127]`). Activations are quantised per block to int16 (relative error ~2⁻¹⁶, negligible
//! next to the weights'), and each block's dot product runs in exact integer arithmetic — AVX-512 VNNI
//! `vpdpwssd`, or AVX2 `vpmaddwd` on the widened weights — then is scaled by `s_w·s_x` into an f32
//! accumulator. Both kernels compute the same integer block sums; only the order of the f32 additions
//! differs between them.

use std::arch::x86_64::*;

use rayon::prelude::*;

use super::{MatmulDims, OutPtr};

mod quantize;

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
        Self::quantize_rows(w, k)
    }

    /// [`Q8Matrix::quantize`] of bf16 bit patterns, read as their f32 values.
    pub fn quantize_bf16(w: &[u16], k: usize) -> Option<Self> {
        Self::quantize_rows(w, k)
    }

    fn quantize_rows<T: quantize::Widen + Sync>(w: &[T], k: usize) -> Option<Self> {
        if k == 0 || !k.is_multiple_of(QBLOCK) {
            return None;
        }
        let mut q = vec![0i8; w.len()];
        let mut scales = vec![0f32; w.len() / QBLOCK];
        // Whole rows per task: every block lies in one.
        q.par_chunks_mut(k)
            .zip(scales.par_chunks_mut(k / QBLOCK))
            .zip(w.par_chunks(k))
            .for_each(|((q, scales), w)| quantize::weights(w, q, scales));
        Some(Q8Matrix { q, scales })
    }
}

/// The SIMD kernels of the int8 path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Int8Kernel {
    /// AVX-512 F, BW and VNNI: 64 products per block in two `vpdpwssd`.
    Avx512Vnni,
    /// AVX2 (with FMA for the f32 accumulation): four `vpmaddwd` per block.
    Avx2,
}

impl Int8Kernel {
    /// The fastest kernel this CPU runs, if any.
    pub fn best() -> Option<Self> {
        [Int8Kernel::Avx512Vnni, Int8Kernel::Avx2]
            .into_iter()
            .find(|k| k.available())
    }

    /// Whether this CPU has the kernel's instructions.
    pub fn available(self) -> bool {
        match self {
            Int8Kernel::Avx512Vnni => {
                is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("avx512bw")
                    && is_x86_feature_detected!("avx512vnni")
            }
            Int8Kernel::Avx2 => is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"),
        }
    }
}

/// Whether an int8 kernel can run on this CPU.
pub fn available() -> bool {
    Int8Kernel::best().is_some()
}

/// `out[rows, n] = x[rows, k] · Wᵀ (+ bias)` with int8 weights and the best kernel; `rows <= 4`.
/// `xq` and `xs` are scratch.
pub fn matmul(
    x: &[f32],
    w: &Q8Matrix,
    bias: Option<&[f32]>,
    d: MatmulDims,
    out: &mut [f32],
    xq: &mut Vec<i16>,
    xs: &mut Vec<f32>,
) {
    let kernel = Int8Kernel::best()
        .expect("the int8 kernels need AVX2 and FMA: check int8::available() first");
    matmul_on(kernel, x, w, bias, d, out, xq, xs);
}

/// [`matmul`] on a chosen kernel, which must be [`Int8Kernel::available`].
#[allow(clippy::too_many_arguments)]
pub fn matmul_on(
    kernel: Int8Kernel,
    x: &[f32],
    w: &Q8Matrix,
    bias: Option<&[f32]>,
    d: MatmulDims,
    out: &mut [f32],
    xq: &mut Vec<i16>,
    xs: &mut Vec<f32>,
) {
    assert!(kernel.available(), "{kernel:?} does not run on this CPU");
    assert!(
        d.rows <= 4
            && d.k.is_multiple_of(QBLOCK)
            && w.q.len() == d.n * d.k
            && out.len() >= d.rows * d.n
    );
    let nb = d.k / QBLOCK;
    quantize_activations(&x[..d.rows * d.k], xq, xs);
    let (xq, xs) = (&xq[..], &xs[..]);
    let out_ptr = OutPtr(out.as_mut_ptr());
    let chunk = 16;
    (0..d.n.div_ceil(chunk)).into_par_iter().for_each(|c| {
        for r in c * chunk..((c + 1) * chunk).min(d.n) {
            let wq = &w.q[r * d.k..(r + 1) * d.k];
            let ws = &w.scales[r * nb..(r + 1) * nb];
            for t in 0..d.rows {
                let (xq, xs) = (&xq[t * d.k..(t + 1) * d.k], &xs[t * nb..(t + 1) * nb]);
                // SAFETY: the kernel's features were checked above; both rows hold `nb` blocks.
                let v = unsafe {
                    match kernel {
                        Int8Kernel::Avx512Vnni => row_dot_vnni(xq, xs, wq, ws),
                        Int8Kernel::Avx2 => row_dot_avx2(xq, xs, wq, ws),
                    }
                };
                // SAFETY: (t, r) belongs to this task only.
                unsafe { *out_ptr.ptr().add(t * d.n + r) = v + bias.map_or(0.0, |b| b[r]) };
            }
        }
    });
}

/// Quantises activation rows to int16 per block of [`QBLOCK`] (scale `max|x| / 32767`).
fn quantize_activations(x: &[f32], xq: &mut Vec<i16>, xs: &mut Vec<f32>) {
    xq.resize(x.len(), 0);
    xs.resize(x.len() / QBLOCK, 0.0);
    quantize::activations(x, xq, xs);
}

/// Dot product of one quantised activation row with one int8 weight row (AVX-512 VNNI).
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn row_dot_vnni(xq: &[i16], xs: &[f32], wq: &[i8], ws: &[f32]) -> f32 {
    let mut acc = _mm512_setzero_ps();
    for (b, (&sw, &sx)) in ws.iter().zip(xs).enumerate() {
        // SAFETY: block b spans 64 elements inside both rows.
        unsafe {
            let wv = _mm512_loadu_si512(wq.as_ptr().add(b * QBLOCK) as *const _);
            let lo = _mm512_cvtepi8_epi16(_mm512_castsi512_si256(wv));
            let hi = _mm512_cvtepi8_epi16(_mm512_extracti64x4_epi64::<1>(wv));
            let x0 = _mm512_loadu_si512(xq.as_ptr().add(b * QBLOCK) as *const _);
            let x1 = _mm512_loadu_si512(xq.as_ptr().add(b * QBLOCK + 32) as *const _);
            let dot =
                _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(_mm512_setzero_si512(), lo, x0), hi, x1);
            acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_set1_ps(sw * sx), acc);
        }
    }
    _mm512_reduce_add_ps(acc)
}

/// Dot product of one quantised activation row with one int8 weight row (AVX2): each group of 16
/// weights is sign-extended to int16 as it loads and multiplied pairwise with `vpmaddwd`. A block's four
/// partial sums stay below 4·2·127·32767 < 2³¹, so the integer sum is exact.
#[target_feature(enable = "avx2,fma")]
unsafe fn row_dot_avx2(xq: &[i16], xs: &[f32], wq: &[i8], ws: &[f32]) -> f32 {
    let mut acc = _mm256_setzero_ps();
    for (b, (&sw, &sx)) in ws.iter().zip(xs).enumerate() {
        // SAFETY: block b spans 64 elements inside both rows; each load reads 16 of them.
        unsafe {
            let (w, x) = (wq.as_ptr().add(b * QBLOCK), xq.as_ptr().add(b * QBLOCK));
            let part = |g: usize| {
                let wv = _mm256_cvtepi8_epi16(_mm_loadu_si128(w.add(g * 16) as *const _));
                _mm256_madd_epi16(wv, _mm256_loadu_si256(x.add(g * 16) as *const _))
            };
            let dot = _mm256_add_epi32(
                _mm256_add_epi32(part(0), part(1)),
                _mm256_add_epi32(part(2), part(3)),
            );
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(sw * sx), acc);
        }
    }
    let halves = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps::<1>(acc));
    let pairs = _mm_add_ps(halves, _mm_movehl_ps(halves, halves));
    _mm_cvtss_f32(_mm_add_ss(pairs, _mm_shuffle_ps::<1>(pairs, pairs)))
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
