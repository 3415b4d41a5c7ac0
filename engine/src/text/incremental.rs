//! An owned incremental detokeniser for long-lived generation state.
//!
//! [`super::StreamDecoder`] borrows its tokenizer, which suits a loop on one stack frame; the serving engine
//! keeps one decoder per request beside the tokenizer it owns, so this one holds only the decoding state
//! and takes the tokenizer per call. Both run the `tokenizers` crate's own stream-decoding step.

use std::ops::Deref;

use super::TextTokenizer;
use crate::error::{EngineError, Result};

/// Decoding state of one generated sequence.
#[derive(Debug, Clone, Default)]
pub struct IncrementalDecoder {
    ids: Vec<u32>,
    prefix: String,
    prefix_index: usize,
}

impl IncrementalDecoder {
    /// Adds one token; returns the text that became complete UTF-8, if any. Special tokens add no text.
    pub fn push(&mut self, tokenizer: &TextTokenizer, token: u32) -> Result<Option<String>> {
        tokenizers::tokenizer::step_decode_stream(
            tokenizer.inner().deref(),
            vec![token],
            true,
            &mut self.ids,
            &mut self.prefix,
            &mut self.prefix_index,
        )
        .map_err(|e| EngineError::Tokenizer(format!("cannot decode token {token}: {e}")))
    }
}
