//! CPU backend op by op: the SIMD matmuls (bf16, f32, int8) against the portable reference and the
//! row-wise ops against their formulas (attention is in `cpu_attention.rs`). Inputs are fresh random
//! values each run (the seed is printed).

use crate::common;

use common::Rng;
use docqa_engine::backend::Backend;
use docqa_engine::backend::cpu::CpuBackend;
use docqa_engine::backend::cpu::matmul::{self, Kernel, MatmulDims, WeightSlice};
use docqa_engine::config::RopeFreqs;
use docqa_engine::weights::{TensorRef, WeightDtype};

fn bf16(v: f32) -> f32 {
    half::bf16::from_f32(v).to_f32()
}

/// Shapes with every kind of tail: rows not a multiple of 4, k not a multiple of 32, n not of 4.
/// `len` random weights in [-0.5, 0.5) as bf16 bit patterns.
fn bf16_weights(rng: &mut Rng, len: usize) -> Vec<u16> {
    rng.vec(len, 0.5)
        .iter()
        .map(|v| half::bf16::from_f32(*v).to_bits())
        .collect()
}

const SHAPES: &[(usize, usize, usize)] = &[
    (1, 576, 192),
    (3, 40, 7),
    (5, 1536, 64),
    (67, 576, 193),
    (130, 96, 17),
];

/// The SIMD kernels this CPU runs for weights like `w` (each test checks all of them, so the AVX2
/// kernel is tested on AVX-512 machines too, and the widening AVX-512 kernel on those with BF16).
fn simd_kernels(w: WeightSlice<'_>) -> Vec<Kernel> {
    [Kernel::Avx512, Kernel::Avx512Fma, Kernel::Avx2Fma]
        .into_iter()
        .filter(|k| k.available(w))
        .collect()
}

/// `matmul_on(kernel, …)` into a fresh output.
fn run_kernel(
    kernel: Kernel,
    x: &[f32],
    w: WeightSlice<'_>,
    bias: Option<&[f32]>,
    d: MatmulDims,
) -> Vec<f32> {
    let mut out = vec![f32::NAN; d.rows * d.n];
    matmul::matmul_on(kernel, x, w, bias, d, &mut out, &mut Vec::new());
    out
}

#[test]
fn bf16_matmul_simd_matches_reference_within_activation_rounding() {
    let mut rng = Rng::fresh("bf16_matmul");
    for &(rows, k, n) in SHAPES {
        let x = rng.vec(rows * k, 2.0);
        let w = bf16_weights(&mut rng, n * k);
        let bias = rng.vec(n, 1.0);
        let d = MatmulDims { rows, k, n };
        let mut reference = vec![f32::NAN; rows * n];
        matmul::matmul_ref(&x, WeightSlice::Bf16(&w), Some(&bias), d, &mut reference);
        for kernel in simd_kernels(WeightSlice::Bf16(&w)) {
            let fast = run_kernel(kernel, &x, WeightSlice::Bf16(&w), Some(&bias), d);
            for t in 0..rows {
                for o in 0..n {
                    // AVX-512 rounds activations to bf16 (relative error ≤ 2⁻⁹ each); bound 2⁻⁸·Σ|x·w|.
                    let mag: f32 = (0..k)
                        .map(|i| (x[t * k + i] * f32::from_bits((w[o * k + i] as u32) << 16)).abs())
                        .sum();
                    let (a, b) = (fast[t * n + o], reference[t * n + o]);
                    assert!(
                        (a - b).abs() <= mag / 256.0 + 1e-5,
                        "{kernel:?} ({rows},{k},{n}) [{t},{o}]: {a} vs {b}"
                    );
                }
            }
        }
    }
}

#[test]
fn bf16_matmul_simd_is_exact_up_to_summation_order_on_bf16_activations() {
    let mut rng = Rng::fresh("bf16_matmul_exact");
    for &(rows, k, n) in SHAPES {
        let x: Vec<f32> = rng.vec(rows * k, 2.0).into_iter().map(bf16).collect();
        let w = bf16_weights(&mut rng, n * k);
        let d = MatmulDims { rows, k, n };
        let mut reference = vec![f32::NAN; rows * n];
        matmul::matmul_ref(&x, WeightSlice::Bf16(&w), None, d, &mut reference);
        for kernel in simd_kernels(WeightSlice::Bf16(&w)) {
            let fast = run_kernel(kernel, &x, WeightSlice::Bf16(&w), None, d);
            // Products of bf16 values are exact in f32; only the order of k f32 additions differs:
            // k·2⁻²³ relative.
            for (a, b) in fast.iter().zip(&reference) {
                assert!(
                    (a - b).abs() <= k as f32 * 1.2e-7 * b.abs().max(1.0),
                    "{kernel:?} ({rows},{k},{n}): {a} vs {b}"
                );
            }
        }
    }
}

