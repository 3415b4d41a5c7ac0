//! Token counts that follow the generator.
//!
//! A document's token count is taken at ingestion with the generator's tokenizer, and the router's fit
//! and cost signals rest on it. Served later with another model (`docqa serve --model`), the same data
//! directory would hold counts in the old tokenizer's units: a byte tokenizer counts four times what
//! SmolLM2's does. So each document records which tokenizer counted it ([`tokenizer_id`]), and at start
//! the server recounts, in the background and one document at a time, every ready document another
//! tokenizer counted (or one counted before the record existed). Prompts themselves are always built
//! with the tokenizer in use, so answers never depend on the counts; only the route's reasoning does.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use sha2::{Digest, Sha256};

use super::sandbox::document_tokens;
use crate::state::AppState;

/// Documents fetched per query while recounting.
const BATCH: i64 = 16;

/// The name a tokenizer's counts are recorded under: the first 16 hex digits of the SHA-256 of the
/// model directory's `tokenizer.json`.
pub fn tokenizer_id(model_dir: &Path) -> anyhow::Result<String> {
    let path = model_dir.join("tokenizer.json");
    let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    Ok(hex::encode(&Sha256::digest(&bytes)[..8]))
}

/// Recounts every ready document that another tokenizer counted, until done or shutdown; returns how
/// many it recounted.
pub async fn recount_stale(state: Arc<AppState>) -> anyhow::Result<usize> {
    let mut after = String::new();
    let mut recounted = 0;
    loop {
        let ids = state
            .db
            .documents_counted_by_another(&state.tokenizer_id, &after, BATCH)
            .await?;
        let Some(last) = ids.last() else {
            return Ok(recounted);
        };
        after = last.clone();
        for id in ids {
            if state.shutdown.is_cancelled() {
                return Ok(recounted);
            }
            if recount(&state, &id).await? {
                recounted += 1;
            }
        }
    }
}

/// Counts one document's text with the generator's tokenizer and records it; false when the document
/// went away meanwhile.
async fn recount(state: &Arc<AppState>, id: &str) -> anyhow::Result<bool> {
    let Some((text, _)) = state.db.document_text(id).await? else {
        return Ok(false);
    };
    let tokenizer = Arc::clone(&state.tokenizer);
    let tokens = tokio::task::spawn_blocking(move || document_tokens(&tokenizer, &text)).await?;
    let set = state
        .db
        .set_token_count(id, tokens as i64, &state.tokenizer_id)
        .await?;
    if set {
        tracing::info!(document = %id, tokens, "recounted for this generator's tokenizer");
    }
    Ok(set)
}
