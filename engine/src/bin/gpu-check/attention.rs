//! Parity checks of the attention ops: causal paged attention (decode, prefill, chunked prefill after
//! a cached prefix; GQA; head_dim 64 and 128; f32 and bf16 pools) and bidirectional varlen attention.
//! bf16 pools run the tensor-core kernels (bf16 tolerance), f32 pools the plain ones; sink windows
//! (every other sequence streaming, block-table rows compacted as `Batch::build` does) the plain ones.
//! Keys that grow along the context make the softmax move its references past their slack.

use docqa_engine::Result;
use docqa_engine::backend::{AttnShape, Backend, KvDtype, KvShape, PagedAttnMeta, WindowedAttn};

use crate::inputs::{Pair, Rng};
use crate::ops::{TOL_BF16, TOL_F32};
use crate::report::Report;

/// Tokens per KV block in these checks (the engine's default).
const BLOCK_SIZE: usize = 16;

/// A block size that is not a power of two, for the kernels' general block-table path.
const ODD_BLOCK_SIZE: usize = 24;

/// Checked with both block sizes: prefill chunks and decode, GQA 32/8, head_dim 128.
const ODD_BLOCK_CASE: Case = Case {
    seqs: &[(100, 300), (1, 1), (257, 257)],
    heads: 32,
    kv_heads: 8,
    head_dim: 128,
};

/// A paged attention case: per sequence (new query rows, context length), and the head layout.
struct Case {
    seqs: &'static [(usize, usize)],
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
}

const CASES: &[(&str, Case)] = &[
    (
        "decode",
        Case {
            seqs: &[(1, 1), (1, 17), (1, 300), (1, 1000)],
            heads: 9,
            kv_heads: 3,
            head_dim: 64,
        },
    ),
    (
        "prefill",
        Case {
            seqs: &[(700, 700), (33, 33)],
            heads: 9,
            kv_heads: 3,
            head_dim: 64,
        },
    ),
    (
        "chunk after prefix",
        Case {
            seqs: &[(50, 50), (128, 200), (1, 4097)],
            heads: 32,
            kv_heads: 8,
            head_dim: 128,
        },
    ),
    (
        "prefill",
        Case {
            seqs: &[(1024, 1024)],
            heads: 32,
            kv_heads: 8,
            head_dim: 128,
        },
    ),
    (
        "decode",
        Case {
            seqs: &[(1, 1), (1, 63), (1, 4097), (1, 20000)],
            heads: 32,
            kv_heads: 8,
            head_dim: 128,
        },
    ),
    (
        "decode",
        Case {
            seqs: &[(1, 5000), (1, 65)],
            heads: 9,
            kv_heads: 3,
            head_dim: 128,
        },
    ),
    (
        "decode",
        Case {
            seqs: &[(1, 3000), (1, 2)],
            heads: 32,
            kv_heads: 8,
            head_dim: 64,
        },
    ),
    (
        "prefill odd",
        Case {
            seqs: &[(1, 1), (77, 77), (130, 1000)],
            heads: 9,
            kv_heads: 3,
            head_dim: 128,
        },
    ),
    (
        "prefill odd",
        Case {
            seqs: &[(333, 333), (1, 1), (64, 64), (65, 129)],
            heads: 32,
            kv_heads: 8,
            head_dim: 64,
        },
    ),
];

/// Cases whose keys grow along the context (key j scaled by 1 + 3j/ctx): each row's later tiles hold
/// scores well past its first ones, so the kernels' softmax references move past their slack
/// (`RESCALE_SLACK_LOG2`) and rescale the output, where the uniform cases mostly keep them.
const RISING_KEY_CASES: &[(&str, Case)] = &[
    (
        "prefill, rising keys",
        Case {
            seqs: &[(1024, 1024), (130, 1000)],
            heads: 32,
            kv_heads: 8,
            head_dim: 128,
        },
    ),
    (
        "prefill, rising keys",
        Case {
            seqs: &[(700, 700)],
            heads: 9,
            kv_heads: 3,
            head_dim: 64,
        },
    ),
    (
        "decode, rising keys",
        Case {
            seqs: &[(1, 4097), (1, 300)],
            heads: 32,
            kv_heads: 8,
            head_dim: 128,
        },
    ),
];

