//! Launches of the skinny decode products (`gemv.cu`): bf16 weights times at most [`MAX_ROWS`]
//! activation rows in one launch each, with the bias, the residual add, the q/k/v triple (with RoPE
//! and the KV write after it, over bf16 and f32 pools) or SwiGLU's silu·mul fused, and the RMSNorm
//! before the q/k/v and gate/up products. Wider products, f32
//! weights and widths not a multiple of 8 go through cuBLAS. The kernels fetch their first weights
//! before they wait for the previous kernel, so they are launched with programmatic dependent launch
//! where the device has it ([`super::pdl`]).

use cudarc::driver::{CudaSlice, LaunchConfig};

use super::ops::vector;
use super::pdl::PdlArgs;
use super::{CudaBackend, CudaKv, CudaWeight, CudaWeightData, check_len, cuda_err, pools};
use crate::backend::{RmsNormInto, RopeKvWrite};
use crate::error::Result;

/// Most activation rows the kernels take.
pub const MAX_ROWS: usize = 4;
/// bf16 activations a block stages at once, all rows together (the kernels' `STAGE_ELEMS`).
const STAGE_ELEMS: usize = 16384;

/// The bf16 elements of `w` when a product of `rows` rows with it goes to the skinny kernels.
pub(super) fn bf16_weight(w: &CudaWeight, rows: usize) -> Option<&CudaSlice<u16>> {
    match &w.data {
        CudaWeightData::Bf16(d) if (1..=MAX_ROWS).contains(&rows) && w.cols.is_multiple_of(8) => {
            Some(d)
        }
        _ => None,
    }
}

/// The entry point for `rows` rows: `<name>_r1`, `_r2` or `_r4`.
fn entry(name: &str, rows: usize) -> String {
    format!("{name}_r{}", rows.next_power_of_two())
}

/// The skinny kernels' blocks as the loaded module has them: output features a block takes at once
/// (a warp each; the kernels' `GEMV_WARPS`, their launch bound's threads / 32) and blocks an SM
/// holds at once with a full stage (their occupancy).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct GemvBlocks {
    warps: usize,
    per_sm: usize,
}

impl CudaBackend {
    /// The skinny decode products' blocks: (warps a block, blocks an SM), as read from the loaded
    /// kernels.
    pub fn gemv_blocks(&self) -> (usize, usize) {
        (self.gemv_blocks.warps, self.gemv_blocks.per_sm)
    }
}

/// Reads [`GemvBlocks`] from the one-row product, which every entry point's bounds match.
pub(super) fn read_blocks(kernels: &super::modules::Kernels) -> Result<GemvBlocks> {
    let f = kernels.get("gemv_bf16_r1")?;
    let threads = f.max_threads_per_block().map_err(cuda_err)?;
    let per_sm = f
        .occupancy_max_active_blocks_per_multiprocessor(threads as u32, STAGE_ELEMS * 2, None)
        .map_err(cuda_err)?;
    Ok(GemvBlocks {
        warps: (threads as usize / 32).max(1),
        per_sm: (per_sm as usize).max(1),
    })
}

/// The grid for `outputs` features over inputs of `inp` values in `rows` rows. Where the inputs fit
/// in one stage, a block stages them whole and its warps stream feature after feature, so the grid
/// only needs to fill the device once; otherwise a block stages a tile at a time and every warp takes
/// one feature.
fn launch_config(be: &CudaBackend, outputs: usize, rows: usize, inp: usize) -> LaunchConfig {
    let GemvBlocks { warps, per_sm } = be.gemv_blocks;
    let one_feature_a_warp = outputs.div_ceil(warps);
    let resident = inp * rows.next_power_of_two() <= STAGE_ELEMS;
    let (blocks, staged) = match resident {
        true => (one_feature_a_warp.min(per_sm * be.dev.sm_count), rows * inp),
        false => (one_feature_a_warp, STAGE_ELEMS),
    };
    LaunchConfig {
        grid_dim: (blocks as u32, 1, 1),
        block_dim: ((warps * 32) as u32, 1, 1),
        shared_mem_bytes: (staged * 2) as u32,
    }
}

/// An optional bias's device vector, checked against the product's width.
fn bias_arg(bias: Option<&CudaWeight>, width: usize) -> Result<Option<&CudaSlice<f32>>> {
    bias.map(|b| {
        check_len("gemv bias", b.cols, width)?;
        vector(b)
    })
    .transpose()
}

