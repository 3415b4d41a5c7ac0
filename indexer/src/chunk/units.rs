//! Packing units: the sentences of a document with their token counts, a sentence longer than the
//! budget replaced by its oversize pieces.
//!
//! Each sentence is tokenised once, together with the whitespace before it, so that for
//! tokenisers that split words at whitespace (byte-level BPE, WordPiece) the count of a chunk is
//! the sum of its sentences' counts. The first sentence of a chunk has no whitespace before it in
//! the chunk; its count without that whitespace is taken once, when it starts a chunk.

use std::ops::Range;

use super::TokenCounter;
use super::sentence::sentence_spans;
use super::split::split_oversize;

/// A sentence, or a piece of an oversize sentence.
#[derive(Debug, Clone)]
pub(crate) struct Unit {
    /// Byte range in the document text, without surrounding whitespace.
    pub range: Range<usize>,
    /// Tokens of the unit with the whitespace before it.
    pub tokens: usize,
    /// Tokens of the unit alone, once known.
    pub bare_tokens: Option<usize>,
    /// A piece of a sentence that was longer than the budget.
    pub oversize: bool,
}

impl Unit {
    /// A piece of an oversize sentence, counted alone.
    pub(crate) fn piece(range: Range<usize>, tokens: usize) -> Self {
        Self {
            range,
            tokens,
            bare_tokens: Some(tokens),
            oversize: true,
        }
    }

    /// Tokens of the unit alone (counted at most once).
    pub(crate) fn bare(&mut self, text: &str, counter: &dyn TokenCounter) -> usize {
        *self
            .bare_tokens
            .get_or_insert_with(|| counter.count_tokens(&text[self.range.clone()]))
    }
}

/// The units of `text` for a budget of `max` tokens.
pub(crate) fn units(text: &str, counter: &dyn TokenCounter, max: usize) -> Vec<Unit> {
    let mut out = Vec::new();
    let mut prev_end = 0;
    for span in sentence_spans(text) {
        let tokens = counter.count_tokens(&text[prev_end..span.end]);
        if tokens <= max {
            out.push(Unit {
                range: span.clone(),
                tokens,
                bare_tokens: None,
                oversize: false,
            });
        } else {
            split_oversize(text, span.clone(), counter, max, &mut out);
        }
        prev_end = span.end;
    }
    out
}
