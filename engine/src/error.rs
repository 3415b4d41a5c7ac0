//! The engine's one error type. Every fallible engine function returns [`Result`].

use std::path::PathBuf;

/// Everything that can go wrong inside the engine, one variant per cause.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// A file could not be read or written.
    #[error("i/o error on {path}: {source}")]
    Io {
        /// The file or directory involved.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// An engine setting is out of range.
    #[error("invalid engine configuration: {0}")]
    InvalidConfig(String),
    /// A request needs more KV blocks than the whole cache has, so it could never run.
    #[error("request of {tokens} tokens cannot fit in a KV cache of {capacity_tokens} tokens")]
    RequestTooLarge {
        /// Prompt plus the tokens it may generate.
        tokens: usize,
        /// Tokens the whole cache holds.
        capacity_tokens: usize,
    },
    /// The waiting queue is full; try again later.
    #[error("engine overloaded: {queued} requests already waiting")]
    Overloaded {
        /// Requests in the queue.
        queued: usize,
    },
    /// The request id is not known to the engine (finished, cancelled, or never added).
    #[error("unknown request {0}")]
    UnknownRequest(u64),
    /// An internal invariant broke; this is a bug in docqa.
    #[error("internal engine error: {0}")]
    Internal(String),
}

/// The engine's result type.
pub type Result<T, E = EngineError> = std::result::Result<T, E>;
