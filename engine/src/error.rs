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
    /// A safetensors file (or its shard index) is truncated, corrupt or inconsistent.
    #[error("invalid safetensors file {path}: {reason}")]
    Safetensors {
        /// The file involved.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A tensor the model needs is not in its weight files.
    #[error("tensor {name} is missing from the model weights")]
    MissingTensor {
        /// The tensor's name.
        name: String,
    },
    /// A tensor has a shape other than the one the config implies.
    #[error("tensor {name} has shape {actual:?}, expected {expected:?}")]
    TensorShape {
        /// The tensor's name.
        name: String,
        /// The shape the config implies.
        expected: Vec<usize>,
        /// The shape found in the file.
        actual: Vec<usize>,
    },
    /// A tensor is stored in a dtype the engine cannot use.
    #[error("tensor {name} has unsupported dtype {dtype}")]
    UnsupportedDtype {
        /// The tensor's name.
        name: String,
        /// The dtype found in the file.
        dtype: String,
    },
    /// A `config.json` could not be parsed or holds inconsistent values.
    #[error("invalid model config {path}: {reason}")]
    Config {
        /// The file involved.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A `config.json` names an architecture the engine does not implement.
    #[error("unsupported model architecture {architecture:?} (supported: {supported})")]
    UnknownArchitecture {
        /// The architecture named by the config.
        architecture: String,
        /// The architectures this model family accepts.
        supported: String,
    },
    /// A sequence would be longer than the model's context window.
    #[error("sequence of {len} tokens exceeds the context window of {max} tokens")]
    ContextTooLong {
        /// The sequence length asked for.
        len: usize,
        /// The model's context window.
        max: usize,
    },
    /// A forward-pass batch is inconsistent (lengths, offsets, block tables).
    #[error("invalid batch: {0}")]
    InvalidBatch(String),
    /// The KV block pool has no free blocks left.
    #[error("KV cache exhausted: {needed} blocks needed, {free} free")]
    KvCacheFull {
        /// Blocks asked for.
        needed: usize,
        /// Blocks free.
        free: usize,
    },
    /// The tokenizer could not be loaded or failed on an input.
    #[error("tokenizer error: {0}")]
    Tokenizer(String),
}

/// The engine's result type.
pub type Result<T, E = EngineError> = std::result::Result<T, E>;
