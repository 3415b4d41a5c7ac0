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
pub mod workspace;

use crate::adapter::Adapter;
use crate::backend::{Backend, KvShape};
use crate::error::{EngineError, Result};
use crate::weights::{TensorRef, Weights};

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

/// Uploads a matrix after checking its shape, with the adapter's LoRA merged in when it adapts it.
pub(crate) fn adapted_matrix<B: Backend>(
    b: &B,
    w: &Weights,
    name: &str,
    shape: [usize; 2],
    adapter: Option<&Adapter>,
) -> Result<B::Weight> {
    let t = tensor(w, name, &shape)?;
    match adapter.map(|a| a.merge(&t)).transpose()?.flatten() {
        Some(merged) => b.upload_matrix(&merged.as_ref()),
        None => b.upload_matrix(&t),
    }
}

/// Uploads a vector after checking its length.
pub(crate) fn vector<B: Backend>(b: &B, w: &Weights, name: &str, len: usize) -> Result<B::Weight> {
    b.upload_vector(&tensor(w, name, &[len])?)
}

/// Uploads an optional vector (a bias some checkpoints carry).
pub(crate) fn opt_vector<B: Backend>(
    b: &B,
    w: &Weights,
    name: &str,
    len: usize,
) -> Result<Option<B::Weight>> {
    if w.contains(name) {
        vector(b, w, name, len).map(Some)
    } else {
        Ok(None)
    }
}

/// A workspace too small for the batch asked of it.
pub(crate) fn too_big(what: &str, asked: usize, capacity: usize) -> EngineError {
    EngineError::InvalidBatch(format!(
        "{asked} {what} exceed the workspace's capacity of {capacity}"
    ))
}
