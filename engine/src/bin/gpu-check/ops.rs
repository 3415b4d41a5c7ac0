//! Parity checks of the row-wise, element-wise, matmul and KV-write ops at the models' shapes
//! (SmolLM2-135M: hidden 576, FFN 1536, 9 heads × 64; MiniLM: hidden 384, FFN 1536, 12 heads × 32).

use docqa_engine::Result;
use docqa_engine::backend::{Backend, KvDtype, KvShape};
use docqa_engine::config::RopeFreqs;
use docqa_engine::weights::WeightDtype;

use crate::inputs::{Pair, Rng};
use crate::report::Report;

/// Tolerance of ops computed in f32 on both sides.
pub const TOL_F32: f64 = 1e-4;
/// Tolerance of bf16 matmuls.
pub const TOL_BF16: f64 = 1e-2;

/// Runs every op check.
pub fn run(p: &Pair, rng: &mut Rng, r: &mut Report) -> Result<()> {
    embedding(p, rng, r, WeightDtype::Bf16, [49152, 576], 37, 0)?;
    embedding(p, rng, r, WeightDtype::F32, [30522, 384], 19, 0)?;
    // The second half of a vocabulary of 49,152, as rank 1 of two holds it: ids below it give zeros.
    embedding(p, rng, r, WeightDtype::Bf16, [24576, 576], 37, 24576)?;
    gather_rows(p, rng, r)?;
    rms_norm(p, rng, r, 37, 576)?;
    rms_norm(p, rng, r, 1, 2048)?;
    layer_norm(p, rng, r, 19, 384)?;
    for (rows, n, k, dtype, bias) in [
        (1, 1536, 576, WeightDtype::Bf16, false),
        (3, 1536, 576, WeightDtype::Bf16, true),
        (4, 576, 1536, WeightDtype::Bf16, false),
        (37, 576, 1536, WeightDtype::Bf16, false),
        (300, 49152, 576, WeightDtype::Bf16, false),
        (5, 8192, 2048, WeightDtype::Bf16, true),
        (19, 1536, 384, WeightDtype::F32, true),
        (19, 384, 1536, WeightDtype::F32, true),
    ] {
        matmul(p, rng, r, (rows, n, k), dtype, bias)?;
    }
    rope_table(p, rng, r, 37, 64, 100_000.0, 1.0)?;
    rope_table(p, rng, r, 5, 128, 500_000.0, 1.2)?;
    rope(p, rng, r, 37, 9, 64)?;
    rope(p, rng, r, 7, 32, 128)?;
    elementwise(p, rng, r, 37 * 1536)?;
    kv_write(p, rng, r, KvDtype::F32)?;
    kv_write(p, rng, r, KvDtype::Bf16)?;
    kv_write(p, rng, r, KvDtype::Int8)?;
    Ok(())
}

fn embedding(
    p: &Pair,
    rng: &mut Rng,
    r: &mut Report,
    dtype: WeightDtype,
    [vocab, width]: [usize; 2],
    rows: usize,
    first: u32,
) -> Result<()> {
    let (ct, gt) = p.matrix(&rng.vec(vocab * width, 1.0), [vocab, width], dtype)?;
    let ids: Vec<u32> = (0..rows)
        .map(|_| rng.below(vocab + first as usize) as u32)
        .collect();
    let (ci, gi) = p.ids(&ids)?;
    let (mut co, mut go) = p.poisoned(rows * width)?;
    p.cpu.embedding(&ct, &ci, rows, first, &mut co)?;
    p.gpu.embedding(&gt, &gi, rows, first, &mut go)?;
    let name = match first {
        0 => format!("embedding ({dtype:?} table)"),
        _ => format!("embedding ({dtype:?} table, vocabulary part from {first})"),
    };
    let shape = format!("[{vocab}, {width}] ids {rows}");
    r.check(&name, &shape, &p.read(&go, rows * width)?, &co, 0.0);
    Ok(())
}

fn gather_rows(p: &Pair, rng: &mut Rng, r: &mut Report) -> Result<()> {
    let (n, width, rows) = (64, 576, 7);
    let (cx, gx) = p.buf(&rng.vec(n * width, 3.0))?;
    let idx: Vec<u32> = (0..rows).map(|_| rng.below(n) as u32).collect();
    let (ci, gi) = p.ids(&idx)?;
    let (mut co, mut go) = p.poisoned(rows * width)?;
    p.cpu.gather_rows(&cx, &ci, rows, width, &mut co)?;
    p.gpu.gather_rows(&gx, &gi, rows, width, &mut go)?;
    let shape = format!("[{n}, {width}] -> {rows} rows");
    r.check("gather_rows", &shape, &p.read(&go, rows * width)?, &co, 0.0);
    Ok(())
}

