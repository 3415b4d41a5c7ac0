//! Shared machinery of the evaluations: a throw-away index, batched query embedding, and the
//! three rankings (bm25, dense, hybrid) of a query.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crate::Result;
use crate::bm25::Bm25Index;
use crate::dense::{DenseEntry, DenseIndex, Embedder, embed_in_batches};
use crate::hybrid::{Fusion, fuse};
use crate::record::{ChunkRecord, Retriever, ScoredChunk, SearchFilter};
use crate::store::SearchConfig;

/// A directory under the system temp dir, removed when dropped.
pub struct ScratchDir(PathBuf);

impl ScratchDir {
    /// Creates a fresh, empty directory.
    pub fn new(label: &str) -> Result<Self> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let dir =
            std::env::temp_dir().join(format!("docqa-{label}-{}-{n}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        Ok(Self(dir))
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Settings shared by the evaluations.
#[derive(Debug, Clone, Copy, Default)]
pub struct EvalOptions {
    /// Index configuration (tokenizer, HNSW, fusion depth, embedding batch).
    pub search: SearchConfig,
    /// Fusion used for the hybrid line.
    pub fusion: Fusion,
}

/// The retrievers' rankings of one query.
pub struct Rankings {
    /// `(name, chunks best first)` per evaluated retriever: bm25, then dense and hybrid if any.
    pub lists: Vec<(&'static str, Vec<ScoredChunk>)>,
}

/// An index built for one evaluation run, with cumulated query times per retriever.
pub struct EvalIndex {
    _dir: ScratchDir,
    bm25: Bm25Index,
    dense: Option<(DenseIndex, Arc<dyn Embedder>)>,
    options: EvalOptions,
    /// Seconds spent in bm25, dense (excluding query embedding) and fusion, summed over queries.
    pub seconds: [f64; 3],
}

impl EvalIndex {
    /// Indexes `records` with BM25, and with the embedder's vectors when there is one.
    pub fn build(
        records: &[ChunkRecord],
        embedder: Option<Arc<dyn Embedder>>,
        options: EvalOptions,
    ) -> Result<Self> {
        let dir = ScratchDir::new("eval")?;
        let bm25 = Bm25Index::open(&dir.path().join("bm25"), options.search.bm25)?;
        bm25.add(records)?;
        bm25.commit()?;
        let dense = match embedder {
            Some(e) => {
                let texts: Vec<&str> = records.iter().map(|r| r.text.as_str()).collect();
                let vectors = embed_in_batches(e.as_ref(), &texts, options.search.embed_batch)?;
                let mut index =
                    DenseIndex::open(&dir.path().join("dense"), e.dim(), options.search.dense)?;
                let entries: Vec<DenseEntry> = records
                    .iter()
                    .map(|r| DenseEntry {
                        chunk_id: r.chunk_id,
                        document_id: r.document_id.clone(),
                        collection: r.collection.clone(),
                    })
                    .collect();
                index.add(&entries, &vectors)?;
                Some((index, e))
            }
            None => None,
        };
        Ok(Self {
            _dir: dir,
            bm25,
            dense,
            options,
            seconds: [0.0; 3],
        })
    }

    /// Embeds all queries at once (batched); empty when there is no embedder.
    pub fn embed_queries(&self, queries: &[&str]) -> Result<Vec<Vec<f32>>> {
        match &self.dense {
            Some((_, e)) => embed_in_batches(e.as_ref(), queries, self.options.search.embed_batch),
            None => Ok(Vec::new()),
        }
    }

    /// Rankings of `query` (with its vector, if dense is evaluated), `k` deep, under `filter`.
    pub fn rank(
        &mut self,
        query: &str,
        vector: Option<&[f32]>,
        k: usize,
        filter: &SearchFilter,
    ) -> Result<Rankings> {
        let depth = self.options.search.fusion_depth.max(k);
        let t = Instant::now();
        let lexical = self.bm25.search(query, depth, filter)?;
        self.seconds[0] += t.elapsed().as_secs_f64();
        let mut lists = Vec::new();
        if let (Some((dense, _)), Some(v)) = (&self.dense, vector) {
            let t = Instant::now();
            let semantic = dense.search(v, depth, filter)?;
            self.seconds[1] += t.elapsed().as_secs_f64();
            let t = Instant::now();
            let fused = fuse(
                &[(Retriever::Bm25, &lexical), (Retriever::Dense, &semantic)],
                self.options.fusion,
                k,
            );
            self.seconds[2] += t.elapsed().as_secs_f64();
            let hybrid = fused
                .into_iter()
                .map(|h| ScoredChunk {
                    chunk_id: h.chunk_id,
                    document_id: h.document_id,
                    score: h.score,
                })
                .collect();
            lists.push(("dense", truncate(semantic, k)));
            lists.push(("hybrid", hybrid));
        }
        lists.insert(0, ("bm25", truncate(lexical, k)));
        Ok(Rankings { lists })
    }
}

fn truncate(mut v: Vec<ScoredChunk>, k: usize) -> Vec<ScoredChunk> {
    v.truncate(k);
    v
}
