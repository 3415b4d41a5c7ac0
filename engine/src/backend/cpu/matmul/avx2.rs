//! AVX2 + FMA register tiles for [`super::matmul`], for x86-64 CPUs without AVX-512 (Zen 1–3, most
//! Intel client parts before Ice Lake, many cloud instances).
//!
//! Activations stay f32 (AVX2 has no bf16 dot product): bf16 weights are widened to f32 eight at a
//! time (zero-extend, shift left by 16) and multiplied with FMA. With 16 vector registers, a tile is
//! at most 4 activation rows × 2 weight rows (8 accumulators, 2 weight vectors, 1 activation vector);
//! a 4-weight-row tile of the walker runs as two of them. One activation row (decode) takes four weight
//! rows at once, four independent FMA chains, so the loop is bound by memory, not by FMA latency.
//!
//! Every accumulator sums its products in `k` order, 8 lanes at a time, the row's tail zero-padded into
//! one last step, then reduces its lanes with one fixed tree: a token's output is bit-identical
//! whatever else shares its batch.

use std::arch::x86_64::*;

use super::{MatmulDims, WeightSlice, for_each_tile};
use crate::backend::cpu::attention::avx2::hsum8;

/// Whether this CPU has the instructions the kernels use.
pub(super) fn available() -> bool {
    is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")
}

/// Dispatches to the bf16 or f32 tiles; see the parent module. The caller checked [`available`].
pub(super) fn matmul(
    x: &[f32],
    w: WeightSlice<'_>,
    bias: Option<&[f32]>,
    d: MatmulDims,
    out: &mut [f32],
) {
    for_each_tile(d, bias, out, |t, r, m, nr, acc| {
        tile(x, w, d.k, [t, r, m, nr], acc)
    });
}

/// Weight elements the kernels can widen to eight f32 lanes.
trait Lanes: Copy + Default {
    /// Eight elements from `p` as f32.
    ///
    /// # Safety
    /// `p..p + 8` must be readable; the CPU must have AVX2.
    unsafe fn load8(p: *const Self) -> __m256;
}

impl Lanes for u16 {
    #[inline(always)]
    unsafe fn load8(p: *const u16) -> __m256 {
        // SAFETY: forwarded from the caller.
        unsafe {
            let halves = _mm_loadu_si128(p as *const __m128i);
            _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(halves), 16))
        }
    }
}

impl Lanes for f32 {
    #[inline(always)]
    unsafe fn load8(p: *const f32) -> __m256 {
        // SAFETY: forwarded from the caller.
        unsafe { _mm256_loadu_ps(p) }
    }
}

/// Fills `acc[..m][..nr]` for activation rows `t..t + m` and weight rows `r..r + nr` (`[t, r, m, nr]`).
#[inline(always)]
fn tile(x: &[f32], w: WeightSlice<'_>, k: usize, at: [usize; 4], acc: &mut [[f32; 4]; 4]) {
    match w {
        WeightSlice::Bf16(w) => tile_of(x, w, k, at, acc),
        WeightSlice::F32(w) => tile_of(x, w, k, at, acc),
    }
}

#[inline(always)]
fn tile_of<W: Lanes>(x: &[f32], w: &[W], k: usize, at: [usize; 4], acc: &mut [[f32; 4]; 4]) {
    let [t, r, m, nr] = at;
    assert!((t + m) * k <= x.len() && (r + nr) * k <= w.len());
    let (xp, wp) = (x[t * k..].as_ptr(), w[r * k..].as_ptr());
    // SAFETY: the bounds are asserted above; the caller checked the CPU features. Each kernel reads
    // rows of `k` elements from `xp` (m of them) and from its weight pointer (its R of them).
    unsafe {
        match (m, nr) {
            (1, 1) => kernel::<W, 1, 1>(xp, wp, k, acc, 0),
            (1, _) => kernel::<W, 1, 4>(xp, wp, k, acc, 0),
            (2, 1) => kernel::<W, 2, 1>(xp, wp, k, acc, 0),
            (3, 1) => kernel::<W, 3, 1>(xp, wp, k, acc, 0),
            (4, 1) => kernel::<W, 4, 1>(xp, wp, k, acc, 0),
            (2, _) => pairs::<W, 2>(xp, wp, k, acc),
            (3, _) => pairs::<W, 3>(xp, wp, k, acc),
            _ => pairs::<W, 4>(xp, wp, k, acc),
        }
    }
}

