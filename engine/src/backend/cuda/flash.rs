//! Launches of the tensor-core attention kernels over bf16 paged KV pools (`flash_prefill.cu`,
//! `flash_decode.cu`): FlashAttention-2-style prefill, and split-KV decode with its reduce.
//!
//! They apply to head_dim 64 and 128; decode also needs at most 16 query heads per KV head and one
//! query row per sequence. Q and the output stay f32 (`[rows, heads · head_dim]`); the kernels round
//! Q to bf16 in registers.

use cudarc::driver::sys::CUfunction_attribute::{
    CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES as MAX_DYNAMIC_SMEM,
    CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK as MAX_THREADS,
};
use cudarc::driver::{CudaSlice, LaunchConfig, PushKernelArg};

use super::{CudaBackend, cuda_err};
use crate::backend::{AttnShape, PagedAttnMeta};
use crate::error::Result;

/// Most keys per prefill tile (the kernel's `BN_OF(HD)`: 32 or 64); shared memory is sized for it.
const MAX_TILE_KEYS: usize = 64;
/// Keys per decode block step (4 warps × 16 keys): split lengths are multiples of it.
const DECODE_STEP: usize = 64;
/// Shortest key split worth a block of its own.
const MIN_SPLIT: usize = 256;
/// Blocks the decode launch aims for: many short blocks over the H200's 132 SMs, so the last wave
/// is a small share of the time.
const TARGET_BLOCKS: usize = 132 * 16;
/// Most query heads per KV head the decode kernel handles (one mma tile's rows).
const MAX_GROUP: usize = 16;

/// Whether the flash kernels handle this head layout.
pub(super) fn supports(shape: AttnShape) -> bool {
    matches!(shape.head_dim, 64 | 128)
}

/// Whether a batch is pure decode the decode kernel handles: one query row per sequence (every
/// scheduled sequence has at least one row, so `num_tokens == num_seqs` means exactly one each).
pub(super) fn is_decode(meta: &PagedAttnMeta<'_, CudaBackend>, shape: AttnShape) -> bool {
    meta.num_tokens == meta.num_seqs && shape.num_heads / shape.num_kv_heads <= MAX_GROUP
}

/// Causal prefill (any batch shape) over bf16 pools.
pub(super) fn prefill(
    be: &CudaBackend,
    q: &CudaSlice<f32>, // [num_tokens, num_heads, head_dim]
    (k, v): (&CudaSlice<u16>, &CudaSlice<u16>), // [num_blocks, block_size, num_kv_heads, head_dim]
    meta: &PagedAttnMeta<'_, CudaBackend>,
    shape: AttnShape,
    block_size: usize,
    out: &mut CudaSlice<f32>, // [num_tokens, num_heads, head_dim]
) -> Result<()> {
    let func = be
        .kernels
        .get(&format!("flash_prefill_bf16_hd{}", shape.head_dim))?;
    // The kernel's launch bound is its block size (PREFILL_WARPS · 32), 32 query rows per warp.
    let threads = func.get_attribute(MAX_THREADS).map_err(cuda_err)? as usize / 32 * 32;
    let rows = threads;
    // Q rows, then two stages of K and V tiles, each row padded by 8 elements: above the 48 KiB
    // default.
    let smem = (rows + 4 * MAX_TILE_KEYS) * (shape.head_dim + 8) * 2;
    func.set_attribute(MAX_DYNAMIC_SMEM, smem as i32)
        .map_err(cuda_err)?;
    let blocks = meta.num_tokens / rows + meta.num_seqs;
    let cfg = LaunchConfig {
        grid_dim: (blocks as u32, shape.num_heads as u32, 1),
        block_dim: (threads as u32, 1, 1),
        shared_mem_bytes: smem as u32,
    };
    let ints = [
        meta.num_seqs,
        shape.num_heads,
        shape.num_kv_heads,
        block_size,
        meta.max_blocks_per_seq,
    ]
    .map(|v| v as i32);
    let mut b = be.dev.stream.launch_builder(func);
    b.arg(q).arg(k).arg(v);
    b.arg(meta.query_start_loc)
        .arg(meta.seq_lens)
        .arg(meta.block_table)
        .arg(out);
    for i in &ints {
        b.arg(i);
    }
    b.arg(&shape.scale);
    // SAFETY: arguments match the kernel's signature; the caller checked the buffer sizes; the
    // block table and lengths come from the KV bookkeeping, as for the other attention kernels.
    unsafe { b.launch(cfg) }.map_err(cuda_err)?;
    Ok(())
}

