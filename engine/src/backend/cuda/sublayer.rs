//! The attention sublayer of a prefill on Hopper, in bf16 from one product to the next: the input
//! normalised and rounded once, the q, k and v products written in bf16, RoPE (and the biases) applied
//! to them in bf16 with k and v going to the pools (`rope_kv_write_bf16io`, or
//! `rope_kv_write_int8_bf16io` quantising into int8 pools), attention reading bf16 queries and writing
//! its output in bf16 (`flash_prefill_sm90*_bf16io`), and the output product reading that output as it
//! is, added onto the f32 residual stream by cuBLAS.
//!
//! The op-by-op path writes each of q, k, v and attention's output in f32 and reads it back (and
//! rounds attention's output to bf16 on a pass of its own): at a 32K-token prefill of the
//! Llama-3.2-1B shape that is about 20 GB of traffic a forward pass that this path does not have
//! (some of it hidden under the products' and attention's compute). What
//! is rounded is what the op-by-op path rounds too (k and v for the pools, q and the output for their
//! products), only earlier: q and k are rotated after their rounding instead of before.

use cudarc::cublas::sys::cudaDataType_t;
use cudarc::driver::{CudaSlice, DevicePtrMut, LaunchConfig};

use super::flash::{self, PrefillIo};
use super::matmul::{all_bf16, gemm_bf16, gemm_bf16_into, staged_bf16};
use super::ops::vector;
use super::pdl::PdlArgs;
use super::{CudaBackend, CudaKv, check_len, grid};
use crate::backend::{AttnBuffers, AttnShape, AttnWeights, KvDtype, PagedAttnMeta, RopeKvWrite};
use crate::error::{EngineError, Result};