/// `y[rows, w.rows] = (accumulate ? y : 0) + x · Wᵀ (+ bias)`.
pub(super) fn gemv(
    be: &CudaBackend,
    (x, w, bias): (&CudaSlice<f32>, &CudaWeight, Option<&CudaWeight>),
    rows: usize,
    accumulate: bool,
    y: &mut CudaSlice<f32>,
) -> Result<()> {
    let Some(wd) = bf16_weight(w, rows) else {
        unreachable!("callers check bf16_weight first")
    };
    let (out, inp) = (w.rows, w.cols);
    check_len("gemv x", x.len(), rows * inp)?;
    check_len("gemv y", y.len(), rows * out)?;
    let bias = bias_arg(bias, out)?;
    let f = be.kernels.get(&entry("gemv_bf16", rows))?;
    let stream = &be.dev.stream;
    let mut a = PdlArgs::new();
    a.buf(wd, stream)
        .buf(x, stream)
        .maybe_buf(bias, stream)
        .buf(y, stream);
    for i in [rows, inp, out, accumulate as usize] {
        a.int(i as i32);
    }
    // SAFETY: arguments match the kernel's signature; sizes checked above; `in` is a multiple of 8
    // (bf16_weight), so every 16-byte load is aligned and in bounds; every thread of the kernel
    // waits for the previous grid before it reads x or y.
    unsafe { a.launch(f, stream, launch_config(be, out, rows, inp), be.pdl_on()) }
}

/// A norm fused into a skinny product: its weight vector and epsilon.
pub(super) type FusedNorm<'a> = Option<(&'a CudaSlice<f32>, f32)>;

/// The weight vector and epsilon of an RMSNorm to fuse.
pub(super) fn fused_norm<'a>(
    norm: Option<&'a RmsNormInto<'_, CudaBackend>>,
) -> Result<FusedNorm<'a>> {
    norm.map(|n| Ok((vector(n.weight)?, n.eps))).transpose()
}

/// Pushes a fused norm's arguments: its weight (or a null pointer) and epsilon.
fn push_norm(a: &mut PdlArgs, norm: FusedNorm<'_>, stream: &cudarc::driver::CudaStream) {
    a.maybe_buf(norm.map(|n| n.0), stream)
        .float(norm.map_or(0.0, |n| n.1));
}

