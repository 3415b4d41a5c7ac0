//! Sentence-boundary chunking under a budget of generator tokens.
//!
//! The text is cut into sentences ([`sentence`]), each counted once with the caller's
//! [`TokenCounter`] (the generator's tokenizer, so chunks fit the prompt exactly). Chunks are
//! filled greedily with whole sentences up to `max_tokens`; the next chunk repeats the last whole
//! sentences of the previous one, up to `overlap_tokens`. A sentence longer than the budget is cut
//! at clause punctuation, then whitespace, then between characters ([`split`]); chunks holding
//! such pieces are marked `oversize_split`. Spans are character offsets into the document text.

mod pack;
mod rules;
pub mod sentence;
mod split;
mod units;

pub use sentence::{sentence_spans, sentences};

use crate::document::ParsedDocument;

/// Counts tokens the way the generator will; implemented by the service over the engine's
/// tokenizer (the indexer does not depend on the engine).
pub trait TokenCounter: Send + Sync {
    /// Number of tokens of `text`, without special tokens.
    fn count_tokens(&self, text: &str) -> usize;
}

impl<F: Fn(&str) -> usize + Send + Sync> TokenCounter for F {
    fn count_tokens(&self, text: &str) -> usize {
        self(text)
    }
}

/// Chunk size and overlap, in generator tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkerConfig {
    /// Most tokens in a chunk (at least 1).
    pub max_tokens: usize,
    /// Most tokens of whole sentences repeated from the end of the previous chunk.
    pub overlap_tokens: usize,
}

impl Default for ChunkerConfig {
    fn default() -> Self {
        Self {
            max_tokens: 256,
            overlap_tokens: 32,
        }
    }
}

/// A chunk of a document: whole sentences (or pieces of one oversize sentence).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Chunk {
    /// Position of the chunk in the document, from 0.
    pub ordinal: u32,
    /// The chunk's text: exactly `doc.text.chars().skip(char_start).take(char_end - char_start)`.
    pub text: String,
    /// First character of the chunk (Unicode scalar values into the document text).
    pub char_start: usize,
    /// One past the last character of the chunk.
    pub char_end: usize,
    /// Page of the first character (1-based).
    pub page_start: u32,
    /// Page of the last character (1-based).
    pub page_end: u32,
    /// Tokens of `text`, summed from its sentences' counts.
    pub token_count: u32,
    /// The chunk holds pieces of a sentence longer than the budget.
    pub oversize_split: bool,
}

/// Cuts a document into chunks; see the module documentation.
pub fn chunk_document(
    doc: &ParsedDocument,
    counter: &dyn TokenCounter,
    cfg: &ChunkerConfig,
) -> Vec<Chunk> {
    let max = cfg.max_tokens.max(1);
    let mut units = units::units(&doc.text, counter, max);
    let plan = pack::pack(&doc.text, &mut units, counter, max, cfg.overlap_tokens);
    pack::materialise(doc, &units, &plan)
}