/// An `M × 4` tile as two `M × 2` tiles (weight rows 0–1, then 2–3).
///
/// # Safety
/// As [`kernel`], for four weight rows.
#[inline(always)]
unsafe fn pairs<W: Lanes, const M: usize>(
    x: *const f32,
    w: *const W,
    k: usize,
    acc: &mut [[f32; 4]; 4],
) {
    // SAFETY: forwarded from the caller; rows 2–3 start 2·k elements in.
    unsafe {
        kernel::<W, M, 2>(x, w, k, acc, 0);
        kernel::<W, M, 2>(x, w.add(2 * k), k, acc, 2);
    }
}

/// `acc[m][col + r] = Σ_k x[m, k] · w[r, k]` for an `M × R` tile.
///
/// # Safety
/// `x` must point at `M` rows of `k` f32 and `w` at `R` rows of `k` elements; the CPU must have AVX2
/// and FMA.
#[target_feature(enable = "avx2,fma")]
unsafe fn kernel<W: Lanes, const M: usize, const R: usize>(
    x: *const f32,
    w: *const W,
    k: usize,
    out: &mut [[f32; 4]; 4],
    col: usize,
) {
    let mut acc = [[_mm256_setzero_ps(); R]; M];
    let full = k - k % 8;
    let mut c = 0;
    while c < full {
        // SAFETY: c + 8 <= k, inside every row.
        unsafe { step(x, k, w, k, c, &mut acc) };
        c += 8;
    }
    if full < k {
        let (xt, wt) = (tail::<f32, M>(x, k, full), tail::<W, R>(w, k, full));
        // SAFETY: the tails are zero-padded copies of 8 elements per row.
        unsafe {
            step(
                xt.as_ptr() as *const f32,
                8,
                wt.as_ptr() as *const W,
                8,
                0,
                &mut acc,
            )
        };
    }
    for (mi, row) in acc.iter().enumerate() {
        for (ri, v) in row.iter().enumerate() {
            out[mi][col + ri] = hsum8(*v);
        }
    }
}

/// One 8-element step of every accumulator: `acc[m][r] += x[m, c..c + 8] · w[r, c..c + 8]`.
///
/// # Safety
/// `c + 8` elements of each of the `M` rows of `x` (stride `xs`) and `R` rows of `w` (stride `ws`)
/// must be readable; the CPU must have AVX2 and FMA.
#[inline(always)]
unsafe fn step<W: Lanes, const M: usize, const R: usize>(
    x: *const f32,
    xs: usize,
    w: *const W,
    ws: usize,
    c: usize,
    acc: &mut [[__m256; R]; M],
) {
    // SAFETY: forwarded from the caller.
    unsafe {
        let mut wv = [_mm256_setzero_ps(); R];
        for (ri, v) in wv.iter_mut().enumerate() {
            *v = W::load8(w.add(ri * ws + c));
        }
        for (mi, acc_row) in acc.iter_mut().enumerate() {
            let xv = _mm256_loadu_ps(x.add(mi * xs + c));
            for (a, wr) in acc_row.iter_mut().zip(&wv) {
                *a = _mm256_fmadd_ps(xv, *wr, *a);
            }
        }
    }
}

/// The last `k - from` (< 8) elements of each of `N` rows of `k` elements, zero-padded to 8.
fn tail<T: Copy + Default, const N: usize>(p: *const T, k: usize, from: usize) -> [[T; 8]; N] {
    let mut rows = [[T::default(); 8]; N];
    for (i, row) in rows.iter_mut().enumerate() {
        for (j, v) in row.iter_mut().enumerate().take(k - from) {
            // SAFETY: from + j < k, inside row i (the caller's bounds).
            *v = unsafe { *p.add(i * k + from + j) };
        }
    }
    rows
}
