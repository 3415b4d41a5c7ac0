//! Helpers shared by the integration tests: where the fixtures and the evaluation data live
//! ([`test_data`]), small chunk records and random vectors.
#![allow(dead_code)]

#[path = "../../../tests/support/test_data.rs"]
pub mod test_data;

use docqa_indexer::ChunkRecord;

/// A chunk record in the default collection.
pub fn chunk(chunk_id: u64, document_id: &str, text: &str) -> ChunkRecord {
    ChunkRecord {
        chunk_id,
        document_id: document_id.to_string(),
        collection: None,
        text: text.to_string(),
    }
}

/// Random unit vectors (Gaussian components, normalised), reproducible from `seed`.
pub fn random_unit_vectors(n: usize, dim: usize, seed: u64) -> Vec<Vec<f32>> {
    use rand::{RngExt, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..n)
        .map(|_| {
            let mut v: Vec<f32> = (0..dim)
                .map(|_| {
                    // Box-Muller: two uniforms to one standard normal.
                    let u1: f32 = rng.random::<f32>().max(f32::MIN_POSITIVE);
                    let u2: f32 = rng.random::<f32>();
                    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f32::consts::PI * u2).cos()
                })
                .collect();
            docqa_indexer::dense::normalize(&mut v);
            v
        })
        .collect()
}
