//! gpu-check: runs every CUDA backend op against the CPU reference on fresh random inputs, with the
//! GPU outputs poisoned (NaN) beforehand, and prints a table of relative errors; then end-to-end
//! parity on random models (a BERT with MiniLM's shapes, and decoding with Llamas of SmolLM2-135M's
//! shapes) and the tiered KV cache's reloads; then, with `--bench`, the timings; last a summary line.
//!
//! Usage: `gpu-check [--ops-only] [--bench] [--kernels-only] [--families-only] [--tiers-only] [--tp-only]
//! [--persistent-only]`; `--ops-only` skips the
//! end-to-end models, `--kernels-only` keeps the timings to the kernels, `--families-only` runs only
//! the model families against transformers' logits (`tests/golden/families`), `--tp-only` the tensor-parallel
//! checks (NCCL collectives, split models against whole; `DOCQA_TP_SHAPES` adds real shapes),
//! `--persistent-only` the one-launch decode against the op-by-op one.
//! `DOCQA_BENCH_SHAPES=llama-3.1-8b,...` times decode at those real shapes and nothing else (over int8
//! KV pools with `DOCQA_BENCH_KV_DTYPE=int8`; `DOCQA_BENCH_CASES=32x32768,...` names the batch sizes and
//! contexts),
//! `DOCQA_BENCH_TP=llama-3.1-8b,...` prefill and decode whole against split over the GPUs and NCCL's sum;
//! `DOCQA_BENCH_KV_TIERS=1` runs the tiered KV cache's benchmark (`engine/benches/kv_tiers.rs`)
//! instead, `DOCQA_PROBE_RELOAD=1` times a reload of KV blocks from host memory alone,
//! `DOCQA_BENCH_PREFILL=1` times prefill attention alone (`=wgmma`: the Hopper kernel alone, `=int8`: over int8 pools,
//! `=windowed`: through sink windows, split and in one split),
//! `DOCQA_BENCH_END_TO_END=1` the end-to-end prefill and decode of random models alone (over int8 KV
//! pools with `DOCQA_BENCH_KV_DTYPE=int8`),
//! `DOCQA_BENCH_DECODE=1` decode alone (the attention kernel, then end to end at two shapes; `=products`:
//! the skinny products at real widths, then end to end), `DOCQA_PROFILE_PREFILL=1` (`=int8`) runs the
//! prefill kernel once at head_dim 128 and 16K tokens over bf16 (int8) pools, and
//! `DOCQA_PROFILE_MODEL=llama-3.2-1b` runs one prefill (of `DOCQA_PROFILE_TOKENS`, default 8,191) and
//! one decode step of a random model of that shape under cuProfilerStart/Stop (for ncu); one of these
//! variables a run. Exit status 0 when every check passes, 1 when one fails, 2 when there is no CUDA
//! device, 64 when two of the variables above are set (each would run instead of the other).
//! `DOCQA_TEST_SEED` replays a run; `DOCQA_CUBIN_DIR` points at prebuilt cubins (default: `cubins/` beside the
//! executable), else the kernels are compiled with NVRTC.

mod attention;
mod batched;
mod bench;
mod bench_windowed;
mod decode;
mod e2e;
mod families;
mod fused;
mod inputs;
#[path = "../../../benches/kv_tiers.rs"]
mod kv_tiers_bench;
mod ops;
mod persistent;
mod products;
mod qkv_rope;
mod random_models;
mod reload_probe;
mod report;
mod sample;
mod sublayer;
mod tensor_parallel;
mod tiers;

use docqa_engine::backend::cpu::{CpuBackend, CpuKv, KvStore};
use docqa_engine::backend::cuda::CudaBackend;
use docqa_engine::{EngineError, Result};

use inputs::{Pair, Rng};
use report::Report;

/// A CPU pool's elements as f32.
pub fn cpu_kv_f32(kv: &CpuKv) -> Vec<f32> {
    let len = match &kv.store {
        KvStore::F32(v) => v.len(),
        KvStore::Bf16(v) => v.len(),
        KvStore::Int8 { q, .. } => q.len(),
    };
    (0..len).map(|i| kv.value_at(i)).collect()
}