fn rms_norm(p: &Pair, rng: &mut Rng, r: &mut Report, rows: usize, width: usize) -> Result<()> {
    let (cx, gx) = p.buf(&rng.vec(rows * width, 4.0))?;
    let w: Vec<f32> = rng.vec(width, 0.2).iter().map(|v| v + 1.0).collect();
    let (cw, gw) = p.vector(&w)?;
    let (mut co, mut go) = p.poisoned(rows * width)?;
    p.cpu.rms_norm(&cx, &cw, 1e-5, rows, &mut co)?;
    p.gpu.rms_norm(&gx, &gw, 1e-5, rows, &mut go)?;
    let shape = format!("[{rows}, {width}]");
    r.check(
        "rms_norm",
        &shape,
        &p.read(&go, rows * width)?,
        &co,
        TOL_F32,
    );
    Ok(())
}

fn layer_norm(p: &Pair, rng: &mut Rng, r: &mut Report, rows: usize, width: usize) -> Result<()> {
    let x: Vec<f32> = rng.vec(rows * width, 4.0).iter().map(|v| v + 0.7).collect();
    let (cx, gx) = p.buf(&x)?;
    let w: Vec<f32> = rng.vec(width, 0.2).iter().map(|v| v + 1.0).collect();
    let (cw, gw) = p.vector(&w)?;
    let (cb, gb) = p.vector(&rng.vec(width, 0.5))?;
    let (mut co, mut go) = p.poisoned(rows * width)?;
    p.cpu.layer_norm(&cx, &cw, &cb, 1e-12, rows, &mut co)?;
    p.gpu.layer_norm(&gx, &gw, &gb, 1e-12, rows, &mut go)?;
    let shape = format!("[{rows}, {width}]");
    r.check(
        "layer_norm",
        &shape,
        &p.read(&go, rows * width)?,
        &co,
        TOL_F32,
    );
    Ok(())
}

fn matmul(
    p: &Pair,
    rng: &mut Rng,
    r: &mut Report,
    (rows, n, k): (usize, usize, usize),
    dtype: WeightDtype,
    bias: bool,
) -> Result<()> {
    let (cx, gx) = p.buf(&rng.vec(rows * k, 2.0))?;
    let scale = 2.0 / (k as f32).sqrt();
    let (cw, gw) = p.matrix(&rng.vec(n * k, scale), [n, k], dtype)?;
    let b = if bias {
        Some(p.vector(&rng.vec(n, 0.5))?)
    } else {
        None
    };
    let (mut co, mut go) = p.poisoned(rows * n)?;
    p.cpu
        .matmul(&cx, &cw, b.as_ref().map(|b| &b.0), rows, &mut co)?;
    p.gpu
        .matmul(&gx, &gw, b.as_ref().map(|b| &b.1), rows, &mut go)?;
    let name = format!("matmul ({dtype:?} W{})", if bias { ", bias" } else { "" });
    let shape = format!("[{rows}, {k}] x [{n}, {k}]T");
    let tol = if dtype == WeightDtype::Bf16 {
        TOL_BF16
    } else {
        TOL_F32
    };
    r.check(&name, &shape, &p.read(&go, rows * n)?, &co, tol);
    Ok(())
}

fn rope_table(
    p: &Pair,
    rng: &mut Rng,
    r: &mut Report,
    rows: usize,
    head_dim: usize,
    theta: f64,
    mscale: f32,
) -> Result<()> {
    let inv_freq = (0..head_dim / 2)
        .map(|i| (1.0 / theta.powf(2.0 * i as f64 / head_dim as f64)) as f32)
        .collect();
    let freqs = RopeFreqs { inv_freq, mscale };
    let pos: Vec<u32> = (0..rows).map(|_| rng.below(131_072) as u32).collect();
    let (cp, gp) = p.ids(&pos)?;
    let (mut co, mut go) = p.poisoned(rows * head_dim)?;
    p.cpu.rope_table(&cp, &freqs, rows, &mut co)?;
    p.gpu.rope_table(&gp, &freqs, rows, &mut go)?;
    let shape = format!("[{rows}, {head_dim}] pos < 131072");
    let name = format!("rope_table (mscale {mscale})");
    r.check(&name, &shape, &p.read(&go, rows * head_dim)?, &co, TOL_F32);
    Ok(())
}

