//! The indexer's one error type: parsing, chunking, indexing and retrieval failures.

/// Everything that can go wrong while turning documents into searchable chunks.
#[derive(Debug, thiserror::Error)]
pub enum IndexerError {
    /// A file or index directory could not be read or written.
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
    /// The BM25 index (tantivy) failed to open, write or search.
    #[error("bm25 index error: {0}")]
    Bm25(#[from] tantivy::TantivyError),
    /// A JSON file (index metadata, dataset line) could not be parsed or written.
    #[error("json error: {0}")]
    Json(#[from] serde_json::Error),
    /// The embedder behind the [`crate::dense::Embedder`] trait failed.
    #[error("embedder failed: {0}")]
    Embedder(String),
    /// A vector did not have the dimension the dense index was created with.
    #[error("vector dimension mismatch: index has {expected}, got {got}")]
    DimensionMismatch {
        /// Dimension of the index.
        expected: usize,
        /// Dimension of the offending vector.
        got: usize,
    },
    /// Files of an index on disk are inconsistent with each other.
    #[error("corrupt index at {path}: {reason}")]
    CorruptIndex {
        /// The file or directory at fault.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
    /// An evaluation dataset is missing a file or has a malformed line.
    #[error("invalid dataset {path}: {reason}")]
    InvalidDataset {
        /// The file at fault.
        path: String,
        /// What is wrong with it (with the line number where there is one).
        reason: String,
    },
}

/// The indexer's result type.
pub type Result<T, E = IndexerError> = std::result::Result<T, E>;
