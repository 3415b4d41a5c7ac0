//! AVX2 + FMA chunk updates for the blocked attention ([`super::blocked`]), for x86-64 CPUs without
//! AVX-512: the scores of a chunk's 16 keys are two 8-lane vectors, built by broadcast FMAs from
//! transposed keys (four independent chains per half), or for a single row from one partial-product
//! vector per key, eight keys reduced together. The online softmax runs on them with a vectorised
//! `exp`, and the value update keeps the head's accumulator in registers across the chunk's keys.

use std::arch::x86_64::*;

use super::blocked::{self, KB};

blocked::blocked_kernel!(Avx2, "avx2,fma");

/// Whether this CPU has the instructions the kernel uses.
pub(crate) fn available() -> bool {
    is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")
}

/// Scores of 16 keys stored transposed `[hd, 16]`, as keys 0–7 and 8–15: one broadcast FMA per
/// dimension and half, in four independent chains per half.
#[target_feature(enable = "avx2,fma")]
unsafe fn scores(q: &[f32], kt: &[f32]) -> [__m256; 2] {
    let hd = q.len();
    assert!(kt.len() >= KB * hd && hd.is_multiple_of(4));
    let mut s = [[_mm256_setzero_ps(); 2]; 4];
    for d in (0..hd).step_by(4) {
        for (i, si) in s.iter_mut().enumerate() {
            let qb = _mm256_set1_ps(q[d + i]);
            // SAFETY: (d + i) * 16 + 16 <= hd * 16.
            unsafe {
                let row = kt.as_ptr().add((d + i) * KB);
                si[0] = _mm256_fmadd_ps(qb, _mm256_loadu_ps(row), si[0]);
                si[1] = _mm256_fmadd_ps(qb, _mm256_loadu_ps(row.add(8)), si[1]);
            }
        }
    }
    [0, 1].map(|h| {
        _mm256_add_ps(
            _mm256_add_ps(s[0][h], s[2][h]),
            _mm256_add_ps(s[1][h], s[3][h]),
        )
    })
}

/// Scores of 16 keys stored as rows `[16, hd]`: for each half of the keys, one vector of partial
/// products per key, the eight reduced across their lanes together by [`hsum8x8`].
#[target_feature(enable = "avx2,fma")]
unsafe fn scores_of_rows(q: &[f32], kr: &[f32]) -> [__m256; 2] {
    let hd = q.len();
    assert!(kr.len() >= KB * hd && hd.is_multiple_of(8));
    [0, 1].map(|half| {
        let mut parts = [_mm256_setzero_ps(); 8];
        for d in (0..hd).step_by(8) {
            // SAFETY: d + 8 <= hd for q and for each key row of kr.
            unsafe {
                let qv = _mm256_loadu_ps(q.as_ptr().add(d));
                for (j, p) in parts.iter_mut().enumerate() {
                    let key = kr.as_ptr().add((half * 8 + j) * hd + d);
                    *p = _mm256_fmadd_ps(qv, _mm256_loadu_ps(key), *p);
                }
            }
        }
        hsum8x8(&parts)
    })
}

