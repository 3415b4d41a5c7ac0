//! Loading a model over a tensor-parallel group: the backends joined into a group
//! ([`crate::parallel::Grouped`]), then every rank's part loaded at once, each in a thread of its own.

use std::path::Path;

use crate::adapter::Adapter;
use crate::error::{EngineError, Result};
use crate::models::llama::Llama;
use crate::parallel::Grouped;

/// The model in `dir` split over `backends` (rank `i` on `backends[i]`), rank 0 first, with the
/// adapter merged into every part; the first rank's error when any fails.
pub fn load_ranks<B: Grouped>(
    backends: Vec<B>,
    dir: &Path,
    adapter: Option<&Adapter>,
) -> Result<Vec<Llama<B>>> {
    if backends.is_empty() {
        return Err(EngineError::InvalidConfig(
            "a tensor-parallel group needs at least one rank".into(),
        ));
    }
    let groups = B::join(&backends.iter().collect::<Vec<_>>())?;
    std::thread::scope(|s| {
        let loading: Vec<_> = backends
            .into_iter()
            .zip(groups)
            .map(|(backend, group)| {
                s.spawn(move || Llama::load_part(backend, dir, adapter, Some(group)))
            })
            .collect();
        loading
            .into_iter()
            .map(|l| {
                l.join().unwrap_or_else(|_| {
                    Err(EngineError::Internal("a rank's loader panicked".into()))
                })
            })
            .collect()
    })
}
