//! Launches of the attention kernels: causal over the paged KV pool, bidirectional varlen.
//!
//! Paged attention over bf16 and int8 pools at head_dim 64 and 128 goes to the tensor-core kernels in
//! [`flash`] (split-KV decode when every sequence has one query row, tiled prefill otherwise for
//! block sizes that are multiples of 8; sink windows included), and so do bidirectional varlen
//! batches (BERT), K and V rounded to bf16. Everything else (f32 pools, other widths and block
//! sizes) runs the plain kernels: one block per (query row, head) with `head_dim` threads, so
//! `head_dim` must be a multiple of 32 and at most 256.

use cudarc::driver::{CudaSlice, LaunchConfig, PushKernelArg};

use super::{CudaBackend, CudaKv, check_len, cuda_err, flash, pools};
use crate::backend::{AttnShape, PagedAttnMeta, WindowedAttn};
use crate::error::{EngineError, Result};

/// Largest head width the kernels support.
pub const MAX_HEAD_DIM: usize = 256;

fn launch_config(rows: usize, shape: AttnShape) -> Result<LaunchConfig> {
    let hd = shape.head_dim;
    if hd == 0 || !hd.is_multiple_of(32) || hd > MAX_HEAD_DIM {
        return Err(EngineError::InvalidConfig(format!(
            "CUDA attention needs head_dim a multiple of 32 up to {MAX_HEAD_DIM}, got {hd}"
        )));
    }
    if shape.num_kv_heads == 0 || !shape.num_heads.is_multiple_of(shape.num_kv_heads) {
        return Err(EngineError::InvalidConfig(format!(
            "{} heads is not a multiple of {} KV heads",
            shape.num_heads, shape.num_kv_heads
        )));
    }
    Ok(LaunchConfig {
        grid_dim: (rows as u32, shape.num_heads as u32, 1),
        block_dim: (hd as u32, 1, 1),
        shared_mem_bytes: 0,
    })
}

/// The integer arguments of the paged kernels: num_seqs, num_heads, num_kv_heads, head_dim, block_size,
/// max_blocks_per_seq.
fn paged_ints(
    meta: &PagedAttnMeta<'_, CudaBackend>,
    shape: AttnShape,
    block_size: usize,
) -> [i32; 6] {
    [
        meta.num_seqs,
        shape.num_heads,
        shape.num_kv_heads,
        shape.head_dim,
        block_size,
        meta.max_blocks_per_seq,
    ]
    .map(|v| v as i32)
}

pub(super) fn paged(
    be: &CudaBackend,
    q: &CudaSlice<f32>,
    (kc, vc): (&CudaKv, &CudaKv),
    meta: &PagedAttnMeta<'_, CudaBackend>,
    shape: AttnShape,
    out: &mut CudaSlice<f32>,
) -> Result<()> {
    let width = meta.num_tokens * shape.num_heads * shape.head_dim;
    check_len("paged_attention q", q.len(), width)?;
    check_len("paged_attention out", out.len(), width)?;
    check_len(
        "query_start_loc",
        meta.query_start_loc.len(),
        meta.num_seqs + 1,
    )?;
    check_len("seq_lens", meta.seq_lens.len(), meta.num_seqs)?;
    let table = meta.num_seqs * meta.max_blocks_per_seq;
    check_len("block_table", meta.block_table.len(), table)?;
    if meta.num_tokens == 0 {
        return Ok(());
    }
    let cfg = launch_config(meta.num_tokens, shape)?;
    if let Some(w) = &meta.windows {
        check_len("paged_attention q_sinks", w.q_sinks.len(), width)?;
        check_len("windows", w.windows.len(), 3 * meta.num_seqs)?;
    }
    let dtype = pools::shared_dtype(kc, vc)?;
    if dtype != "f32" && flash::supports(shape) {
        let bs = kc.shape.block_size;
        let decode = flash::is_decode(meta, shape);
        if decode {
            return flash::decode(be, q, (kc, vc), meta, shape, out);
        }
        if !decode && flash::prefill_takes_block_size(bs) {
            return flash::prefill(be, flash::PrefillIo::F32(q, out), (kc, vc), meta, shape);
        }
    }
    if let Some(w) = &meta.windows {
        return paged_windowed(be, (q, w), (kc, vc), meta, shape, cfg, out);
    }
    let ints = paged_ints(meta, shape, kc.shape.block_size);
    let name = format!("paged_attention_{dtype}");
    let mut b = be.dev.stream.launch_builder(be.kernels.get(&name)?);
    b.arg(q);
    pools::push(&mut b, &be.dev.stream, kc, vc)?;
    b.arg(meta.query_start_loc)
        .arg(meta.seq_lens)
        .arg(meta.block_table);
    b.arg(out);
    for i in &ints {
        b.arg(i);
    }
    b.arg(&shape.scale);
    // SAFETY: arguments match the kernel's signature; buffer sizes checked above; the block table
    // and sequence lengths come from the caller's KV bookkeeping, as on the CPU backend.
    unsafe { b.launch(cfg) }.map_err(cuda_err)?;
    Ok(())
}

