//! docqa-indexer: turns documents into searchable chunks.
//!
//! parse (text with pages) → chunk (sentence boundaries, generator-token budget) → index (BM25 and dense)
//! → retrieve (hybrid fusion). The indexer knows nothing of the inference engine: embeddings and token
//! counts come in through small traits that the service wires to the engine.

pub mod chunk;
pub mod document;
pub mod error;
pub mod parse;

pub use chunk::{Chunk, ChunkerConfig, TokenCounter, chunk_document};
pub use document::{DocumentFormat, PageMap, ParsedDocument};
pub use error::{IndexerError, Result};
pub use parse::{ParseLimits, parse_document, parse_document_with_limits};
