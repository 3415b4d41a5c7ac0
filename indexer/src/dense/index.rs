//! The dense index: slots of (entry, unit vector), an HNSW graph over live slots, tombstones.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::graph::{Graph, GraphParams};
use super::storage::{self, DenseEntry, Manifest};
use super::{dot, normalize};
use crate::record::{ScoredChunk, SearchFilter};
use crate::{IndexerError, Result};

/// Tuning of the dense index.
#[derive(Debug, Clone, Copy)]
pub struct DenseConfig {
    /// HNSW M: neighbours per node and layer.
    pub max_connections: usize,
    /// HNSW candidate list size while inserting.
    pub ef_construction: usize,
    /// HNSW candidate list size while searching (raised to the number of results asked).
    pub ef_search: usize,
    /// Share of tombstoned slots above which a commit compacts and rebuilds.
    pub rebuild_tombstone_share: f32,
    /// A filtered search whose filter leaves at most this many chunks scans them exactly.
    pub exact_scan_below: usize,
}

impl Default for DenseConfig {
    fn default() -> Self {
        Self {
            max_connections: 24,
            ef_construction: 200,
            ef_search: 256,
            rebuild_tombstone_share: 0.2,
            exact_scan_below: 2048,
        }
    }
}

/// Dense vectors of chunks, persisted in a directory (see [`super::storage`]).
pub struct DenseIndex {
    dir: PathBuf,
    config: DenseConfig,
    manifest: Manifest,
    entries: Vec<DenseEntry>,
    vectors: Vec<f32>,
    live: Vec<bool>,
    by_chunk: HashMap<u64, usize>,
    dead: usize,
    graph: Graph,
}

impl DenseIndex {
    /// Opens the index in `dir` (rebuilding its graph from the stored vectors), or creates an
    /// empty one of dimension `dim`.
    pub fn open(dir: &Path, dim: usize, config: DenseConfig) -> Result<Self> {
        std::fs::create_dir_all(dir)?;
        let (manifest, entries, vectors) = match storage::load(dir)? {
            Some(l) => (l.manifest, l.entries, l.vectors),
            None => {
                let m = Manifest {
                    dim,
                    ..Manifest::default()
                };
                storage::write_manifest(dir, &m)?;
                (m, Vec::new(), Vec::new())
            }
        };
        if manifest.dim != dim {
            return Err(IndexerError::DimensionMismatch {
                expected: manifest.dim,
                got: dim,
            });
        }
        let mut live = vec![true; entries.len()];
        for &s in &manifest.deleted {
            if let Some(l) = live.get_mut(s) {
                *l = false;
            }
        }
        let dead = live.iter().filter(|l| !**l).count();
        let by_chunk = live_map(&entries, &live);
        let skip: Vec<bool> = live.iter().map(|l| !l).collect();
        let graph = Graph::build(params(&config), &vectors, dim.max(1), &skip);
        Ok(Self {
            dir: dir.to_path_buf(),
            config,
            manifest,
            entries,
            vectors,
            live,
            by_chunk,
            dead,
            graph,
        })
    }

    /// Vector dimension.
    pub fn dim(&self) -> usize {
        self.manifest.dim
    }

    /// Number of live (searchable) chunks.
    pub fn len(&self) -> usize {
        self.by_chunk.len()
    }

    /// Whether there is no live chunk.
    pub fn is_empty(&self) -> bool {
        self.by_chunk.is_empty()
    }

    /// Number of tombstoned slots not yet compacted away.
    pub fn tombstones(&self) -> usize {
        self.dead
    }

    /// Adds chunks with their vectors (normalised here); a chunk id already present is replaced.
    /// Searchable at once; durable after [`Self::commit`].
    pub fn add(&mut self, entries: &[DenseEntry], vectors: &[Vec<f32>]) -> Result<()> {
        if entries.len() != vectors.len() {
            return Err(IndexerError::Embedder(format!(
                "{} entries but {} vectors",
                entries.len(),
                vectors.len()
            )));
        }
        let dim = self.dim();
        if let Some(v) = vectors.iter().find(|v| v.len() != dim) {
            return Err(IndexerError::DimensionMismatch {
                expected: dim,
                got: v.len(),
            });
        }
        let first = self.entries.len();
        for (e, v) in entries.iter().zip(vectors) {
            if let Some(old) = self.by_chunk.get(&e.chunk_id).copied() {
                self.kill(old);
            }
            let mut v = v.clone();
            normalize(&mut v);
            self.by_chunk.insert(e.chunk_id, self.entries.len());
            self.entries.push(e.clone());
            self.vectors.extend_from_slice(&v);
            self.live.push(true);
        }
        let items: Vec<(&[f32], usize)> = (first..self.entries.len())
            .filter(|&s| self.live[s])
            .map(|s| (&self.vectors[s * dim..(s + 1) * dim], s))
            .collect();
        self.graph.insert_many(&items);
        Ok(())
    }

    fn kill(&mut self, slot: usize) {
        if self.live[slot] {
            self.live[slot] = false;
            self.dead += 1;
            self.by_chunk.remove(&self.entries[slot].chunk_id);
        }
    }

    /// Tombstones every chunk of a document; returns how many. Durable after [`Self::commit`].
    pub fn delete_document(&mut self, document_id: &str) -> usize {
        let slots: Vec<usize> = (0..self.entries.len())
            .filter(|&s| self.live[s] && self.entries[s].document_id == document_id)
            .collect();
        slots.iter().for_each(|&s| self.kill(s));
        slots.len()
    }

    /// Tombstones every chunk.
    pub fn clear(&mut self) {
        (0..self.entries.len()).for_each(|s| self.kill(s));
    }