#[test]
fn a_bf16_matmul_row_is_bit_identical_alone_and_inside_a_batch() {
    // Decode (one activation row) reads weight rows differently from batches of rows: both must sum
    // the same products in the same order. k = 1,541 leaves a tail after every kernel's full steps.
    let mut rng = Rng::fresh("bf16_matmul_batch_invariance");
    for k in [1536, 1541] {
        let (rows, n) = (6, 69);
        let x = rng.vec(rows * k, 2.0);
        let w = bf16_weights(&mut rng, n * k);
        let w = WeightSlice::Bf16(&w);
        for kernel in simd_kernels(w) {
            let together = run_kernel(kernel, &x, w, None, MatmulDims { rows, k, n });
            for r in 0..rows {
                let one = MatmulDims { rows: 1, k, n };
                let alone = run_kernel(kernel, &x[r * k..(r + 1) * k], w, None, one);
                let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                assert_eq!(
                    bits(&alone),
                    bits(&together[r * n..(r + 1) * n]),
                    "{kernel:?} k {k} row {r}"
                );
            }
        }
    }
}

#[test]
fn f32_matmul_simd_matches_reference() {
    let mut rng = Rng::fresh("f32_matmul");
    for &(rows, k, n) in SHAPES {
        let (x, w, bias) = (rng.vec(rows * k, 2.0), rng.vec(n * k, 0.5), rng.vec(n, 1.0));
        let d = MatmulDims { rows, k, n };
        let mut reference = vec![f32::NAN; rows * n];
        matmul::matmul_ref(&x, WeightSlice::F32(&w), Some(&bias), d, &mut reference);
        for kernel in simd_kernels(WeightSlice::F32(&w)) {
            let fast = run_kernel(kernel, &x, WeightSlice::F32(&w), Some(&bias), d);
            for (a, b) in fast.iter().zip(&reference) {
                assert!(
                    (a - b).abs() <= k as f32 * 1.2e-7 * b.abs().max(1.0),
                    "{kernel:?} ({rows},{k},{n}): {a} vs {b}"
                );
            }
        }
    }
}

#[test]
fn every_int8_decode_kernel_matches_its_reference_and_stays_near_the_exact_product() {
    use docqa_engine::backend::cpu::matmul::int8::{self, Int8Kernel, Q8Matrix, QBLOCK};
    let kernels: Vec<Int8Kernel> = [Int8Kernel::Avx512Vnni, Int8Kernel::Avx2]
        .into_iter()
        .filter(|k| k.available())
        .collect();
    if kernels.is_empty() {
        eprintln!(
            "not run: this CPU has neither AVX2 nor AVX-512 VNNI, so the int8 decode path is never taken"
        );
        return;
    }
    let mut rng = Rng::fresh("int8_matmul");
    for (rows, k, n) in [(1, 576, 193), (4, 1536, 64), (3, 64, 5)] {
        let (x, w) = (rng.vec(rows * k, 2.0), rng.vec(n * k, 0.5));
        let q = Q8Matrix::quantize(&w, k).expect("k is a multiple of 64");
        let d = MatmulDims { rows, k, n };
        let mut reference = vec![f32::NAN; rows * n];
        int8::matmul_ref(&x, &q, d, &mut reference);
        for &kernel in &kernels {
            let mut fast = vec![f32::NAN; rows * n];
            let (mut xq, mut xs) = (Vec::new(), Vec::new());
            int8::matmul_on(kernel, &x, &q, None, d, &mut fast, &mut xq, &mut xs);
            for t in 0..rows {
                for o in 0..n {
                    let (a, b) = (fast[t * n + o], reference[t * n + o]);
                    // Activations go through int16 (half a step of max|x_block|/32767 each).
                    let xmax: f32 = (0..k / QBLOCK)
                        .map(|b| {
                            x[t * k + b * QBLOCK..][..QBLOCK]
                                .iter()
                                .fold(0f32, |m, v| m.max(v.abs()))
                        })
                        .sum();
                    let wsum: f32 = (0..k).map(|i| w[o * k + i].abs()).sum::<f32>() * 1.01;
                    assert!(
                        (a - b).abs() <= xmax / 32767.0 * wsum + 1e-4,
                        "{kernel:?} ({rows},{k},{n}) [{t},{o}]: {a} vs {b}"
                    );
                    // Against the unquantised product: each weight moves by at most half a step,
                    // max|w_block|/254.
                    let exact: f32 = (0..k).map(|i| x[t * k + i] * w[o * k + i]).sum();
                    let bound: f32 = (0..k)
                        .map(|i| x[t * k + i].abs() * q.scales[o * (k / QBLOCK) + i / QBLOCK] / 2.0)
                        .sum();
                    assert!(
                        (a - exact).abs() <= bound * 1.01 + 1e-4,
                        "{kernel:?} [{t},{o}]: {a} vs exact {exact} (bound {bound})"
                    );
                }
            }
        }
    }
}