fn rope(
    p: &Pair,
    rng: &mut Rng,
    r: &mut Report,
    rows: usize,
    heads: usize,
    hd: usize,
) -> Result<()> {
    // One table (the CPU's) for both sides, so this checks the rotation alone.
    let freqs = RopeFreqs {
        inv_freq: (0..hd / 2)
            .map(|i| 1.0 / 10_000f32.powf(2.0 * i as f32 / hd as f32))
            .collect(),
        mscale: 1.0,
    };
    let pos: Vec<u32> = (0..rows).map(|_| rng.below(8192) as u32).collect();
    let mut table = vec![0.0; rows * hd];
    p.cpu.rope_table(&pos, &freqs, rows, &mut table)?;
    let (ct, gt) = p.buf(&table)?;
    let (mut cx, mut gx) = p.buf(&rng.vec(rows * heads * hd, 2.0))?;
    p.cpu.rope(&mut cx, &ct, rows, heads, hd)?;
    p.gpu.rope(&mut gx, &gt, rows, heads, hd)?;
    let shape = format!("[{rows}, {heads} x {hd}]");
    r.check(
        "rope",
        &shape,
        &p.read(&gx, rows * heads * hd)?,
        &cx,
        TOL_F32,
    );
    Ok(())
}

fn elementwise(p: &Pair, rng: &mut Rng, r: &mut Report, n: usize) -> Result<()> {
    let shape = format!("[{n}]");
    let (cg, gg) = p.buf(&rng.vec(n, 6.0))?;
    let (cu, gu) = p.buf(&rng.vec(n, 2.0))?;
    let (mut co, mut go) = p.poisoned(n)?;
    p.cpu.silu_mul(&cg, &cu, n, &mut co)?;
    p.gpu.silu_mul(&gg, &gu, n, &mut go)?;
    r.check("silu_mul", &shape, &p.read(&go, n)?, &co, TOL_F32);

    let (mut cx, mut gx) = p.buf(&rng.vec(n, 5.0))?;
    p.cpu.gelu(&mut cx, n)?;
    p.gpu.gelu(&mut gx, n)?;
    r.check("gelu (erf)", &shape, &p.read(&gx, n)?, &cx, TOL_F32);

    let (mut cx, mut gx) = p.buf(&rng.vec(n, 3.0))?;
    let (cy, gy) = p.buf(&rng.vec(n, 3.0))?;
    p.cpu.add(&mut cx, &cy, n)?;
    p.gpu.add(&mut gx, &gy, n)?;
    r.check("add", &shape, &p.read(&gx, n)?, &cx, 0.0);
    Ok(())
}

fn kv_write(p: &Pair, rng: &mut Rng, r: &mut Report, dtype: KvDtype) -> Result<()> {
    let shape = KvShape {
        num_blocks: 64,
        block_size: 16,
        num_kv_heads: 3,
        head_dim: 64,
        dtype,
    };
    let (rows, width) = (37, shape.num_kv_heads * shape.head_dim);
    let slots: Vec<u32> = rng.permutation(shape.num_blocks * shape.block_size)[..rows].to_vec();
    let (cs, gs) = p.ids(&slots)?;
    let (ck, gk) = p.buf(&rng.vec(rows * width, 3.0))?;
    let (cv, gv) = p.buf(&rng.vec(rows * width, 3.0))?;
    let (mut ckc, mut cvc) = (p.cpu.alloc_kv(shape)?, p.cpu.alloc_kv(shape)?);
    let (mut gkc, mut gvc) = (p.gpu.alloc_kv(shape)?, p.gpu.alloc_kv(shape)?);
    p.cpu.kv_write(&ck, &cv, &cs, rows, &mut ckc, &mut cvc)?;
    p.gpu.kv_write(&gk, &gv, &gs, rows, &mut gkc, &mut gvc)?;
    let name = format!("kv_write ({dtype:?} pool)");
    let desc = format!("{rows} rows -> [64, 16, 3, 64]");
    let (gk_host, gv_host) = (p.gpu.read_kv(&gkc)?, p.gpu.read_kv(&gvc)?);
    let (ck_host, cv_host) = (crate::cpu_kv_f32(&ckc), crate::cpu_kv_f32(&cvc));
    r.check(&format!("{name} K"), &desc, &gk_host, &ck_host, 0.0);
    r.check(&format!("{name} V"), &desc, &gv_host, &cv_host, 0.0);
    Ok(())
}
