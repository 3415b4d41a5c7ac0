//! The indexer's one error type: parsing, chunking, indexing and retrieval failures.

/// Everything that can go wrong while turning documents into searchable chunks.
#[derive(Debug, thiserror::Error)]
pub enum IndexerError {
    /// A file or index directory could not be read or written.
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
}

/// The indexer's result type.
pub type Result<T, E = IndexerError> = std::result::Result<T, E>;
