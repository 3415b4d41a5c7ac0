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
    /// Allocates `layers` K and V pools of `shape`.
    pub fn new(backend: &B, layers: usize, shape: KvShape) -> Result<Self> {
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
