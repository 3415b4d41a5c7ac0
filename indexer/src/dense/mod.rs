//! Dense retrieval: an embedder trait, and an HNSW index (hnsw_rs) of L2-normalised vectors.
//!
//! Similarity is the inner product of unit vectors (= cosine). The vectors themselves are kept in
//! a flat file beside the index metadata ([`storage`]); the HNSW graph is rebuilt from them when
//! the index is opened, so reopening or compacting never needs the embedder again.
//! Deleted chunks become tombstones, filtered out at query time; once they exceed a share of the
//! index ([`DenseConfig::rebuild_tombstone_share`]) the next commit compacts the files and
//! rebuilds the graph.

mod graph;
mod index;
pub mod storage;

pub use index::{DenseConfig, DenseIndex};
pub use storage::DenseEntry;

use crate::Result;

/// Turns texts into embedding vectors. The service implements it over the inference engine.
pub trait Embedder: Send + Sync {
    /// Dimension of the vectors.
    fn dim(&self) -> usize;
    /// Embeds a batch of texts, one vector per text, in order.
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>>;
}

/// Scales `v` to unit L2 norm in place (a zero vector stays zero).
pub fn normalize(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
}

/// Inner product of two vectors of equal length.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Embeds `texts` in batches of `batch` with `embedder`, checking every vector's dimension.
pub fn embed_in_batches(
    embedder: &dyn Embedder,
    texts: &[&str],
    batch: usize,
) -> Result<Vec<Vec<f32>>> {
    let mut out = Vec::with_capacity(texts.len());
    for part in texts.chunks(batch.max(1)) {
        let vectors = embedder.embed(part)?;
        if vectors.len() != part.len() {
            return Err(crate::IndexerError::Embedder(format!(
                "embedder returned {} vectors for {} texts",
                vectors.len(),
                part.len()
            )));
        }
        for v in vectors {
            if v.len() != embedder.dim() {
                return Err(crate::IndexerError::DimensionMismatch {
                    expected: embedder.dim(),
                    got: v.len(),
                });
            }
            out.push(v);
        }
    }
    Ok(out)
}
