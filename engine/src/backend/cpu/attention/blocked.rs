//! Blocked CPU attention, the part shared by the SIMD kernels (`avx512`, `avx2`): one task per
//! (sequence, KV head, block of [`QB`] query rows), or, for a decode row split over its keys, per
//! (sequence, KV head, part of the keys) with unnormalised states.
//!
//! A task walks its keys in chunks of 16. Each chunk's keys and values are copied once into f32 tiles
//! (this resolves the paged indirection and the int8/bf16 conversion in one place) and then serve every
//! query row of the block and every query head of the KV head's group (GQA). The kernel's
//! [`ChunkUpdate`] scores the chunk's keys for one (row, head) — from keys stored transposed when a block
//! has several rows to share the transposition, or stored as rows for a single row (decode) — and runs
//! the online softmax and value update on them. A row's arithmetic depends only on its own block and
//! context, so results do not depend on the rest of the batch.

use std::cell::RefCell;

use super::KeyValues;
use crate::backend::AttnShape;

/// One online-softmax step of one (row, head) over the keys `lo..hi` of a chunk, on one instruction set:
/// scores `q · k · scale` of the chunk's keys (`kt` transposed `[hd, 16]`, or rows `[16, hd]` with
/// `key_rows`), the running max and sum `ml = [max, sum]` updated, and `acc = acc·corr + Σ p_j·v_j`
/// over the value rows `vt[16, hd]`.
pub(crate) trait ChunkUpdate {
    /// # Safety
    /// The CPU must have the implementation's instructions; `hd = q.len()` is a multiple of 16,
    /// `kt` and `vt` hold 16 × hd elements, `acc` hd and `ml` 2; `lo < hi <= 16`.
    unsafe fn update(
        q: &[f32],
        tiles: (&[f32], &[f32], bool),
        keys: (usize, usize),
        scale: f32,
        acc: &mut [f32],
        ml: &mut [f32],
    );
}

/// Declares an instruction set's blocked kernel in a module that defines its chunk update as
/// `unsafe fn update(…)` (the signature of [`ChunkUpdate::update`]): a unit struct `$set` implementing
/// [`ChunkUpdate`] with it, and `task`, [`task`] compiled with the set's target features.
macro_rules! blocked_kernel {
    ($set:ident, $features:literal) => {
        /// The instruction set named by the struct.
        pub(crate) struct $set;

        impl $crate::backend::cpu::attention::blocked::ChunkUpdate for $set {
            #[inline(always)]
            unsafe fn update(
                q: &[f32],
                tiles: (&[f32], &[f32], bool),
                keys: (usize, usize),
                scale: f32,
                acc: &mut [f32],
                ml: &mut [f32],
            ) {
                // SAFETY: forwarded from the caller.
                unsafe { update(q, tiles, keys, scale, acc, ml) }
            }
        }

        /// [`blocked::task`](crate::backend::cpu::attention::blocked::task) compiled for this
        /// module's instruction set.
        ///
        /// # Safety
        /// As that function, on a CPU with these features.
        #[target_feature(enable = $features)]
        #[allow(clippy::too_many_arguments)]
        pub(crate) unsafe fn task<S: $crate::backend::cpu::attention::KeyValues>(
            q: (&[f32], &[f32]),
            finish: $crate::backend::cpu::attention::blocked::Finish<'_>,
            kv: &S,
            span: $crate::backend::cpu::attention::blocked::Span,
            ranges: (std::ops::Range<usize>, std::ops::Range<usize>),
            g: usize,
            shape: $crate::backend::AttnShape,
            causal: bool,
        ) {
            // SAFETY: forwarded from the caller.
            unsafe {
                $crate::backend::cpu::attention::blocked::task::<$set, S>(
                    q, finish, kv, span, ranges, g, shape, causal,
                )
            }
        }
    };
}
pub(crate) use blocked_kernel;

/// Keys per chunk (one vector of scores).
pub(crate) const KB: usize = 16;
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
/// The CPU must support `C`'s instructions, `shape.head_dim` must be a multiple of 16, `keys.start` a
/// multiple of 16; with [`Finish::Out`], the output must cover the batch's `[rows, num_heads * head_dim]`
/// and no other task may write the same (row, head) slices; a [`Finish::Partial`] slice must hold the
/// states.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn task<C: ChunkUpdate, S: KeyValues>(
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
    // The scratch is taken out of its cell rather than borrowed in a closure, so this body stays inline
    // in the caller and is compiled with its instruction set.
    let mut owned = SCRATCH.take();
    'body: {
        let scratch = &mut owned;
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
                        // SAFETY: the caller checked C's features; slices are in bounds.
                        unsafe {
                            C::update(
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
                break 'body;
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
    }
    SCRATCH.set(owned);
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
