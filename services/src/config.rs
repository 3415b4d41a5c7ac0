//! `docqa serve` settings: every flag has an environment variable, and a documented default.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, ValueEnum};

use crate::device::Device;

/// Whether requests without a key are served as the local single user.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LocalMode {
    /// On when binding to a loopback address, off otherwise.
    Auto,
    /// Always on (requests without a key act as the `local` tenant).
    On,
    /// Always off (every request needs a key).
    Off,
}

/// `docqa serve`.
#[derive(Debug, Clone, Args)]
pub struct ServeConfig {
    /// Address to listen on (port 0 picks a free port; the chosen address is printed).
    #[arg(long, env = "DOCQA_BIND", default_value = "127.0.0.1:8080")]
    pub bind: SocketAddr,
    /// Directory for the database, the search indexes and the uploaded originals
    /// [default: $XDG_DATA_HOME/docqa or ~/.local/share/docqa].
    #[arg(long, env = "DOCQA_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Database URL: `sqlite://PATH` or `postgres://USER:PASS@HOST/DB` [default: SQLite file
    /// `docqa.db` in the data directory].
    #[arg(long, env = "DOCQA_DATABASE_URL")]
    pub database_url: Option<String>,
    /// Directory holding the model directories [default: $XDG_CACHE_HOME/docqa/models or
    /// ~/.cache/docqa/models]; missing models are fetched on start.
    #[arg(long, env = "DOCQA_MODELS_DIR")]
    pub models_dir: Option<PathBuf>,
    /// A Llama-family HF model directory to serve instead of the default generator (Llama 3.x, Qwen2.5,
    /// Mistral: config.json, bf16 safetensors whole or sharded with their index, tokenizer.json, and a
    /// chat template in tokenizer_config.json or chat_template.jinja), or a GGUF file of those families,
    /// converted on the first start into the models directory's `converted/` and read from there after.
    /// The shipped reader is trained for the default generator, so none is merged unless --adapter names
    /// one; only the embedder is fetched.
    #[arg(long, env = "DOCQA_GENERATOR_DIR")]
    pub model: Option<PathBuf>,
    /// The admin API key. When unset and no admin key exists yet, one is generated on first start
    /// and printed once.
    #[arg(long, env = "DOCQA_ADMIN_KEY", hide_env_values = true)]
    pub admin_key: Option<String>,
    /// Serve requests without a key as the single local user.
    #[arg(long, env = "DOCQA_LOCAL_MODE", value_enum, default_value_t = LocalMode::Auto)]
    pub local_mode: LocalMode,
    /// Largest accepted upload, in bytes, per request.
    #[arg(long, env = "DOCQA_MAX_UPLOAD_BYTES", default_value_t = 64 << 20)]
    pub max_upload_bytes: u64,
    /// Requests per minute allowed to each API key (0: no limit).
    #[arg(long, env = "DOCQA_RATE_LIMIT_PER_MINUTE", default_value_t = 600)]
    pub rate_limit_per_minute: u32,
    /// Documents ingested at the same time.
    #[arg(long, env = "DOCQA_INGEST_WORKERS", default_value_t = 1)]
    pub ingest_workers: usize,
    /// Memory a document's parse and chunking may use, in MiB: they run in a child process with
    /// this ceiling, and a document that needs more fails with the `memory` limit.
    #[arg(long, env = "DOCQA_INGEST_MEMORY_MIB", default_value_t = 1024)]
    pub ingest_memory_mib: u64,
    /// Seconds a document's parse and chunking may take before they are stopped and the document
    /// fails with the `time` limit.
    #[arg(long, env = "DOCQA_PARSE_TIMEOUT_SECS", default_value_t = 120)]
    pub parse_timeout_secs: u64,
    /// Context window of the RAG path, in tokens (prompt and answer together) [default: 1024 on the
    /// CPU, 2048 on CUDA].
    #[arg(long, env = "DOCQA_RAG_WINDOW")]
    pub rag_window: Option<usize>,
    /// Chunks retrieved per question before the window is filled.
    #[arg(long, env = "DOCQA_RAG_CANDIDATES", default_value_t = 40)]
    pub rag_candidates: usize,
    /// Default and largest number of answer tokens [default: 256 on the CPU, 512 on CUDA].
    #[arg(long, env = "DOCQA_MAX_ANSWER_TOKENS")]
    pub max_answer_tokens: Option<usize>,
    /// LoRA adapter merged into the generator at load: a PEFT adapter directory, or `none` for the base
    /// model [default: the shipped reader, `docqa-reader` in the models directory, installed on start].
    #[arg(long, env = "DOCQA_ADAPTER", value_name = "DIR|none")]
    pub adapter: Option<crate::adapter::AdapterFlag>,
    /// Where the generator and the embedder run: `cpu`, or `cuda` (GPU 0; needs a build with
    /// `--features cuda`).
    #[arg(long, env = "DOCQA_DEVICE", value_enum, default_value_t = Device::Cpu)]
    pub device: Device,
    /// Split the generator over this many ranks (tensor parallelism): on CUDA one GPU a rank (GPUs
    /// 0..N, joined by NCCL), on the CPU threads. N must divide the model's attention and KV heads,
    /// MLP width and vocabulary. A KV block's record in the host-memory and disk tiers holds every
    /// rank's share; a disk tier written under one N is not read under another.
    #[arg(long, env = "DOCQA_TENSOR_PARALLEL", value_name = "N")]
    pub tensor_parallel: Option<usize>,
    /// Element type of the generator's KV cache: bf16 (the default), f32 (exact, twice the memory), or
    /// int8 with one scale per (token, head) (about half of bf16's memory per token).
    #[arg(long, env = "DOCQA_KV_DTYPE", value_enum)]
    pub kv_dtype: Option<crate::device::KvType>,
    /// Weights the CPU reads in decode steps: int8 (the default: blocks of 64 with a scale, half the
    /// bytes, about 1.8× the speed) or bf16 (as stored). Prompts are always read on bf16. Ignored on
    /// CUDA.
    #[arg(long, env = "DOCQA_CPU_DECODE_WEIGHTS", value_enum)]
    pub cpu_decode_weights: Option<crate::device::CpuDecodeWeights>,
    /// How the long path reads scopes longer than the model's trained context: `none`, or `yarn` (RoPE
    /// scaling by `--rope-factor`: the context grows that many times, at a small cost in quality inside
    /// the trained context, for every request). With `route=long`, whatever is still too long streams
    /// through a sink window.
    #[arg(long, env = "DOCQA_LONG_CONTEXT", value_enum, default_value_t = LongContext::None)]
    pub long_context: LongContext,
    /// Scale factor of `--long-context yarn`.
    #[arg(long, env = "DOCQA_ROPE_FACTOR", default_value_t = 4.0)]
    pub rope_factor: f64,
    /// Memory for the generator's KV cache, in MiB [default: 512 on the CPU; on CUDA, what
    /// `--gpu-memory-share` leaves].
    #[arg(long, env = "DOCQA_KV_CACHE_MIB")]
    pub kv_cache_mib: Option<usize>,
    /// Host memory for KV blocks evicted from the KV cache, in MiB (0: none). A question on a
    /// document whose KV went there brings it back instead of reading the document again.
    #[arg(long, env = "DOCQA_KV_HOST_MIB", default_value_t = 2048)]
    pub kv_host_mib: usize,
    /// Disk space for KV blocks pushed out of host memory (and for everything cached at a shutdown),
    /// in MiB, under the data directory's `kv/` (0: none). A restarted server finds them there.
    #[arg(long, env = "DOCQA_KV_DISK_MIB", default_value_t = 10240)]
    pub kv_disk_mib: usize,
    /// Host memory for KV blocks on their way to disk or back from it, in MiB, beyond
    /// `--kv-host-mib` (pinned on CUDA). A document larger than this streams back through it in
    /// batches (0: blocks in transit use ordinary heap memory, several times slower to move).
    #[arg(long, env = "DOCQA_KV_TRANSIT_MIB", default_value_t = 1024)]
    pub kv_transit_mib: usize,
    /// Share of the KV cache's blocks (running requests' and cached ones not yet copied down) above
    /// which cached blocks are copied to host memory ahead of their eviction.
    #[arg(long, env = "DOCQA_KV_HIGH_WATER", default_value_t = 0.85, value_parser = share)]
    pub kv_high_water: f64,
    /// Copy KV blocks down to host memory and disk as soon as they are computed (while
    /// `--kv-transit-mib` has room), not only when they are evicted: evictions then cost nothing, and
    /// a document read is on disk within moments, so it survives a crash and not only a shutdown
    /// (`false`: copy blocks down only as they are evicted).
    #[arg(long, env = "DOCQA_KV_WRITE_THROUGH", default_value_t = true, action = clap::ArgAction::Set)]
    pub kv_write_through: bool,
    /// On CUDA without `--kv-cache-mib`: the share of the GPU's memory that the model, its workspace
    /// and the KV cache may fill together; the KV cache takes what the model leaves of it.
    #[arg(long, env = "DOCQA_GPU_MEMORY_SHARE", default_value_t = 0.85, value_parser = share)]
    pub gpu_memory_share: f64,
    /// Abstention threshold: an answer whose first token the model gave a probability below it counts
    /// as unsupported: it becomes "Not found in the document." and, under Self-Route, the whole
    /// document is read instead. 0 (the default) never abstains: with SmolLM2-135M no threshold
    /// calibrated on SQuAD 2.0 held on other articles (EVAL.md, "Abstention"); calibrate one for another
    /// model with `docqa eval` and `bench/abstention.py`.
    #[arg(long, env = "DOCQA_ABSTENTION_THRESHOLD", default_value_t = 0.0,
        value_parser = probability)]
    pub abstention_threshold: f64,
    /// Generation requests allowed to wait for the engine before new ones get 429.
    #[arg(long, env = "DOCQA_MAX_WAITING", default_value_t = 64)]
    pub max_waiting: usize,
    /// HTTP worker threads.
    #[arg(long, env = "DOCQA_HTTP_WORKERS", default_value_t = 2)]
    pub http_workers: usize,
    /// Seconds without a heartbeat after which another replica's running job counts as crashed
    /// (PostgreSQL; with SQLite, one process owns the file and recovers at start).
    #[arg(long, env = "DOCQA_JOB_LEASE_SECS", default_value_t = 30)]
    pub job_lease_secs: u64,
    /// Milliseconds between two reads of the index change log: a document made ready or deleted
    /// through another replica sharing the database is searchable, or gone, here within about this.
    #[arg(long, env = "DOCQA_INDEX_POLL_MS", default_value_t = 1000,
        value_parser = clap::value_parser!(u64).range(10..=3_600_000))]
    pub index_poll_ms: u64,
}

