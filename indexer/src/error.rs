//! The indexer's one error type: parsing, chunking, indexing and retrieval failures.

use crate::document::DocumentFormat;

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
}

/// The indexer's result type.
pub type Result<T, E = IndexerError> = std::result::Result<T, E>;
