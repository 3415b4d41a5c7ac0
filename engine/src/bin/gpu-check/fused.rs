//! Parity of the fused decode products against the CPU backend's unfused sequence (the trait's
//! default: RMSNorm, separate products, then the add or silu·mul): the residual add, SwiGLU's gate
//! and up, the whole SwiGLU MLP, the q/k/v triple, with and without the norm, each at 1 and 3 rows
//! (the skinny kernels) and 24 rows (cuBLAS), and at inputs wider than the kernels stage at once;
//! RoPE with the KV write; and the arg-max of logit rows.

use docqa_engine::Result;
use docqa_engine::backend::{Backend, KvDtype, KvShape, RmsNormInto};
use docqa_engine::config::RopeFreqs;
use docqa_engine::models::generate::argmax;
use docqa_engine::weights::WeightDtype;

use crate::inputs::{Pair, Rng};
use crate::ops::{TOL_BF16, TOL_F32};
use crate::report::Report;

/// RMSNorm epsilon of the checks (SmolLM2's).
const EPS: f32 = 1e-5;

/// Runs the fused-product and arg-max checks at SmolLM2-135M's shapes (hidden 576, FFN 1536, q 576,
/// k/v 192), at Llama-3.2-1B's widest (hidden 2048, FFN 8192), and at inputs that do and do not fit
/// in the skinny kernels' stage.
pub fn run(p: &Pair, rng: &mut Rng, r: &mut Report) -> Result<()> {
    for rows in [1, 3, 24] {
        residual(p, rng, r, rows, (576, 1536))?;
        for normed in [false, true] {
            swiglu(p, rng, r, (rows, normed), (1536, 576))?;
            gated(p, rng, r, (rows, normed), (1536, 576))?;
            qkv(p, rng, r, (rows, normed), (576, 192, 576))?;
        }
    }
    residual(p, rng, r, 3, (2048, 8192))?;
    swiglu(p, rng, r, (300, true), (8192, 2048))?;
    // Inputs that fit in one stage, with more features than the launch has warps (about two blocks
    // an SM), so each warp streams several, across q/k/v's boundaries too.
    gated(p, rng, r, (4, true), (8192, 2048))?;
    qkv(p, rng, r, (1, true), (2048, 512, 2048))?;
    residual(p, rng, r, 1, (4096, 14336))?;
    // Inputs past one stage of the skinny kernels (16,384 values over the rows), staged a tile at a
    // time, some with a last tile shorter than a lane's step.
    residual(p, rng, r, 1, (1024, 16392))?;
    gated(p, rng, r, (2, true), (512, 8200))?;
    qkv(p, rng, r, (3, true), (512, 128, 4104))?;
    qkv(p, rng, r, (2, false), (256, 64, 8200))?;
    for dtype in [KvDtype::F32, KvDtype::Bf16, KvDtype::Int8] {
        rope_kv_write(p, rng, r, dtype)?;
    }
    argmax_rows(p, rng, r)
}

