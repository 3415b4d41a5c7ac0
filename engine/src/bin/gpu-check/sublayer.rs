//! Parity of the attention sublayer (norm, q/k/v products, RoPE and the KV write, paged attention, the
//! output product onto the residual) on the GPU against the CPU backend's op-by-op sequence. On Hopper
//! a prefill over bf16 or int8 pools runs it in bf16 from one product to the next; decode batches and
//! other GPUs run the sequence op by op, checked the same way. The residual's change (not the
//! residual, which would hide it) and both pools must match, and each row checks which path ran.

use docqa_engine::Result;
use docqa_engine::backend::{
    AttnShape, AttnWeights, Backend, KvDtype, KvShape, PagedAttnMeta, RopeKvWrite,
};
use docqa_engine::config::RopeFreqs;
use docqa_engine::weights::WeightDtype;

use crate::attention::block_table;
use crate::inputs::{Pair, Rng};
use crate::ops::TOL_BF16;
use crate::report::Report;

/// Tolerance over int8 pools. The bf16 path rotates k after rounding it to bf16, the CPU before: the
/// difference (about 2^-9 of a value) moves roughly one element in eight across a rounding boundary of
/// its int8 step (amax / 127), which then differs by a whole step. Over a head of values spread up to
/// amax that is about 9e-3 of relative error, measured 7.8–8.2e-3: twice that leaves room for the draw.
const TOL_INT8_POOLS: f64 = 2e-2;

/// Tokens per KV block (the engine's default).
const BLOCK_SIZE: usize = 16;

/// A sublayer case: per sequence (new rows, context length with them), the head layout, whether the
/// projections have biases (Qwen2's) and whether the output product is added onto the residual.
struct Case {
    name: &'static str,
    seqs: &'static [(usize, usize)],
    heads: (usize, usize, usize),
    hidden: usize,
    biases: bool,
    adds_residual: bool,
    dtype: KvDtype,
}

const CASES: &[Case] = &[
    Case {
        name: "decode, written over x",
        seqs: &[(1, 700), (1, 257)],
        heads: (8, 2, 128),
        hidden: 1024,
        biases: false,
        adds_residual: false,
        dtype: KvDtype::Int8,
    },
    Case {
        name: "prefill",
        seqs: &[(300, 300), (45, 45)],
        heads: (9, 3, 64),
        hidden: 576,
        biases: false,
        adds_residual: true,
        dtype: KvDtype::Bf16,
    },
    Case {
        name: "chunks after prefixes, biases",
        seqs: &[(200, 700), (129, 129), (1, 40)],
        heads: (16, 4, 128),
        hidden: 2048,
        biases: true,
        adds_residual: true,
        dtype: KvDtype::Bf16,
    },
    Case {
        name: "prefill, written over x",
        seqs: &[(257, 257)],
        heads: (32, 8, 64),
        hidden: 2048,
        biases: false,
        adds_residual: false,
        dtype: KvDtype::Bf16,
    },
    Case {
        name: "decode",
        seqs: &[(1, 50), (1, 300), (1, 17)],
        heads: (9, 3, 64),
        hidden: 576,
        biases: true,
        adds_residual: true,
        dtype: KvDtype::Bf16,
    },
    Case {
        name: "prefill",
        seqs: &[(300, 300), (45, 90)],
        heads: (9, 3, 64),
        hidden: 576,
        biases: false,
        adds_residual: true,
        dtype: KvDtype::Int8,
    },
    Case {
        name: "chunks after prefixes, biases",
        seqs: &[(200, 700), (129, 129), (1, 40)],
        heads: (16, 4, 128),
        hidden: 2048,
        biases: true,
        adds_residual: true,
        dtype: KvDtype::Int8,
    },
];

/// Runs every case, and on Hopper the prefill cases again op by op (`…, op by op`).
pub fn run(p: &Pair, rng: &mut Rng, r: &mut Report) -> Result<()> {
    for case in CASES {
        check(p, rng, r, case, "")?;
    }
    if p.gpu.hopper_prefill() && p.gpu.bf16_sublayer() {
        p.gpu.set_bf16_sublayer(false);
        for case in CASES.iter().filter(|c| c.seqs[0].0 > 1) {
            check(p, rng, r, case, ", op by op")?;
        }
        p.gpu.set_bf16_sublayer(true);
    }
    Ok(())
}

