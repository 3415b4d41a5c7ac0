//! Streaming detokenisation: text is emitted only once it is complete UTF-8.
//!
//! Byte-level BPE can split one character (CJK, emoji) over several tokens; decoding a prefix then ends
//! in U+FFFD. [`StreamDecoder`] follows the `tokenizers` crate's `DecodeStream`: it decodes a short window
//! of recent tokens and emits the new suffix only when it does not end in a replacement character.

use tokenizers::DecodeStream;
use tokenizers::{DecoderWrapper, ModelWrapper, NormalizerWrapper, PostProcessorWrapper, PreTokenizerWrapper};

use crate::error::{EngineError, Result};

type Inner<'a> =
    DecodeStream<'a, ModelWrapper, NormalizerWrapper, PreTokenizerWrapper, PostProcessorWrapper, DecoderWrapper>;

/// Turns generated token ids into text pieces, one call per token.
pub struct StreamDecoder<'a> {
    inner: Inner<'a>,
}

impl<'a> StreamDecoder<'a> {
    pub(super) fn new(inner: Inner<'a>) -> Self {
        Self { inner }
    }

    /// Adds one token; returns the text that became complete, if any. Special tokens produce no text.
    pub fn push(&mut self, token: u32) -> Result<Option<String>> {
        self.inner
            .step(token)
            .map_err(|e| EngineError::Tokenizer(format!("cannot decode token {token}: {e}")))
    }
}