/// Sink-window cases: (sinks, window) applied to every other sequence.
const WINDOWED_CASES: &[(&str, Case, (usize, usize))] = &[
    (
        "windowed decode",
        Case {
            seqs: &[(1, 5000), (1, 300), (1, 1030), (1, 40)],
            heads: 9,
            kv_heads: 3,
            head_dim: 64,
        },
        (4, 1020),
    ),
    (
        "windowed decode",
        Case {
            seqs: &[(1, 9000), (1, 2000), (1, 600)],
            heads: 32,
            kv_heads: 8,
            head_dim: 128,
        },
        (16, 2000),
    ),
    (
        "windowed chunks",
        Case {
            seqs: &[(200, 3000), (64, 64), (130, 1500), (1, 700)],
            heads: 32,
            kv_heads: 8,
            head_dim: 128,
        },
        (4, 508),
    ),
    (
        "windowed chunks, some rows streaming",
        Case {
            seqs: &[(400, 600), (300, 300), (128, 2000)],
            heads: 9,
            kv_heads: 3,
            head_dim: 64,
        },
        (4, 250),
    ),
    (
        "windowed chunks, a long window in splits",
        Case {
            seqs: &[(700, 9000), (200, 1800), (300, 5000)],
            heads: 9,
            kv_heads: 3,
            head_dim: 64,
        },
        (4, 4000),
    ),
];

/// Runs every attention check. bf16 and int8 prefill run on the warpgroup-MMA kernel where the device
/// has it, and again on the mma.sync one (rows labelled `…, mma.sync kernel`); bf16 also on the
/// warpgroup-MMA kernel's other form (TMA or cp.async loads, `…, wgmma TMA form`).
pub fn run(p: &Pair, rng: &mut Rng, r: &mut Report) -> Result<()> {
    for (name, case) in CASES {
        for dtype in [KvDtype::F32, KvDtype::Bf16, KvDtype::Int8] {
            paged(p, rng, r, (*name, case, BLOCK_SIZE), dtype, Keys::Plain)?;
        }
    }
    for (name, case) in RISING_KEY_CASES {
        for dtype in [KvDtype::F32, KvDtype::Bf16, KvDtype::Int8] {
            paged(p, rng, r, (*name, case, BLOCK_SIZE), dtype, Keys::Rising)?;
        }
    }
    if p.gpu.hopper_prefill() {
        p.gpu.set_hopper_prefill(false);
        for (name, case) in CASES.iter().filter(|(n, _)| !n.starts_with("decode")) {
            let label = format!("{name}, mma.sync kernel");
            for dtype in [KvDtype::Bf16, KvDtype::Int8] {
                paged(p, rng, r, (&label, case, BLOCK_SIZE), dtype, Keys::Plain)?;
            }
        }
        for (name, case) in RISING_KEY_CASES
            .iter()
            .filter(|(n, _)| !n.starts_with("decode"))
        {
            let label = format!("{name}, mma.sync kernel");
            for dtype in [KvDtype::Bf16, KvDtype::Int8] {
                paged(p, rng, r, (&label, case, BLOCK_SIZE), dtype, Keys::Rising)?;
            }
        }
        p.gpu.set_hopper_prefill(true);
        let tma = p.gpu.hopper_tma();
        p.gpu.set_hopper_tma(!tma);
        for (name, case) in CASES.iter().filter(|(n, _)| !n.starts_with("decode")) {
            let form = if tma { "cp.async" } else { "TMA" };
            let label = format!("{name}, wgmma {form} form");
            paged(
                p,
                rng,
                r,
                (&label, case, BLOCK_SIZE),
                KvDtype::Bf16,
                Keys::Plain,
            )?;
        }
        p.gpu.set_hopper_tma(tma);
    }
    // Under the split policy the windowed prefill kernel splits its window tiles where a launch has
    // few blocks: every chunk case below (decode cases run the decode kernel), but over bf16 pools at
    // head_dim 128, which has no split form. Then the chunk cases once more in one split each.
    let splits = p.gpu.windowed_prefill_splits();
    p.gpu.set_windowed_prefill_splits(None);
    for (name, case, window) in WINDOWED_CASES {
        for dtype in [KvDtype::F32, KvDtype::Bf16, KvDtype::Int8] {
            paged(
                p,
                rng,
                r,
                (*name, case, BLOCK_SIZE),
                dtype,
                Keys::Windowed(*window),
            )?;
        }
    }
    p.gpu.set_windowed_prefill_splits(Some(1));
    for (name, case, window) in WINDOWED_CASES.iter().filter(|(n, ..)| n.contains("chunks")) {
        let label = format!("{name}, one split");
        for dtype in [KvDtype::Bf16, KvDtype::Int8] {
            let keys = Keys::Windowed(*window);
            paged(p, rng, r, (&label, case, BLOCK_SIZE), dtype, keys)?;
        }
    }
    p.gpu.set_windowed_prefill_splits(splits);
    let odd = ("prefill, 24-token blocks", &ODD_BLOCK_CASE, ODD_BLOCK_SIZE);
    paged(p, rng, r, odd, KvDtype::Bf16, Keys::Plain)?;
    let twelve = ("prefill, 12-token blocks", &ODD_BLOCK_CASE, 12);
    paged(p, rng, r, twelve, KvDtype::Bf16, Keys::Plain)?;
    let decode = Case {
        seqs: &[(1, 5000), (1, 25)],
        ..ODD_BLOCK_CASE
    };
    paged(
        p,
        rng,
        r,
        ("decode, 24-token blocks", &decode, ODD_BLOCK_SIZE),
        KvDtype::Bf16,
        Keys::Plain,
    )?;
    varlen(p, rng, r, &[7, 128, 33], (12, 12, 32))?;
    varlen(p, rng, r, &[256, 1, 77], (8, 2, 64))?;
    varlen(p, rng, r, &[300], (16, 16, 128))?;
    varlen(p, rng, r, &[700, 1, 129, 64], (12, 4, 64))?;
    varlen(p, rng, r, &[33, 512, 200], (32, 8, 128))?;
    Ok(())
}

