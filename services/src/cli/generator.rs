//! The flags that choose the generator a command runs, the adapter merged into it, and where
//! (`docqa generate`, `docqa perplexity`).

use std::path::PathBuf;

use clap::Args;
use docqa_engine::adapter::Adapter;

use super::models::{fetch_with_progress, models_dir_or_default};
use crate::adapter::{AdapterFlag, AdapterInfo};
use crate::device::{CpuDecodeWeights, Device, GeneratorBackend};

/// Which generator, and on which device.
#[derive(Debug, Args)]
pub struct GeneratorArgs {
    /// A Llama-family HF model directory to use instead of the default generator, or a GGUF file
    /// (converted once into the models directory's `converted/`, as `docqa models convert` does).
    #[arg(long, env = "DOCQA_GENERATOR_DIR")]
    pub model: Option<PathBuf>,
    /// Directory holding the model directories [default: $XDG_CACHE_HOME/docqa/models or ~/.cache/docqa/models].
    #[arg(long, env = "DOCQA_MODELS_DIR")]
    pub models_dir: Option<PathBuf>,
    /// Where the generator runs: `cpu`, or `cuda` (GPU 0; needs a build with `--features cuda`).
    #[arg(long, env = "DOCQA_DEVICE", value_enum, default_value_t = Device::Cpu)]
    pub device: Device,
    /// Weights the CPU reads in decode steps: int8 (the default) or bf16 (as stored). Ignored on CUDA.
    #[arg(long, env = "DOCQA_CPU_DECODE_WEIGHTS", value_enum)]
    pub cpu_decode_weights: Option<CpuDecodeWeights>,
    /// LoRA adapter merged into the generator at load: a PEFT adapter directory, or `none` for the base
    /// model [default: the shipped reader `docqa-reader` in the models directory; none with `--model`].
    #[arg(long, env = "DOCQA_ADAPTER", value_name = "DIR|none")]
    pub adapter: Option<AdapterFlag>,
}

impl GeneratorArgs {
    /// Opens the device's backend (one a rank with `tensor_parallel`), then finds the model directory
    /// and loads the adapter (the default generator and reader are fetched on first use). Says on
    /// stderr which adapter is merged.
    pub fn resolve(
        &self,
        tensor_parallel: Option<usize>,
    ) -> anyhow::Result<(GeneratorBackend, PathBuf, Option<Adapter>)> {
        let backend = self.device.open(self.cpu_decode_weights, tensor_parallel)?;
        let models_dir = models_dir_or_default(self.models_dir.clone());
        let (dir, reader) = match &self.model {
            Some(model) => (super::model_arg::model_dir(&models_dir, model)?, None),
            None => {
                let models = fetch_with_progress(&models_dir)?;
                (models.generator, Some(models.reader))
            }
        };
        let adapter = crate::adapter::load(self.adapter.as_ref(), reader.as_deref())?;
        eprintln!("[adapter: {}]", AdapterInfo::of(adapter.as_ref()).label());
        Ok((backend, dir, adapter))
    }
}
