//! The HNSW graph over unit vectors (hnsw_rs), with a distance that tolerates rounding.

use hnsw_rs::prelude::{Distance, Hnsw};

/// `1 − ⟨a, b⟩` for unit vectors, clamped at 0: hnsw_rs asserts distances are non-negative and
/// the dot product of two equal unit vectors can round to slightly above 1.
#[derive(Debug, Default, Clone, Copy)]
pub struct UnitDot;

impl Distance<f32> for UnitDot {
    fn eval(&self, a: &[f32], b: &[f32]) -> f32 {
        (1.0 - super::dot(a, b)).max(0.0)
    }
}

/// Build parameters of the graph.
#[derive(Debug, Clone, Copy)]
pub struct GraphParams {
    /// Neighbours kept per node and layer (HNSW's M).
    pub max_connections: usize,
    /// Candidate list size while inserting.
    pub ef_construction: usize,
}

/// An HNSW graph whose data ids are slot numbers of the vector store.
pub struct Graph {
    hnsw: Hnsw<'static, f32, UnitDot>,
}

impl Graph {
    /// An empty graph sized for about `capacity` points.
    pub fn new(params: GraphParams, capacity: usize) -> Self {
        let m = params.max_connections.clamp(4, 255);
        let hnsw = Hnsw::new(m, capacity.max(1024), 16, params.ef_construction, UnitDot);
        Self { hnsw }
    }

    /// Builds a graph over `vectors` (`dim` values per slot), skipping slots where `skip` is true.
    pub fn build(params: GraphParams, vectors: &[f32], dim: usize, skip: &[bool]) -> Self {
        let graph = Self::new(params, skip.len());
        let items: Vec<(&[f32], usize)> = vectors
            .chunks_exact(dim)
            .enumerate()
            .filter(|(slot, _)| !skip[*slot])
            .map(|(slot, v)| (v, slot))
            .collect();
        graph.insert_many(&items);
        graph
    }

    /// Inserts `(vector, slot)` pairs (in parallel for large batches).
    pub fn insert_many(&self, items: &[(&[f32], usize)]) {
        if items.len() >= 256 {
            self.hnsw.parallel_insert_slice(&items.to_vec());
        } else {
            for &(v, slot) in items {
                self.hnsw.insert_slice((v, slot));
            }
        }
    }

    /// The `n` nearest slots to `query` as `(slot, distance)`, nearest first.
    pub fn search(&self, query: &[f32], n: usize, ef: usize) -> Vec<(usize, f32)> {
        self.hnsw
            .search(query, n, ef.max(n))
            .into_iter()
            .map(|nb| (nb.d_id, nb.distance))
            .collect()
    }
}
