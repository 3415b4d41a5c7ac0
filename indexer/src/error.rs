//! The indexer's one error type: parsing, chunking, indexing and retrieval failures.

use crate::document::DocumentFormat;
use crate::parse::Limit;

/// Everything that can go wrong while turning documents into searchable chunks.
#[derive(Debug, thiserror::Error)]
pub enum IndexerError {
    /// A file or index directory could not be read or written.
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),

    /// The input is larger than the configured parse limit (`ParseLimits::max_bytes`), either as
    /// uploaded or once decompressed (DOCX parts).
    #[error("document too large: {size} bytes exceeds the limit of {max_bytes} bytes")]
    TooLarge {
        /// Size seen, in bytes (at least this many; reading stops at the limit).
        size: u64,
        /// The configured limit, in bytes.
        max_bytes: u64,
    },

    /// The document breaks one of the bounds a parse runs under (`ParseLimits`, or the parsing
    /// process's memory ceiling and deadline).
    #[error("the document exceeds the {limit} limit: {detail}")]
    LimitExceeded {
        /// The bound that was broken.
        limit: Limit,
        /// What was seen, against the bound.
        detail: String,
    },

    /// The input is empty: zero bytes, or a file that holds no text at all.
    #[error("empty document: {0}")]
    EmptyDocument(&'static str),

    /// The content is neither plain text, Markdown, HTML, PDF nor DOCX.
    #[error("unsupported document type: {0}")]
    UnsupportedType(String),

    /// A text-based file (plain text, Markdown, HTML) is not valid UTF-8 (nor UTF-16 with a
    /// byte-order mark). docqa rejects such files rather than guessing an encoding.
    #[error("text is not valid UTF-8: invalid byte sequence at byte offset {byte_offset}")]
    InvalidUtf8 {
        /// Offset of the first invalid byte.
        byte_offset: usize,
    },

    /// The file claims (or looks like) a known format but cannot be read as one.
    #[error("corrupt {format} file: {reason}")]
    Corrupt {
        /// The format the file was parsed as.
        format: DocumentFormat,
        /// What the parser could not read.
        reason: String,
    },

    /// The PDF is encrypted with a user password; docqa cannot read it without one.
    #[error("the PDF is encrypted and needs a password")]
    EncryptedPdf,

    /// The PDF has pages with images but no text layer (a scan); it needs OCR first.
    #[error("the PDF has no text layer ({pages} page(s) of images only); run OCR first")]
    ScannedPdf {
        /// Number of pages in the PDF.
        pages: u32,
    },
    /// The BM25 index (tantivy) failed to open, write or search.
    #[cfg(feature = "search")]
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
