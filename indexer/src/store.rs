//! [`SearchIndex`]: the BM25 and dense indexes of one corpus, kept in step, searched together.
//!
//! Layout: `<dir>/bm25/` (tantivy) and `<dir>/dense/` (vectors + manifest). Every write goes
//! to both indexes and is committed before the call returns. The service's database is the
//! source of truth: [`SearchIndex::rebuild_from`] recreates both indexes from its chunk rows.
//! Searches take `&self` and writes `&mut self`: share one behind an `RwLock`.

use std::path::Path;
use std::sync::Arc;

use crate::Result;
use crate::bm25::{Bm25Config, Bm25Index};
use crate::dense::{DenseConfig, DenseEntry, DenseIndex, Embedder, embed_in_batches};
use crate::hybrid::{Fusion, SearchMode, fuse, single};
use crate::record::{ChunkRecord, Hit, Retriever, SearchFilter};

/// Options of a [`SearchIndex`].
#[derive(Debug, Clone, Copy)]
pub struct SearchConfig {
    /// BM25 options (used when the BM25 index is created).
    pub bm25: Bm25Config,
    /// Dense index tuning.
    pub dense: DenseConfig,
    /// Texts per embedder call.
    pub embed_batch: usize,
    /// How many candidates each retriever contributes to a hybrid search (at least `k`).
    pub fusion_depth: usize,
}

impl Default for SearchConfig {
    fn default() -> Self {
        Self {
            bm25: Bm25Config::default(),
            dense: DenseConfig::default(),
            embed_batch: 32,
            fusion_depth: 100,
        }
    }
}

/// BM25 + dense indexes of one corpus, with the embedder that feeds the dense side.
pub struct SearchIndex {
    bm25: Bm25Index,
    dense: DenseIndex,
    embedder: Arc<dyn Embedder>,
    config: SearchConfig,
}

impl SearchIndex {
    /// Opens (or creates) the indexes under `dir` with default options.
    pub fn open(dir: &Path, embedder: Arc<dyn Embedder>) -> Result<Self> {
        Self::open_with(dir, embedder, SearchConfig::default())
    }

    /// Opens (or creates) the indexes under `dir`.
    pub fn open_with(
        dir: &Path,
        embedder: Arc<dyn Embedder>,
        config: SearchConfig,
    ) -> Result<Self> {
        let bm25 = Bm25Index::open(&dir.join("bm25"), config.bm25)?;
        let dense = DenseIndex::open(&dir.join("dense"), embedder.dim(), config.dense)?;
        Ok(Self {
            bm25,
            dense,
            embedder,
            config,
        })
    }

    /// The BM25 side.
    pub fn bm25(&self) -> &Bm25Index {
        &self.bm25
    }

    /// The dense side.
    pub fn dense(&self) -> &DenseIndex {
        &self.dense
    }

    /// Embeds and indexes chunks (replacing any with the same chunk id), then commits.
    pub fn add(&mut self, records: &[ChunkRecord]) -> Result<()> {
        let texts: Vec<&str> = records.iter().map(|r| r.text.as_str()).collect();
        let vectors = embed_in_batches(self.embedder.as_ref(), &texts, self.config.embed_batch)?;
        self.add_embedded(records, &vectors)
    }

    /// Indexes chunks whose vectors are already computed (e.g. cached), then commits.
    pub fn add_embedded(&mut self, records: &[ChunkRecord], vectors: &[Vec<f32>]) -> Result<()> {
        let entries: Vec<DenseEntry> = records.iter().map(dense_entry).collect();
        self.dense.add(&entries, vectors)?;
        self.bm25.add(records)?;
        self.commit()
    }

    /// Removes every chunk of a document from both indexes, then commits.
    pub fn delete_document(&mut self, document_id: &str) -> Result<()> {
        self.bm25.delete_document(document_id)?;
        self.dense.delete_document(document_id);
        self.commit()
    }

    /// Replaces the whole content of both indexes by `records` (re-embedding them).
    pub fn rebuild_from(&mut self, records: &[ChunkRecord]) -> Result<()> {
        self.bm25.clear()?;
        self.dense.clear();
        self.dense.compact()?;
        self.add(records)
    }

    /// Replaces the whole content of both indexes by `records` with their stored `vectors`.
    pub fn rebuild_from_embedded(
        &mut self,
        records: &[ChunkRecord],
        vectors: &[Vec<f32>],
    ) -> Result<()> {
        self.bm25.clear()?;
        self.dense.clear();
        self.dense.compact()?;
        self.add_embedded(records, vectors)
    }

    /// Chunks in the BM25 index and in the dense index (equal when the two are in step).
    pub fn counts(&self) -> (u64, usize) {
        (self.bm25.len(), self.dense.len())
    }

    fn commit(&mut self) -> Result<()> {
        self.dense.commit()?;
        self.bm25.commit()
    }

    /// The `k` best chunks for `query` under `filter`, with the retrievers that found each.
    pub fn search(
        &self,
        query: &str,
        k: usize,
        mode: SearchMode,
        filter: &SearchFilter,
    ) -> Result<Vec<Hit>> {
        match mode {
            SearchMode::Bm25 => Ok(single(
                Retriever::Bm25,
                &self.bm25.search(query, k, filter)?,
            )),
            SearchMode::Dense => {
                let q = self.embed_query(query)?;
                Ok(single(Retriever::Dense, &self.dense.search(&q, k, filter)?))
            }
            SearchMode::Hybrid => self.hybrid(query, k, Fusion::default(), filter),
            SearchMode::HybridWith(f) => self.hybrid(query, k, f, filter),
        }
    }

    fn embed_query(&self, query: &str) -> Result<Vec<f32>> {
        let mut v = embed_in_batches(self.embedder.as_ref(), &[query], 1)?;
        v.pop()
            .ok_or_else(|| crate::IndexerError::Embedder("no vector for the query".into()))
    }

    fn hybrid(
        &self,
        query: &str,
        k: usize,
        fusion: Fusion,
        filter: &SearchFilter,
    ) -> Result<Vec<Hit>> {
        let depth = self.config.fusion_depth.max(k);
        let lexical = self.bm25.search(query, depth, filter)?;
        let q = self.embed_query(query)?;
        let semantic = self.dense.search(&q, depth, filter)?;
        Ok(fuse(
            &[(Retriever::Bm25, &lexical), (Retriever::Dense, &semantic)],
            fusion,
            k,
        ))
    }
}

fn dense_entry(r: &ChunkRecord) -> DenseEntry {
    DenseEntry {
        chunk_id: r.chunk_id,
        document_id: r.document_id.clone(),
        collection: r.collection.clone(),
    }
}