/// RoPE on q and k, then the KV write, fused, against the three separate ops on the CPU: q, k and both
/// pools must match.
fn rope_kv_write(p: &Pair, rng: &mut Rng, r: &mut Report, dtype: KvDtype) -> Result<()> {
    let shape = KvShape {
        num_blocks: 64,
        block_size: 16,
        num_kv_heads: 3,
        head_dim: 64,
        dtype,
    };
    let (rows, heads, hd) = (5, 9, 64);
    let width = shape.num_kv_heads * hd;
    let RopeRows {
        slots: (cs, gs),
        table: (ct, gt),
    } = rope_rows(p, rng, rows, &shape, 100_000.0)?;
    let (mut cq, mut gq) = p.buf(&rng.vec(rows * heads * hd, 3.0))?;
    let (mut ck, mut gk) = p.buf(&rng.vec(rows * width, 3.0))?;
    let (cv, gv) = p.buf(&rng.vec(rows * width, 3.0))?;
    let (mut ckc, mut cvc) = (p.cpu.alloc_kv(shape)?, p.cpu.alloc_kv(shape)?);
    let (mut gkc, mut gvc) = (p.gpu.alloc_kv(shape)?, p.gpu.alloc_kv(shape)?);
    let dims = (rows, heads, shape.num_kv_heads, hd);
    p.cpu.rope_kv_write(
        (&mut cq, &mut ck, &cv),
        &ct,
        &cs,
        dims,
        (&mut ckc, &mut cvc),
    )?;
    p.gpu.rope_kv_write(
        (&mut gq, &mut gk, &gv),
        &gt,
        &gs,
        dims,
        (&mut gkc, &mut gvc),
    )?;
    let mut gpu = p.read(&gq, rows * heads * hd)?;
    gpu.extend(p.read(&gk, rows * width)?);
    gpu.extend(p.gpu.read_kv(&gkc)?);
    gpu.extend(p.gpu.read_kv(&gvc)?);
    let cpu = [cq, ck, crate::cpu_kv_f32(&ckc), crate::cpu_kv_f32(&cvc)].concat();
    let name = format!("rope_kv_write ({dtype:?} pool)");
    // An int8 element whose rounding flips on an f32 difference in k is one step (the head's
    // largest value / 127) off: within the bf16 tolerance.
    let tol = if dtype == KvDtype::F32 {
        TOL_F32
    } else {
        TOL_BF16
    };
    r.check(&name, "5 rows, 9/3 heads x 64", &gpu, &cpu, tol);
    Ok(())
}

/// Rows' pool slots and RoPE cos/sin table on both backends, for the checks of RoPE with the KV write.
pub struct RopeRows {
    pub slots: (Vec<u32>, cudarc::driver::CudaSlice<u32>),
    pub table: (Vec<f32>, cudarc::driver::CudaSlice<f32>),
}

/// `rows` distinct random slots of `shape`'s pool, and the table of random positions below 8,000 at
/// its head_dim with RoPE base `theta`.
pub fn rope_rows(
    p: &Pair,
    rng: &mut Rng,
    rows: usize,
    shape: &KvShape,
    theta: f32,
) -> Result<RopeRows> {
    let hd = shape.head_dim;
    let slots: Vec<u32> = rng.permutation(shape.num_blocks * shape.block_size)[..rows].to_vec();
    let slots = p.ids(&slots)?;
    let positions: Vec<u32> = (0..rows).map(|_| rng.below(8000) as u32).collect();
    let (cp, gp) = p.ids(&positions)?;
    let freqs = RopeFreqs {
        inv_freq: (0..hd / 2)
            .map(|i| theta.powf(-2.0 * i as f32 / hd as f32))
            .collect(),
        mscale: 1.0,
    };
    let (mut ct, mut gt) = p.poisoned(rows * hd)?;
    p.cpu.rope_table(&cp, &freqs, rows, &mut ct)?;
    p.gpu.rope_table(&gp, &freqs, rows, &mut gt)?;
    Ok(RopeRows {
        slots,
        table: (ct, gt),
    })
}

fn weight(
    p: &Pair,
    rng: &mut Rng,
    [n, k]: [usize; 2],
) -> Result<(
    docqa_engine::backend::cpu::CpuWeight,
    docqa_engine::backend::cuda::CudaWeight,
)> {
    p.matrix(
        &rng.vec(n * k, 2.0 / (k as f32).sqrt()),
        [n, k],
        WeightDtype::Bf16,
    )
}

/// `out += x · Wᵀ` onto a random residual.
fn residual(
    p: &Pair,
    rng: &mut Rng,
    r: &mut Report,
    rows: usize,
    (n, k): (usize, usize),
) -> Result<()> {
    let (cx, gx) = p.buf(&rng.vec(rows * k, 2.0))?;
    let (cw, gw) = weight(p, rng, [n, k])?;
    let (mut co, mut go) = p.buf(&rng.vec(rows * n, 1.0))?;
    let (mut cs, mut gs) = p.poisoned(rows * n)?;
    p.cpu.matmul_add(&cx, &cw, (rows, n), &mut cs, &mut co)?;
    p.gpu.matmul_add(&gx, &gw, (rows, n), &mut gs, &mut go)?;
    let shape = format!("[{rows}, {k}] x [{n}, {k}]T");
    r.check(
        "matmul_add (residual)",
        &shape,
        &p.read(&go, rows * n)?,
        &co,
        TOL_BF16,
    );
    Ok(())
}

