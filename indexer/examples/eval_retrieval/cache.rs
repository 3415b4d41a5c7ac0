//! An [`Embedder`] wrapper that keeps every vector it computes in a file under `.cache/`,
//! keyed by model name and SHA-256 of the text, so re-running an evaluation never re-embeds.
//!
//! File: `.cache/embeddings/<model>.bin`, records of `[32-byte sha256][dim × f32 LE]`, appended.

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Mutex;

use docqa_indexer::{Embedder, Result};
use sha2::{Digest, Sha256};

/// Embeddings cached on disk in front of a real embedder (or of nothing: cache only).
pub struct CachedEmbedder {
    inner: Option<Box<dyn Embedder>>,
    dim: usize,
    path: PathBuf,
    vectors: Mutex<HashMap<[u8; 32], Vec<f32>>>,
}

fn key(text: &str) -> [u8; 32] {
    Sha256::digest(text.as_bytes()).into()
}

impl CachedEmbedder {
    /// Opens the cache of `model` (dimension `dim`) under `root`, computing misses with `inner`.
    pub fn open(
        root: &std::path::Path,
        model: &str,
        dim: usize,
        inner: Option<Box<dyn Embedder>>,
    ) -> Result<Self> {
        let dir = root.join("embeddings");
        std::fs::create_dir_all(&dir)?;
        let path = dir.join(format!("{model}.bin"));
        let mut vectors = HashMap::new();
        if let Ok(bytes) = std::fs::read(&path) {
            for rec in bytes.chunks_exact(32 + 4 * dim) {
                let mut k = [0u8; 32];
                k.copy_from_slice(&rec[..32]);
                let v = rec[32..]
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect();
                vectors.insert(k, v);
            }
        }
        Ok(Self {
            inner,
            dim,
            path,
            vectors: Mutex::new(vectors),
        })
    }

    /// Number of cached vectors.
    pub fn len(&self) -> usize {
        self.vectors.lock().map(|v| v.len()).unwrap_or(0)
    }
}

impl Embedder for CachedEmbedder {
    fn dim(&self) -> usize {
        self.dim
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        let keys: Vec<[u8; 32]> = texts.iter().map(|t| key(t)).collect();
        let mut cache = self
            .vectors
            .lock()
            .map_err(|_| docqa_indexer::IndexerError::Embedder("cache lock poisoned".into()))?;
        let missing: Vec<usize> = (0..texts.len())
            .filter(|&i| !cache.contains_key(&keys[i]))
            .collect();
        if !missing.is_empty() {
            let inner = self.inner.as_ref().ok_or_else(|| {
                docqa_indexer::IndexerError::Embedder("text not in the embedding cache".into())
            })?;
            let batch: Vec<&str> = missing.iter().map(|&i| texts[i]).collect();
            let fresh = inner.embed(&batch)?;
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.path)?;
            let mut buf = Vec::new();
            for (&i, v) in missing.iter().zip(fresh) {
                buf.extend_from_slice(&keys[i]);
                v.iter()
                    .for_each(|x| buf.extend_from_slice(&x.to_le_bytes()));
                cache.insert(keys[i], v);
            }
            file.write_all(&buf)?;
        }
        Ok(keys.iter().map(|k| cache[k].clone()).collect())
    }
}
