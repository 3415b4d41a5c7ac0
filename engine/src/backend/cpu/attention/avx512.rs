//! AVX-512 blocked attention: one task per (sequence, KV head, block of [`QB`] query rows), or, for a
//! decode row split over its keys, per (sequence, KV head, part of the keys) with unnormalised states.
//!
//! A task walks its keys in chunks of 16. Each chunk's keys and values are copied once into f32 tiles
//! (this resolves the paged indirection and the int8/bf16 conversion in one place) and then serve every
//! query row of the block and every query head of the KV head's group (GQA). The scores of 16 keys are
//! one vector: built by `head_dim` broadcast FMAs from keys stored transposed when a block has several
//! rows to share the transposition, or from keys stored as rows, one partial-product vector per key
//! reduced together, for a single row (decode). The online softmax runs on that vector with a vectorised
//! `exp`, and the value update is 16 broadcast FMAs per head slice. A row's arithmetic depends only on
//! its own block and context, so results do not depend on the rest of the batch.

use std::arch::x86_64::*;
use std::cell::RefCell;

use super::KeyValues;
use crate::backend::AttnShape;

/// Keys per chunk (one vector of scores).
const KB: usize = 16;
/// Query rows per task.
pub(crate) const QB: usize = 16;

/// One sequence's rows and context.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Span {
    /// First query row of the sequence in the batch.
    pub q_start: usize,
    /// Query rows of the sequence.
    pub q_len: usize,
    /// Keys visible to its last query row.
    pub ctx: usize,
    /// Sink tokens of its window (0 when dense).
    pub sinks: usize,
    /// Recent tokens its window keeps, or 0 for dense attention.
    pub window: usize,
}

impl Span {
    /// The key ranges row `i` scores, each flagged with whether it uses the row's sink-rotated query:
    /// everything visible when dense or while the window has not slid, else the sinks and the window.
    fn segments(&self, i: usize, causal: bool) -> [(bool, std::ops::Range<usize>); 2] {
        let end = if causal {
            self.ctx - self.q_len + i + 1
        } else {
            self.ctx
        };
        if self.window == 0 || end <= self.sinks + self.window {
            [(false, 0..end), (false, 0..0)]
        } else {
            [(true, 0..self.sinks), (false, end - self.window..end)]
        }
    }
}

/// Output rows shared by tasks writing disjoint (row, head) slices.
#[derive(Clone, Copy)]
pub(crate) struct OutPtr(pub *mut f32);
// SAFETY: every task writes only its own (row, head) slices.
unsafe impl Send for OutPtr {}
unsafe impl Sync for OutPtr {}