    /// Writes new slots and tombstones to disk; compacts and rebuilds the graph when the
    /// tombstone share exceeds [`DenseConfig::rebuild_tombstone_share`].
    pub fn commit(&mut self) -> Result<()> {
        let total = self.entries.len();
        if total > 0 && self.dead as f32 / total as f32 > self.config.rebuild_tombstone_share {
            return self.compact();
        }
        let dim = self.dim();
        let from = self.manifest.count;
        let bytes = storage::append(
            &self.dir,
            &self.manifest,
            &self.entries[from..],
            &self.vectors[from * dim..],
        )?;
        self.manifest.count = total;
        self.manifest.entries_bytes = bytes;
        self.manifest.deleted = (0..total).filter(|&s| !self.live[s]).collect();
        storage::write_manifest(&self.dir, &self.manifest)
    }

    /// Drops tombstoned slots from memory and disk and rebuilds the graph from the survivors.
    pub fn compact(&mut self) -> Result<()> {
        let dim = self.dim();
        let keep: Vec<usize> = (0..self.entries.len()).filter(|&s| self.live[s]).collect();
        self.entries = keep.iter().map(|&s| self.entries[s].clone()).collect();
        self.vectors = keep
            .iter()
            .flat_map(|&s| self.vectors[s * dim..(s + 1) * dim].to_vec())
            .collect();
        self.live = vec![true; keep.len()];
        self.dead = 0;
        self.by_chunk = live_map(&self.entries, &self.live);
        let old = self.manifest.generation;
        let mut next = Manifest {
            dim,
            generation: old + 1,
            ..Manifest::default()
        };
        storage::remove_generation(&self.dir, next.generation);
        next.entries_bytes = storage::append(&self.dir, &next, &self.entries, &self.vectors)?;
        next.count = self.entries.len();
        storage::write_manifest(&self.dir, &next)?;
        storage::remove_generation(&self.dir, old);
        self.manifest = next;
        self.graph = Graph::build(
            params(&self.config),
            &self.vectors,
            dim,
            &vec![false; keep.len()],
        );
        Ok(())
    }

    fn vector(&self, slot: usize) -> &[f32] {
        let dim = self.dim();
        &self.vectors[slot * dim..(slot + 1) * dim]
    }

    fn scored(&self, slot: usize, score: f32) -> ScoredChunk {
        let e = &self.entries[slot];
        ScoredChunk {
            chunk_id: e.chunk_id,
            document_id: e.document_id.clone(),
            score,
        }
    }

    fn passes(&self, slot: usize, filter: &SearchFilter) -> bool {
        let e = &self.entries[slot];
        self.live[slot] && filter.matches(&e.document_id, e.collection.as_deref())
    }

    /// Exact top-`k` over the slots passing `filter` (the reference the graph is tested against).
    pub fn exact_search(&self, query: &[f32], k: usize, filter: &SearchFilter) -> Vec<ScoredChunk> {
        let mut scored: Vec<(usize, f32)> = (0..self.entries.len())
            .filter(|&s| self.passes(s, filter))
            .map(|s| (s, dot(query, self.vector(s))))
            .collect();
        scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        scored.truncate(k);
        scored
            .into_iter()
            .map(|(s, sc)| self.scored(s, sc))
            .collect()
    }

    /// The `k` chunks most similar (cosine) to `query` among those passing `filter`, best first.
    pub fn search(
        &self,
        query: &[f32],
        k: usize,
        filter: &SearchFilter,
    ) -> Result<Vec<ScoredChunk>> {
        if query.len() != self.dim() {
            return Err(IndexerError::DimensionMismatch {
                expected: self.dim(),
                got: query.len(),
            });
        }
        let mut q = query.to_vec();
        normalize(&mut q);
        if k == 0 || self.is_empty() {
            return Ok(Vec::new());
        }
        if !filter.is_empty() && self.filtered_count(filter) <= self.config.exact_scan_below {
            return Ok(self.exact_search(&q, k, filter));
        }
        Ok(self.graph_search(&q, k, filter))
    }

    fn filtered_count(&self, filter: &SearchFilter) -> usize {
        (0..self.entries.len())
            .filter(|&s| self.passes(s, filter))
            .count()
    }

    /// Graph search asking for more neighbours than `k` until `k` survive the tombstones and the
    /// filter, falling back to an exact scan when the graph has been exhausted.
    fn graph_search(&self, q: &[f32], k: usize, filter: &SearchFilter) -> Vec<ScoredChunk> {
        let slots = self.entries.len();
        let mut want = k + self.dead.min(k * 4);
        loop {
            let found = self.graph.search(q, want, self.config.ef_search.max(want));
            let exhausted = found.len() < want;
            let hits: Vec<ScoredChunk> = found
                .into_iter()
                .filter(|&(s, _)| self.passes(s, filter))
                .take(k)
                .map(|(s, d)| self.scored(s, 1.0 - d))
                .collect();
            if hits.len() == k || (exhausted && filter.is_empty()) {
                return hits;
            }
            if want >= slots || exhausted {
                return self.exact_search(q, k, filter);
            }
            want = (want * 4).min(slots);
        }
    }
}

fn params(c: &DenseConfig) -> GraphParams {
    GraphParams {
        max_connections: c.max_connections,
        ef_construction: c.ef_construction,
    }
}

fn live_map(entries: &[DenseEntry], live: &[bool]) -> HashMap<u64, usize> {
    entries
        .iter()
        .enumerate()
        .filter(|(s, _)| live[*s])
        .map(|(s, e)| (e.chunk_id, s))
        .collect()
}