/// Block ids for each sequence, from a shuffled pool; the block table, padded with zeros.
pub fn block_table(rng: &mut Rng, ctx: &[usize], bs: usize) -> (Vec<u32>, usize, usize) {
    let per: Vec<usize> = ctx.iter().map(|c| c.div_ceil(bs)).collect();
    let max_blocks = per.iter().copied().max().unwrap_or(1);
    let num_blocks = per.iter().sum::<usize>() + 3;
    let pool = rng.permutation(num_blocks);
    let mut table = vec![0u32; ctx.len() * max_blocks];
    let mut next = 0;
    for (s, &n) in per.iter().enumerate() {
        table[s * max_blocks..][..n].copy_from_slice(&pool[next..next + n]);
        next += n;
    }
    (table, max_blocks, num_blocks)
}

/// The keys of a paged case: drawn alike at every position, the same through a sink window
/// (sinks, window) on every other sequence, or growing along the context (`RISING_KEY_CASES`).
#[derive(Clone, Copy)]
enum Keys {
    Plain,
    Windowed((usize, usize)),
    Rising,
}

/// Key rows for every context position of every sequence, in slot order; with `rising`, position j
/// of a sequence of c keys scaled by 1 + 3j/c.
fn key_rows(rng: &mut Rng, ctx: &[usize], row_len: usize, rising: bool) -> Vec<f32> {
    let mut k = rng.vec(ctx.iter().sum::<usize>() * row_len, 3.0);
    if rising {
        let growth = ctx
            .iter()
            .flat_map(|&c| (0..c).map(move |j| 1.0 + 3.0 * j as f32 / c as f32));
        for (row, g) in k.chunks_mut(row_len).zip(growth) {
            row.iter_mut().for_each(|v| *v *= g);
        }
    }
    k
}

