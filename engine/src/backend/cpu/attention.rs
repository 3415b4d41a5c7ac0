//! CPU attention: causal attention over the paged KV pool and bidirectional varlen attention.
//!
//! With AVX-512 or AVX2+FMA (run-time detection) and a head width that is a multiple of 16, the blocked
//! kernel (`blocked`, with its chunk updates in `avx512` or `avx2`) runs one task per (sequence, KV head,
//! block of query rows). Otherwise, and as the reference,
//! the portable path runs one task per (query row, head), streaming keys in chunks of 32 with an
//! online softmax (running max and sum, rescaled once per chunk); nothing is allocated and the score
//! vector never materialises. On CPUs with AVX2 and FMA that loop is compiled for them.
//!
//! Sink windows (StreamingLLM): a query scores the sink keys with its sink-rotated row and its recent
//! window with its own row, in one online softmax ([`run_windowed`]), on the blocked kernel where it runs
//! and on the portable path otherwise.

use rayon::prelude::*;

use super::kv::KvElem;
use crate::backend::AttnShape;

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2;
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512;
#[cfg(target_arch = "x86_64")]
mod blocked;

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
    /// The factor key `j`'s elements are multiplied by (int8 pools; 1 otherwise).
    #[inline(always)]
    fn key_scale(&self, _j: usize) -> f32 {
        1.0
    }
    /// The factor value `j`'s elements are multiplied by (int8 pools; 1 otherwise).
    #[inline(always)]
    fn value_scale(&self, _j: usize) -> f32 {
        1.0
    }
}

/// A sequence's keys in the paged pool `[num_blocks, block_size, num_kv_heads, head_dim]`.
///
/// `blocks` is the sequence's block-table row: logical block `b` is entry `b` below `sink_blocks` and entry
/// `b - block_offset` from there on (a sink window's row skips the blocks it dropped). Int8 pools carry one
/// scale per (slot, head) in `k_scales` / `v_scales` (empty otherwise).
pub(crate) struct Paged<'a, T> {
    pub k: &'a [T],
    pub v: &'a [T],
    pub k_scales: &'a [f32],
    pub v_scales: &'a [f32],
    pub blocks: &'a [u32],
    pub sink_blocks: usize,
    pub block_offset: usize,
    pub block_size: usize,
    pub row_stride: usize,
    pub head_off: usize,
    pub head_dim: usize,
}

impl<T: KvElem> Paged<'_, T> {
    #[inline(always)]
    fn offset(&self, j: usize) -> usize {
        let logical = j / self.block_size;
        let entry = if logical < self.sink_blocks {
            logical
        } else {
            logical - self.block_offset
        };
        let block = self.blocks[entry] as usize;
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
    #[inline(always)]
    fn key_scale(&self, j: usize) -> f32 {
        match self.k_scales.is_empty() {
            true => 1.0,
            false => self.k_scales[self.offset(j) / self.head_dim],
        }
    }
    #[inline(always)]
    fn value_scale(&self, j: usize) -> f32 {
        match self.v_scales.is_empty() {
            true => 1.0,
            false => self.v_scales[self.offset(j) / self.head_dim],
        }
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
    if let Some(kernel) = BlockedKernel::detect(shape.head_dim) {
        let dense = |_: usize| [0; 3];
        let kv = (ctx, dense);
        return run_blocked(kernel, (q, &[]), out, qsl, kv, kv_for, shape, causal);
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
            attend(&[(qv, 0..visible)], &kv_for(s, h / group), shape.scale, o);
        });
}

/// Causal attention over the paged KV where sequences may stream through sink windows: `window_of(s)` is
/// `[num_sink_tokens, window, _]` (window 0: dense). A query at position `p` past the sinks and its window
/// scores keys `0..num_sink_tokens` with its row of `q_sinks` and keys `p + 1 - window..=p` with its row of
/// `q`; otherwise it sees every key up to `p` with its row of `q`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_windowed<S: KeyValues>(
    q: &[f32],
    q_sinks: &[f32],
    out: &mut [f32],
    qsl: &[u32],
    ctx: impl Fn(usize) -> usize + Sync,
    window_of: impl Fn(usize) -> [usize; 3] + Sync,
    kv_for: impl Fn(usize, usize) -> S + Sync,
    shape: AttnShape,
) {
    let num_seqs = qsl.len() - 1;
    let (hd, heads) = (shape.head_dim, shape.num_heads);
    let rows = qsl[num_seqs] as usize;
    assert!(out.len() >= rows * heads * hd && q.len() >= rows * heads * hd);
    assert!(q_sinks.len() >= rows * heads * hd);
    #[cfg(target_arch = "x86_64")]
    if let Some(kernel) = BlockedKernel::detect(hd) {
        return run_blocked(
            kernel,
            (q, q_sinks),
            out,
            qsl,
            (ctx, window_of),
            kv_for,
            shape,
            true,
        );
    }
    let group = heads / shape.num_kv_heads;
    out[..rows * heads * hd]
        .par_chunks_mut(hd)
        .enumerate()
        .for_each(|(i, o)| {
            let (t, h) = (i / heads, i % heads);
            let s = qsl.partition_point(|&x| x as usize <= t) - 1;
            let q_len = (qsl[s + 1] - qsl[s]) as usize;
            let pos = ctx(s) - q_len + (t - qsl[s] as usize);
            let [sinks, window, _] = window_of(s);
            let row = (t * heads + h) * hd..(t * heads + h + 1) * hd;
            let kv = kv_for(s, h / group);
            if window == 0 || pos < sinks + window {
                attend(&[(&q[row], 0..pos + 1)], &kv, shape.scale, o);
            } else {
                let segments = [
                    (&q_sinks[row.clone()], 0..sinks),
                    (&q[row], pos + 1 - window..pos + 1),
                ];
                attend(&segments, &kv, shape.scale, o);
            }
        });
}