/// Paged attention where sequences may stream through sink windows: the plain kernel, with each query
/// scoring the sinks with its row of `q_sinks`.
fn paged_windowed(
    be: &CudaBackend,
    (q, windowed): (&CudaSlice<f32>, &WindowedAttn<'_, CudaBackend>),
    (kc, vc): (&CudaKv, &CudaKv),
    meta: &PagedAttnMeta<'_, CudaBackend>,
    shape: AttnShape,
    cfg: LaunchConfig,
    out: &mut CudaSlice<f32>,
) -> Result<()> {
    let name = format!("paged_attention_windowed_{}", pools::shared_dtype(kc, vc)?);
    let mut b = be.dev.stream.launch_builder(be.kernels.get(&name)?);
    b.arg(q).arg(windowed.q_sinks);
    pools::push(&mut b, &be.dev.stream, kc, vc)?;
    b.arg(meta.query_start_loc)
        .arg(meta.seq_lens)
        .arg(meta.block_table)
        .arg(windowed.windows);
    b.arg(out);
    let ints = paged_ints(meta, shape, kc.shape.block_size);
    for i in &ints {
        b.arg(i);
    }
    b.arg(&shape.scale);
    // SAFETY: arguments match the kernel's signature; buffer sizes checked above and in `paged`; block
    // table rows and windows come from `Batch::build`, as on the CPU backend.
    unsafe { b.launch(cfg) }.map_err(cuda_err)?;
    Ok(())
}

pub(super) fn varlen(
    be: &CudaBackend,
    q: &CudaSlice<f32>,
    (k, v): (&CudaSlice<f32>, &CudaSlice<f32>),
    query_start_loc: &CudaSlice<u32>,
    (num_seqs, rows): (usize, usize),
    shape: AttnShape,
    out: &mut CudaSlice<f32>,
) -> Result<()> {
    check_len("query_start_loc", query_start_loc.len(), num_seqs + 1)?;
    let s = &be.dev.stream;
    let kv_width = rows * shape.num_kv_heads * shape.head_dim;
    check_len(
        "varlen_attention q",
        q.len(),
        rows * shape.num_heads * shape.head_dim,
    )?;
    check_len(
        "varlen_attention out",
        out.len(),
        rows * shape.num_heads * shape.head_dim,
    )?;
    check_len("varlen_attention k", k.len(), kv_width)?;
    check_len("varlen_attention v", v.len(), kv_width)?;
    if rows == 0 {
        return Ok(());
    }
    let cfg = launch_config(rows, shape)?;
    if flash::supports(shape) {
        return flash::bidirectional(be, q, (k, v), query_start_loc, (num_seqs, rows), shape, out);
    }
    let ints = [
        num_seqs,
        shape.num_heads,
        shape.num_kv_heads,
        shape.head_dim,
    ]
    .map(|v| v as i32);
    let mut b = s.launch_builder(be.kernels.get("varlen_attention_f32")?);
    b.arg(q).arg(k).arg(v).arg(query_start_loc).arg(out);
    for i in &ints {
        b.arg(i);
    }
    b.arg(&shape.scale);
    // SAFETY: arguments match the kernel's signature; sizes checked above.
    unsafe { b.launch(cfg) }.map_err(cuda_err)?;
    Ok(())
}
