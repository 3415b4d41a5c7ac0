//! AVX-512 chunk updates for the blocked attention ([`super::blocked`]): the scores of 16 keys are one
//! vector, built by `head_dim` broadcast FMAs from transposed keys, or for a single row from one
//! partial-product vector per key reduced together; the online softmax runs on it with a vectorised
//! `exp`, and the value update is 16 broadcast FMAs per head slice.

use std::arch::x86_64::*;

use super::blocked::{self, KB};

blocked::blocked_kernel!(Avx512, "avx512f");

/// Scores of 16 keys stored transposed `[hd, 16]`: one broadcast FMA per dimension, in eight
/// independent chains so FMA latency does not bound the loop.
#[target_feature(enable = "avx512f")]
unsafe fn scores(q: &[f32], kt: &[f32]) -> __m512 {
    let hd = q.len();
    assert!(kt.len() >= KB * hd && hd.is_multiple_of(8));
    let mut s = [_mm512_setzero_ps(); 8];
    for d in (0..hd).step_by(8) {
        for (i, si) in s.iter_mut().enumerate() {
            // SAFETY: (d + i) * 16 + 16 <= hd * 16.
            let k = unsafe { _mm512_loadu_ps(kt.as_ptr().add((d + i) * KB)) };
            *si = _mm512_fmadd_ps(_mm512_set1_ps(q[d + i]), k, *si);
        }
    }
    let s4 = [0, 1, 2, 3].map(|i| _mm512_add_ps(s[i], s[i + 4]));
    _mm512_add_ps(_mm512_add_ps(s4[0], s4[1]), _mm512_add_ps(s4[2], s4[3]))
}

/// Scores of 16 keys stored as rows `[16, hd]`: one vector of partial products per key, the sixteen
/// reduced across their lanes together by [`hsum16`].
#[target_feature(enable = "avx512f")]
unsafe fn scores_of_rows(q: &[f32], kr: &[f32]) -> __m512 {
    let hd = q.len();
    assert!(kr.len() >= KB * hd && hd.is_multiple_of(16));
    let mut parts = [_mm512_setzero_ps(); KB];
    for d in (0..hd).step_by(16) {
        // SAFETY: d + 16 <= hd for q and for each key row j < 16 of kr.
        unsafe {
            let qv = _mm512_loadu_ps(q.as_ptr().add(d));
            for (j, p) in parts.iter_mut().enumerate() {
                *p = _mm512_fmadd_ps(qv, _mm512_loadu_ps(kr.as_ptr().add(j * hd + d)), *p);
            }
        }
    }
    hsum16(&parts)
}

/// One online-softmax step of one (row, head) over keys `lo..hi` of a chunk.
#[target_feature(enable = "avx512f")]
unsafe fn update(
    q: &[f32],
    (kt, vt, key_rows): (&[f32], &[f32], bool),
    (lo, hi): (usize, usize),
    scale: f32,
    acc: &mut [f32],
    ml: &mut [f32],
) {
    let valid = hi;
    let hd = q.len();
    // SAFETY: every load below stays within q (hd), kt/vt (16 × hd) and acc (hd); hd % 16 == 0.
    unsafe {
        let scores = if key_rows {
            scores_of_rows(q, kt)
        } else {
            scores(q, kt)
        };
        let mask = (((1u32 << hi) - 1) & !((1u32 << lo) - 1)) as __mmask16;
        let s = _mm512_mask_mov_ps(
            _mm512_set1_ps(f32::NEG_INFINITY),
            mask,
            _mm512_mul_ps(scores, _mm512_set1_ps(scale)),
        );
        let m_new = ml[0].max(_mm512_reduce_max_ps(s));
        let corr = if m_new > ml[0] {
            (ml[0] - m_new).exp()
        } else {
            1.0
        };
        let p = _mm512_maskz_mov_ps(mask, exp512(_mm512_sub_ps(s, _mm512_set1_ps(m_new))));
        ml[0] = m_new;
        ml[1] = ml[1] * corr + _mm512_reduce_add_ps(p);
        let mut pj = [0f32; KB];
        _mm512_storeu_ps(pj.as_mut_ptr(), p);
        match hd / 16 {
            2 => pv::<2>(acc, vt, &pj, valid, corr),
            4 => pv::<4>(acc, vt, &pj, valid, corr),
            8 => pv::<8>(acc, vt, &pj, valid, corr),
            _ => {
                for c in (0..hd).step_by(16) {
                    let mut a =
                        _mm512_mul_ps(_mm512_loadu_ps(acc.as_ptr().add(c)), _mm512_set1_ps(corr));
                    for (j, &w) in pj.iter().enumerate().take(valid) {
                        a = _mm512_fmadd_ps(
                            _mm512_set1_ps(w),
                            _mm512_loadu_ps(vt.as_ptr().add(j * hd + c)),
                            a,
                        );
                    }
                    _mm512_storeu_ps(acc.as_mut_ptr().add(c), a);
                }
            }
        }
    }
}

