//! Random checkpoints at real models' shapes: HF-style directories (`config.json`, bf16 safetensors,
//! sharded with an index as HF writes them when large, a byte-level `tokenizer.json`, and a
//! `tokenizer_config.json` with the family's chat format) whose weights
//! are drawn from a seeded generator, so the engine can be loaded, timed and profiled at a model's true
//! size without downloading it. The output is noise, not text: these models are for speed and memory,
//! never for quality.
//!
//! [`named`] holds the shapes `docqa models synth` knows, [`Shape`] describes one (a test can make a tiny
//! one of its own), [`synthesize`] writes a directory. The same seed writes byte-identical files.

mod chat;
pub mod named;
mod shape;
mod tokenizer;
mod writer;

use std::path::{Path, PathBuf};

pub use named::{SHAPES, shape_named};
pub use shape::{Family, Llama3Rope, Shape, TensorSpec};
pub use tokenizer::build_tokenizer;
pub use writer::{DEFAULT_SHARD_BYTES, plan_shards, write_safetensors, write_weights};

use crate::error::{EngineError, Result};
use crate::test_rng::Rng;
use crate::weights::WeightDtype;

/// What [`synthesize`] wrote.
#[derive(Debug, Clone)]
pub struct Synthesized {
    /// Every file written, `config.json`, `tokenizer.json` and `tokenizer_config.json` included.
    pub files: Vec<PathBuf>,
    /// Parameters drawn.
    pub parameters: u64,
}

/// Writes a random bf16 checkpoint of `shape` into `dir` (created if needed): `config.json`,
/// `tokenizer.json`, `tokenizer_config.json` and the weights in shards of at most `max_shard_bytes`
/// ([`DEFAULT_SHARD_BYTES`] as HF does), drawn from `rng` one tensor at a time.
pub fn synthesize(
    dir: &Path,
    shape: &Shape,
    rng: &mut Rng,
    max_shard_bytes: u64,
) -> Result<Synthesized> {
    shape.validate()?;
    std::fs::create_dir_all(dir).map_err(|e| EngineError::io(dir, e))?;
    let config = dir.join("config.json");
    let text = serde_json::to_string_pretty(&shape.config_json())
        .map_err(|e| EngineError::json(&config, e))?;
    std::fs::write(&config, text).map_err(|e| EngineError::io(&config, e))?;
    let tokenizer = dir.join("tokenizer.json");
    tokenizer::write_tokenizer(shape, &tokenizer)?;
    let tokenizer_config = dir.join("tokenizer_config.json");
    chat::write_tokenizer_config(shape, &tokenizer_config)?;
    let specs = shape.tensors();
    let mut files = vec![config, tokenizer, tokenizer_config];
    files.extend(write_weights(
        dir,
        &specs,
        WeightDtype::Bf16,
        max_shard_bytes,
        rng,
    )?);
    Ok(Synthesized {
        files,
        parameters: specs.iter().map(|t| t.numel() as u64).sum(),
    })
}