/// Number of key splits and keys per split for a decode batch.
fn splits(meta: &PagedAttnMeta<'_, CudaBackend>, shape: AttnShape) -> (usize, usize) {
    let max_len = meta.max_seq_len.max(1);
    let per_split = (meta.num_seqs * shape.num_kv_heads).max(1);
    let most = max_len.div_ceil(MIN_SPLIT);
    let n = TARGET_BLOCKS.div_ceil(per_split).clamp(1, most.max(1));
    let len = max_len.div_ceil(n).div_ceil(DECODE_STEP) * DECODE_STEP;
    (max_len.div_ceil(len), len)
}

/// Split-KV decode (one query row per sequence) over bf16 pools, then the reduce.
pub(super) fn decode(
    be: &CudaBackend,
    q: &CudaSlice<f32>,                         // [num_seqs, num_heads, head_dim]
    (k, v): (&CudaSlice<u16>, &CudaSlice<u16>), // [num_blocks, block_size, num_kv_heads, head_dim]
    meta: &PagedAttnMeta<'_, CudaBackend>,
    shape: AttnShape,
    block_size: usize,
    out: &mut CudaSlice<f32>, // [num_seqs, num_heads, head_dim]
) -> Result<()> {
    let (n, len) = splits(meta, shape);
    let rows = meta.num_seqs * n * shape.num_heads;
    let stream = &be.dev.stream;
    // SAFETY: every element of both is written by the decode kernel before the reduce reads it.
    let mut part_o = unsafe { stream.alloc::<f32>(rows * shape.head_dim) }.map_err(cuda_err)?;
    let mut part_ml = unsafe { stream.alloc::<f32>(rows * 2) }.map_err(cuda_err)?;
    let name = format!("flash_decode_bf16_hd{}", shape.head_dim);
    let cfg = LaunchConfig {
        grid_dim: (n as u32, shape.num_kv_heads as u32, meta.num_seqs as u32),
        block_dim: (128, 1, 1),
        shared_mem_bytes: 0,
    };
    let ints = [
        shape.num_heads,
        shape.num_kv_heads,
        block_size,
        meta.max_blocks_per_seq,
        len,
    ]
    .map(|v| v as i32);
    let mut b = stream.launch_builder(be.kernels.get(&name)?);
    b.arg(q).arg(k).arg(v);
    b.arg(meta.query_start_loc)
        .arg(meta.seq_lens)
        .arg(meta.block_table);
    b.arg(&mut part_o).arg(&mut part_ml);
    for i in &ints {
        b.arg(i);
    }
    b.arg(&shape.scale);
    // SAFETY: arguments match the kernel's signature; the partial buffers hold
    // num_seqs · splits · num_heads rows; the caller checked the other sizes.
    unsafe { b.launch(cfg) }.map_err(cuda_err)?;

    let cfg = LaunchConfig {
        grid_dim: (shape.num_heads as u32, meta.num_seqs as u32, 1),
        block_dim: (shape.head_dim as u32, 1, 1),
        shared_mem_bytes: 0,
    };
    let ints = [n, shape.num_heads, shape.head_dim].map(|v| v as i32);
    let mut b = stream.launch_builder(be.kernels.get("flash_decode_reduce")?);
    b.arg(&part_o)
        .arg(&part_ml)
        .arg(meta.query_start_loc)
        .arg(out);
    for i in &ints {
        b.arg(i);
    }
    // SAFETY: arguments match the kernel's signature; sizes as above.
    unsafe { b.launch(cfg) }.map_err(cuda_err)?;
    Ok(())
}