/// Lane `j` of the result is the sum of the lanes of `v[j]`.
#[target_feature(enable = "avx2")]
fn hsum8x8(v: &[__m256; 8]) -> __m256 {
    let (t0, t1) = (_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
    let (t2, t3) = (_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
    // Per 128-bit half: [v0, v1, v2, v3] and [v4, v5, v6, v7], each the sum of four of its lanes.
    let (u0, u1) = (_mm256_hadd_ps(t0, t1), _mm256_hadd_ps(t2, t3));
    _mm256_add_ps(
        _mm256_permute2f128_ps::<0x20>(u0, u1),
        _mm256_permute2f128_ps::<0x31>(u0, u1),
    )
}

/// The lanes of keys `lo..hi` of a 16-key chunk, as all-ones masks in two halves.
#[target_feature(enable = "avx2")]
fn key_masks(lo: usize, hi: usize) -> [__m256; 2] {
    let (lo, hi) = (_mm256_set1_ps(lo as f32), _mm256_set1_ps(hi as f32));
    [0.0f32, 8.0].map(|first| {
        let idx = _mm256_add_ps(
            _mm256_setr_ps(0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0),
            _mm256_set1_ps(first),
        );
        _mm256_and_ps(
            _mm256_cmp_ps::<_CMP_GE_OQ>(idx, lo),
            _mm256_cmp_ps::<_CMP_LT_OQ>(idx, hi),
        )
    })
}

/// One online-softmax step of one (row, head) over keys `lo..hi` of a chunk (see [`ChunkUpdate`]).
#[target_feature(enable = "avx2,fma")]
unsafe fn update(
    q: &[f32],
    (kt, vt, key_rows): (&[f32], &[f32], bool),
    (lo, hi): (usize, usize),
    scale: f32,
    acc: &mut [f32],
    ml: &mut [f32],
) {
    let hd = q.len();
    // SAFETY: every load below stays within q (hd), kt/vt (16 × hd) and acc (hd); hd % 16 == 0.
    let raw = unsafe {
        if key_rows {
            scores_of_rows(q, kt)
        } else {
            scores(q, kt)
        }
    };
    let masks = key_masks(lo, hi);
    let s = [0, 1].map(|h| {
        _mm256_blendv_ps(
            _mm256_set1_ps(f32::NEG_INFINITY),
            _mm256_mul_ps(raw[h], _mm256_set1_ps(scale)),
            masks[h],
        )
    });
    let m_new = ml[0].max(hmax8(_mm256_max_ps(s[0], s[1])));
    let corr = if m_new > ml[0] {
        (ml[0] - m_new).exp()
    } else {
        1.0
    };
    let p =
        [0, 1].map(|h| _mm256_and_ps(exp256(_mm256_sub_ps(s[h], _mm256_set1_ps(m_new))), masks[h]));
    ml[0] = m_new;
    ml[1] = ml[1] * corr + hsum8(_mm256_add_ps(p[0], p[1]));
    let mut pj = [0f32; KB];
    // SAFETY: pj holds 16 floats.
    unsafe {
        _mm256_storeu_ps(pj.as_mut_ptr(), p[0]);
        _mm256_storeu_ps(pj.as_mut_ptr().add(8), p[1]);
    }
    // SAFETY: acc holds hd floats and vt 16 rows of hd.
    unsafe {
        match hd / 8 {
            2 => pv::<2>(acc, vt, &pj, hi, corr),
            4 => pv::<4>(acc, vt, &pj, hi, corr),
            8 => pv::<8>(acc, vt, &pj, hi, corr),
            _ => pv_any(acc, vt, &pj, hi, corr),
        }
    }
}

/// `acc = acc·corr + Σ_{j < valid} p_j·V_j` with the `NC` 8-lane slices of `acc` held in registers.
///
/// # Safety
/// `acc` holds `8·NC` floats and `vt` 16 rows of them.
#[target_feature(enable = "avx2,fma")]
unsafe fn pv<const NC: usize>(
    acc: &mut [f32],
    vt: &[f32],
    pj: &[f32; KB],
    valid: usize,
    corr: f32,
) {
    let hd = NC * 8;
    assert!(acc.len() >= hd && vt.len() >= KB * hd);
    // SAFETY: bounds asserted above; rows j < 16 of vt.
    unsafe {
        let mut a = [_mm256_setzero_ps(); NC];
        for (c, ac) in a.iter_mut().enumerate() {
            *ac = _mm256_mul_ps(
                _mm256_loadu_ps(acc.as_ptr().add(8 * c)),
                _mm256_set1_ps(corr),
            );
        }
        for (j, &w) in pj.iter().enumerate().take(valid) {
            let wb = _mm256_set1_ps(w);
            for (c, ac) in a.iter_mut().enumerate() {
                *ac = _mm256_fmadd_ps(wb, _mm256_loadu_ps(vt.as_ptr().add(j * hd + 8 * c)), *ac);
            }
        }
        for (c, ac) in a.iter().enumerate() {
            _mm256_storeu_ps(acc.as_mut_ptr().add(8 * c), *ac);
        }
    }
}

/// [`pv`] for any head width that is a multiple of 8, one slice at a time.
///
/// # Safety
/// `acc` holds `hd` floats (a multiple of 8) and `vt` 16 rows of them.
#[target_feature(enable = "avx2,fma")]
unsafe fn pv_any(acc: &mut [f32], vt: &[f32], pj: &[f32; KB], valid: usize, corr: f32) {
    let hd = acc.len();
    assert!(hd.is_multiple_of(8) && vt.len() >= KB * hd);
    for c in (0..hd).step_by(8) {
        // SAFETY: c + 8 <= hd, in acc and in each row of vt.
        unsafe {
            let mut a = _mm256_mul_ps(_mm256_loadu_ps(acc.as_ptr().add(c)), _mm256_set1_ps(corr));
            for (j, &w) in pj.iter().enumerate().take(valid) {
                let v = _mm256_loadu_ps(vt.as_ptr().add(j * hd + c));
                a = _mm256_fmadd_ps(_mm256_set1_ps(w), v, a);
            }
            _mm256_storeu_ps(acc.as_mut_ptr().add(c), a);
        }
    }
}

/// The largest of the eight lanes.
#[target_feature(enable = "avx2")]
fn hmax8(v: __m256) -> f32 {
    let quad = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let pair = _mm_max_ps(quad, _mm_movehl_ps(quad, quad));
    _mm_cvtss_f32(_mm_max_ss(pair, _mm_shuffle_ps::<1>(pair, pair)))
}

/// The sum of the eight lanes, in one fixed order: halves, then pairs, then the last two (also the
/// AVX2 matmul's reduction).
#[target_feature(enable = "avx2")]
pub(crate) fn hsum8(v: __m256) -> f32 {
    let quad = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let pair = _mm_add_ps(quad, _mm_movehl_ps(quad, quad));
    _mm_cvtss_f32(_mm_add_ss(pair, _mm_shuffle_ps::<1>(pair, pair)))
}

/// `exp(x)` lane-wise for `x <= 0` (relative error ~2e-7): `x = n·ln2 + r`, degree-6 Taylor for `eʳ`
/// on `|r| <= ln2/2`, times `2ⁿ` built in the exponent bits. Inputs below -87 flush towards 0.
#[target_feature(enable = "avx2,fma")]
fn exp256(x: __m256) -> __m256 {
    let x = _mm256_max_ps(x, _mm256_set1_ps(-87.0));
    let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(
        x,
        _mm256_set1_ps(std::f32::consts::LOG2_E),
    ));
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693_145_75), x);
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428_606_8e-6), r);
    let mut p = _mm256_set1_ps(1.0 / 720.0);
    for c in [1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0] {
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
    }
    // n >= -126 here (x >= -87), so 2ⁿ is a normal float: its biased exponent is n + 127.
    let biased = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
    _mm256_mul_ps(p, _mm256_castsi256_ps(_mm256_slli_epi32::<23>(biased)))
}