/// `ys[i] = x' · W[i]ᵀ (+ bias[i])` for q, k and v (`W[1]` and `W[2]` of one shape) in one launch,
/// `x'` being `x` RMS-normalised when a norm is given.
pub(super) fn gemv3(
    be: &CudaBackend,
    (x, norm): (&CudaSlice<f32>, FusedNorm<'_>),
    (w, bias): ([&CudaWeight; 3], [Option<&CudaWeight>; 3]),
    rows: usize,
    [y0, y1, y2]: [&mut CudaSlice<f32>; 3],
) -> Result<()> {
    let weights = w.map(|w| bf16_weight(w, rows));
    let [Some(w0), Some(w1), Some(w2)] = weights else {
        unreachable!("callers check bf16_weight first")
    };
    let (out0, out12, inp) = (w[0].rows, w[1].rows, w[0].cols);
    check_len("gemv3 x", x.len(), rows * inp)?;
    check_len("gemv3 y0", y0.len(), rows * out0)?;
    check_len("gemv3 y1", y1.len(), rows * out12)?;
    check_len("gemv3 y2", y2.len(), rows * out12)?;
    let f = be.kernels.get(&entry("gemv3_bf16", rows))?;
    let stream = &be.dev.stream;
    let mut a = qkv_args(
        stream,
        ([w0, w1, w2], bias),
        (out0, out12),
        [y0, y1, y2],
        (x, norm),
    )?;
    for i in [rows, inp, out0, out12] {
        a.int(i as i32);
    }
    // SAFETY: arguments match the kernel's signature; sizes checked above; the three weights share
    // `in`, a multiple of 8, and k and v share their output width (checked by the caller); every
    // thread waits for the previous grid before it reads x.
    unsafe {
        a.launch(
            f,
            stream,
            launch_config(be, out0 + 2 * out12, rows, inp),
            be.pdl_on(),
        )
    }
}

/// The arguments the q/k/v kernels begin with: the three weights, their biases (null where absent;
/// q's `widths.0` wide, k's and v's `widths.1`), the three outputs, the input and the fused norm.
fn qkv_args(
    stream: &cudarc::driver::CudaStream,
    (w, bias): ([&CudaSlice<u16>; 3], [Option<&CudaWeight>; 3]),
    (nq, nkv): (usize, usize),
    outs: [&mut CudaSlice<f32>; 3],
    (x, norm): (&CudaSlice<f32>, FusedNorm<'_>),
) -> Result<PdlArgs> {
    let mut a = PdlArgs::new();
    for w in w {
        a.buf(w, stream);
    }
    for (b, width) in bias.into_iter().zip([nq, nkv, nkv]) {
        a.maybe_buf(bias_arg(b, width)?, stream);
    }
    for y in outs {
        a.buf(y, stream);
    }
    a.buf(x, stream);
    push_norm(&mut a, norm, stream);
    Ok(a)
}

/// [`gemv3`] with RoPE and the KV write after it in the same launch (`gemv3_rope_kv_*`): q and k
/// rotated, k and v written to their pool slots, q, k, v left as `rope_kv_write` leaves them. bf16 and
/// f32 pools only (an int8 pool's scale needs a whole head); None where it does not apply.
pub(super) fn gemv3_rope_kv(
    be: &CudaBackend,
    (x, norm): (&CudaSlice<f32>, FusedNorm<'_>),
    (w, bias): ([&CudaWeight; 3], [Option<&CudaWeight>; 3]),
    rows: usize,
    [q, k, v]: [&mut CudaSlice<f32>; 3],
    rope: RopeKvWrite<'_, CudaBackend>,
) -> Option<Result<()>> {
    let (heads, kv_heads, head_dim) = rope.heads;
    let (kc, vc) = rope.caches;
    let pool = pools::shared_dtype(kc, vc).ok().filter(|d| *d != "int8")?;
    let [Some(w0), Some(w1), Some(w2)] = w.map(|w| bf16_weight(w, rows)) else {
        return None;
    };
    let width = kv_heads * head_dim;
    let shapes_fit = head_dim.is_multiple_of(2)
        && (w[0].rows, w[1].rows, w[2].rows) == (heads * head_dim, width, width)
        && w[0].cols == w[1].cols
        && w[1].cols == w[2].cols
        && kc.shape.num_kv_heads * kc.shape.head_dim == width;
    if !shapes_fit {
        return None;
    }
    Some(launch_gemv3_rope_kv(
        be,
        (x, norm),
        ([w0, w1, w2], bias),
        (rows, w[0].cols, pool),
        [q, k, v],
        (rope.table, rope.slot_mapping, rope.heads),
        (kc, vc),
    ))
}

fn launch_gemv3_rope_kv(
    be: &CudaBackend,
    (x, norm): (&CudaSlice<f32>, FusedNorm<'_>),
    (w, bias): ([&CudaSlice<u16>; 3], [Option<&CudaWeight>; 3]),
    (rows, inp, pool): (usize, usize, &str),
    [q, k, v]: [&mut CudaSlice<f32>; 3],
    (table, slots, (heads, kv_heads, head_dim)): (
        &CudaSlice<f32>,
        &CudaSlice<u32>,
        (usize, usize, usize),
    ),
    (kc, vc): (&mut CudaKv, &mut CudaKv),
) -> Result<()> {
    let (nq, nkv) = (heads * head_dim, kv_heads * head_dim);
    check_len("gemv3_rope_kv x", x.len(), rows * inp)?;
    check_len("gemv3_rope_kv q", q.len(), rows * nq)?;
    check_len("gemv3_rope_kv k", k.len(), rows * nkv)?;
    check_len("gemv3_rope_kv v", v.len(), rows * nkv)?;
    check_len("gemv3_rope_kv table", table.len(), rows * head_dim)?;
    check_len("gemv3_rope_kv slot_mapping", slots.len(), rows)?;
    let f = be
        .kernels
        .get(&entry(&format!("gemv3_rope_kv_{pool}"), rows))?;
    let stream = &be.dev.stream;
    let mut a = qkv_args(stream, (w, bias), (nq, nkv), [q, k, v], (x, norm))?;
    for i in [rows, inp, heads, kv_heads, head_dim] {
        a.int(i as i32);
    }
    a.buf(table, stream).buf(slots, stream);
    pools::push(&mut a, stream, kc, vc)?;
    // SAFETY: arguments match the kernel's signature (bf16 or f32 pools, whose push gives K then V);
    // sizes checked above, the weights' shapes by the caller; slots are the caller's, as for
    // rope_kv_write; every thread waits for the previous grid before it reads x.
    unsafe {
        a.launch(
            f,
            stream,
            launch_config(be, (heads + 2 * kv_heads) * head_dim / 2, rows, inp),
            be.pdl_on(),
        )
    }
}

/// `y[rows, width] = silu(x' · Gᵀ) ⊙ (x' · Uᵀ)` in one launch, `x'` as for [`gemv3`].
pub(super) fn silu_mul(
    be: &CudaBackend,
    (x, norm): (&CudaSlice<f32>, FusedNorm<'_>),
    (gate, up): (&CudaWeight, &CudaWeight),
    rows: usize,
    y: &mut CudaSlice<f32>,
) -> Result<()> {
    let (Some(g), Some(u)) = (bf16_weight(gate, rows), bf16_weight(up, rows)) else {
        unreachable!("callers check bf16_weight first")
    };
    let (out, inp) = (gate.rows, gate.cols);
    check_len("gemv_silu_mul x", x.len(), rows * inp)?;
    check_len("gemv_silu_mul y", y.len(), rows * out)?;
    let f = be.kernels.get(&entry("gemv_silu_mul_bf16", rows))?;
    let stream = &be.dev.stream;
    let mut a = PdlArgs::new();
    a.buf(g, stream).buf(u, stream).buf(x, stream);
    push_norm(&mut a, norm, stream);
    a.buf(y, stream);
    for i in [rows, inp, out] {
        a.int(i as i32);
    }
    // SAFETY: arguments match the kernel's signature; sizes checked above; gate and up share their
    // shape (checked by the caller); every thread waits for the previous grid before it reads x.
    unsafe { a.launch(f, stream, launch_config(be, out, rows, inp), be.pdl_on()) }
}
