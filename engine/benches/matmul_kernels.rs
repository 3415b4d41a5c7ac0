//! The CPU matmul kernels side by side: every SIMD kernel this CPU runs, on bf16 weights of the
//! SmolLM2-135M-Instruct products' shapes, with a prompt's rows (prefill) and one row (decode).
//!
//! For each shape and kernel it prints the median of `DOCQA_BENCH_REPS` timed calls (default 30, after
//! three untimed) and the GFLOP/s that gives, on a rayon pool of `DOCQA_BENCH_THREADS` threads (default
//! 2). The kernels run in turn, twice each, A B A B, so a drift of the machine's speed shows as a
//! difference between a kernel's two rows.
//!
//! Run: `cargo bench -p docqa-engine --bench matmul_kernels`.

use std::time::Instant;

use docqa_engine::backend::cpu::matmul::{self, Kernel, MatmulDims, WeightSlice};

/// (what, activation rows, k, n): SmolLM2-135M's q/k/v (fused), gate/up (fused) and down products.
const SHAPES: [(&str, usize, usize, usize); 6] = [
    ("q/k/v, 512 rows", 512, 576, 960),
    ("gate/up, 512 rows", 512, 576, 3072),
    ("down, 512 rows", 512, 1536, 576),
    ("q/k/v, 1 row", 1, 576, 960),
    ("gate/up, 1 row", 1, 576, 3072),
    ("down, 1 row", 1, 1536, 576),
];

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Fixed pseudo-random values in [-0.5, 0.5).
fn values(len: usize, salt: usize) -> impl Iterator<Item = f32> {
    (0..len).map(move |i| ((i * 7919 + salt * 104_729) % 1000) as f32 / 1000.0 - 0.5)
}

/// Median seconds of `reps` calls of `kernel` after three untimed.
fn time_kernel(kernel: Kernel, x: &[f32], w: &[u16], d: MatmulDims, reps: usize) -> f64 {
    let (mut out, mut scratch) = (vec![0f32; d.rows * d.n], Vec::new());
    let mut run = || {
        matmul::matmul_on(
            kernel,
            x,
            WeightSlice::Bf16(w),
            None,
            d,
            &mut out,
            &mut scratch,
        )
    };
    for _ in 0..3 {
        run();
    }
    let mut times: Vec<f64> = (0..reps)
        .map(|_| {
            let t = Instant::now();
            run();
            t.elapsed().as_secs_f64()
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[reps / 2]
}

fn main() {
    let threads = env_usize("DOCQA_BENCH_THREADS", 2);
    let reps = env_usize("DOCQA_BENCH_REPS", 30).max(1);
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build_global()
        .expect("rayon pool");
    let kernels: Vec<Kernel> = [Kernel::Avx512, Kernel::Avx512Fma, Kernel::Avx2Fma]
        .into_iter()
        .filter(|k| k.available(WeightSlice::Bf16(&[])))
        .collect();
    println!("{threads} threads; kernels this CPU runs: {kernels:?}");
    for (what, rows, k, n) in SHAPES {
        let x: Vec<f32> = values(rows * k, 1).collect();
        let w: Vec<u16> = values(n * k, 2)
            .map(|v| half::bf16::from_f32(v).to_bits())
            .collect();
        let d = MatmulDims { rows, k, n };
        for kernel in kernels.iter().chain(&kernels) {
            let secs = time_kernel(*kernel, &x, &w, d, reps);
            let gflops = 2.0 * (rows * k * n) as f64 / secs / 1e9;
            println!(
                "{what:<20} {kernel:<14?} {:>9.3} ms {gflops:>8.1} GFLOP/s",
                secs * 1e3
            );
        }
    }
}