/// A random RMSNorm weight of `width` on both backends, and a NaN-poisoned buffer for its output.
type NormPair = (
    (
        docqa_engine::backend::cpu::CpuWeight,
        docqa_engine::backend::cuda::CudaWeight,
    ),
    (Vec<f32>, cudarc::driver::CudaSlice<f32>),
);

fn norm_pair(p: &Pair, rng: &mut Rng, rows: usize, width: usize) -> Result<NormPair> {
    let w: Vec<f32> = rng.vec(width, 0.5).iter().map(|v| v + 1.0).collect();
    Ok((p.vector(&w)?, p.poisoned(rows * width)?))
}

/// `out = silu(x' · Gᵀ) ⊙ (x' · Uᵀ)`, `x'` RMS-normalised when `normed`.
fn gated(
    p: &Pair,
    rng: &mut Rng,
    r: &mut Report,
    (rows, normed): (usize, bool),
    (n, k): (usize, usize),
) -> Result<()> {
    let (cx, gx) = p.buf(&rng.vec(rows * k, 2.0))?;
    let (cg, gg) = weight(p, rng, [n, k])?;
    let (cu, gu) = weight(p, rng, [n, k])?;
    let ((cn, gn), (mut ch, mut gh)) = norm_pair(p, rng, rows, k)?;
    let (mut co, mut go) = p.poisoned(rows * n)?;
    let (mut c1, mut g1) = p.poisoned(rows * n)?;
    let (mut c2, mut g2) = p.poisoned(rows * n)?;
    let cnorm = normed.then_some(RmsNormInto {
        weight: &cn,
        eps: EPS,
        out: &mut ch,
    });
    let gnorm = normed.then_some(RmsNormInto {
        weight: &gn,
        eps: EPS,
        out: &mut gh,
    });
    p.cpu.gated_matmul(
        &cx,
        cnorm,
        (&cg, &cu),
        (rows, n),
        (&mut c1, &mut c2),
        &mut co,
    )?;
    p.gpu.gated_matmul(
        &gx,
        gnorm,
        (&gg, &gu),
        (rows, n),
        (&mut g1, &mut g2),
        &mut go,
    )?;
    let shape = format!("[{rows}, {k}] x 2 x [{n}, {k}]T");
    let name = format!(
        "gated_matmul (SwiGLU{})",
        if normed { ", RMSNorm" } else { "" }
    );
    r.check(&name, &shape, &p.read(&go, rows * n)?, &co, TOL_BF16);
    Ok(())
}

/// A whole SwiGLU MLP onto a random residual: `x += (silu(x' · Gᵀ) ⊙ (x' · Uᵀ)) · Dᵀ`, `x'`
/// RMS-normalised when `normed`.
fn swiglu(
    p: &Pair,
    rng: &mut Rng,
    r: &mut Report,
    (rows, normed): (usize, bool),
    (width, hidden): (usize, usize),
) -> Result<()> {
    let (mut cx, mut gx) = p.buf(&rng.vec(rows * hidden, 2.0))?;
    let (cg, gg) = weight(p, rng, [width, hidden])?;
    let (cu, gu) = weight(p, rng, [width, hidden])?;
    let (cd, gd) = weight(p, rng, [hidden, width])?;
    let ((cn, gn), (mut cs, mut gs)) = norm_pair(p, rng, rows, hidden)?;
    let (mut c1, mut g1) = p.poisoned(rows * width)?;
    let (mut c2, mut g2) = p.poisoned(rows * width)?;
    let (mut c3, mut g3) = p.poisoned(rows * width)?;
    let dims = (rows, width, hidden);
    p.cpu.swiglu_mlp(
        &mut cx,
        normed.then_some((&cn, EPS)),
        (&cg, &cu, &cd),
        dims,
        (&mut c1, &mut c2, &mut c3, &mut cs),
    )?;
    p.gpu.swiglu_mlp(
        &mut gx,
        normed.then_some((&gn, EPS)),
        (&gg, &gu, &gd),
        dims,
        (&mut g1, &mut g2, &mut g3, &mut gs),
    )?;
    let shape = format!("[{rows}, {hidden}] x 2 x [{width}, {hidden}]T x [{hidden}, {width}]T");
    let name = format!(
        "swiglu_mlp (residual{})",
        if normed { ", RMSNorm" } else { "" }
    );
    r.check(&name, &shape, &p.read(&gx, rows * hidden)?, &cx, TOL_BF16);
    Ok(())
}

