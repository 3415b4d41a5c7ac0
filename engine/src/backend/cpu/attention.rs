//! CPU attention: causal attention over the paged KV pool and bidirectional varlen attention.
//!
//! With AVX-512 (run-time detection) and a head width that is a multiple of 16, the blocked kernel in
//! `avx512` runs one task per (sequence, KV head, block of query rows). Otherwise, and as the reference,
//! the portable path runs one task per (query row, head), streaming keys in chunks of 32 with an
//! online softmax (running max and sum, rescaled once per chunk); nothing is allocated and the score
//! vector never materialises.

use rayon::prelude::*;

use super::kv::KvElem;
use crate::backend::AttnShape;

#[cfg(target_arch = "x86_64")]
mod avx512;

/// Keys scored per online-softmax step.
const CHUNK: usize = 32;
/// Largest head width the stack accumulators support.
pub const MAX_HEAD_DIM: usize = 256;

/// Where the keys and values of one (sequence, KV head) live.
pub(crate) trait KeyValues: Sync {
    /// Element type.
    type T: KvElem;
    /// Key `j` of the sequence.
    fn key(&self, j: usize) -> &[Self::T];
    /// Value `j` of the sequence.
    fn value(&self, j: usize) -> &[Self::T];
}

/// A sequence's keys in the paged pool `[num_blocks, block_size, num_kv_heads, head_dim]`.
pub(crate) struct Paged<'a, T> {
    pub k: &'a [T],
    pub v: &'a [T],
    pub blocks: &'a [u32],
    pub block_size: usize,
    pub row_stride: usize,
    pub head_off: usize,
    pub head_dim: usize,
}

impl<T: KvElem> Paged<'_, T> {
    #[inline(always)]
    fn offset(&self, j: usize) -> usize {
        let block = self.blocks[j / self.block_size] as usize;
        (block * self.block_size + j % self.block_size) * self.row_stride + self.head_off
    }
}

impl<T: KvElem> KeyValues for Paged<'_, T> {
    type T = T;
    #[inline(always)]
    fn key(&self, j: usize) -> &[T] {
        let o = self.offset(j);
        &self.k[o..o + self.head_dim]
    }
    #[inline(always)]
    fn value(&self, j: usize) -> &[T] {
        let o = self.offset(j);
        &self.v[o..o + self.head_dim]
    }
}

/// A sequence's keys in dense row-major `[tokens, num_kv_heads * head_dim]` buffers.
pub(crate) struct Dense<'a> {
    pub k: &'a [f32],
    pub v: &'a [f32],
    pub start: usize,
    pub row_stride: usize,
    pub head_off: usize,
    pub head_dim: usize,
}

impl KeyValues for Dense<'_> {
    type T = f32;
    #[inline(always)]
    fn key(&self, j: usize) -> &[f32] {
        let o = (self.start + j) * self.row_stride + self.head_off;
        &self.k[o..o + self.head_dim]
    }
    #[inline(always)]
    fn value(&self, j: usize) -> &[f32] {
        let o = (self.start + j) * self.row_stride + self.head_off;
        &self.v[o..o + self.head_dim]
    }
}

/// Attention of `q[rows, num_heads * head_dim]` for a varlen batch: sequence `s` owns query rows
/// `qsl[s]..qsl[s + 1]`, sees `ctx(s)` keys in total, and `kv_for(s, kv_head)` finds them. With `causal`
/// the last row of a sequence sees all `ctx(s)` keys and each earlier row one fewer.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run<S: KeyValues>(
    q: &[f32],
    out: &mut [f32],
    qsl: &[u32],
    ctx: impl Fn(usize) -> usize + Sync,
    kv_for: impl Fn(usize, usize) -> S + Sync,
    shape: AttnShape,
    causal: bool,
) {
    let num_seqs = qsl.len() - 1;
    let rows = qsl[num_seqs] as usize;
    assert!(
        out.len() >= rows * shape.num_heads * shape.head_dim && q.len() >= out.len().min(q.len())
    );
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx512f") && shape.head_dim % 16 == 0 {
        return run_blocked(q, out, qsl, ctx, kv_for, shape, causal);
    }
    let group = shape.num_heads / shape.num_kv_heads;
    out[..rows * shape.num_heads * shape.head_dim]
        .par_chunks_mut(shape.head_dim)
        .enumerate()
        .for_each(|(i, o)| {
            let (t, h) = (i / shape.num_heads, i % shape.num_heads);
            let s = qsl.partition_point(|&x| x as usize <= t) - 1;
            let (i, q_len) = (t - qsl[s] as usize, (qsl[s + 1] - qsl[s]) as usize);
            let visible = if causal {
                ctx(s) - q_len + i + 1
            } else {
                ctx(s)
            };
            let qv = &q[(t * shape.num_heads + h) * shape.head_dim..][..shape.head_dim];
            attend(qv, &kv_for(s, h / group), visible, shape.scale, o);
        });
}

