//! AVX-512 BF16 register tiles for [`super::matmul`]: `vdpbf16ps` for bf16 weights (f32 weights go to
//! the FMA tiles of [`super::avx512_fma`]), and the reduction and tile dispatch both share.

use std::arch::x86_64::*;

use rayon::prelude::*;

use super::{MatmulDims, WeightSlice, for_each_tile};
use crate::backend::cpu::attention::avx512::hsum16;

/// Dispatches to the bf16 or f32 tiles; see the parent module.
pub(super) fn matmul(
    x: &[f32],
    w: WeightSlice<'_>,
    bias: Option<&[f32]>,
    d: MatmulDims,
    out: &mut [f32],
    scratch: &mut Vec<u16>,
) {
    match w {
        WeightSlice::Bf16(w) => {
            let kp = d.k.next_multiple_of(32);
            if scratch.len() < d.rows * kp {
                scratch.resize(d.rows * kp, 0);
            }
            let rows = &mut scratch[..d.rows * kp];
            rows.par_chunks_mut(kp)
                .zip(x[..d.rows * d.k].par_chunks(d.k))
                .for_each(|(dst, src)| {
                    // SAFETY: the caller checked avx512f/bw/bf16.
                    unsafe { to_bf16_row(src, dst) }
                });
            let xb: &[u16] = scratch;
            for_each_tile(d, bias, out, |t, r, m, nr, acc| {
                tile_bf16(xb, kp, w, d.k, t, r, m, nr, acc)
            });
        }
        WeightSlice::F32(_) => super::avx512_fma::matmul(x, w, bias, d, out),
    }
}

/// Rounds one f32 row to bf16 (nearest even), zero-padding it to `dst.len()`.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn to_bf16_row(src: &[f32], dst: &mut [u16]) {
    let mut i = 0;
    while i + 16 <= src.len() {
        // SAFETY: i + 16 <= len for both rows (dst is at least as long as src).
        unsafe {
            let v = _mm512_cvtneps_pbh(_mm512_loadu_ps(src.as_ptr().add(i)));
            _mm256_storeu_si256(
                dst.as_mut_ptr().add(i) as *mut __m256i,
                std::mem::transmute::<__m256bh, __m256i>(v),
            );
        }
        i += 16;
    }
    for (j, d) in dst.iter_mut().enumerate().skip(i) {
        *d = src.get(j).map_or(0, |v| half::bf16::from_f32(*v).to_bits());
    }
}

/// `$f::<[T,] M, R>(args)` for the tile shape `($m, $nr)`: `M` activation rows (1 to 4) by 1 or 4
/// weight rows; `$f::<T>` names a kernel's leading type parameter.
macro_rules! dispatch_tile {
    ($f:ident $(::<$($t:ty),+>)?, $m:expr, $nr:expr, $($args:expr),*) => {
        match ($m, $nr) {
            (1, 1) => $f::<$($($t,)+)? 1, 1>($($args),*),
            (2, 1) => $f::<$($($t,)+)? 2, 1>($($args),*),
            (3, 1) => $f::<$($($t,)+)? 3, 1>($($args),*),
            (4, 1) => $f::<$($($t,)+)? 4, 1>($($args),*),
            (1, _) => $f::<$($($t,)+)? 1, 4>($($args),*),
            (2, _) => $f::<$($($t,)+)? 2, 4>($($args),*),
            (3, _) => $f::<$($($t,)+)? 3, 4>($($args),*),
            _ => $f::<$($($t,)+)? 4, 4>($($args),*),
        }
    };
}
pub(super) use dispatch_tile;

#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn tile_bf16(
    xb: &[u16],
    kp: usize,
    w: &[u16],
    k: usize,
    t: usize,
    r: usize,
    m: usize,
    nr: usize,
    acc: &mut [[f32; 4]; 4],
) {
    assert!((t + m) * kp <= xb.len() && (r + nr) * k <= w.len());
    let (xp, wp) = (xb[t * kp..].as_ptr(), w[r * k..].as_ptr());
    // SAFETY: bounds asserted above; the caller checked the CPU features.
    unsafe { dispatch_tile!(bf16_kernel, m, nr, xp, kp, wp, k, acc) }
}