/// Keys per part when a decode row's attention is split over its keys (a multiple of the kernel's
/// 16-key chunks). Decode has one query row per sequence, so without a split a sequence is only
/// `num_kv_heads` tasks (3 for SmolLM2), too few to share evenly between threads.
#[cfg(target_arch = "x86_64")]
const SPLIT_KEYS: usize = 128;

/// The blocked kernels, by instruction set.
#[cfg(target_arch = "x86_64")]
#[derive(Debug, Clone, Copy)]
enum BlockedKernel {
    Avx512,
    Avx2,
}

#[cfg(target_arch = "x86_64")]
impl BlockedKernel {
    /// The fastest blocked kernel this CPU runs for heads of `head_dim`, if any (the head width must be a
    /// multiple of 16).
    fn detect(head_dim: usize) -> Option<Self> {
        if !head_dim.is_multiple_of(16) {
            None
        } else if is_x86_feature_detected!("avx512f") {
            Some(BlockedKernel::Avx512)
        } else if avx2::available() {
            Some(BlockedKernel::Avx2)
        } else {
            None
        }
    }

    /// [`blocked::task`] on this kernel.
    ///
    /// # Safety
    /// As [`blocked::task`]; `self` came from [`BlockedKernel::detect`].
    #[allow(clippy::too_many_arguments)]
    unsafe fn task<S: KeyValues>(
        self,
        q: (&[f32], &[f32]),
        finish: blocked::Finish<'_>,
        kv: &S,
        span: blocked::Span,
        ranges: (std::ops::Range<usize>, std::ops::Range<usize>),
        g: usize,
        shape: AttnShape,
        causal: bool,
    ) {
        // SAFETY: forwarded from the caller; detect() checked the features.
        unsafe {
            match self {
                BlockedKernel::Avx512 => {
                    avx512::task(q, finish, kv, span, ranges, g, shape, causal)
                }
                BlockedKernel::Avx2 => avx2::task(q, finish, kv, span, ranges, g, shape, causal),
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
fn run_blocked<S: KeyValues>(
    kernel: BlockedKernel,
    (q, q_sinks): (&[f32], &[f32]),
    out: &mut [f32],
    qsl: &[u32],
    (ctx, window_of): (
        impl Fn(usize) -> usize + Sync,
        impl Fn(usize) -> [usize; 3] + Sync,
    ),
    kv_for: impl Fn(usize, usize) -> S + Sync,
    shape: AttnShape,
    causal: bool,
) {
    let kvh = shape.num_kv_heads;
    let span_of = |s: usize| {
        let [sinks, window, _] = window_of(s);
        blocked::Span {
            q_start: qsl[s] as usize,
            q_len: (qsl[s + 1] - qsl[s]) as usize,
            ctx: ctx(s),
            sinks,
            window,
        }
    };
    // Whole tasks (sequence, block of query rows, KV head), and split ones (sequence, KV head, key
    // part) for dense decode rows: a row's split depends on its own context only, so its arithmetic
    // does not depend on the rest of the batch.
    let (mut whole, mut split) = (Vec::new(), Vec::new());
    for s in 0..qsl.len() - 1 {
        let span = span_of(s);
        if span.q_len == 1 && span.window == 0 && span.ctx > SPLIT_KEYS {
            let parts = span.ctx.div_ceil(SPLIT_KEYS);
            split.extend((0..kvh).flat_map(|g| (0..parts).map(move |p| (s, g, p))));
        } else {
            let blocks = span.q_len.div_ceil(blocked::QB);
            whole.extend((0..blocks).flat_map(|b| (0..kvh).map(move |g| (s, b, g))));
        }
    }
    let out_ptr = blocked::OutPtr(out.as_mut_ptr());
    whole.into_par_iter().for_each(|(s, b, g)| {
        let span = span_of(s);
        let rows = b * blocked::QB..((b + 1) * blocked::QB).min(span.q_len);
        let finish = blocked::Finish::Out(out_ptr);
        // SAFETY: the kernel's features detected, head_dim % 16 == 0, out covers every row (asserted by the
        // caller), and tasks own disjoint (row, head) slices.
        unsafe {
            kernel.task(
                (q, q_sinks),
                finish,
                &kv_for(s, g),
                span,
                (rows, 0..usize::MAX),
                g,
                shape,
                causal,
            )
        }
    });
    if split.is_empty() {
        return;
    }
    let group = shape.num_heads / kvh;
    let width = group * (shape.head_dim + 2);
    let mut partial = vec![0f32; split.len() * width];
    partial
        .par_chunks_mut(width)
        .zip(split.par_iter())
        .for_each(|(dst, &(s, g, p))| {
            let keys = p * SPLIT_KEYS..(p + 1) * SPLIT_KEYS;
            // SAFETY: as above; keys.start is a multiple of 16 and dst holds `group` states.
            unsafe {
                kernel.task(
                    (q, q_sinks),
                    blocked::Finish::Partial(dst),
                    &kv_for(s, g),
                    span_of(s),
                    (0..1, keys),
                    g,
                    shape,
                    causal,
                )
            }
        });
    let mut i = 0;
    while i < split.len() {
        let (s, g, _) = split[i];
        let n = split[i..]
            .iter()
            .take_while(|&&(s2, g2, _)| (s2, g2) == (s, g))
            .count();
        let parts: Vec<&[f32]> = partial[i * width..(i + n) * width]
            .chunks_exact(width)
            .collect();
        let row = qsl[s] as usize * shape.num_heads + g * group;
        let dst = &mut out[row * shape.head_dim..(row + group) * shape.head_dim];
        merge_partials(&parts, group, shape.head_dim, dst);
        i += n;
    }
}

/// Combines the unnormalised softmax states of consecutive key parts (layout of
/// [`blocked::Finish::Partial`], one query row) into the normalised outputs of its `group` heads.
#[cfg(target_arch = "x86_64")]
fn merge_partials(parts: &[&[f32]], group: usize, hd: usize, out: &mut [f32]) {
    for h in 0..group {
        let stats = |p: &[f32]| (p[group * hd + 2 * h], p[group * hd + 2 * h + 1]);
        let max = parts
            .iter()
            .map(|p| stats(p).0)
            .fold(f32::NEG_INFINITY, f32::max);
        let o = &mut out[h * hd..(h + 1) * hd];
        o.fill(0.0);
        let mut sum = 0.0;
        for p in parts.iter().filter(|p| stats(p).1 > 0.0) {
            let (m, l) = stats(p);
            let w = (m - max).exp();
            sum += l * w;
            o.iter_mut()
                .zip(&p[h * hd..(h + 1) * hd])
                .for_each(|(y, a)| *y += a * w);
        }
        let inv = if sum > 0.0 { 1.0 / sum } else { 0.0 };
        o.iter_mut().for_each(|y| *y *= inv);
    }
}

/// Key ranges of one query, each scored with its own query vector.
pub(crate) type Segments<'q> = [(&'q [f32], std::ops::Range<usize>)];

/// Softmax-weighted sum of the values of every segment's keys, each key scored with its segment's query,
/// into `out`.
pub(crate) fn attend<S: KeyValues>(segments: &Segments<'_>, kv: &S, scale: f32, out: &mut [f32]) {
    assert!(out.len() <= MAX_HEAD_DIM && segments.iter().all(|(q, _)| q.len() == out.len()));
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx512f") {
        // SAFETY: the feature was just detected.
        return unsafe { attend_avx512(segments, kv, scale, out) };
    }
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
        // SAFETY: the features were just detected.
        return unsafe { attend_avx2(segments, kv, scale, out) };
    }
    attend_portable(segments, kv, scale, out);
}

