//! docqa-indexer: turns documents into searchable chunks.
//!
//! parse (text with pages) → chunk (sentence boundaries, generator-token budget) → index (BM25 and dense)
//! → retrieve (hybrid fusion). The indexer knows nothing of the inference engine: embeddings and token
//! counts come in through small traits that the service wires to the engine.
//!
//! Retrieval map: [`record`] (what is indexed and returned), [`bm25`] (tantivy), [`dense`]
//! (hnsw_rs), [`hybrid`] (fusion), [`store`] ([`SearchIndex`], both indexes together) and
//! [`eval`] (retrieval metrics and evaluation datasets).
//!
//! The search side (`bm25`, `dense`, `store`, `eval`: tantivy, jieba and hnsw_rs) is the default
//! feature `search`; without it the crate is parsing and chunking only, with fusion and the records
//! it works on, which is what the parsers' fuzz targets (`indexer/fuzz/`) build.

#[cfg(feature = "search")]
pub mod bm25;
pub mod chunk;
#[cfg(feature = "search")]
pub mod dense;
pub mod document;
pub mod error;
#[cfg(feature = "search")]
pub mod eval;
pub mod hybrid;
pub mod parse;
pub mod record;
#[cfg(feature = "search")]
pub mod store;

pub use chunk::{Chunk, ChunkerConfig, TokenCounter, chunk_document};
#[cfg(feature = "search")]
pub use dense::Embedder;
pub use document::{DocumentFormat, PageMap, ParsedDocument};
pub use error::{IndexerError, Result};
pub use hybrid::{Fusion, SearchMode};
pub use parse::{
    Limit, ParseLimits, detect_file_format, detect_format, parse_document,
    parse_document_with_limits,
};
pub use record::{ChunkRecord, Hit, Retriever, RetrieverHit, ScoredChunk, SearchFilter};
#[cfg(feature = "search")]
pub use store::{SearchConfig, SearchIndex};
