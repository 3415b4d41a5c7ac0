//! CPU matmul `out = x · Wᵀ (+ b)` with weights `[n, k]` in bf16 or f32 and f32 activations.
//!
//! Work is split into tasks of (up to) [`MC`] activation rows × [`NC`] weight rows, so both operands of
//! a task fit in L2, and tasks run on rayon. Inside a task, register tiles of up to 4 activation rows ×
//! 4 weight rows accumulate 16-lane partial sums over `k` and reduce them at the end. With AVX-512 BF16
//! (detected at run time) the activation rows are rounded to bf16 once per call and each step is
//! `vdpbf16ps` (32 multiply-adds into f32); without BF16, bf16 weights are widened to f32 sixteen at a
//! time for AVX-512 FMA on the exact activations; f32 weights use AVX-512 FMA. The portable functions
//! ([`matmul_ref`]) are the fallback and the reference the SIMD paths are tested against.

use rayon::prelude::*;

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "x86_64")]
mod avx512_fma;
#[cfg(target_arch = "x86_64")]
pub mod int8;

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

/// The matmul kernels, fastest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// AVX-512: `vdpbf16ps` on bf16-rounded activations for bf16 weights (needs AVX-512 BF16), FMA for
    /// f32 weights.
    Avx512,
    /// AVX-512 without BF16 (F, BW and VL): bf16 weights widened to f32, FMA, activations exact; f32
    /// weights as [`Kernel::Avx512`] takes them.
    Avx512Fma,
    /// AVX2 with FMA: bf16 weights widened to f32, activations exact.
    Avx2Fma,
    /// [`matmul_ref`].
    Portable,
}

impl Kernel {
    /// Whether this kernel can run on this CPU for weights like `w`.
    pub fn available(self, w: WeightSlice<'_>) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            let avx512 =
                is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bw");
            match (self, w) {
                (Kernel::Avx512, WeightSlice::Bf16(_)) => {
                    avx512 && is_x86_feature_detected!("avx512bf16")
                }
                (Kernel::Avx512, WeightSlice::F32(_)) | (Kernel::Avx512Fma, _) => {
                    avx512_fma::available()
                }
                (Kernel::Avx2Fma, _) => avx2::available(),
                (Kernel::Portable, _) => true,
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = w;
            self == Kernel::Portable
        }
    }

    /// The fastest kernel this CPU runs for weights like `w`.
    pub fn best(w: WeightSlice<'_>) -> Kernel {
        [Kernel::Avx512, Kernel::Avx512Fma, Kernel::Avx2Fma]
            .into_iter()
            .find(|k| k.available(w))
            .unwrap_or(Kernel::Portable)
    }
}

/// `out = x · Wᵀ (+ bias)`, on the fastest kernel this CPU supports ([`Kernel::best`]). `scratch` holds
/// the bf16 copy of the activations (AVX-512) and only grows.
pub fn matmul(
    x: &[f32],
    w: WeightSlice<'_>,
    bias: Option<&[f32]>,
    d: MatmulDims,
    out: &mut [f32],
    scratch: &mut Vec<u16>,
) {
    matmul_on(Kernel::best(w), x, w, bias, d, out, scratch)
}

/// [`matmul`] on a chosen kernel, which must be [`Kernel::available`] (tests compare them all).
pub fn matmul_on(
    kernel: Kernel,
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
    assert!(kernel.available(w), "{kernel:?} cannot run on this CPU");
    let _ = &scratch;
    match kernel {
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx512 => avx512::matmul(x, w, bias, d, out, scratch),
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx512Fma => avx512_fma::matmul(x, w, bias, d, out),
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx2Fma => avx2::matmul(x, w, bias, d, out),
        _ => matmul_ref(x, w, bias, d, out),
    }
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

impl OutPtr {
    /// The pointer (a method, so closures capture the whole `Sync` wrapper).
    fn ptr(self) -> *mut f32 {
        self.0
    }
}

/// Runs `tile` over every register tile of the task grid in parallel ([`for_each_task`], [`run_tiles`]),
/// storing `acc + bias` into `out`: the frame every SIMD kernel's matmul shares.
#[cfg(target_arch = "x86_64")]
fn for_each_tile(
    d: MatmulDims,
    bias: Option<&[f32]>,
    out: &mut [f32],
    tile: impl Fn(usize, usize, usize, usize, &mut [[f32; 4]; 4]) + Sync,
) {
    let out_ptr = OutPtr(out.as_mut_ptr());
    for_each_task(d, |rows, cols| {
        run_tiles(rows, cols, d, bias, out_ptr, &tile)
    });
}

/// Walks the register tiles of one task and stores `acc + bias` into the output: `tile(t, r, m, nr, acc)`
/// fills `acc[..m][..nr]` for activation rows `t..t + m` and weight rows `r..r + nr` (`nr` is 4, or 1
/// at a chunk's tail).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn run_tiles(
    rows: std::ops::Range<usize>,
    cols: std::ops::Range<usize>,
    d: MatmulDims,
    bias: Option<&[f32]>,
    out: OutPtr,
    tile: impl Fn(usize, usize, usize, usize, &mut [[f32; 4]; 4]),
) {
    let mut acc = [[0f32; 4]; 4];
    let mut t = rows.start;
    while t < rows.end {
        let m = (rows.end - t).min(4);
        let mut r = cols.start;
        while r < cols.end {
            let nr = if r + 4 <= cols.end { 4 } else { 1 };
            tile(t, r, m, nr, &mut acc);
            for (mi, acc_row) in acc.iter().enumerate().take(m) {
                for (j, a) in acc_row.iter().enumerate().take(nr) {
                    let b = bias.map_or(0.0, |b| b[r + j]);
                    // SAFETY: (t + mi, r + j) is inside out (checked by the caller) and owned by this task.
                    unsafe { *out.0.add((t + mi) * d.n + r + j) = a + b };
                }
            }
            r += nr;
        }
        t += m;
    }
}
