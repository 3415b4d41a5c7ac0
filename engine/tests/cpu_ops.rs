//! CPU backend op by op: the SIMD matmuls against the portable reference, paged attention against a
//! dense softmax reference in f64, and the row-wise ops against their formulas. Inputs are fresh random
//! values each run (the seed is printed).

mod common;

use common::Rng;
use docqa_engine::backend::cpu::matmul::{self, MatmulDims, WeightSlice};
use docqa_engine::backend::cpu::{CpuBackend, CpuKv, KvStore};
use docqa_engine::backend::{AttnShape, Backend, KvDtype, KvShape, PagedAttnMeta};
use docqa_engine::config::RopeFreqs;

fn bf16(v: f32) -> f32 {
    half::bf16::from_f32(v).to_f32()
}

/// Shapes with every kind of tail: rows not a multiple of 4, k not a multiple of 32, n not of 4.
const SHAPES: &[(usize, usize, usize)] = &[
    (1, 576, 192),
    (3, 40, 7),
    (5, 1536, 64),
    (67, 576, 193),
    (130, 96, 17),
];

#[test]
fn bf16_matmul_simd_matches_reference_within_activation_rounding() {
    let mut rng = Rng::fresh("bf16_matmul");
    for &(rows, k, n) in SHAPES {
        let x = rng.vec(rows * k, 2.0);
        let w: Vec<u16> = rng
            .vec(n * k, 0.5)
            .iter()
            .map(|v| half::bf16::from_f32(*v).to_bits())
            .collect();
        let bias = rng.vec(n, 1.0);
        let d = MatmulDims { rows, k, n };
        let (mut fast, mut reference) = (vec![f32::NAN; rows * n], vec![f32::NAN; rows * n]);
        matmul::matmul(
            &x,
            WeightSlice::Bf16(&w),
            Some(&bias),
            d,
            &mut fast,
            &mut Vec::new(),
        );
        matmul::matmul_ref(&x, WeightSlice::Bf16(&w), Some(&bias), d, &mut reference);
        for t in 0..rows {
            for o in 0..n {
                // The SIMD path rounds activations to bf16 (relative error ≤ 2⁻⁹ each); bound 2⁻⁸·Σ|x·w|.
                let mag: f32 = (0..k)
                    .map(|i| (x[t * k + i] * f32::from_bits((w[o * k + i] as u32) << 16)).abs())
                    .sum();
                let (a, b) = (fast[t * n + o], reference[t * n + o]);
                assert!(
                    (a - b).abs() <= mag / 256.0 + 1e-5,
                    "({rows},{k},{n}) [{t},{o}]: {a} vs {b}"
                );
            }
        }
    }
}

#[test]
fn bf16_matmul_simd_is_exact_up_to_summation_order_on_bf16_activations() {
    let mut rng = Rng::fresh("bf16_matmul_exact");
    for &(rows, k, n) in SHAPES {
        let x: Vec<f32> = rng.vec(rows * k, 2.0).into_iter().map(bf16).collect();
        let w: Vec<u16> = rng
            .vec(n * k, 0.5)
            .iter()
            .map(|v| half::bf16::from_f32(*v).to_bits())
            .collect();
        let d = MatmulDims { rows, k, n };
        let (mut fast, mut reference) = (vec![f32::NAN; rows * n], vec![f32::NAN; rows * n]);
        matmul::matmul(
            &x,
            WeightSlice::Bf16(&w),
            None,
            d,
            &mut fast,
            &mut Vec::new(),
        );
        matmul::matmul_ref(&x, WeightSlice::Bf16(&w), None, d, &mut reference);
        // Products of bf16 values are exact in f32; only the order of k f32 additions differs: k·2⁻²³ relative.
        for (a, b) in fast.iter().zip(&reference) {
            assert!(
                (a - b).abs() <= k as f32 * 1.2e-7 * b.abs().max(1.0),
                "({rows},{k},{n}): {a} vs {b}"
            );
        }
    }
}