/// `acc = acc·corr + Σ_j p_j·V_j` with the `NC` 16-lane slices of `acc` held in registers, even and
/// odd keys in separate accumulators (twice the independent FMA chains).
#[target_feature(enable = "avx512f")]
unsafe fn pv<const NC: usize>(
    acc: &mut [f32],
    vt: &[f32],
    pj: &[f32; KB],
    valid: usize,
    corr: f32,
) {
    let hd = NC * 16;
    assert!(acc.len() >= hd && vt.len() >= KB * hd);
    // SAFETY: bounds asserted above; rows j < 16 of vt.
    unsafe {
        let (mut even, mut odd) = ([_mm512_setzero_ps(); NC], [_mm512_setzero_ps(); NC]);
        for (c, ac) in even.iter_mut().enumerate() {
            *ac = _mm512_mul_ps(
                _mm512_loadu_ps(acc.as_ptr().add(16 * c)),
                _mm512_set1_ps(corr),
            );
        }
        let mut j = 0;
        while j < valid {
            let w0 = _mm512_set1_ps(pj[j]);
            let w1 = _mm512_set1_ps(if j + 1 < valid { pj[j + 1] } else { 0.0 });
            for c in 0..NC {
                even[c] = _mm512_fmadd_ps(
                    w0,
                    _mm512_loadu_ps(vt.as_ptr().add(j * hd + 16 * c)),
                    even[c],
                );
                // Row j + 1 < 16 exists in the tile (zeros past the valid keys).
                odd[c] = _mm512_fmadd_ps(
                    w1,
                    _mm512_loadu_ps(vt.as_ptr().add((j + 1) * hd + 16 * c)),
                    odd[c],
                );
            }
            j += 2;
        }
        for c in 0..NC {
            _mm512_storeu_ps(acc.as_mut_ptr().add(16 * c), _mm512_add_ps(even[c], odd[c]));
        }
    }
}

/// Lane `j` of the result is the sum of the lanes of `v[j]`.
#[target_feature(enable = "avx512f")]
pub(crate) fn hsum16(v: &[__m512; 16]) -> __m512 {
    // Level 1: pairs → [a0+a2, b0+b2, a1+a3, b1+b3] per 128-bit lane.
    let p =
        |a: __m512, b: __m512| _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
    // Level 2: two pairs → [a, b, c, d] partial sums per 128-bit lane.
    let q = |x: __m512, y: __m512| {
        _mm512_add_ps(
            _mm512_shuffle_ps::<0x44>(x, y),
            _mm512_shuffle_ps::<0xEE>(x, y),
        )
    };
    let quad = |i: usize| q(p(v[i], v[i + 1]), p(v[i + 2], v[i + 3]));
    let (e, f, g, h) = (quad(0), quad(4), quad(8), quad(12));
    // Level 3: add the four 128-bit lanes, keys in order.
    let u = _mm512_add_ps(
        _mm512_shuffle_f32x4::<0x44>(e, f),
        _mm512_shuffle_f32x4::<0xEE>(e, f),
    );
    let w = _mm512_add_ps(
        _mm512_shuffle_f32x4::<0x44>(g, h),
        _mm512_shuffle_f32x4::<0xEE>(g, h),
    );
    _mm512_add_ps(
        _mm512_shuffle_f32x4::<0x88>(u, w),
        _mm512_shuffle_f32x4::<0xDD>(u, w),
    )
}

/// `exp(x)` lane-wise for `x <= 0` (relative error ~2e-7): `x = n·ln2 + r`, degree-6 Taylor for `eʳ`
/// on `|r| <= ln2/2`, times `2ⁿ` by `vscalefps`. Inputs below -87 flush towards 0.
#[target_feature(enable = "avx512f")]
fn exp512(x: __m512) -> __m512 {
    let x = _mm512_max_ps(x, _mm512_set1_ps(-87.0));
    let n =
        _mm512_roundscale_ps::<0x08>(_mm512_mul_ps(x, _mm512_set1_ps(std::f32::consts::LOG2_E)));
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693_145_75), x);
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428_606_8e-6), r);
    let mut p = _mm512_set1_ps(1.0 / 720.0);
    for c in [1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0] {
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
    }
    _mm512_scalef_ps(p, n)
}