fn paged(
    p: &Pair,
    rng: &mut Rng,
    r: &mut Report,
    (name, case, bs): (&str, &Case, usize),
    dtype: KvDtype,
    keys: Keys,
) -> Result<()> {
    let window = match keys {
        Keys::Windowed(w) => Some(w),
        Keys::Plain | Keys::Rising => None,
    };
    let (h, g, hd) = (case.heads, case.kv_heads, case.head_dim);
    let ctx: Vec<usize> = case.seqs.iter().map(|s| s.1).collect();
    let (mut table, max_blocks, num_blocks) = block_table(rng, &ctx, bs);
    let shape = KvShape {
        num_blocks,
        block_size: bs,
        num_kv_heads: g,
        head_dim: hd,
        dtype,
    };
    // Every context position of every sequence gets a K and V row.
    let slots: Vec<u32> = ctx
        .iter()
        .enumerate()
        .flat_map(|(s, &c)| {
            let row = &table[s * max_blocks..];
            (0..c).map(move |j| row[j / bs] * bs as u32 + (j % bs) as u32)
        })
        .collect();
    let kv_rows = slots.len();
    let (cs, gs) = p.ids(&slots)?;
    let (ck, gk) = p.buf(&key_rows(rng, &ctx, g * hd, matches!(keys, Keys::Rising)))?;
    let (cv, gv) = p.buf(&rng.vec(kv_rows * g * hd, 2.0))?;
    let (mut ckc, mut cvc) = (p.cpu.alloc_kv(shape)?, p.cpu.alloc_kv(shape)?);
    let (mut gkc, mut gvc) = (p.gpu.alloc_kv(shape)?, p.gpu.alloc_kv(shape)?);
    let decode = case.seqs.iter().all(|&(q_len, _)| q_len == 1);
    let tma_prefill = p.gpu.prefill_loads_with_tma(dtype, bs) && matches!(hd, 64 | 128);
    if tma_prefill && !decode && window.is_none() {
        // The TMA form loads whole blocks: the slots past a sequence's keys hold NaN here, which
        // its output must not see.
        let all = num_blocks * bs;
        let nan = vec![f32::NAN; all * g * hd];
        let ((_, gnan), (_, gall)) = (p.buf(&nan)?, p.ids(&(0..all as u32).collect::<Vec<_>>())?);
        p.gpu
            .kv_write(&gnan, &gnan, &gall, all, &mut gkc, &mut gvc)?;
    }
    p.cpu.kv_write(&ck, &cv, &cs, kv_rows, &mut ckc, &mut cvc)?;
    p.gpu.kv_write(&gk, &gv, &gs, kv_rows, &mut gkc, &mut gvc)?;
    let windows = window.map(|w| compact_windowed_rows(&mut table, max_blocks, case.seqs, bs, w));

    let mut qsl = vec![0u32];
    for &(q_len, _) in case.seqs {
        qsl.push(qsl.last().copied().unwrap_or(0) + q_len as u32);
    }
    let tokens = *qsl.last().unwrap_or(&0) as usize;
    let lens: Vec<u32> = ctx.iter().map(|&c| c as u32).collect();
    let ((cq_loc, gq_loc), (cl, gl), (ct, gt)) = (p.ids(&qsl)?, p.ids(&lens)?, p.ids(&table)?);
    // bf16 pools at head_dim 64/128 run the tensor-core kernels, which take Q as bf16 and round P
    // to bf16: Q is drawn bf16-representable there, so the rows measure the kernel, not Q's rounding.
    // The prefill kernel takes block sizes that are multiples of 8; other prefills run plain.
    // int8 pools take the tensor-core kernels too, widened to bf16 as they load (and the plain
    // kernels otherwise, dequantised in f32 as on the CPU); so do sink windows.
    let flash_shape = matches!(hd, 64 | 128) && (decode || bs.is_multiple_of(8));
    let (kernel, tol) = match dtype {
        KvDtype::Bf16 | KvDtype::Int8 if flash_shape => ("flash", TOL_BF16),
        _ => ("plain", TOL_F32),
    };
    let mut q = rng.vec(tokens * h * hd, 3.0);
    if kernel == "flash" {
        q.iter_mut()
            .for_each(|v| *v = half::bf16::from_f32(*v).to_f32());
    }
    let (cq, gq) = p.buf(&q)?;
    let (mut co, mut go) = p.poisoned(tokens * h * hd)?;
    let attn = AttnShape {
        num_heads: h,
        num_kv_heads: g,
        head_dim: hd,
        scale: 1.0 / (hd as f32).sqrt(),
    };
    let max_seq_len = ctx.iter().copied().max().unwrap_or(0);
    let mut q_sinks = rng.vec(tokens * h * hd, 3.0);
    if kernel == "flash" {
        q_sinks
            .iter_mut()
            .for_each(|v| *v = half::bf16::from_f32(*v).to_f32());
    }
    let ((cw, gw), (cqs, gqs)) = (p.ids(windows.as_deref().unwrap_or(&[0]))?, p.buf(&q_sinks)?);
    let cmeta = PagedAttnMeta {
        query_start_loc: &cq_loc,
        seq_lens: &cl,
        block_table: &ct,
        max_blocks_per_seq: max_blocks,
        num_seqs: ctx.len(),
        num_tokens: tokens,
        max_seq_len,
        windows: windows.is_some().then_some(WindowedAttn {
            windows: &cw,
            q_sinks: &cqs,
        }),
    };
    p.cpu
        .paged_attention(&cq, &ckc, &cvc, &cmeta, attn, &mut co)?;
    let gmeta = PagedAttnMeta {
        query_start_loc: &gq_loc,
        seq_lens: &gl,
        block_table: &gt,
        max_blocks_per_seq: max_blocks,
        num_seqs: ctx.len(),
        num_tokens: tokens,
        max_seq_len,
        windows: windows.is_some().then_some(WindowedAttn {
            windows: &gw,
            q_sinks: &gqs,
        }),
    };
    p.gpu
        .paged_attention(&gq, &gkc, &gvc, &gmeta, attn, &mut go)?;
    let wgmma = kernel == "flash"
        && !decode
        && matches!(dtype, KvDtype::Bf16 | KvDtype::Int8)
        && window.is_none()
        && p.gpu.hopper_prefill();
    let kernel = match (wgmma, tma_prefill) {
        (true, true) => "wgmma TMA",
        (true, false) => "wgmma",
        (false, _) => kernel,
    };
    let op = format!("paged_attention {name} ({dtype:?} KV, {kernel})");
    let seqs: Vec<String> = case.seqs.iter().map(|(q, c)| format!("{q}/{c}")).collect();
    let streaming = window.map_or(String::new(), |(s, w)| format!(" sinks {s} window {w}"));
    let desc = format!("q/ctx {} h{h}/{g} d{hd}{streaming}", seqs.join(","));
    r.check(&op, &desc, &p.read(&go, tokens * h * hd)?, &co, tol);
    Ok(())
}