#[test]
fn f32_matmul_simd_matches_reference() {
    let mut rng = Rng::fresh("f32_matmul");
    for &(rows, k, n) in SHAPES {
        let (x, w, bias) = (rng.vec(rows * k, 2.0), rng.vec(n * k, 0.5), rng.vec(n, 1.0));
        let d = MatmulDims { rows, k, n };
        let (mut fast, mut reference) = (vec![f32::NAN; rows * n], vec![f32::NAN; rows * n]);
        matmul::matmul(
            &x,
            WeightSlice::F32(&w),
            Some(&bias),
            d,
            &mut fast,
            &mut Vec::new(),
        );
        matmul::matmul_ref(&x, WeightSlice::F32(&w), Some(&bias), d, &mut reference);
        for (a, b) in fast.iter().zip(&reference) {
            assert!(
                (a - b).abs() <= k as f32 * 1.2e-7 * b.abs().max(1.0),
                "({rows},{k},{n}): {a} vs {b}"
            );
        }
    }
}

#[test]
fn simd_kernels_are_available_on_the_reference_machine() {
    // The development and CI machines have AVX-512 BF16; a silent fallback would hide a regression.
    if std::env::var_os("DOCQA_ALLOW_PORTABLE").is_none() {
        assert!(
            matmul::simd_available(WeightSlice::Bf16(&[])),
            "AVX-512 BF16 not detected (set DOCQA_ALLOW_PORTABLE)"
        );
    }
}

/// A random varlen batch for attention: per sequence (new tokens, context length).
struct AttnCase {
    seqs: Vec<(usize, usize)>,
    block_size: usize,
    shape: AttnShape,
}

/// Dense causal attention in f64 over explicit per-sequence K/V rows.
fn dense_reference(q: &[f32], ks: &[Vec<f32>], vs: &[Vec<f32>], c: &AttnCase) -> Vec<f32> {
    let AttnShape {
        num_heads: h,
        num_kv_heads: kvh,
        head_dim: hd,
        scale,
    } = c.shape;
    let mut out = Vec::new();
    let mut row = 0;
    for (s, &(q_len, ctx)) in c.seqs.iter().enumerate() {
        for i in 0..q_len {
            let visible = ctx - q_len + i + 1;
            for head in 0..h {
                let g = head / (h / kvh);
                let qv = &q[(row * h + head) * hd..][..hd];
                let scores: Vec<f64> = (0..visible)
                    .map(|j| {
                        (0..hd)
                            .map(|d| qv[d] as f64 * ks[s][(j * kvh + g) * hd + d] as f64)
                            .sum::<f64>()
                            * scale as f64
                    })
                    .collect();
                let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = scores.iter().map(|x| (x - m).exp()).collect();
                let z: f64 = e.iter().sum();
                for d in 0..hd {
                    out.push(
                        (0..visible)
                            .map(|j| e[j] * vs[s][(j * kvh + g) * hd + d] as f64)
                            .sum::<f64>() as f32
                            / z as f32,
                    );
                }
            }
            row += 1;
        }
    }
    out
}

fn run_paged(c: &AttnCase, dtype: KvDtype, rng: &mut Rng) -> (Vec<f32>, Vec<f32>) {
    let b = CpuBackend::new();
    let AttnShape {
        num_heads: h,
        num_kv_heads: kvh,
        head_dim: hd,
        ..
    } = c.shape;
    let bs = c.block_size;
    let max_blocks = c.seqs.iter().map(|s| s.1.div_ceil(bs)).max().unwrap_or(1);
    let num_blocks = c.seqs.len() * max_blocks + 3;
    // Blocks handed out in a shuffled order so the table really is indirect.
    let mut free: Vec<u32> = (0..num_blocks as u32).collect();
    for i in (1..free.len()).rev() {
        free.swap(i, rng.below(i + 1));
    }
    let shape = KvShape {
        num_blocks,
        block_size: bs,
        num_kv_heads: kvh,
        head_dim: hd,
        dtype,
    };
    let (mut kc, mut vc) = (CpuKv::zeros(shape), CpuKv::zeros(shape));
    let (mut qsl, mut seq_lens, mut table, mut ks, mut vs) =
        (vec![0u32], vec![], vec![], vec![], vec![]);
    let round = |v: Vec<f32>| {
        if dtype == KvDtype::Bf16 {
            v.into_iter().map(bf16).collect()
        } else {
            v
        }
    };
    for &(q_len, ctx) in &c.seqs {
        let blocks: Vec<u32> = (0..max_blocks).map(|_| free.pop().unwrap_or(0)).collect();
        let (k, v) = (
            round(rng.vec(ctx * kvh * hd, 1.0)),
            round(rng.vec(ctx * kvh * hd, 1.0)),
        );
        let slots: Vec<u32> = (0..ctx)
            .map(|p| blocks[p / bs] * bs as u32 + (p % bs) as u32)
            .collect();
        kc.write_rows(&k, &slots);
        vc.write_rows(&v, &slots);
        ks.push(k);
        vs.push(v);
        qsl.push(qsl[qsl.len() - 1] + q_len as u32);
        seq_lens.push(ctx as u32);
        table.extend(blocks);
    }
    let n = qsl[qsl.len() - 1] as usize;
    let q = rng.vec(n * h * hd, 1.0);
    let meta = PagedAttnMeta::<CpuBackend> {
        query_start_loc: &qsl,
        seq_lens: &seq_lens,
        block_table: &table,
        max_blocks_per_seq: max_blocks,
        num_seqs: c.seqs.len(),
        num_tokens: n,
        max_seq_len: c.seqs.iter().map(|s| s.1).max().unwrap_or(0),
    };
    let mut out = vec![f32::NAN; n * h * hd];
    b.paged_attention(&q, &kc, &vc, &meta, c.shape, &mut out)
        .expect("attention");
    (out, dense_reference(&q, &ks, &vs, c))
}