fn check(p: &Pair, rng: &mut Rng, r: &mut Report, case: &Case, label: &str) -> Result<()> {
    let ((heads, kv_heads, hd), hidden) = (case.heads, case.hidden);
    let (nq, nkv) = (heads * hd, kv_heads * hd);
    let ctx: Vec<usize> = case.seqs.iter().map(|s| s.1).collect();
    let (table, max_blocks, num_blocks) = block_table(rng, &ctx, BLOCK_SIZE);
    let shape = KvShape {
        num_blocks,
        block_size: BLOCK_SIZE,
        num_kv_heads: kv_heads,
        head_dim: hd,
        dtype: case.dtype,
    };
    let slot = |s: usize, j: usize| {
        table[s * max_blocks + j / BLOCK_SIZE] * BLOCK_SIZE as u32 + (j % BLOCK_SIZE) as u32
    };
    // The prefixes' keys and values, written alike to both backends' pools.
    let (mut prefix_slots, mut new_slots, mut positions) = (vec![], vec![], vec![]);
    for (s, &(q_len, c)) in case.seqs.iter().enumerate() {
        prefix_slots.extend((0..c - q_len).map(|j| slot(s, j)));
        new_slots.extend((c - q_len..c).map(|j| slot(s, j)));
        positions.extend((c - q_len..c).map(|j| j as u32));
    }
    let (mut ckc, mut cvc) = (p.cpu.alloc_kv(shape)?, p.cpu.alloc_kv(shape)?);
    let (mut gkc, mut gvc) = (p.gpu.alloc_kv(shape)?, p.gpu.alloc_kv(shape)?);
    if !prefix_slots.is_empty() {
        let n = prefix_slots.len();
        let (cs, gs) = p.ids(&prefix_slots)?;
        let (ck, gk) = p.buf(&rng.vec(n * nkv, 3.0))?;
        let (cv, gv) = p.buf(&rng.vec(n * nkv, 2.0))?;
        p.cpu.kv_write(&ck, &cv, &cs, n, &mut ckc, &mut cvc)?;
        p.gpu.kv_write(&gk, &gv, &gs, n, &mut gkc, &mut gvc)?;
    }
    let rows = new_slots.len();
    let (cs, gs) = p.ids(&new_slots)?;
    let (cp, gp) = p.ids(&positions)?;
    let freqs = RopeFreqs {
        inv_freq: (0..hd / 2)
            .map(|i| 500_000f32.powf(-2.0 * i as f32 / hd as f32))
            .collect(),
        mscale: 1.0,
    };
    let (mut ct, mut gt) = p.poisoned(rows * hd)?;
    p.cpu.rope_table(&cp, &freqs, rows, &mut ct)?;
    p.gpu.rope_table(&gp, &freqs, rows, &mut gt)?;

    let matrix = |rng: &mut Rng, n: usize, k: usize| {
        let scale = 2.0 / (k as f32).sqrt();
        p.matrix(&rng.vec(n * k, scale), [n, k], WeightDtype::Bf16)
    };
    let (wq, wk, wv) = (
        matrix(rng, nq, hidden)?,
        matrix(rng, nkv, hidden)?,
        matrix(rng, nkv, hidden)?,
    );
    let wo = matrix(rng, hidden, nq)?;
    let norm_w: Vec<f32> = rng.vec(hidden, 0.5).iter().map(|v| v + 1.0).collect();
    let norm = p.vector(&norm_w)?;
    let biases = match case.biases {
        true => Some((
            p.vector(&rng.vec(nq, 0.5))?,
            p.vector(&rng.vec(nkv, 0.5))?,
            p.vector(&rng.vec(nkv, 0.5))?,
        )),
        false => None,
    };

    let mut qsl = vec![0u32];
    for &(q_len, _) in case.seqs {
        qsl.push(qsl.last().copied().unwrap_or(0) + q_len as u32);
    }
    let lens: Vec<u32> = ctx.iter().map(|&c| c as u32).collect();
    let ((cq_loc, gq_loc), (cl, gl), (ctab, gtab)) = (p.ids(&qsl)?, p.ids(&lens)?, p.ids(&table)?);
    let attn = AttnShape {
        num_heads: heads,
        num_kv_heads: kv_heads,
        head_dim: hd,
        scale: 1.0 / (hd as f32).sqrt(),
    };
    let max_seq_len = ctx.iter().copied().max().unwrap_or(0);
    let x0 = rng.vec(rows * hidden, 2.0);
    let (mut cx, mut gx) = p.buf(&x0)?;
    let (mut ch, mut gh) = p.poisoned(rows * hidden)?;
    let (mut cq, mut gq) = p.poisoned(rows * nq)?;
    let (mut ck, mut gk) = p.poisoned(rows * nkv)?;
    let (mut cv, mut gv) = p.poisoned(rows * nkv)?;
    let (mut ca, mut ga) = p.poisoned(rows * nq)?;

    let cmeta = PagedAttnMeta {
        query_start_loc: &cq_loc,
        seq_lens: &cl,
        block_table: &ctab,
        max_blocks_per_seq: max_blocks,
        num_seqs: ctx.len(),
        num_tokens: rows,
        max_seq_len,
        windows: None,
    };
    p.cpu.attention_sublayer(
        &mut cx,
        AttnWeights {
            norm: (&norm.0, 1e-5),
            qkv: (
                [&wq.0, &wk.0, &wv.0],
                match &biases {
                    Some((bq, bk, bv)) => [Some(&bq.0), Some(&bk.0), Some(&bv.0)],
                    None => [None; 3],
                },
            ),
            o: &wo.0,
            hidden,
            adds_residual: case.adds_residual,
        },
        RopeKvWrite {
            table: &ct,
            slot_mapping: &cs,
            heads: case.heads,
            caches: (&mut ckc, &mut cvc),
        },
        (&cmeta, attn),
        (&mut ch, [&mut cq, &mut ck, &mut cv], &mut ca),
    )?;
    let gmeta = PagedAttnMeta {
        query_start_loc: &gq_loc,
        seq_lens: &gl,
        block_table: &gtab,
        max_blocks_per_seq: max_blocks,
        num_seqs: ctx.len(),
        num_tokens: rows,
        max_seq_len,
        windows: None,
    };
    let runs_before = p.gpu.bf16_sublayer_runs();
    p.gpu.attention_sublayer(
        &mut gx,
        AttnWeights {
            norm: (&norm.1, 1e-5),
            qkv: (
                [&wq.1, &wk.1, &wv.1],
                match &biases {
                    Some((bq, bk, bv)) => [Some(&bq.1), Some(&bk.1), Some(&bv.1)],
                    None => [None; 3],
                },
            ),
            o: &wo.1,
            hidden,
            adds_residual: case.adds_residual,
        },
        RopeKvWrite {
            table: &gt,
            slot_mapping: &gs,
            heads: case.heads,
            caches: (&mut gkc, &mut gvc),
        },
        (&gmeta, attn),
        (&mut gh, [&mut gq, &mut gk, &mut gv], &mut ga),
    )?;
    let change = |x: &[f32]| -> Vec<f32> {
        match case.adds_residual {
            true => x.iter().zip(&x0).map(|(a, b)| a - b).collect(),
            false => x.to_vec(),
        }
    };
    let mut gpu = change(&p.read(&gx, rows * hidden)?);
    let mut cpu = change(&cx);
    gpu.extend(p.gpu.read_kv(&gkc)?);
    gpu.extend(p.gpu.read_kv(&gvc)?);
    cpu.extend(crate::cpu_kv_f32(&ckc));
    cpu.extend(crate::cpu_kv_f32(&cvc));
    let name = format!(
        "attention sublayer {}{label} ({:?} pool)",
        case.name, case.dtype
    );
    let dims = format!("{rows} rows, {heads}/{kv_heads} heads x {hd}, hidden {hidden}");
    let tol = match case.dtype {
        KvDtype::Int8 => TOL_INT8_POOLS,
        _ => TOL_BF16,
    };
    r.check(&name, &dims, &gpu, &cpu, tol);
    let took = p.gpu.bf16_sublayer_runs() > runs_before;
    let expected = bf16_path_expected(p, case, rows);
    let what = match took {
        true => "the bf16 path ran",
        false => "op by op",
    };
    r.note(&name, &dims, what, took == expected);
    Ok(())
}

/// Whether the GPU should run `case` in bf16 from product to product: on the Hopper kernel with the
/// switch on, for a batch that is not pure decode and has more rows than the skinny products take.
fn bf16_path_expected(p: &Pair, case: &Case, rows: usize) -> bool {
    p.gpu.hopper_prefill()
        && p.gpu.bf16_sublayer()
        && case.seqs.iter().any(|&(q_len, _)| q_len > 1)
        && rows > docqa_engine::backend::cuda::SKINNY_MAX_ROWS
}
