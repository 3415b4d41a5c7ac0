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
}

/// The engine's result type.
pub type Result<T, E = EngineError> = std::result::Result<T, E>;
