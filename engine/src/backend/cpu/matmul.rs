//! CPU matmul `out = x · Wᵀ (+ b)` with weights `[n, k]` in bf16 or f32 and f32 activations.
//!
//! Work is split into tasks of (up to) [`MC`] activation rows × [`NC`] weight rows, so both operands of
//! a task fit in L2, and tasks run on rayon. Inside a task, register tiles of up to 4 activation rows ×
//! 4 weight rows accumulate 16-lane partial sums over `k` and reduce them at the end. With AVX-512 BF16
//! (detected at run time) the activation rows are rounded to bf16 once per call and each step is
//! `vdpbf16ps` (32 multiply-adds into f32); f32 weights use AVX-512 FMA. The portable functions
//! ([`matmul_ref`]) are the fallback and the reference the SIMD paths are tested against.

use rayon::prelude::*;

#[cfg(target_arch = "x86_64")]
mod avx512;

/// Activation rows per task.
const MC: usize = 64;
/// Largest number of weight rows per task.
const NC: usize = 64;

/// A weight matrix's elements.
#[derive(Debug, Clone, Copy)]
pub enum WeightSlice<'a> {
    /// bf16 bit patterns.
    Bf16(&'a [u16]),
    /// f32 values.
    F32(&'a [f32]),
}

/// Shapes of one matmul: `x[rows, k]`, weights `[n, k]`, `out[rows, n]`.
#[derive(Debug, Clone, Copy)]
pub struct MatmulDims {
    /// Activation rows.
    pub rows: usize,
    /// Inner dimension.
    pub k: usize,
    /// Output columns (weight rows).
    pub n: usize,
}

/// Whether the AVX-512 kernels can run on this CPU.
pub fn simd_available(w: WeightSlice<'_>) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        let base = is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bw");
        match w {
            WeightSlice::Bf16(_) => base && is_x86_feature_detected!("avx512bf16"),
            WeightSlice::F32(_) => base,
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = w;
        false
    }
}

/// `out = x · Wᵀ (+ bias)`, on the fastest kernel this CPU supports. `scratch` holds the bf16 copy of the
/// activations and only grows.
pub fn matmul(
    x: &[f32],
    w: WeightSlice<'_>,
    bias: Option<&[f32]>,
    d: MatmulDims,
    out: &mut [f32],
    scratch: &mut Vec<u16>,
) {
    assert!(
        x.len() >= d.rows * d.k && out.len() >= d.rows * d.n,
        "matmul buffers too small"
    );
    #[cfg(target_arch = "x86_64")]
    if simd_available(w) {
        return avx512::matmul(x, w, bias, d, out, scratch);
    }
    let _ = scratch;
    matmul_ref(x, w, bias, d, out);
}

/// Portable reference: f32 products of the exact activations and the stored weights, summed in f32,
/// parallel over activation rows.
pub fn matmul_ref(
    x: &[f32],
    w: WeightSlice<'_>,
    bias: Option<&[f32]>,
    d: MatmulDims,
    out: &mut [f32],
) {
    out[..d.rows * d.n]
        .par_chunks_mut(d.n)
        .enumerate()
        .for_each(|(t, row)| {
            let xr = &x[t * d.k..(t + 1) * d.k];
            for (o, y) in row.iter_mut().enumerate() {
                let dot: f32 = match w {
                    WeightSlice::Bf16(w) => xr
                        .iter()
                        .zip(&w[o * d.k..(o + 1) * d.k])
                        .map(|(a, b)| a * bf16_to_f32(*b))
                        .sum(),
                    WeightSlice::F32(w) => xr
                        .iter()
                        .zip(&w[o * d.k..(o + 1) * d.k])
                        .map(|(a, b)| a * b)
                        .sum(),
                };
                *y = dot + bias.map_or(0.0, |b| b[o]);
            }
        });
}

/// The f32 value of a bf16 bit pattern.
#[inline(always)]
pub fn bf16_to_f32(b: u16) -> f32 {
    f32::from_bits((b as u32) << 16)
}

/// Splits `n` weight rows into chunks: at most [`NC`], a multiple of 4, and enough chunks to keep every
/// thread busy on small matrices.
fn chunk_rows(n: usize) -> usize {
    let want = n.div_ceil(4 * rayon::current_num_threads().max(1));
    want.next_multiple_of(4).clamp(4, NC)
}

/// Runs `task(row_block, col_chunk)` over the task grid in parallel.
fn for_each_task(
    d: MatmulDims,
    task: impl Fn(std::ops::Range<usize>, std::ops::Range<usize>) + Sync,
) {
    let nc = chunk_rows(d.n);
    let n_chunks = d.n.div_ceil(nc);
    let m_blocks = d.rows.div_ceil(MC);
    (0..n_chunks * m_blocks).into_par_iter().for_each(|i| {
        let (mb, nb) = (i / n_chunks, i % n_chunks);
        task(
            mb * MC..((mb + 1) * MC).min(d.rows),
            nb * nc..((nb + 1) * nc).min(d.n),
        );
    });
}

/// A raw output pointer shared by tasks that write disjoint elements.
#[derive(Clone, Copy)]
struct OutPtr(*mut f32);
// SAFETY: tasks write disjoint (row, column) elements of the output.
unsafe impl Send for OutPtr {}
unsafe impl Sync for OutPtr {}
