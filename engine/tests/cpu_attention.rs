//! CPU paged attention against a dense causal softmax reference in f64: a varlen batch mixing prefill,
//! chunked prefill and decode rows, blocks handed out in shuffled order, f32 and bf16 KV pools, head
//! widths that take the blocked kernel (AVX-512 or AVX2, whichever the CPU has) and one (40) that takes
//! the portable path.

use crate::common;

use common::Rng;
use docqa_engine::backend::cpu::{CpuBackend, CpuKv, KvStore};
use docqa_engine::backend::{AttnShape, Backend, KvDtype, KvShape, PagedAttnMeta};

fn bf16(v: f32) -> f32 {
    half::bf16::from_f32(v).to_f32()
}

/// Each head of `v` quantised symmetrically to int8 with its own scale (max |x| / 127), then restored.
fn int8_rounded(v: &[f32], head_dim: usize) -> Vec<f32> {
    v.chunks(head_dim)
        .flat_map(|head| {
            let scale = head.iter().fold(0f32, |m, x| m.max(x.abs())) / 127.0;
            let inv = if scale > 0.0 { 1.0 / scale } else { 0.0 };
            head.iter()
                .map(move |x| (x * inv).round().clamp(-127.0, 127.0) * scale)
        })
        .collect()
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
    let round = |v: Vec<f32>| match dtype {
        KvDtype::Bf16 => v.into_iter().map(bf16).collect(),
        KvDtype::Int8 => int8_rounded(&v, hd),
        KvDtype::F32 => v,
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
        windows: None,
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
    // Prefill from empty, chunked prefill onto a context, decode steps (short ones, and long ones whose
    // keys the CPU kernel splits into parts and merges); lengths cross block boundaries.
    let seqs = vec![
        (37, 37),
        (1, 70),
        (5, 133),
        (1, 1),
        (16, 48),
        (1, 300),
        (1, 129),
    ];
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
        // f32 accumulation over ≤ 300 keys of O(1) values against an f64 reference.
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
fn paged_attention_over_int8_kv_matches_reference_on_quantised_values() {
    let mut rng = Rng::fresh("paged_attention_int8");
    for hd in head_dims(&mut rng) {
        let (out, reference) = run_paged(&attention_case(hd), KvDtype::Int8, &mut rng);
        // The pool holds each (token, head) as int8 times one scale: the reference attends over exactly
        // those values, so only f32 accumulation differs.
        for (i, (a, b)) in out.iter().zip(&reference).enumerate() {
            assert!(
                (a - b).abs() < 2e-5,
                "head_dim {hd} element {i}: {a} vs {b}"
            );
        }
    }
}

#[test]
fn an_int8_pool_takes_about_half_the_memory_of_bf16_per_token() {
    let hd = 64;
    let (int8, bf16, f32) = (
        KvDtype::Int8.bytes_per_head(hd),
        KvDtype::Bf16.bytes_per_head(hd),
        KvDtype::F32.bytes_per_head(hd),
    );
    assert_eq!((int8, bf16, f32), (68, 128, 256));
    let pool = CpuKv::zeros(KvShape {
        num_blocks: 4,
        block_size: 16,
        num_kv_heads: 3,
        head_dim: hd,
        dtype: KvDtype::Int8,
    });
    let KvStore::Int8 { q, scales } = &pool.store else {
        panic!("an int8 pool")
    };
    assert_eq!(q.len() + 4 * scales.len(), 4 * 16 * 3 * int8);
}