/// Reduces each accumulator to its lane sum into `out[m][r]` with one transpose-and-add tree for every
/// tile shape (missing slots are zeros). The tree sums each vector's lanes in the same order whatever its
/// slot, so a row's result does not depend on whether it sits in a full or a partial tile: a token's
/// output is bit-identical whatever else shares its batch.
#[target_feature(enable = "avx512f")]
pub(super) fn store_sums<const M: usize, const R: usize>(
    acc: &[[__m512; R]; M],
    out: &mut [[f32; 4]; 4],
) {
    let mut flat = [_mm512_setzero_ps(); 16];
    for (mi, row) in acc.iter().enumerate() {
        for (ri, v) in row.iter().enumerate() {
            flat[mi * 4 + ri] = *v;
        }
    }
    let mut sums = [0f32; 16];
    // SAFETY: sums holds 16 floats.
    unsafe { _mm512_storeu_ps(sums.as_mut_ptr(), hsum16(&flat)) };
    for (mi, o) in out.iter_mut().enumerate().take(M) {
        for (ri, y) in o.iter_mut().enumerate().take(R) {
            *y = sums[mi * 4 + ri];
        }
    }
}

/// `acc[m][r] = Σ_k xb[m, k] · w[r, k]` for an `M × R` tile; `xb` rows are zero-padded to `kp`.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn bf16_kernel<const M: usize, const R: usize>(
    xb: *const u16,
    kp: usize,
    w: *const u16,
    k: usize,
    out: &mut [[f32; 4]; 4],
) {
    let mut acc = [[_mm512_setzero_ps(); R]; M];
    if M == 1 {
        // SAFETY: forwarded from the caller.
        unsafe { bf16_rows_in_turn(xb, w, k, &mut acc[0]) };
        store_sums(&acc, out);
        return;
    }
    let mut c = 0;
    while c < k {
        let mask = lanes_before(k - c);
        // SAFETY: masked loads stay inside row r of w; xb rows are padded to kp >= c + 32.
        unsafe {
            let mut wv = [_mm512_setzero_si512(); R];
            for (ri, v) in wv.iter_mut().enumerate() {
                *v = _mm512_maskz_loadu_epi16(mask, w.add(ri * k + c) as *const i16);
            }
            for (mi, acc_row) in acc.iter_mut().enumerate() {
                let xv: __m512bh =
                    std::mem::transmute(_mm512_loadu_si512(xb.add(mi * kp + c) as *const _));
                for (a, wr) in acc_row.iter_mut().zip(&wv) {
                    *a = _mm512_dpbf16_ps(*a, xv, std::mem::transmute::<__m512i, __m512bh>(*wr));
                }
            }
        }
        c += 32;
    }
    store_sums(&acc, out);
}

/// The lanes of a 32-element bf16 step that lie before the row's end, `left` elements away (its low 16
/// bits serve the 16-lane f32 steps).
#[inline(always)]
pub(super) fn lanes_before(left: usize) -> __mmask32 {
    if left >= 32 {
        u32::MAX
    } else {
        (1u32 << left) - 1
    }
}

/// The one-activation-row case of [`bf16_kernel`] (decode), bound by memory: each weight row is read
/// to its end before the next, so the tile's rows, which lie back to back, are one sequential stream
/// for the hardware prefetcher. Interleaving the rows, as the many-row tiles do to share activation
/// loads, splits it into streams a few cache lines long that the prefetcher does not follow (decode
/// ran 20 % slower that way). Each accumulator sees the same products in the same order as in
/// [`bf16_kernel`]'s main loop, so the sums are bit-identical.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn bf16_rows_in_turn<const R: usize>(
    xb: *const u16,
    w: *const u16,
    k: usize,
    acc: &mut [__m512; R],
) {
    for (ri, a) in acc.iter_mut().enumerate() {
        let mut c = 0;
        while c < k {
            let mask = lanes_before(k - c);
            // SAFETY: as in bf16_kernel: the masked load stays inside row ri of w, and the
            // activation row is padded to a multiple of 32 elements.
            unsafe {
                let wv = _mm512_maskz_loadu_epi16(mask, w.add(ri * k + c) as *const i16);
                let xv: __m512bh = std::mem::transmute(_mm512_loadu_si512(xb.add(c) as *const _));
                *a = _mm512_dpbf16_ps(*a, xv, std::mem::transmute::<__m512i, __m512bh>(wv));
            }
            c += 32;
        }
    }
}