/// Streams every other sequence through `(sinks, window)`: drops the blocks no query of the step sees
/// from its block-table row, as `Batch::build` does; returns the `[num_seqs * 3]` window descriptions.
pub fn compact_windowed_rows(
    table: &mut [u32],
    max_blocks: usize,
    seqs: &[(usize, usize)],
    bs: usize,
    (sinks, window): (usize, usize),
) -> Vec<u32> {
    let mut windows = vec![0u32; 3 * seqs.len()];
    for (s, &(q_len, ctx)) in seqs.iter().enumerate().filter(|(s, _)| s % 2 == 0) {
        let row = &mut table[s * max_blocks..(s + 1) * max_blocks];
        let used = ctx.div_ceil(bs);
        let sink_blocks = sinks.div_ceil(bs);
        let first_key = (ctx - q_len + 1).saturating_sub(window);
        let first_block = (first_key / bs).max(sink_blocks).min(used);
        let offset = first_block.saturating_sub(sink_blocks);
        if offset > 0 {
            row.copy_within(first_block..used, sink_blocks);
        }
        windows[3 * s..3 * s + 3].copy_from_slice(&[sinks as u32, window as u32, offset as u32]);
    }
    windows
}

fn varlen(
    p: &Pair,
    rng: &mut Rng,
    r: &mut Report,
    lens: &[usize],
    (h, g, hd): (usize, usize, usize),
) -> Result<()> {
    let mut qsl = vec![0u32];
    for &l in lens {
        qsl.push(qsl.last().copied().unwrap_or(0) + l as u32);
    }
    let rows = *qsl.last().unwrap_or(&0) as usize;
    let (cqsl, gqsl) = p.ids(&qsl)?;
    // head_dim 64 and 128 take the tensor-core kernel, which rounds Q, K and V to bf16: they are
    // drawn bf16-representable there, so the row measures the kernel.
    let flash = matches!(hd, 64 | 128);
    let mut draw = |n: usize, scale: f32| {
        let mut x = rng.vec(n, scale);
        if flash {
            x.iter_mut()
                .for_each(|v| *v = half::bf16::from_f32(*v).to_f32());
        }
        x
    };
    let (cq, gq) = p.buf(&draw(rows * h * hd, 3.0))?;
    let (ck, gk) = p.buf(&draw(rows * g * hd, 3.0))?;
    let (cv, gv) = p.buf(&draw(rows * g * hd, 2.0))?;
    let (mut co, mut go) = p.poisoned(rows * h * hd)?;
    let attn = AttnShape {
        num_heads: h,
        num_kv_heads: g,
        head_dim: hd,
        scale: 1.0 / (hd as f32).sqrt(),
    };
    p.cpu
        .varlen_attention(&cq, &ck, &cv, &cqsl, (lens.len(), rows), attn, &mut co)?;
    p.gpu
        .varlen_attention(&gq, &gk, &gv, &gqsl, (lens.len(), rows), attn, &mut go)?;
    let lens: Vec<String> = lens.iter().map(usize::to_string).collect();
    let desc = format!("lens {} h{h}/{g} d{hd}", lens.join(","));
    let (name, tol) = match flash {
        true => ("varlen_attention (bidirectional, flash)", TOL_BF16),
        false => ("varlen_attention (bidirectional, plain)", TOL_F32),
    };
    r.check(name, &desc, &p.read(&go, rows * h * hd)?, &co, tol);
    Ok(())
}
