//! Where the models run (`--device cpu|cuda`): the choice on the command line, the generator's backend
//! it opens, the embedder it loads on the same device, and the KV cache element type that suits that
//! backend.

use std::path::Path;

use anyhow::Context;
use clap::ValueEnum;
use docqa_engine::adapter::Adapter;
use docqa_engine::backend::KvDtype;
use docqa_engine::backend::cpu::CpuBackend;
#[cfg(feature = "cuda")]
use docqa_engine::backend::cuda::CudaBackend;
use docqa_engine::models::bert::BertEmbedder;
use docqa_engine::models::llama::Llama;
use docqa_engine::models::split::load_ranks;
use docqa_engine::parallel::Grouped;
use docqa_engine::serving::KvBudget;

/// The device the generator runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum Device {
    /// The CPU engine.
    #[default]
    Cpu,
    /// The first CUDA GPU (needs a docqa built with `--features cuda`).
    Cuda,
}

/// Element types of the KV cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum KvType {
    /// f32 (exact).
    F32,
    /// bf16 (the default).
    Bf16,
    /// int8 with one scale per (token, head) (CPU).
    Int8,
}

impl KvType {
    /// The engine's element type.
    pub fn dtype(self) -> KvDtype {
        match self {
            KvType::F32 => KvDtype::F32,
            KvType::Bf16 => KvDtype::Bf16,
            KvType::Int8 => KvDtype::Int8,
        }
    }
}

/// The weights the CPU backend reads in decode steps (batches of at most four rows).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CpuDecodeWeights {
    /// The bf16 weights as stored.
    Bf16,
    /// An int8 copy of every matrix (blocks of 64 with a scale; needs AVX2 with FMA or AVX-512 VNNI):
    /// half the bytes per token.
    Int8,
}

/// The generator's backends, opened: one, or one a rank of a tensor-parallel group.
pub enum GeneratorBackend {
    /// The CPU reference backend (a group's ranks run as threads).
    Cpu(Vec<CpuBackend>),
    /// The CUDA backend on GPU 0, or on GPUs 0.. for a group.
    #[cfg(feature = "cuda")]
    Cuda(Vec<CudaBackend>),
}

/// Settings whose best value depends on where the model runs (BENCHMARKS.md, "Defaults by device").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceDefaults {
    /// The RAG path's window, in tokens.
    pub rag_window: usize,
    /// The default and largest answer length, in tokens.
    pub max_answer_tokens: usize,
    /// Prompt tokens read per engine step: a stop or a closed connection takes effect between steps.
    pub prefill_chunk: usize,
    /// Whether the engine warms up before serving ([`docqa_engine::serving::warm_up`]).
    pub warm_up: bool,
}

impl Device {
    /// The defaults for this device (BENCHMARKS.md, "Defaults by device"). The reader answers as well
    /// with a 1,024-token RAG window as with 2,048 (90 seeded questions per file: +0.5 points overall,
    /// every file's difference within its 95 % interval), and far better than with 4,096 or 8,192. The
    /// CPU takes 1,024, which halves its reading time; the GPU keeps 2,048, which costs it about 30 ms
    /// an answer and keeps twice the passages. On the CPU, where decode runs at tens of tokens a second,
    /// answers are capped at 256 tokens, and prompts are read 256 tokens a step (under a second on two
    /// cores) so that a stop frees the engine within a second. CUDA reads 2,048 a step: at the
    /// Llama-3.1-8B shape on an H200 an 8K prompt's first token comes after 0.233 s against 0.262 s at
    /// 512 a step (8,192 a step: 0.225 s), while a step, and with it the other streams' next token,
    /// stays near 60 ms (the 0.233 s over four steps; BENCHMARKS.md, "Real scale").
    ///
    /// CUDA warms up before serving: its first read pays a quarter of a second of one-off costs
    /// (0.301 s against 0.046 s warm for a 2K prompt at the Llama-3.1-8B shape on an H100), and each
    /// new step size about 20 ms more. The CPU's first question costs what later ones do (1,811 ms
    /// warmed up against 1,831 ms without, the same 727-token prompt), so it starts a second sooner
    /// instead (BENCHMARKS.md, "Warm-up before serving").
    pub fn defaults(self) -> DeviceDefaults {
        match self {
            Device::Cpu => DeviceDefaults {
                rag_window: 1024,
                max_answer_tokens: 256,
                prefill_chunk: 256,
                warm_up: false,
            },
            Device::Cuda => DeviceDefaults {
                rag_window: 2048,
                max_answer_tokens: 512,
                prefill_chunk: 2048,
                warm_up: true,
            },
        }
    }

