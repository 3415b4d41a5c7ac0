//! AVX-512 FMA register tiles for [`super::matmul`]: f32 weights, and bf16 weights on CPUs without
//! AVX-512 BF16 (Skylake-SP, Cascade Lake, Ice Lake: many cloud instances).
//!
//! Activations stay f32. bf16 weights are widened to f32 sixteen at a time (zero-extend, shift left by
//! 16), as the AVX2 kernel does eight at a time, and with 32 vector registers a tile is a full 4
//! activation rows × 4 weight rows (16 accumulators, 4 weight vectors, 1 activation vector). Each
//! accumulator sums its products in `k` order, 16 lanes at a time, the row's tail masked, and the tile's
//! sums are reduced by the one tree every AVX-512 tile uses, so a token's output is bit-identical
//! whatever else shares its batch. One activation row (decode) runs the same interleaved loop over four
//! weight rows, four independent FMA chains: on an Ice Lake server this decoded bf16 weights faster
//! than reading each weight row to its end before the next, as the BF16 kernel does (BENCHMARKS.md,
//! "AVX-512 without BF16").

use std::arch::x86_64::*;

use super::avx512::{dispatch_tile, lanes_before, store_sums};
use super::{MatmulDims, WeightSlice, for_each_tile};

/// Whether this CPU has the instructions the kernels use.
pub(super) fn available() -> bool {
    is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vl")
}

/// `out = x · Wᵀ (+ bias)`; the caller checked [`available`].
pub(super) fn matmul(
    x: &[f32],
    w: WeightSlice<'_>,
    bias: Option<&[f32]>,
    d: MatmulDims,
    out: &mut [f32],
) {
    for_each_tile(d, bias, out, |t, r, m, nr, acc| match w {
        WeightSlice::Bf16(w) => tile(x, w, d.k, [t, r, m, nr], acc),
        WeightSlice::F32(w) => tile(x, w, d.k, [t, r, m, nr], acc),
    });
}

/// Weight elements the kernels can load as sixteen f32 lanes.
trait Lanes: Copy {
    /// The 16 elements at `p` under `mask` (zeros elsewhere) as f32.
    ///
    /// # Safety
    /// The masked lanes of `p..p + 16` must be readable; the CPU must have AVX-512 F, BW and VL.
    unsafe fn load16(p: *const Self, mask: __mmask16) -> __m512;
}

impl Lanes for u16 {
    #[inline(always)]
    unsafe fn load16(p: *const u16, mask: __mmask16) -> __m512 {
        // SAFETY: forwarded from the caller.
        unsafe {
            let halves = _mm256_maskz_loadu_epi16(mask, p as *const i16);
            _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(halves), 16))
        }
    }
}

impl Lanes for f32 {
    #[inline(always)]
    unsafe fn load16(p: *const f32, mask: __mmask16) -> __m512 {
        // SAFETY: forwarded from the caller.
        unsafe { _mm512_maskz_loadu_ps(mask, p) }
    }
}

/// Fills `acc[..m][..nr]` for activation rows `t..t + m` and weight rows `r..r + nr` (`[t, r, m, nr]`).
#[inline(always)]
fn tile<W: Lanes>(x: &[f32], w: &[W], k: usize, at: [usize; 4], acc: &mut [[f32; 4]; 4]) {
    let [t, r, m, nr] = at;
    assert!((t + m) * k <= x.len() && (r + nr) * k <= w.len());
    let (xp, wp) = (x[t * k..].as_ptr(), w[r * k..].as_ptr());
    // SAFETY: the bounds are asserted above; the caller checked the CPU features.
    unsafe { dispatch_tile!(kernel::<W>, m, nr, xp, wp, k, acc) }
}

/// `acc[m][r] = Σ_k x[m, k] · w[r, k]` for an `M × R` tile.
///
/// # Safety
/// `x` must point at `M` rows of `k` f32 and `w` at `R` rows of `k` elements; the CPU must have
/// AVX-512 F, BW and VL.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
unsafe fn kernel<W: Lanes, const M: usize, const R: usize>(
    x: *const f32,
    w: *const W,
    k: usize,
    out: &mut [[f32; 4]; 4],
) {
    let mut acc = [[_mm512_setzero_ps(); R]; M];
    let mut c = 0;
    while c < k {
        // The low 16 of the 32-lane mask: all set from 16 elements left on.
        let mask = lanes_before(k - c) as __mmask16;
        // SAFETY: the masked loads stay inside row r of w and row m of x.
        unsafe {
            let mut wv = [_mm512_setzero_ps(); R];
            for (ri, v) in wv.iter_mut().enumerate() {
                *v = W::load16(w.add(ri * k + c), mask);
            }
            for (mi, acc_row) in acc.iter_mut().enumerate() {
                let xv = _mm512_maskz_loadu_ps(mask, x.add(mi * k + c));
                for (a, wr) in acc_row.iter_mut().zip(&wv) {
                    *a = _mm512_fmadd_ps(xv, *wr, *a);
                }
            }
        }
        c += 16;
    }
    store_sums(&acc, out);
}