/// A probability: a number from 0 to 1.
fn probability(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(p) if (0.0..=1.0).contains(&p) => Ok(p),
        _ => Err(format!("{text:?} is not a number from 0 to 1")),
    }
}

fn share(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(p) if p > 0.0 && p <= 1.0 => Ok(p),
        _ => Err(format!("{text:?} is not a share above 0 and at most 1")),
    }
}

/// How the long path reads past the model's trained context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LongContext {
    /// The trained context only (longer scopes stream through a sink window with `route=long`).
    None,
    /// YaRN RoPE scaling by `--rope-factor`.
    Yarn,
}

impl ServeConfig {
    /// The RAG window: as given, else the device's default.
    pub fn rag_window(&self) -> usize {
        self.rag_window
            .unwrap_or_else(|| self.device.defaults().rag_window)
    }

    /// The answer length cap: as given, else the device's default.
    pub fn max_answer_tokens(&self) -> usize {
        self.max_answer_tokens
            .unwrap_or_else(|| self.device.defaults().max_answer_tokens)
    }

    /// The data directory, resolved.
    pub fn data_dir(&self) -> PathBuf {
        self.data_dir.clone().unwrap_or_else(default_data_dir)
    }

    /// Whether local single-user mode is on.
    pub fn local_mode_enabled(&self) -> bool {
        match self.local_mode {
            LocalMode::On => true,
            LocalMode::Off => false,
            LocalMode::Auto => self.bind.ip().is_loopback(),
        }
    }
}

/// `$XDG_DATA_HOME/docqa`, else `~/.local/share/docqa`, else `./docqa-data`.
pub fn default_data_dir() -> PathBuf {
    let env = |key: &str| {
        std::env::var_os(key)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    match (env("XDG_DATA_HOME"), env("HOME")) {
        (Some(data), _) => data.join("docqa"),
        (None, Some(home)) => home.join(".local").join("share").join("docqa"),
        (None, None) => PathBuf::from("docqa-data"),
    }
}

#[cfg(test)]
mod tests {
    use super::probability;

    #[test]
    fn an_abstention_threshold_outside_zero_to_one_is_refused() {
        assert_eq!(probability("0.42"), Ok(0.42));
        assert_eq!(probability("0"), Ok(0.0));
        for bad in ["1.5", "-0.1", "NaN", "half"] {
            assert!(probability(bad).is_err(), "{bad}");
        }
    }
}
