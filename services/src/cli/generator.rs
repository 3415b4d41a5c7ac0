//! The flags that choose the generator a command runs and where (`docqa generate`, `docqa perplexity`).

use std::path::PathBuf;

use clap::Args;

use super::models::{fetch_with_progress, models_dir_or_default};
use crate::device::{Device, GeneratorBackend};

/// Which generator, and on which device.
#[derive(Debug, Args)]
pub struct GeneratorArgs {
    /// A Llama-family HF model directory to use instead of the default generator.
    #[arg(long, env = "DOCQA_GENERATOR_DIR")]
    pub model: Option<PathBuf>,
    /// Directory holding the model directories [default: $XDG_CACHE_HOME/docqa/models or ~/.cache/docqa/models].
    #[arg(long, env = "DOCQA_MODELS_DIR")]
    pub models_dir: Option<PathBuf>,
    /// Where the generator runs: `cpu`, or `cuda` (GPU 0; needs a build with `--features cuda`).
    #[arg(long, env = "DOCQA_DEVICE", value_enum, default_value_t = Device::Cpu)]
    pub device: Device,
}

impl GeneratorArgs {
    /// Opens the device's backend, then finds the model directory (the default generator is fetched on
    /// first use).
    pub fn resolve(&self) -> anyhow::Result<(GeneratorBackend, PathBuf)> {
        let backend = self.device.open()?;
        let dir = match &self.model {
            Some(dir) => dir.clone(),
            None => fetch_with_progress(&models_dir_or_default(self.models_dir.clone()))?.generator,
        };
        Ok((backend, dir))
    }
}
