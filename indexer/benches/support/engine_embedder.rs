//! The engine's MiniLM embedder behind the indexer's [`Embedder`] trait, with an optional progress
//! line on stderr.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use docqa_engine::models::bert::BertEmbedder;
use docqa_indexer::{Embedder, IndexerError, Result};

/// Texts per call into the engine.
const BATCH: usize = 64;

/// [`BertEmbedder`] with a progress count.
pub struct EngineEmbedder {
    bert: BertEmbedder,
    texts: AtomicUsize,
    start: Instant,
    progress: bool,
}

impl EngineEmbedder {
    /// Loads all-MiniLM-L6-v2 from `dir`; `progress` prints a running count on stderr.
    pub fn load(dir: &std::path::Path, progress: bool) -> Result<Self> {
        let bert = BertEmbedder::load(dir).map_err(|e| IndexerError::Embedder(e.to_string()))?;
        Ok(Self {
            bert,
            texts: AtomicUsize::new(0),
            start: Instant::now(),
            progress,
        })
    }
}

impl Embedder for EngineEmbedder {
    fn dim(&self) -> usize {
        self.bert.dim()
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        let mut out = Vec::with_capacity(texts.len());
        for part in texts.chunks(BATCH) {
            let vectors = self
                .bert
                .embed(part)
                .map_err(|e| IndexerError::Embedder(e.to_string()))?;
            out.extend(vectors);
            let n = self.texts.fetch_add(part.len(), Ordering::Relaxed) + part.len();
            if self.progress {
                let secs = self.start.elapsed().as_secs_f64();
                eprint!("\rembedded {n} texts in {secs:.0} s");
            }
        }
        Ok(out)
    }
}