/// Whether this sublayer runs in bf16 here: the backend's switch on, and a prefill (not a decode
/// batch) over bf16 or int8 pools on the Hopper kernel, without windows, all four products over bf16
/// weights at more rows than the skinny kernels take, and biases (where there are any) as f32 vectors.
pub(super) fn takes(
    be: &CudaBackend,
    weights: &AttnWeights<'_, CudaBackend>,
    rope: &RopeKvWrite<'_, CudaBackend>,
    (meta, shape): (&PagedAttnMeta<'_, CudaBackend>, AttnShape),
) -> bool {
    let (kc, vc) = (&*rope.caches.0, &*rope.caches.1);
    let [q, k, v] = weights.qkv.0;
    let width = shape.num_heads * shape.head_dim;
    be.bf16_sublayer()
        && be.hopper_prefill()
        && matches!(kc.shape.dtype, KvDtype::Bf16 | KvDtype::Int8)
        && kc.shape.dtype == vc.shape.dtype
        && flash::supports(shape)
        && flash::prefill_takes_block_size(kc.shape.block_size)
        && meta.windows.is_none()
        && !flash::is_decode(meta, shape)
        && meta.num_tokens > super::gemv::MAX_ROWS
        && all_bf16([q, k, v, weights.o]).is_some()
        && [q, k, v].iter().all(|w| w.cols == weights.hidden)
        && (weights.o.rows, weights.o.cols) == (weights.hidden, width)
        && weights.qkv.1.iter().flatten().all(|b| vector(b).is_ok())
}

/// Runs the sublayer as the module says; [`takes`] must have said yes. `bufs` lend their memory:
/// q, k and v hold the bf16 products in their first halves; the norm's and attention's buffers are
/// not used.
pub(super) fn run(
    be: &CudaBackend,
    x: &mut CudaSlice<f32>,
    weights: AttnWeights<'_, CudaBackend>,
    rope: RopeKvWrite<'_, CudaBackend>,
    (meta, shape): (&PagedAttnMeta<'_, CudaBackend>, AttnShape),
    (_, [q, k, v], _): AttnBuffers<'_, CudaBackend>,
) -> Result<()> {
    let rows = meta.num_tokens;
    let (heads, kv_heads, head_dim) = rope.heads;
    let (q_width, kv_width, hidden) = (heads * head_dim, kv_heads * head_dim, weights.hidden);
    check_len("sublayer x", x.len(), rows * hidden)?;
    // The f32 buffers hold twice the bf16 values needed.
    check_len("sublayer q", q.len(), rows * q_width / 2)?;
    check_len("sublayer k", k.len(), rows * kv_width / 2)?;
    check_len("sublayer v", v.len(), rows * kv_width / 2)?;
    let Some([wq, wk, wv, wo]) = all_bf16([
        weights.qkv.0[0],
        weights.qkv.0[1],
        weights.qkv.0[2],
        weights.o,
    ]) else {
        unreachable!("takes() checked the weights are bf16")
    };
    let stream = &be.dev.stream;
    // The normalised input, later attention's output: room for the wider of the two.
    let norm = Some((vector(weights.norm.0)?, weights.norm.1));
    let mut staged = staged_bf16(be, (&*x, norm), (rows, hidden), rows * q_width)?;
    let xb = staged.buf();
    let (q_at, _gq) = q.device_ptr_mut(stream);
    let (k_at, _gk) = k.device_ptr_mut(stream);
    let (v_at, _gv) = v.device_ptr_mut(stream);
    for (w, at, n) in [
        (wq, q_at, q_width),
        (wk, k_at, kv_width),
        (wv, v_at, kv_width),
    ] {
        // SAFETY: each buffer holds rows · n bf16 values (checked above), on this stream.
        unsafe {
            gemm_bf16_into(
                be,
                (xb, w),
                (rows, n, hidden),
                0.0,
                (at, cudaDataType_t::CUDA_R_16BF),
            )
        }?;
    }
    let (kc, vc) = rope.caches;
    let biases = weights.qkv.1.map(|b| b.map(vector).transpose());
    let [qb, kb, vb] = biases;
    let biases = [qb?, kb?, vb?];
    // SAFETY: q, k and v hold the bf16 products just written, on this stream.
    unsafe {
        rope_kv_write_bf16io(
            be,
            [q_at, k_at, v_at],
            biases,
            (rope.table, rope.slot_mapping),
            (rows, heads, kv_heads, head_dim),
            (&mut *kc, &mut *vc),
        )
    }?;
    {
        let (out_at, _go) = xb.device_ptr_mut(stream);
        let io = PrefillIo::Bf16 {
            q: q_at,
            out: out_at,
        };
        flash::prefill(be, io, (&*kc, &*vc), meta, shape)?;
    }
    let beta = if weights.adds_residual { 1.0 } else { 0.0 };
    gemm_bf16(be, (xb, wo), (rows, hidden, q_width), beta, x)
}

/// Launches `rope_kv_write_bf16io` (or its int8 form) over the bf16 products at `q`, `k` and `v`.
///
/// # Safety
/// The addresses must hold `[rows, heads · head_dim]` and `[rows, kv_heads · head_dim]` bf16 values,
/// valid on the backend's stream.
unsafe fn rope_kv_write_bf16io(
    be: &CudaBackend,
    [q, k, v]: [u64; 3],
    biases: [Option<&CudaSlice<f32>>; 3],
    (table, slots): (&CudaSlice<f32>, &CudaSlice<u32>),
    (rows, heads, kv_heads, head_dim): (usize, usize, usize, usize),
    (kc, vc): (&mut CudaKv, &mut CudaKv),
) -> Result<()> {
    let widths = [heads, kv_heads, kv_heads].map(|h| h * head_dim);
    for (bias, width) in biases.iter().zip(widths) {
        if let Some(b) = bias {
            check_len("rope_kv_write bias", b.len(), width)?;
        }
    }
    check_len("rope_kv_write table", table.len(), rows * head_dim)?;
    check_len("rope_kv_write slot_mapping", slots.len(), rows)?;
    if [&*kc, &*vc]
        .iter()
        .any(|c| (c.shape.num_kv_heads, c.shape.head_dim) != (kv_heads, head_dim))
    {
        return Err(EngineError::InvalidConfig(format!(
            "rope_kv_write: {kv_heads} KV heads of {head_dim} do not match the pool"
        )));
    }
    let stream = &be.dev.stream;
    let mut a = PdlArgs::new();
    a.addr(q).addr(k).addr(v);
    for b in biases {
        a.maybe_buf(b, stream);
    }
    a.buf(table, stream).buf(slots, stream);
    super::pools::push(&mut a, stream, kc, vc)?;
    for i in [rows, heads, kv_heads, head_dim] {
        a.int(i as i32);
    }
    let (name, cfg) = match kc.shape.dtype {
        // One warp per (row, head): an int8 head's scale needs the whole head.
        KvDtype::Int8 => {
            let warps_per_block = 8;
            let warps = rows * (heads + kv_heads);
            let cfg = LaunchConfig {
                grid_dim: (warps.div_ceil(warps_per_block).max(1) as u32, 1, 1),
                block_dim: (32 * warps_per_block as u32, 1, 1),
                shared_mem_bytes: 0,
            };
            ("rope_kv_write_int8_bf16io", cfg)
        }
        // A thread rotates eight pairs of one head.
        _ => (
            "rope_kv_write_bf16io",
            grid(rows * (heads + kv_heads) * head_dim / 16),
        ),
    };
    let f = be.kernels.get(name)?;
    // SAFETY: arguments match the kernel's signature; sizes checked above or vouched for by the
    // caller; slots come from the block allocator, as for kv_write. Every thread waits for the
    // previous kernel before it reads anything.
    unsafe { a.launch(f, stream, cfg, be.pdl_on()) }
}
