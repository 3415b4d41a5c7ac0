//! docqa-indexer: turns documents into searchable chunks.
//!
//! parse (text with pages) → chunk (sentence boundaries, generator-token budget) → index (BM25 and dense)
//! → retrieve (hybrid fusion). The indexer knows nothing of the inference engine: embeddings and token
//! counts come in through small traits that the service wires to the engine.
//!
//! Retrieval map: [`record`] (what is indexed and returned), [`bm25`] (tantivy), [`dense`]
//! (hnsw_rs), [`hybrid`] (fusion), [`store`] ([`SearchIndex`], both indexes together) and
//! [`eval`] (retrieval metrics and evaluation datasets).

pub mod bm25;
pub mod chunk;
pub mod dense;
pub mod document;
pub mod error;
pub mod eval;
pub mod hybrid;
pub mod parse;
pub mod record;
pub mod store;

pub use chunk::{Chunk, ChunkerConfig, TokenCounter, chunk_document};
pub use dense::Embedder;
pub use document::{DocumentFormat, PageMap, ParsedDocument};
pub use error::{IndexerError, Result};
pub use hybrid::{Fusion, SearchMode};
pub use parse::{
    Limit, ParseLimits, detect_file_format, detect_format, parse_document,
    parse_document_with_limits,
};
pub use record::{ChunkRecord, Hit, Retriever, RetrieverHit, ScoredChunk, SearchFilter};
pub use store::{SearchConfig, SearchIndex};
