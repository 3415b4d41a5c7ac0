//! Model code, one file per architecture: [`llama`] (Llama 2/3, SmolLM2, Mistral, Qwen2) and [`bert`]
//! (the embedder), plus the pieces they share: the batch description ([`batch`]), the per-layer KV pool
//! ([`KvPool`]) and a greedy decoding loop for single sequences ([`generate`]).

pub mod batch;
pub mod bert;
pub mod generate;
pub mod graphs;
mod kv_blocks;
pub mod llama;
pub mod perplexity;
pub mod split;
pub mod workspace;

use std::ops::Range;

use crate::adapter::Adapter;
use crate::backend::{Backend, KvShape};
use crate::error::{EngineError, Result};
use crate::parallel::Shard;
use crate::weights::{OwnedTensor, TensorRef, Weights};

pub use batch::{Batch, FREED_BLOCK, LogitsMode, SeqInput, WindowMeta};

/// The KV cache of a whole model: per layer one K and one V pool of the same shape.
pub struct KvPool<B: Backend> {
    /// Per-layer K pools.
    pub k: Vec<B::Kv>,
    /// Per-layer V pools.
    pub v: Vec<B::Kv>,
    /// Shape of every pool.
    pub shape: KvShape,
    /// Tells this pool's buffers from any other's (recorded graphs hold their addresses).
    pub(crate) id: u64,
}

impl<B: Backend> KvPool<B> {
    /// Allocates `layers` K and V pools of `shape`. On a device whose free memory is known (CUDA), a
    /// cache larger than that is refused with its size and the free memory, before any allocation.
    pub fn new(backend: &B, layers: usize, shape: KvShape) -> Result<Self> {
        check_pools_fit(layers, shape, backend.memory_info()?)?;
        let k = (0..layers)
            .map(|_| backend.alloc_kv(shape))
            .collect::<Result<_>>()?;
        let v = (0..layers)
            .map(|_| backend.alloc_kv(shape))
            .collect::<Result<_>>()?;
        Ok(KvPool {
            k,
            v,
            shape,
            id: graphs::next_pool_id(),
        })
    }
}

/// Refuses `layers` K and V pools of `shape` where they exceed the free bytes of `memory`
/// (`(free, total)`, None where unknown).
fn check_pools_fit(layers: usize, shape: KvShape, memory: Option<(usize, usize)>) -> Result<()> {
    const MIB: usize = 1 << 20;
    let need = 2 * layers * shape.num_blocks * shape.block_bytes();
    match memory {
        Some((free, total)) if need > free => Err(EngineError::InvalidConfig(format!(
            "a KV cache of {} tokens ({:?}, {layers} layers) needs {} MiB, and the device has {} MiB free \
             of {} MiB",
            shape.num_blocks * shape.block_size,
            shape.dtype,
            need.div_ceil(MIB),
            free / MIB,
            total / MIB,
        ))),
        _ => Ok(()),
    }
}

/// Looks a tensor up and checks its shape.
pub(crate) fn tensor<'a>(w: &'a Weights, name: &str, shape: &[usize]) -> Result<TensorRef<'a>> {
    let t = w.get(name)?;
    t.expect_shape(shape)?;
    Ok(t)
}

/// Uploads a matrix after checking its shape.
pub(crate) fn matrix<B: Backend>(
    b: &B,
    w: &Weights,
    name: &str,
    shape: [usize; 2],
) -> Result<B::Weight> {
    b.upload_matrix(&tensor(w, name, &shape)?)
}

/// Which part of a matrix a rank of a tensor-parallel group uploads.
#[derive(Debug, Clone)]
pub(crate) enum Part {
    /// All of it.
    Whole,
    /// These rows (output features: column-parallel q/k/v, gate/up, a vocabulary part).
    Rows(Range<usize>),
    /// These columns (input features: row-parallel o and down).
    Cols(Range<usize>),
}

impl Part {
    /// `shard`'s rows of a matrix with `n` of them (all of them for a whole model).
    pub(crate) fn rows(shard: Shard, n: usize) -> Part {
        match shard.is_whole() {
            true => Part::Whole,
            false => Part::Rows(shard.part(n)),
        }
    }

    /// `shard`'s columns of a matrix with `n` of them (all of them for a whole model).
    pub(crate) fn cols(shard: Shard, n: usize) -> Part {
        match shard.is_whole() {
            true => Part::Whole,
            false => Part::Cols(shard.part(n)),
        }
    }
}

/// Uploads `part` of a matrix after checking its whole shape, with the adapter's LoRA merged in
/// (over the whole matrix, before the part is cut) when it adapts it.
pub(crate) fn adapted_matrix<B: Backend>(
    b: &B,
    w: &Weights,
    (name, shape): (&str, [usize; 2]),
    adapter: Option<&Adapter>,
    part: Part,
) -> Result<B::Weight> {
    let t = tensor(w, name, &shape)?;
    let merged = adapter.map(|a| a.merge(&t)).transpose()?.flatten();
    let whole = merged.as_ref().map_or(t, OwnedTensor::as_ref);
    match part {
        Part::Whole => b.upload_matrix(&whole),
        Part::Rows(rows) => b.upload_matrix(&OwnedTensor::rows(&whole, rows).as_ref()),
        Part::Cols(cols) => b.upload_matrix(&OwnedTensor::cols(&whole, cols).as_ref()),
    }
}

/// Uploads elements `part` of an optional vector (a bias some checkpoints carry) after checking its
/// whole length.
pub(crate) fn opt_vector_part<B: Backend>(
    b: &B,
    w: &Weights,
    (name, len): (&str, usize),
    part: Range<usize>,
) -> Result<Option<B::Weight>> {
    if !w.contains(name) {
        return Ok(None);
    }
    let t = tensor(w, name, &[len])?;
    b.upload_vector(&OwnedTensor::rows(&t, part).as_ref())
        .map(Some)
}

/// Uploads a vector after checking its length.
pub(crate) fn vector<B: Backend>(b: &B, w: &Weights, name: &str, len: usize) -> Result<B::Weight> {
    b.upload_vector(&tensor(w, name, &[len])?)
}

/// A workspace too small for the batch asked of it.
pub(crate) fn too_big(what: &str, asked: usize, capacity: usize) -> EngineError {
    EngineError::InvalidBatch(format!(
        "{asked} {what} exceed the workspace's capacity of {capacity}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::KvDtype;

    const MIB: usize = 1 << 20;

    /// 32 layers of 1,024 blocks of 16 tokens, 8 bf16 heads of 128: 2 × 32 × 1024 × 16 × 8 × 128 × 2
    /// bytes, 2,048 MiB.
    fn two_gib_of_pools() -> KvShape {
        KvShape {
            num_blocks: 1024,
            block_size: 16,
            num_kv_heads: 8,
            head_dim: 128,
            dtype: KvDtype::Bf16,
        }
    }

    #[test]
    fn pools_that_fit_the_free_memory_or_of_unknown_memory_are_allocated() {
        let shape = two_gib_of_pools();
        assert!(check_pools_fit(32, shape, Some((2048 * MIB, 80 * 1024 * MIB))).is_ok());
        assert!(check_pools_fit(32, shape, None).is_ok());
    }

    #[test]
    fn pools_beyond_the_free_memory_are_refused_naming_their_size_and_the_free_memory() {
        let err = check_pools_fit(32, two_gib_of_pools(), Some((2047 * MIB, 80 * 1024 * MIB)))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("16384 tokens (Bf16, 32 layers) needs 2048 MiB")
                && err.contains("2047 MiB free of 81920 MiB"),
            "{err}"
        );
    }
}
