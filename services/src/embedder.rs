//! The engine's MiniLM embedder behind the indexer's [`Embedder`] trait, so ingestion and evaluation can
//! embed chunks and queries without the indexer knowing about the engine.

use docqa_engine::models::bert::BertEmbedder;
use docqa_indexer::{Embedder, IndexerError};

/// Texts embedded per call into the engine: bounds memory on long inputs.
const BATCH: usize = 64;

/// [`BertEmbedder`] as an indexer [`Embedder`].
pub struct EngineEmbedder {
    bert: BertEmbedder,
}

impl EngineEmbedder {
    /// Wraps a loaded embedder.
    pub fn new(bert: BertEmbedder) -> Self {
        EngineEmbedder { bert }
    }
}

impl Embedder for EngineEmbedder {
    fn dim(&self) -> usize {
        self.bert.dim()
    }

    fn embed(&self, texts: &[&str]) -> docqa_indexer::Result<Vec<Vec<f32>>> {
        let mut out = Vec::with_capacity(texts.len());
        for part in texts.chunks(BATCH) {
            let vectors = self
                .bert
                .embed(part)
                .map_err(|e| IndexerError::Embedder(e.to_string()))?;
            out.extend(vectors);
        }
        Ok(out)
    }
}