thread_local! {
    static SCRATCH: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Where a task's softmax states end.
pub(crate) enum Finish<'a> {
    /// Normalised into the batch's output rows.
    Out(OutPtr),
    /// Kept unnormalised for a split-KV merge, as `[acc: states × head_dim][(max, sum): states × 2]`
    /// with the states ordered (row, head of the group).
    Partial(&'a mut [f32]),
}

/// Attention of rows `rows` (indices within the sequence) of `span` for KV head `g`, over the keys of
/// `keys` that each row sees; under a sink window, the sink keys are scored with the rows of `q_sinks`.
///
/// # Safety
/// The CPU must support AVX-512F, `shape.head_dim` must be a multiple of 16, `keys.start` a multiple of
/// 16; with [`Finish::Out`], the output must cover the batch's `[rows, num_heads * head_dim]` and no
/// other task may write the same (row, head) slices; a [`Finish::Partial`] slice must hold the states.
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn task<S: KeyValues>(
    (q, q_sinks): (&[f32], &[f32]),
    finish: Finish<'_>,
    kv: &S,
    span: Span,
    (rows, keys): (std::ops::Range<usize>, std::ops::Range<usize>),
    g: usize,
    shape: AttnShape,
    causal: bool,
) {
    let hd = shape.head_dim;
    let group = shape.num_heads / shape.num_kv_heads;
    let states = rows.len() * group;
    SCRATCH.with_borrow_mut(|scratch| {
        let need = 2 * KB * hd + states * (hd + 2);
        if scratch.len() < need {
            scratch.resize(need, 0.0);
        }
        let (tiles, state) = scratch.split_at_mut(2 * KB * hd);
        let (kt, vt) = tiles.split_at_mut(KB * hd);
        let (acc, ml) = state[..states * (hd + 2)].split_at_mut(states * hd);
        acc.fill(0.0);
        ml.chunks_exact_mut(2)
            .for_each(|c| c.copy_from_slice(&[f32::NEG_INFINITY, 0.0]));
        let last = span
            .segments(rows.end - 1, causal)
            .iter()
            .map(|(_, r)| r.end)
            .max()
            .unwrap_or(0)
            .min(keys.end);
        // One query row (decode) scores keys stored as rows: no transposition to pay for a single row.
        let key_rows = rows.len() == 1;
        let mut c0 = keys.start;
        while c0 < last {
            let n = (last - c0).min(KB);
            // Keys of the chunk some row scores (a window's row skips the blocks it dropped).
            let wanted = rows.clone().fold(0u32, |m, i| {
                span.segments(i, causal).iter().fold(m, |m, (_, r)| {
                    let (lo, hi) = (r.start.max(c0), r.end.min(c0 + n));
                    if lo < hi {
                        m | (((1u32 << (hi - c0)) - 1) & !((1u32 << (lo - c0)) - 1))
                    } else {
                        m
                    }
                })
            });
            if wanted == 0 {
                c0 += n;
                continue;
            }
            load_tiles(kv, c0, (n, wanted), (hd, key_rows), (kt, vt));
            for i in rows.clone() {
                for (sink, r) in span.segments(i, causal) {
                    let (lo, hi) = (r.start.max(c0), r.end.min(c0 + n));
                    if lo >= hi {
                        continue;
                    }
                    let src = if sink { q_sinks } else { q };
                    for hh in 0..group {
                        let h = g * group + hh;
                        let qv = &src[((span.q_start + i) * shape.num_heads + h) * hd..][..hd];
                        let st = (i - rows.start) * group + hh;
                        // SAFETY: features are enabled on this function; slices are in bounds.
                        unsafe {
                            update(
                                qv,
                                (kt, vt, key_rows),
                                (lo - c0, hi - c0),
                                shape.scale,
                                &mut acc[st * hd..(st + 1) * hd],
                                &mut ml[2 * st..2 * st + 2],
                            )
                        };
                    }
                }
            }
            c0 += n;
        }
        let out = match finish {
            Finish::Out(out) => out,
            Finish::Partial(dst) => {
                dst[..states * hd].copy_from_slice(acc);
                dst[states * hd..states * (hd + 2)].copy_from_slice(ml);
                return;
            }
        };
        for i in rows.clone() {
            for hh in 0..group {
                let st = (i - rows.start) * group + hh;
                let inv = if ml[2 * st + 1] > 0.0 {
                    1.0 / ml[2 * st + 1]
                } else {
                    0.0
                };
                let row = (span.q_start + i) * shape.num_heads + g * group + hh;
                for (d, a) in acc[st * hd..(st + 1) * hd].iter().enumerate() {
                    // SAFETY: (row, head) is this task's own slice of out.
                    unsafe { *out.0.add(row * hd + d) = a * inv };
                }
            }
        }
    });
}

/// Copies the keys `c0 + j` (`j < n`, bit `j` of `wanted` set) into `kt`, transposed `[hd, 16]` or,
/// with `key_rows`, as rows `[16, hd]`, and their values into `vt[16, hd]`, as f32, zero-filling the
/// others.
#[inline(always)]
fn load_tiles<S: KeyValues>(
    kv: &S,
    c0: usize,
    (n, wanted): (usize, u32),
    (hd, key_rows): (usize, bool),
    (kt, vt): (&mut [f32], &mut [f32]),
) {
    use super::super::kv::KvElem;
    let full = n == KB && wanted == (1u32 << KB) - 1;
    if !full {
        kt.fill(0.0);
        vt[..KB * hd].fill(0.0);
    }
    for j in (0..n).filter(|j| wanted & (1 << j) != 0) {
        let (ks, vs) = (kv.key_scale(c0 + j), kv.value_scale(c0 + j));
        if key_rows {
            kt[j * hd..(j + 1) * hd]
                .iter_mut()
                .zip(kv.key(c0 + j))
                .for_each(|(d, s)| *d = s.to_f32() * ks);
        } else {
            for (d, s) in kv.key(c0 + j).iter().enumerate() {
                kt[d * KB + j] = s.to_f32() * ks;
            }
        }
        let vr = &mut vt[j * hd..(j + 1) * hd];
        vr.iter_mut()
            .zip(kv.value(c0 + j))
            .for_each(|(d, s)| *d = s.to_f32() * vs);
    }
}

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