#[test]
fn the_int8_kernel_chosen_is_the_fastest_the_cpu_lists() {
    use docqa_engine::backend::cpu::matmul::int8::Int8Kernel;
    let flags = cpu_flags();
    if flags.is_empty() {
        eprintln!("not run: /proc/cpuinfo has no flags line");
        return;
    }
    let has = |names: &[&str]| names.iter().all(|n| flags.iter().any(|f| f == n));
    let expected = if has(&["avx512f", "avx512bw", "avx512_vnni"]) {
        Some(Int8Kernel::Avx512Vnni)
    } else if has(&["avx2", "fma"]) {
        Some(Int8Kernel::Avx2)
    } else {
        None
    };
    assert_eq!(Int8Kernel::best(), expected, "flags: {flags:?}");
}

/// The CPU's feature flags as Linux lists them in `/proc/cpuinfo` (empty where it cannot be read).
fn cpu_flags() -> Vec<String> {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    info.lines()
        .find(|l| l.starts_with("flags"))
        .and_then(|l| l.split(':').nth(1))
        .map(|f| f.split_whitespace().map(str::to_owned).collect())
        .unwrap_or_default()
}

#[test]
fn the_fastest_matmul_kernel_the_cpu_lists_is_the_one_chosen() {
    // Checked against the kernel's own flags in /proc/cpuinfo, so a detection bug that silently falls
    // back to a slower kernel fails here.
    let flags = cpu_flags();
    if flags.is_empty() {
        eprintln!("not run: /proc/cpuinfo has no flags line");
        return;
    }
    let has = |names: &[&str]| names.iter().all(|n| flags.iter().any(|f| f == n));
    let expected = if has(&["avx512f", "avx512bw", "avx512_bf16"]) {
        Kernel::Avx512
    } else if has(&["avx512f", "avx512bw", "avx512vl"]) {
        Kernel::Avx512Fma
    } else if has(&["avx2", "fma"]) {
        Kernel::Avx2Fma
    } else {
        Kernel::Portable
    };
    assert_eq!(
        Kernel::best(WeightSlice::Bf16(&[])),
        expected,
        "flags: {flags:?}"
    );
    assert!(
        expected != Kernel::Portable || std::env::var_os("DOCQA_ALLOW_PORTABLE").is_some(),
        "no SIMD matmul kernel for this CPU: the engine would be slow (set DOCQA_ALLOW_PORTABLE to accept it)"
    );
}

#[test]
fn rope_rotates_half_split_pairs_by_position_times_frequency() {
    let mut rng = Rng::fresh("rope");
    let b = CpuBackend::new();
    let (rows, heads, hd) = (5, 3, 16);
    let freqs = RopeFreqs {
        inv_freq: (0..hd / 2)
            .map(|i| 1.0 / 100f32.powf(2.0 * i as f32 / hd as f32))
            .collect(),
        mscale: 1.3,
    };
    let positions: Vec<u32> = vec![0, 1, 7, 300, 4095];
    let mut table = vec![f32::NAN; rows * hd];
    b.rope_table(&positions, &freqs, rows, &mut table)
        .expect("table");
    let x = rng.vec(rows * heads * hd, 1.0);
    let mut y = x.clone();
    b.rope(&mut y, &table, rows, heads, hd).expect("rope");
    for r in 0..rows {
        for h in 0..heads {
            for i in 0..hd / 2 {
                let a = positions[r] as f64 * freqs.inv_freq[i] as f64;
                let (x1, x2) = (
                    x[(r * heads + h) * hd + i] as f64,
                    x[(r * heads + h) * hd + i + hd / 2] as f64,
                );
                let m = freqs.mscale as f64;
                let want = [
                    m * (x1 * a.cos() - x2 * a.sin()),
                    m * (x2 * a.cos() + x1 * a.sin()),
                ];
                let got = [
                    y[(r * heads + h) * hd + i],
                    y[(r * heads + h) * hd + i + hd / 2],
                ];
                for (g, w) in got.iter().zip(want) {
                    assert!(
                        (*g as f64 - w).abs() < 1e-5,
                        "row {r} head {h} dim {i}: {g} vs {w}"
                    );
                }
            }
        }
    }
}