/// q, k and v of one input, RMS-normalised when `normed`, k and v with a bias (as Qwen2 has).
fn qkv(
    p: &Pair,
    rng: &mut Rng,
    r: &mut Report,
    (rows, normed): (usize, bool),
    (nq, nkv, k): (usize, usize, usize),
) -> Result<()> {
    let (cx, gx) = p.buf(&rng.vec(rows * k, 2.0))?;
    let (cq, gq) = weight(p, rng, [nq, k])?;
    let (ck, gk) = weight(p, rng, [nkv, k])?;
    let (cv, gv) = weight(p, rng, [nkv, k])?;
    let (bk, bv) = (p.vector(&rng.vec(nkv, 0.5))?, p.vector(&rng.vec(nkv, 0.5))?);
    let ((cn, gn), (mut ch, mut gh)) = norm_pair(p, rng, rows, k)?;
    let (mut c0, mut g0) = p.poisoned(rows * nq)?;
    let (mut c1, mut g1) = p.poisoned(rows * nkv)?;
    let (mut c2, mut g2) = p.poisoned(rows * nkv)?;
    let cnorm = normed.then_some(RmsNormInto {
        weight: &cn,
        eps: EPS,
        out: &mut ch,
    });
    let gnorm = normed.then_some(RmsNormInto {
        weight: &gn,
        eps: EPS,
        out: &mut gh,
    });
    p.cpu.matmul3(
        &cx,
        cnorm,
        ([&cq, &ck, &cv], [None, Some(&bk.0), Some(&bv.0)]),
        rows,
        [&mut c0, &mut c1, &mut c2],
    )?;
    p.gpu.matmul3(
        &gx,
        gnorm,
        ([&gq, &gk, &gv], [None, Some(&bk.1), Some(&bv.1)]),
        rows,
        [&mut g0, &mut g1, &mut g2],
    )?;
    let mut gpu = p.read(&g0, rows * nq)?;
    gpu.extend(p.read(&g1, rows * nkv)?);
    gpu.extend(p.read(&g2, rows * nkv)?);
    let cpu: Vec<f32> = [c0, c1, c2].concat();
    let shape = format!("[{rows}, {k}] x [{nq}|{nkv}|{nkv}, {k}]T");
    let name = format!("matmul3 (q, k, v{})", if normed { ", RMSNorm" } else { "" });
    r.check(&name, &shape, &gpu, &cpu, TOL_BF16);
    Ok(())
}

/// Arg-max of 5 rows of 49,152 logits, with a tie planted in one row (the first index must win) and
/// a row of equal values.
fn argmax_rows(p: &Pair, rng: &mut Rng, r: &mut Report) -> Result<()> {
    let (rows, vocab) = (5, 49152);
    let mut logits = rng.vec(rows * vocab, 8.0);
    logits[vocab + 40_000] = 100.0;
    logits[vocab + 7] = 100.0;
    logits[4 * vocab..].fill(-3.0);
    let (_, gl) = p.buf(&logits)?;
    let mut ids = p.gpu.alloc_ids(rows)?;
    p.gpu.write_ids(&mut ids, &[u32::MAX; 5])?;
    p.gpu.argmax_rows(&gl, (rows, vocab), &mut ids)?;
    let mut got = [0u32; 5];
    p.gpu.read_ids(&ids, &mut got)?;
    let want: Vec<u32> = logits.chunks(vocab).map(argmax).collect();
    let same = got.iter().zip(&want).filter(|(g, w)| g == w).count();
    let what = format!("{same}/{rows} rows equal");
    r.note(
        "argmax_rows",
        "5 x 49152, a tie, a flat row",
        &what,
        same == rows,
    );
    Ok(())
}
