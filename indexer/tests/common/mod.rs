//! Helpers shared by the integration tests: where the evaluation data lives, small fixtures.
#![allow(dead_code)]

use std::path::PathBuf;

use docqa_indexer::ChunkRecord;

/// The shared evaluation data: `$DOCQA_DATA`, else `../shared/data` beside the checkout.
pub fn data_dir() -> PathBuf {
    let dir = std::env::var_os("DOCQA_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/data"));
    assert!(
        dir.is_dir(),
        "evaluation data not found at {} (set DOCQA_DATA)",
        dir.display()
    );
    dir
}

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