/// A borrowed f32 vector as a tensor (the bytes are leaked: test-only, a few hundred bytes).
fn f32_tensor(name: &'static str, v: &[f32]) -> TensorRef<'static> {
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    let shape: &'static [usize] = Box::leak(vec![v.len()].into_boxed_slice());
    TensorRef {
        name,
        dtype: WeightDtype::F32,
        shape,
        bytes: Box::leak(bytes.into_boxed_slice()),
    }
}

#[test]
fn norms_and_activations_match_their_formulas() {
    let mut rng = Rng::fresh("norms");
    let b = CpuBackend::new();
    let (rows, d) = (19, 48);
    let x = rng.vec(rows * d, 3.0);
    let (wv, bv) = (rng.vec(d, 1.0), rng.vec(d, 1.0));
    let w = b.upload_vector(&f32_tensor("w", &wv)).expect("upload");
    let bias = b.upload_vector(&f32_tensor("b", &bv)).expect("upload");
    let (mut rms, mut ln) = (vec![f32::NAN; rows * d], vec![f32::NAN; rows * d]);
    b.rms_norm(&x, &w, 1e-5, rows, &mut rms).expect("rms");
    b.layer_norm(&x, &w, &bias, 1e-12, rows, &mut ln)
        .expect("ln");
    for r in 0..rows {
        let xr: Vec<f64> = x[r * d..(r + 1) * d].iter().map(|v| *v as f64).collect();
        let ms = xr.iter().map(|v| v * v).sum::<f64>() / d as f64;
        let mean = xr.iter().sum::<f64>() / d as f64;
        let var = xr.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / d as f64;
        for i in 0..d {
            let want_rms = xr[i] / (ms + 1e-5).sqrt() * wv[i] as f64;
            let want_ln = (xr[i] - mean) / (var + 1e-12).sqrt() * wv[i] as f64 + bv[i] as f64;
            assert!((rms[r * d + i] as f64 - want_rms).abs() < 1e-5);
            assert!((ln[r * d + i] as f64 - want_ln).abs() < 1e-5);
        }
    }
    let (g, u) = (rng.vec(100, 6.0), rng.vec(100, 2.0));
    let mut s = vec![f32::NAN; 100];
    b.silu_mul(&g, &u, 100, &mut s).expect("silu");
    let mut ge = g.clone();
    b.gelu(&mut ge, 100).expect("gelu");
    for i in 0..100 {
        let gi = g[i] as f64;
        assert!((s[i] as f64 - gi / (1.0 + (-gi).exp()) * u[i] as f64).abs() < 1e-5);
        // GELU(x) = x·Φ(x); Φ from the complementary error function identity Φ(x) = 1 - Φ(-x).
        let phi = 0.5 * (1.0 + erf_ref(gi / 2f64.sqrt()));
        assert!(
            (ge[i] as f64 - gi * phi).abs() < 1e-5,
            "gelu({gi}) = {}",
            ge[i]
        );
    }
}

/// erf by numerical integration of 2/√π·exp(-t²) (Simpson, 2000 steps) — independent of the engine's.
fn erf_ref(x: f64) -> f64 {
    let n = 2000;
    let h = x / n as f64;
    let f = |t: f64| (-t * t).exp();
    let s: f64 = (0..=n)
        .map(|i| {
            f(i as f64 * h)
                * if i == 0 || i == n {
                    1.0
                } else if i % 2 == 1 {
                    4.0
                } else {
                    2.0
                }
        })
        .sum();
    s * h / 3.0 * std::f64::consts::FRAC_2_SQRT_PI
}