#[cfg(target_arch = "x86_64")]
fn run_blocked<S: KeyValues>(
    q: &[f32],
    out: &mut [f32],
    qsl: &[u32],
    ctx: impl Fn(usize) -> usize + Sync,
    kv_for: impl Fn(usize, usize) -> S + Sync,
    shape: AttnShape,
    causal: bool,
) {
    let num_seqs = qsl.len() - 1;
    let kvh = shape.num_kv_heads;
    let max_q = qsl
        .windows(2)
        .map(|w| (w[1] - w[0]) as usize)
        .max()
        .unwrap_or(0);
    let blocks = max_q.div_ceil(avx512::QB);
    let out_ptr = avx512::OutPtr(out.as_mut_ptr());
    (0..num_seqs * blocks * kvh)
        .into_par_iter()
        .for_each(|task| {
            let (s, b, g) = (task / (blocks * kvh), task / kvh % blocks, task % kvh);
            let span = avx512::Span {
                q_start: qsl[s] as usize,
                q_len: (qsl[s + 1] - qsl[s]) as usize,
                ctx: ctx(s),
            };
            let r0 = b * avx512::QB;
            if r0 < span.q_len {
                let rows = r0..(r0 + avx512::QB).min(span.q_len);
                // SAFETY: avx512f detected, head_dim % 16 == 0, out covers every row (asserted by the
                // caller), and tasks own disjoint (row, head) slices.
                unsafe { avx512::task(q, out_ptr, &kv_for(s, g), span, rows, g, shape, causal) }
            }
        });
}

/// Softmax-weighted sum of the first `len` values for query `q`, into `out`.
pub(crate) fn attend<S: KeyValues>(q: &[f32], kv: &S, len: usize, scale: f32, out: &mut [f32]) {
    assert!(q.len() <= MAX_HEAD_DIM && out.len() == q.len());
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx512f") {
        // SAFETY: the feature was just detected.
        return unsafe { attend_avx512(q, kv, len, scale, out) };
    }
    attend_portable(q, kv, len, scale, out);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn attend_avx512<S: KeyValues>(q: &[f32], kv: &S, len: usize, scale: f32, out: &mut [f32]) {
    attend_portable(q, kv, len, scale, out);
}

#[inline(always)]
fn attend_portable<S: KeyValues>(q: &[f32], kv: &S, len: usize, scale: f32, out: &mut [f32]) {
    let mut acc = [0f32; MAX_HEAD_DIM];
    let acc = &mut acc[..q.len()];
    let (mut max, mut sum) = (f32::NEG_INFINITY, 0f32);
    let mut start = 0;
    while start < len {
        let n = (len - start).min(CHUNK);
        let mut s = [0f32; CHUNK];
        for (j, sj) in s.iter_mut().enumerate().take(n) {
            *sj = dot(q, kv.key(start + j)) * scale;
        }
        let new_max = s[..n].iter().fold(max, |m, &x| m.max(x));
        let correction = (max - new_max).exp();
        if correction != 1.0 {
            sum *= correction;
            acc.iter_mut().for_each(|a| *a *= correction);
        }
        for (j, &sj) in s.iter().enumerate().take(n) {
            let p = (sj - new_max).exp();
            sum += p;
            axpy(acc, p, kv.value(start + j));
        }
        max = new_max;
        start += n;
    }
    let inv = if sum > 0.0 { 1.0 / sum } else { 0.0 };
    out.iter_mut()
        .zip(acc.iter())
        .for_each(|(o, a)| *o = a * inv);
}

/// Dot product with 16 independent lanes (vectorises without reassociation flags).
#[inline(always)]
fn dot<T: KvElem>(a: &[f32], b: &[T]) -> f32 {
    let mut lanes = [0f32; 16];
    let (ac, bc) = (a.chunks_exact(16), b.chunks_exact(16));
    let (ar, br) = (ac.remainder(), bc.remainder());
    for (x, y) in ac.zip(bc) {
        for l in 0..16 {
            lanes[l] += x[l] * y[l].to_f32();
        }
    }
    let tail: f32 = ar.iter().zip(br).map(|(x, y)| x * y.to_f32()).sum();
    lanes.iter().sum::<f32>() + tail
}

/// `acc += p · v`.
#[inline(always)]
fn axpy<T: KvElem>(acc: &mut [f32], p: f32, v: &[T]) {
    for (a, x) in acc.iter_mut().zip(v) {
        *a += p * x.to_f32();
    }
}
