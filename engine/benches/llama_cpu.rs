//! Llama CPU throughput on the real SmolLM2-135M-Instruct (bf16 weights, bf16 KV cache: the service's
//! defaults).
//!
//! Measures, on a rayon pool of `DOCQA_BENCH_THREADS` threads (default 2):
//! - prefill tok/s for a 512-token and a 2,048-token prompt (one forward pass each, logits of the last
//!   token only), best of `DOCQA_BENCH_REPS` runs (default 3);
//! - decode tok/s for 128 greedy tokens after a 512-token prompt (batch 1, one token per pass,
//!   including the LM head and the arg-max), with the bf16 weights (bf16 KV cache, like llama.cpp's
//!   default f16 one, then the exact f32 KV cache) and again with the int8 decode path
//!   (`CpuBackend::with_int8_decode`, bf16 KV cache).
//!
//! Each figure is printed twice: by wall clock, and by CPU time (`tokens / (busy CPU-seconds of all
//! threads / threads)`, read from `/proc/self/task/*/schedstat`). On a shared machine the wall-clock
//! figure falls with the other load; the CPU-time figure estimates the throughput of `threads` cores of
//! our own.
//!
//! Prompts are fixed pseudo-random token ids (no special tokens), never zeros. The model comes from
//! `fetch::ensure_models` (under `$DOCQA_MODELS_DIR` or the default cache, fetched if missing).
//!
//! Run: `cargo bench -p docqa-engine --bench llama_cpu` (`DOCQA_BENCH_ONLY=prefill|decode` for one part).

use std::path::PathBuf;
use std::time::Instant;

use docqa_engine::backend::KvDtype;
use docqa_engine::backend::cpu::CpuBackend;
use docqa_engine::fetch;
use docqa_engine::models::LogitsMode;
use docqa_engine::models::generate::{SingleSequence, argmax};
use docqa_engine::models::llama::Llama;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The generator's directory, fetched with `ensure_models` if it is missing.
fn model_dir() -> PathBuf {
    let dir = fetch::default_models_dir();
    fetch::ensure_models(&dir, &fetch::NoProgress)
        .expect("fetch models")
        .generator
}

fn prompt(n: usize) -> Vec<u32> {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    (0..n)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            100 + (state >> 33) as u32 % 48_000
        })
        .collect()
}

/// Busy CPU-seconds of all threads of this process so far.
fn cpu_seconds() -> f64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return f64::NAN;
    };
    let ns: u64 = tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    ns as f64 * 1e-9
}

/// Wall and CPU seconds of `f`.
fn timed(f: impl FnOnce()) -> (f64, f64) {
    let (t, c) = (Instant::now(), cpu_seconds());
    f();
    (t.elapsed().as_secs_f64(), cpu_seconds() - c)
}

/// Best (wall, cpu) of several runs.
#[derive(Clone, Copy)]
struct Best(f64, f64);

impl Best {
    fn new() -> Self {
        Best(f64::MAX, f64::MAX)
    }
    fn add(&mut self, (w, c): (f64, f64)) {
        self.0 = self.0.min(w);
        self.1 = self.1.min(c);
    }
    fn report(&self, what: &str, tokens: usize, threads: usize) {
        let (wall, cpu) = (
            tokens as f64 / self.0,
            tokens as f64 / (self.1 / threads as f64),
        );
        println!("{what:<24} {wall:>8.1} tok/s wall   {cpu:>8.1} tok/s by CPU time");
    }
}

fn prefill(model: &Llama<CpuBackend>, n: usize, reps: usize) -> Best {
    let tokens = prompt(n);
    let mut seq = SingleSequence::new(model, n + 256, n, KvDtype::Bf16).expect("driver");
    let mut best = Best::new();
    for _ in 0..reps {
        seq.reset();
        best.add(timed(|| {
            seq.feed(&tokens, LogitsMode::LastPerSequence)
                .expect("prefill");
        }));
    }
    best
}

fn decode(
    model: &Llama<CpuBackend>,
    kv: KvDtype,
    prompt_len: usize,
    steps: usize,
    reps: usize,
) -> Best {
    let tokens = prompt(prompt_len);
    let mut seq =
        SingleSequence::new(model, prompt_len + steps + 16, prompt_len, kv).expect("driver");
    let mut best = Best::new();
    for _ in 0..reps {
        seq.reset();
        let mut next = argmax(
            seq.feed(&tokens, LogitsMode::LastPerSequence)
                .expect("prefill"),
        );
        best.add(timed(|| {
            for _ in 0..steps {
                next = argmax(
                    seq.feed(&[next], LogitsMode::LastPerSequence)
                        .expect("decode"),
                );
            }
        }));
    }
    best
}

fn main() {
    let threads = env_usize("DOCQA_BENCH_THREADS", 2);
    let reps = env_usize("DOCQA_BENCH_REPS", 3);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("thread pool");
    let model = Llama::load(CpuBackend::new(), &model_dir()).expect("load smollm2-135m-instruct");
    pool.install(|| {
        println!("llama_cpu: SmolLM2-135M bf16, {threads} threads, best of {reps}");
        let only = std::env::var("DOCQA_BENCH_ONLY").unwrap_or_default();
        if only != "decode" {
            for n in [512, 2048] {
                prefill(&model, n, reps).report(&format!("prefill {n} tokens"), n, threads);
            }
        }
        if only != "prefill" {
            decode(&model, KvDtype::Bf16, 512, 128, reps).report(
                "decode 128 after 512",
                128,
                threads,
            );
            decode(&model, KvDtype::F32, 512, 128, reps).report(
                "decode, f32 KV cache",
                128,
                threads,
            );
            let int8 =
                Llama::load(CpuBackend::with_int8_decode(), &model_dir()).expect("load int8");
            decode(&int8, KvDtype::Bf16, 512, 128, reps).report(
                "decode (int8 weights)",
                128,
                threads,
            );
        }
    });
}