    /// The KV cache's memory: `mib` when given; else 512 MiB on the CPU (its memory is shared with the
    /// indexes and the parse workers), and on CUDA whatever keeps the GPU at or below `gpu_share` of
    /// its memory once the model and the workspace are loaded (0.85 by default: on an H200 beside a
    /// Llama-3.1-8B-shaped model, 103 GiB, 845,024 tokens; BENCHMARKS.md, "Real scale").
    ///
    /// The budget is each rank's: split over `ranks` tensor-parallel ranks, a GPU's budget holds its
    /// share of every block, so the GPUs together hold `ranks` times the tokens; CPU ranks share the
    /// host's memory, so each takes `1/ranks` of the CPU's budget.
    pub fn kv_budget(self, mib: Option<usize>, gpu_share: f64, ranks: usize) -> KvBudget {
        match (mib, self) {
            (Some(mib), Device::Cuda) => KvBudget::Bytes(mib << 20),
            (Some(mib), Device::Cpu) => KvBudget::Bytes((mib << 20) / ranks.max(1)),
            (None, Device::Cpu) => KvBudget::Bytes((512 << 20) / ranks.max(1)),
            (None, Device::Cuda) => KvBudget::DeviceShare(gpu_share),
        }
    }

    /// The KV cache element type: `chosen` when given, else bf16 on either device. On CUDA the
    /// tensor-core attention kernels read bf16 pools; on the CPU bf16 halves the bytes each decode step
    /// reads and doubles the tokens a cache holds, for a perplexity change of 0.006 % against f32
    /// (BENCHMARKS.md, "INT8 KV cache").
    pub fn kv_dtype(self, chosen: Option<KvType>) -> KvDtype {
        chosen.map_or(KvDtype::Bf16, KvType::dtype)
    }

    /// The weights the CPU reads in decode steps: `chosen` when given, else int8, which decodes at
    /// about 1.8× the bf16 speed on the CPU and answers as well (BENCHMARKS.md, "Int8 decode by
    /// default on the CPU"). Ignored on CUDA.
    pub fn cpu_decode_weights(self, chosen: Option<CpuDecodeWeights>) -> CpuDecodeWeights {
        chosen.unwrap_or(CpuDecodeWeights::Int8)
    }

    /// Opens the backend, or says why this build or this machine has none: one, or with
    /// `tensor_parallel` one a rank (on CUDA, GPUs `0..N`). On the CPU, `decode` picks the weights of
    /// decode steps; a CPU without the int8 kernels' instructions decodes on bf16 (said on stderr).
    pub fn open(
        self,
        decode: Option<CpuDecodeWeights>,
        tensor_parallel: Option<usize>,
    ) -> anyhow::Result<GeneratorBackend> {
        let ranks = tensor_parallel.unwrap_or(1);
        if ranks == 0 {
            anyhow::bail!("--tensor-parallel must be at least 1");
        }
        match self {
            Device::Cpu => {
                let weights = self.cpu_decode_weights(decode);
                let backends: Vec<CpuBackend> = (0..ranks).map(|_| open_cpu(weights)).collect();
                say_cpu(weights, &backends);
                Ok(GeneratorBackend::Cpu(backends))
            }
            Device::Cuda => open_cuda(ranks),
        }
    }

    /// Loads the embedder in `dir` on this device (its own backend, beside the generator's).
    pub fn load_embedder(self, dir: &Path) -> anyhow::Result<BertEmbedder> {
        let loaded = match self {
            Device::Cpu => BertEmbedder::load(dir).map_err(anyhow::Error::from),
            Device::Cuda => load_embedder_cuda(dir),
        };
        loaded.with_context(|| format!("loading {}", dir.display()))
    }
}

/// The generator in `dir` on `backends`: the whole model on the one backend, or with
/// `tensor_parallel` split over a group of them (`docqa_engine::parallel`), rank 0 first.
pub fn load_generator<B: Grouped>(
    mut backends: Vec<B>,
    tensor_parallel: bool,
    dir: &Path,
    adapter: Option<&Adapter>,
) -> anyhow::Result<Vec<Llama<B>>> {
    let loaded = match (tensor_parallel, backends.len()) {
        (true, _) => load_ranks(backends, dir, adapter),
        (false, 1) => Llama::load_with(backends.remove(0), dir, adapter).map(|m| vec![m]),
        (false, n) => anyhow::bail!("{n} backends opened for one generator"),
    };
    loaded.with_context(|| format!("loading {}", dir.display()))
}

fn open_cpu(decode: CpuDecodeWeights) -> CpuBackend {
    match decode {
        CpuDecodeWeights::Bf16 => CpuBackend::new(),
        CpuDecodeWeights::Int8 => CpuBackend::with_int8_decode(),
    }
}

