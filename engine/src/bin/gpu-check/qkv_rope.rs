//! Parity of the q/k/v products with RoPE and the KV write fused into one launch (the skinny kernels'
//! `gemv3_rope_kv`, decode rows over bf16 and f32 pools) against the CPU backend's sequence of the
//! three (the trait's default: the products, RoPE on q and k, the write); over an int8 pool the CUDA
//! backend falls back to that sequence too, checked the same way. q, k, v and both pools must match.

use docqa_engine::Result;
use docqa_engine::backend::{Backend, KvDtype, KvShape, RmsNormInto, RopeKvWrite};
use docqa_engine::weights::WeightDtype;

use crate::fused::{RopeRows, rope_rows};
use crate::inputs::{Pair, Rng};
use crate::ops::TOL_BF16;
use crate::report::Report;

/// Shapes checked: (query heads, KV heads, head_dim, hidden), SmolLM2-135M's and Llama-3.1-8B's.
const SHAPES: [(usize, usize, usize, usize); 2] = [(9, 3, 64, 576), (32, 8, 128, 4096)];

/// Runs the checks: decode rows 1 and 3 on every pool dtype at SmolLM2's shape, with q/k/v biases
/// (Qwen2's) and the RMSNorm fused; one row on a bf16 pool at the 8B shape.
pub fn run(p: &Pair, rng: &mut Rng, r: &mut Report) -> Result<()> {
    for dtype in [KvDtype::Bf16, KvDtype::F32, KvDtype::Int8] {
        for rows in [1, 3] {
            check(p, rng, r, (rows, dtype), SHAPES[0])?;
        }
    }
    check(p, rng, r, (1, KvDtype::Bf16), SHAPES[1])
}

fn check(
    p: &Pair,
    rng: &mut Rng,
    r: &mut Report,
    (rows, dtype): (usize, KvDtype),
    (heads, kv_heads, hd, hidden): (usize, usize, usize, usize),
) -> Result<()> {
    let shape = KvShape {
        num_blocks: 32,
        block_size: 16,
        num_kv_heads: kv_heads,
        head_dim: hd,
        dtype,
    };
    let (nq, nkv) = (heads * hd, kv_heads * hd);
    let matrix = |rng: &mut Rng, n: usize| {
        let scale = 2.0 / (hidden as f32).sqrt();
        p.matrix(&rng.vec(n * hidden, scale), [n, hidden], WeightDtype::Bf16)
    };
    let (wq, wk, wv) = (matrix(rng, nq)?, matrix(rng, nkv)?, matrix(rng, nkv)?);
    let (bq, bk, bv) = (
        p.vector(&rng.vec(nq, 0.5))?,
        p.vector(&rng.vec(nkv, 0.5))?,
        p.vector(&rng.vec(nkv, 0.5))?,
    );
    let norm_w: Vec<f32> = rng.vec(hidden, 0.5).iter().map(|v| v + 1.0).collect();
    let norm = p.vector(&norm_w)?;
    let (cx, gx) = p.buf(&rng.vec(rows * hidden, 2.0))?;
    let RopeRows {
        slots: (cs, gs),
        table: (ct, gt),
    } = rope_rows(p, rng, rows, &shape, 500_000.0)?;
    let (mut ch, mut gh) = p.poisoned(rows * hidden)?;
    let (mut c0, mut g0) = p.poisoned(rows * nq)?;
    let (mut c1, mut g1) = p.poisoned(rows * nkv)?;
    let (mut c2, mut g2) = p.poisoned(rows * nkv)?;
    let (mut ckc, mut cvc) = (p.cpu.alloc_kv(shape)?, p.cpu.alloc_kv(shape)?);
    let (mut gkc, mut gvc) = (p.gpu.alloc_kv(shape)?, p.gpu.alloc_kv(shape)?);
    p.cpu.matmul3_rope_kv_write(
        &cx,
        Some(RmsNormInto {
            weight: &norm.0,
            eps: 1e-5,
            out: &mut ch,
        }),
        (
            [&wq.0, &wk.0, &wv.0],
            [Some(&bq.0), Some(&bk.0), Some(&bv.0)],
        ),
        rows,
        [&mut c0, &mut c1, &mut c2],
        RopeKvWrite {
            table: &ct,
            slot_mapping: &cs,
            heads: (heads, kv_heads, hd),
            caches: (&mut ckc, &mut cvc),
        },
    )?;
    p.gpu.matmul3_rope_kv_write(
        &gx,
        Some(RmsNormInto {
            weight: &norm.1,
            eps: 1e-5,
            out: &mut gh,
        }),
        (
            [&wq.1, &wk.1, &wv.1],
            [Some(&bq.1), Some(&bk.1), Some(&bv.1)],
        ),
        rows,
        [&mut g0, &mut g1, &mut g2],
        RopeKvWrite {
            table: &gt,
            slot_mapping: &gs,
            heads: (heads, kv_heads, hd),
            caches: (&mut gkc, &mut gvc),
        },
    )?;
    let mut gpu = p.read(&g0, rows * nq)?;
    gpu.extend(p.read(&g1, rows * nkv)?);
    gpu.extend(p.read(&g2, rows * nkv)?);
    gpu.extend(p.gpu.read_kv(&gkc)?);
    gpu.extend(p.gpu.read_kv(&gvc)?);
    let cpu = [c0, c1, c2, crate::cpu_kv_f32(&ckc), crate::cpu_kv_f32(&cvc)].concat();
    let name = format!("matmul3 + rope_kv_write ({dtype:?} pool)");
    let dims = format!("{rows} rows, {heads}/{kv_heads} heads x {hd}, hidden {hidden}");
    r.check(&name, &dims, &gpu, &cpu, TOL_BF16);
    Ok(())
}