/// The portable loop compiled for AVX2 and FMA: its 16-lane dot products and value updates become
/// 256-bit vector code.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn attend_avx2<S: KeyValues>(segments: &Segments<'_>, kv: &S, scale: f32, out: &mut [f32]) {
    attend_portable(segments, kv, scale, out);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn attend_avx512<S: KeyValues>(
    segments: &Segments<'_>,
    kv: &S,
    scale: f32,
    out: &mut [f32],
) {
    attend_portable(segments, kv, scale, out);
}

#[inline(always)]
fn attend_portable<S: KeyValues>(segments: &Segments<'_>, kv: &S, scale: f32, out: &mut [f32]) {
    let mut acc = [0f32; MAX_HEAD_DIM];
    let acc = &mut acc[..out.len()];
    let (mut max, mut sum) = (f32::NEG_INFINITY, 0f32);
    for (q, range) in segments {
        let mut start = range.start;
        while start < range.end {
            let n = (range.end - start).min(CHUNK);
            let mut s = [0f32; CHUNK];
            for (j, sj) in s.iter_mut().enumerate().take(n) {
                *sj = dot(q, kv.key(start + j)) * kv.key_scale(start + j) * scale;
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
                axpy(acc, p * kv.value_scale(start + j), kv.value(start + j));
            }
            max = new_max;
            start += n;
        }
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