/// Says on stderr where the generator runs and on which decode weights.
fn say_cpu(decode: CpuDecodeWeights, backends: &[CpuBackend]) {
    let int8 = backends.first().is_some_and(CpuBackend::int8_decode);
    if decode == CpuDecodeWeights::Int8 && !int8 {
        eprintln!(
            "docqa: this CPU has neither AVX2 with FMA nor AVX-512 VNNI; decoding on bf16 weights"
        );
    }
    let weights = if int8 { "int8" } else { "bf16" };
    let ranks = match backends.len() {
        1 => String::new(),
        n => format!(" ({n} tensor-parallel ranks, one thread each)"),
    };
    eprintln!("docqa: generator on the CPU{ranks}, decode steps on {weights} weights");
}

#[cfg(feature = "cuda")]
fn load_embedder_cuda(dir: &Path) -> anyhow::Result<BertEmbedder> {
    let backend = CudaBackend::new(0)?;
    eprintln!("docqa: embedder on {}", backend.describe());
    Ok(BertEmbedder::load_cuda(dir, backend)?)
}

#[cfg(not(feature = "cuda"))]
fn load_embedder_cuda(_dir: &Path) -> anyhow::Result<BertEmbedder> {
    anyhow::bail!("this docqa was built without CUDA support: rebuild with `--features cuda`")
}

#[cfg(feature = "cuda")]
fn open_cuda(ranks: usize) -> anyhow::Result<GeneratorBackend> {
    let visible = docqa_engine::backend::cuda::visible_devices();
    if ranks > visible.max(1) {
        anyhow::bail!("--tensor-parallel {ranks} needs {ranks} GPUs; this machine shows {visible}");
    }
    let backends = (0..ranks)
        .map(CudaBackend::new)
        .collect::<docqa_engine::Result<Vec<_>>>()?;
    for backend in &backends {
        eprintln!("docqa: generator on {}", backend.describe());
    }
    Ok(GeneratorBackend::Cuda(backends))
}

#[cfg(not(feature = "cuda"))]
fn open_cuda(_ranks: usize) -> anyhow::Result<GeneratorBackend> {
    anyhow::bail!("this docqa was built without CUDA support: rebuild with `--features cuda`")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_device_opens_the_cpu_backend_with_a_bf16_cache_unless_told_otherwise() {
        assert!(matches!(
            Device::Cpu.open(None, None),
            Ok(GeneratorBackend::Cpu(_))
        ));
        assert_eq!(Device::Cpu.kv_dtype(None), KvDtype::Bf16);
        assert_eq!(Device::Cpu.kv_dtype(Some(KvType::F32)), KvDtype::F32);
        assert_eq!(Device::Cpu.kv_dtype(Some(KvType::Int8)), KvDtype::Int8);
    }

    #[test]
    fn the_cpu_decodes_on_int8_weights_unless_told_bf16() {
        assert_eq!(Device::Cpu.cpu_decode_weights(None), CpuDecodeWeights::Int8);
        let bf16 = Some(CpuDecodeWeights::Bf16);
        assert_eq!(Device::Cpu.cpu_decode_weights(bf16), CpuDecodeWeights::Bf16);
        let Ok(GeneratorBackend::Cpu(mut backends)) = Device::Cpu.open(bf16, None) else {
            panic!("the CPU backend opens");
        };
        let backend = backends.pop().expect("one backend");
        assert!(
            !backend.int8_decode(),
            "--cpu-decode-weights bf16 is obeyed"
        );
        let Ok(GeneratorBackend::Cpu(mut backends)) = Device::Cpu.open(None, None) else {
            panic!("the CPU backend opens");
        };
        let backend = backends.pop().expect("one backend");
        let has_kernel = docqa_engine::backend::cpu::matmul::int8::available();
        assert_eq!(
            backend.int8_decode(),
            has_kernel,
            "int8 wherever a kernel runs"
        );
    }

    #[test]
    fn the_cuda_device_keeps_its_cache_in_bf16_for_the_tensor_core_kernels() {
        assert_eq!(Device::Cuda.kv_dtype(None), KvDtype::Bf16);
    }

    #[cfg(not(feature = "cuda"))]
    #[test]
    fn a_build_without_cuda_refuses_the_cuda_device_with_a_rebuild_hint() {
        let err = Device::Cuda
            .open(None, None)
            .err()
            .expect("no CUDA in this build");
        assert_eq!(
            err.to_string(),
            "this docqa was built without CUDA support: rebuild with `--features cuda`"
        );
    }

    #[cfg(feature = "cuda")]
    #[test]
    fn a_machine_without_a_gpu_refuses_the_cuda_device_with_the_typed_error() {
        match Device::Cuda.open(None, None) {
            // A machine with a GPU has nothing to refuse.
            Ok(_) => {}
            Err(err) => assert!(
                err.to_string().starts_with("no CUDA device: "),
                "unexpected error: {err:#}"
            ),
        }
    }
}