fn run(ops_only: bool, bench: bool, kernels_only: bool, families_only: bool) -> Result<bool> {
    let t = std::time::Instant::now();
    let gpu = CudaBackend::new(0)?;
    println!(
        "device: {} (opened in {:.2} s)",
        gpu.describe(),
        t.elapsed().as_secs_f64()
    );
    let pair = Pair {
        cpu: CpuBackend::new(),
        gpu,
    };
    let mut rng = Rng::fresh("gpu-check seed");
    if std::env::var_os("DOCQA_BENCH_KV_TIERS").is_some() {
        kv_tiers_bench::main().map_err(|e| EngineError::Internal(e.to_string()))?;
        return Ok(true);
    }
    if std::env::var_os("DOCQA_PROBE_RELOAD").is_some() {
        reload_probe::run(&pair.gpu)?;
        return Ok(true);
    }
    if flag_set("--tp-only") {
        let mut report = Report::default();
        report.header();
        tensor_parallel::run(&mut rng, &mut report)?;
        return Ok(report.summary());
    }
    if flag_set("--persistent-only") {
        let mut report = Report::default();
        report.header();
        persistent::run(&mut rng, &mut report)?;
        return Ok(report.summary());
    }
    if flag_set("--tiers-only") {
        let mut report = Report::default();
        report.header();
        tiers::run(&mut rng, &mut report)?;
        return Ok(report.summary());
    }
    if std::env::var_os("DOCQA_PROFILE_PREFILL").is_some() {
        bench::profile_prefill(&pair.gpu, &mut rng)?;
        return Ok(true);
    }
    if std::env::var_os("DOCQA_BENCH_DECODE").is_some() {
        bench::decode_timings(&pair.gpu, &mut rng)?;
        return Ok(true);
    }
    if std::env::var_os("DOCQA_BENCH_PREFILL").is_some() {
        bench::prefill_timings(&pair.gpu, &mut rng)?;
        return Ok(true);
    }
    if std::env::var_os("DOCQA_BENCH_END_TO_END").is_some() {
        bench::end_to_end(&mut rng)?;
        return Ok(true);
    }
    if let Ok(name) = std::env::var("DOCQA_PROFILE_MODEL") {
        bench::profile_model(&name, &mut rng)?;
        return Ok(true);
    }
    if let Ok(shapes) = std::env::var("DOCQA_BENCH_TP") {
        tensor_parallel::bench(&shapes, &mut rng)?;
        return Ok(true);
    }
    if let Ok(shapes) = std::env::var("DOCQA_BENCH_SHAPES") {
        bench::real_scale(&shapes, &mut rng)?;
        return Ok(true);
    }
    let mut report = Report::default();
    report.header();
    if families_only {
        families::run(&mut report)?;
        return Ok(report.summary());
    }
    ops::run(&pair, &mut rng, &mut report)?;
    fused::run(&pair, &mut rng, &mut report)?;
    qkv_rope::run(&pair, &mut rng, &mut report)?;
    sublayer::run(&pair, &mut rng, &mut report)?;
    sample::run(&pair, &mut rng, &mut report)?;
    attention::run(&pair, &mut rng, &mut report)?;
    if !ops_only {
        e2e::run_bert(&mut rng, &mut report)?;
        e2e::run_llama(&mut rng, &mut report)?;
        persistent::run(&mut rng, &mut report)?;
        families::run(&mut report)?;
        tiers::run(&mut rng, &mut report)?;
        tensor_parallel::run(&mut rng, &mut report)?;
    }
    // The timings come after the parity table, and the summary line last.
    let timed = match bench {
        true => bench::run(&pair.gpu, &mut rng, !kernels_only),
        false => Ok(()),
    };
    let passed = report.summary();
    timed.map(|()| passed)
}

/// The variables that each run one mode of gpu-check instead of the checks, in the order `run` takes
/// them; a run takes one.
const MODE_VARIABLES: [&str; 9] = [
    "DOCQA_BENCH_KV_TIERS",
    "DOCQA_PROBE_RELOAD",
    "DOCQA_PROFILE_PREFILL",
    "DOCQA_BENCH_DECODE",
    "DOCQA_BENCH_PREFILL",
    "DOCQA_BENCH_END_TO_END",
    "DOCQA_PROFILE_MODEL",
    "DOCQA_BENCH_TP",
    "DOCQA_BENCH_SHAPES",
];

/// The mode variables set in the environment.
fn modes_set() -> Vec<&'static str> {
    MODE_VARIABLES
        .into_iter()
        .filter(|v| std::env::var_os(v).is_some())
        .collect()
}

fn flag_set(f: &str) -> bool {
    std::env::args().any(|a| a == f)
}

fn main() {
    // SAFETY: no other thread has started yet.
    unsafe { docqa_engine::parallel::nccl::keep_nvlink_multicast_off() };
    let modes = modes_set();
    if modes.len() > 1 {
        eprintln!(
            "gpu-check: {} each choose what to run; set one of them",
            modes.join(" and ")
        );
        std::process::exit(64);
    }
    let flag = flag_set;
    let flags = (flag("--ops-only"), flag("--bench"), flag("--kernels-only"));
    match run(flags.0, flags.1, flags.2, flag("--families-only")) {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e @ EngineError::NoCudaDevice(_)) => {
            eprintln!("gpu-check: {e}");
            std::process::exit(2);
        }
        Err(e) => {
            eprintln!("gpu-check: {e}");
            std::process::exit(1);
        }
    }
}