/// Head widths: multiples of 16 take the blocked AVX-512 kernel, 40 the portable path.
fn head_dims(rng: &mut Rng) -> [usize; 3] {
    [64, [32, 80, 128][rng.below(3)], 40]
}

fn attention_case(hd: usize) -> AttnCase {
    // Prefill from empty, chunked prefill onto a context, decode steps; lengths cross block boundaries.
    let seqs = vec![(37, 37), (1, 70), (5, 133), (1, 1), (16, 48)];
    AttnCase {
        seqs,
        block_size: 16,
        shape: AttnShape {
            num_heads: 6,
            num_kv_heads: 2,
            head_dim: hd,
            scale: 1.0 / (hd as f32).sqrt(),
        },
    }
}

#[test]
fn paged_attention_matches_dense_causal_reference() {
    let mut rng = Rng::fresh("paged_attention_f32");
    for hd in head_dims(&mut rng) {
        let (out, reference) = run_paged(&attention_case(hd), KvDtype::F32, &mut rng);
        // f32 accumulation over ≤ 133 keys of O(1) values against an f64 reference.
        for (i, (a, b)) in out.iter().zip(&reference).enumerate() {
            assert!(
                (a - b).abs() < 2e-5,
                "head_dim {hd} element {i}: {a} vs {b}"
            );
        }
    }
}

#[test]
fn paged_attention_over_bf16_kv_matches_reference_on_rounded_values() {
    let mut rng = Rng::fresh("paged_attention_bf16");
    for hd in head_dims(&mut rng) {
        let (out, reference) = run_paged(&attention_case(hd), KvDtype::Bf16, &mut rng);
        // The pool stores exactly the bf16-rounded values the reference uses; only f32 accumulation differs.
        for (i, (a, b)) in out.iter().zip(&reference).enumerate() {
            assert!(
                (a - b).abs() < 2e-5,
                "head_dim {hd} element {i}: {a} vs {b}"
            );
        }
    }
    assert!(matches!(
        CpuKv::zeros(KvShape {
            num_blocks: 1,
            block_size: 1,
            num_kv_heads: 1,
            head_dim: 2,
            dtype: KvDtype::Bf16
        })
        .store,
        KvStore::Bf16(_)
    ));
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

#[test]
fn norms_and_activations_match_their_formulas() {
    let mut rng = Rng::fresh("norms");
    let b = CpuBackend::new();
    let (rows, d) = (19, 48);
    let x = rng.vec(rows * d, 3.0);
    let w = docqa_engine::backend::cpu::CpuWeight {
        rows: 1,
        cols: d,
        data: docqa_engine::backend::cpu::CpuWeightData::F32(rng.vec(d, 1.0)),
    };
    let bias = docqa_engine::backend::cpu::CpuWeight {
        rows: 1,
        cols: d,
        data: docqa_engine::backend::cpu::CpuWeightData::F32(rng.vec(d, 1.0)),
    };
    let (wv, bv) = match (&w.data, &bias.data) {
        (
            docqa_engine::backend::cpu::CpuWeightData::F32(a),
            docqa_engine::backend::cpu::CpuWeightData::F32(b),
        ) => (a.clone(), b.clone()),
        _ => unreachable!(),
    };
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
