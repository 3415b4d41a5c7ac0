//! The attention sublayer of a decode step with the split-KV reduce folded into the output product:
//! the fused q/k/v product (RMSNorm, RoPE and the KV write in the same launch), the decode kernel
//! writing each split's partial output, then the output product (`gemv_merged_bf16_*`), which merges
//! the splits while it stages its input and adds onto the residual stream. One launch a layer fewer
//! than the op-by-op sequence (decode kernel, reduce, output product), whose reduce runs alone on a
//! few blocks between two kernels that stream weights. Every block of the product reads all the
//! partials, so where they are many the reduce keeps its own launch ([`MERGED_PARTIAL_BYTES`]).
//!
//! Off unless `DOCQA_CUDA_DECODE_MERGE=1` (or `set_decode_merge(true)`) until its timing is recorded;
//! `gpu-check` checks it against the CPU either way.

use std::sync::atomic::Ordering;

use cudarc::driver::CudaSlice;

use super::{CudaBackend, attention, flash, gemv};
use crate::backend::{
    AttnBuffers, AttnShape, AttnWeights, KvDtype, PagedAttnMeta, RopeKvWrite, unfused,
};
use crate::error::Result;

/// Most bytes of partial outputs every block of the merged product reads (all its rows' splits of
/// every head). Each block merges the whole input for itself, so the partials are read once a block
/// instead of once: beyond this (longer contexts cut into more splits, wider models, more rows) the
/// separate reduce, which reads them once and hands on a row a sequence, costs less than it saves.
/// 64 KiB is the Llama-3.2-1B shape's batch-1 decode after 512 tokens (8 splits of 2,048 values).
const MERGED_PARTIAL_BYTES: usize = 64 * 1024;

/// Whether this sublayer runs here: the backend's switch on, a pure decode batch (one query row a
/// sequence) without sink windows over bf16 or int8 pools on the tensor-core decode kernel, and an
/// output product the skinny kernels take with its whole input staged at once.
pub(super) fn takes(
    be: &CudaBackend,
    weights: &AttnWeights<'_, CudaBackend>,
    rope: &RopeKvWrite<'_, CudaBackend>,
    (meta, shape): (&PagedAttnMeta<'_, CudaBackend>, AttnShape),
) -> bool {
    let (kc, vc) = (&*rope.caches.0, &*rope.caches.1);
    let width = shape.num_heads * shape.head_dim;
    be.decode_merge()
        && meta.num_tokens > 0
        && flash::is_decode(meta, shape)
        && meta.windows.is_none()
        && matches!(kc.shape.dtype, KvDtype::Bf16 | KvDtype::Int8)
        && kc.shape.dtype == vc.shape.dtype
        && flash::supports(shape)
        && (weights.o.rows, weights.o.cols) == (weights.hidden, width)
        && gemv::merged_takes(weights.o, meta.num_tokens)
}

/// Runs the sublayer as the module says; [`takes`] must have said yes.
pub(super) fn run(
    be: &CudaBackend,
    x: &mut CudaSlice<f32>,
    weights: AttnWeights<'_, CudaBackend>,
    rope: RopeKvWrite<'_, CudaBackend>,
    (meta, shape): (&PagedAttnMeta<'_, CudaBackend>, AttnShape),
    (h, [q, k, v], attn): AttnBuffers<'_, CudaBackend>,
) -> Result<()> {
    let rows = meta.num_tokens;
    let (kc, vc) =
        unfused::normed_qkv_rope(be, x, &weights, rope, rows, (&mut *h, [&mut *q, k, v]))?;
    attention::check_paged(q, meta, shape, attn)?;
    let splits = flash::decode_splits(be, q, (kc, vc), meta, shape, attn)?;
    if splits == 1 {
        // One split: the decode kernel wrote the attention output itself, and there is nothing to merge.
        return unfused::output_product(be, attn, &weights, rows, (h, x));
    }
    if rows * splits * weights.o.cols * 4 > MERGED_PARTIAL_BYTES {
        flash::reduce_splits(be, splits, meta, shape, attn)?;
        return unfused::output_product(be, attn, &weights, rows, (h, x));
    }
    be.decode_merge_runs.fetch_add(1, Ordering::Relaxed);
    flash::with_parts(be, |part_o, part_ml| {
        let dims = (rows, splits, shape);
        gemv::gemv_merged(
            be,
            weights.o,
            (part_o, part_ml),
            dims,
            weights.adds_residual,
            x,
        )
    })
}
