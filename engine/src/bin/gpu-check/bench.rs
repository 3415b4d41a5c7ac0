//! Timings (`--bench`): attention prefill TFLOP/s and decode attention bandwidth of the tensor-core
//! kernels (bf16 pools), and end-to-end prefill and batch-1 decode on a random model of SmolLM2-135M's
//! shapes with f32 KV (plain attention kernel) and bf16 KV (tensor-core kernels).
//!
//! Kernel times are CUDA events around the launch, median of several after a warm-up; inputs are
//! random, never zeros. FLOPs of causal attention: `4 · heads · head_dim · N(N+1)/2`; decode bytes:
//! every context K and V element read once (`seqs · ctx · kv_heads · head_dim · 2 bytes · 2`).

use docqa_engine::Result;
use docqa_engine::backend::cuda::{CudaBackend, CudaKv};
use docqa_engine::backend::{AttnShape, Backend, KvDtype, KvShape, PagedAttnMeta};
use docqa_engine::models::LogitsMode;
use docqa_engine::models::generate::{SingleSequence, argmax};
use docqa_engine::models::llama::Llama;

use crate::inputs::Rng;
use crate::random_models::{SMOLLM2_VOCAB, write_smollm2};

const BLOCK: usize = 16;

/// Median of `reps` timed runs of `f`, after one warm-up run.
fn median_ms(gpu: &CudaBackend, reps: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    f()?;
    let mut t: Vec<f64> = Vec::with_capacity(reps);
    for _ in 0..reps {
        t.push(gpu.time_ms(&mut f)? as f64);
    }
    t.sort_by(f64::total_cmp);
    Ok(t[reps / 2])
}

/// Paged pools holding `seqs` contexts of `ctx` random tokens in shuffled blocks; the block table.
fn filled_pools(
    gpu: &CudaBackend,
    rng: &mut Rng,
    (seqs, ctx): (usize, usize),
    (kvh, hd): (usize, usize),
) -> Result<(CudaKv, CudaKv, Vec<u32>, usize)> {
    let per = ctx.div_ceil(BLOCK);
    let shape = KvShape {
        num_blocks: seqs * per,
        block_size: BLOCK,
        num_kv_heads: kvh,
        head_dim: hd,
        dtype: KvDtype::Bf16,
    };
    let table = rng.permutation(seqs * per);
    let (mut kc, mut vc) = (gpu.alloc_kv(shape)?, gpu.alloc_kv(shape)?);
    // Written in pieces of at most 8K rows to keep the staging buffers small.
    let rows = 8192.min(seqs * ctx);
    let (mut k, mut v) = (gpu.alloc(rows * kvh * hd)?, gpu.alloc(rows * kvh * hd)?);
    gpu.write(&mut k, &rng.vec(rows * kvh * hd, 3.0))?;
    gpu.write(&mut v, &rng.vec(rows * kvh * hd, 2.0))?;
    let mut slots_buf = gpu.alloc_ids(rows)?;
    let all: Vec<u32> = (0..seqs)
        .flat_map(|s| {
            let t = &table[s * per..(s + 1) * per];
            (0..ctx).map(move |j| t[j / BLOCK] * BLOCK as u32 + (j % BLOCK) as u32)
        })
        .collect();
    for piece in all.chunks(rows) {
        gpu.write_ids(&mut slots_buf, piece)?;
        gpu.kv_write(&k, &v, &slots_buf, piece.len(), &mut kc, &mut vc)?;
    }
    Ok((kc, vc, table, per))
}

/// Times one paged attention call: `seqs` sequences of `ctx` tokens with `q_len` new rows each.
fn paged_ms(
    gpu: &CudaBackend,
    rng: &mut Rng,
    (seqs, q_len, ctx): (usize, usize, usize),
    (heads, kvh, hd): (usize, usize, usize),
    reps: usize,
) -> Result<f64> {
    let (kc, vc, table, per) = filled_pools(gpu, rng, (seqs, ctx), (kvh, hd))?;
    let tokens = seqs * q_len;
    let ids = |v: &[u32]| -> Result<_> {
        let mut b = gpu.alloc_ids(v.len())?;
        gpu.write_ids(&mut b, v)?;
        Ok(b)
    };
    let qsl: Vec<u32> = (0..=seqs).map(|s| (s * q_len) as u32).collect();
    let (qsl, lens, table) = (ids(&qsl)?, ids(&vec![ctx as u32; seqs])?, ids(&table)?);
    let mut q = gpu.alloc(tokens * heads * hd)?;
    gpu.write(&mut q, &rng.vec(tokens * heads * hd, 3.0))?;
    let mut out = gpu.alloc(tokens * heads * hd)?;
    let meta = PagedAttnMeta {
        query_start_loc: &qsl,
        seq_lens: &lens,
        block_table: &table,
        max_blocks_per_seq: per,
        num_seqs: seqs,
        num_tokens: tokens,
        max_seq_len: ctx,
        windows: None,
    };
    let shape = AttnShape {
        num_heads: heads,
        num_kv_heads: kvh,
        head_dim: hd,
        scale: 1.0 / (hd as f32).sqrt(),
    };
    median_ms(gpu, reps, || {
        gpu.paged_attention(&q, &kc, &vc, &meta, shape, &mut out)
    })
}

/// Prints the attention and end-to-end timings.
pub fn run(gpu: &CudaBackend, rng: &mut Rng) -> Result<()> {
    println!(
        "bench: paged_attention prefill, one sequence, causal, bf16 KV, 32 heads / 8 KV heads"
    );
    for hd in [64, 128] {
        for n in [1024, 2048, 4096, 8192, 16384] {
            let reps = if n > 4096 { 5 } else { 9 };
            let ms = paged_ms(gpu, rng, (1, n, n), (32, 8, hd), reps)?;
            let flops = 4.0 * 32.0 * hd as f64 * (n as f64) * (n as f64 + 1.0) / 2.0;
            println!(
                "  head_dim {hd:>3}  N {n:>6}  {ms:>9.3} ms  {:>7.2} TFLOP/s",
                flops / ms * 1e-9
            );
        }
    }
    println!(
        "bench: paged_attention decode, 8 sequences, 1 new token each, bf16 KV, head_dim 128, 32/8 heads"
    );
    for ctx in [4096, 8192, 16384, 32768, 65536, 131072] {
        let ms = paged_ms(gpu, rng, (8, 1, ctx), (32, 8, 128), 11)?;
        let bytes = 8.0 * ctx as f64 * 8.0 * 128.0 * 2.0 * 2.0;
        println!(
            "  ctx {ctx:>6}  {ms:>9.3} ms  {:>7.3} TB/s",
            bytes / ms * 1e-9
        );
    }
    end_to_end(rng)
}

/// Prefill of 2,048 and 8,191 tokens, then 128 greedy tokens after a 512-token prompt, batch 1,
/// wall clock; with an f32 KV pool, then a bf16 one.
fn end_to_end(rng: &mut Rng) -> Result<()> {
    let dir = tempfile::tempdir().map_err(|e| docqa_engine::EngineError::io("temp dir", e))?;
    write_smollm2(dir.path(), rng)?;
    let model = Llama::load(CudaBackend::new(0)?, dir.path())?;
    for dtype in [KvDtype::F32, KvDtype::Bf16] {
        println!(
            "bench: end to end, random SmolLM2-135M-shaped model, bf16 weights, {dtype:?} KV, batch 1, wall clock"
        );
        end_to_end_with(&model, rng, dtype)?;
    }
    Ok(())
}

fn prompt(n: usize, rng: &mut Rng) -> Vec<u32> {
    (0..n)
        .map(|_| 3 + rng.below(SMOLLM2_VOCAB - 3) as u32)
        .collect()
}

fn end_to_end_with(model: &Llama<CudaBackend>, rng: &mut Rng, dtype: KvDtype) -> Result<()> {
    for n in [2048, 8192 - 1] {
        let p = prompt(n, rng);
        let mut best = f64::INFINITY;
        for _ in 0..3 {
            let mut seq = SingleSequence::new(model, n + 1, n, dtype)?;
            let t = std::time::Instant::now();
            argmax(seq.feed(&p, LogitsMode::LastPerSequence)?);
            best = best.min(t.elapsed().as_secs_f64());
        }
        println!(
            "  prefill {n:>5} tokens  {:>8.1} ms  {:>9.0} tok/s",
            best * 1e3,
            n as f64 / best
        );
    }
    let p = prompt(512, rng);
    let new = 128;
    let mut seq = SingleSequence::new(model, 512 + new + 1, 512, dtype)?;
    let mut next = argmax(seq.feed(&p, LogitsMode::LastPerSequence)?);
    let t = std::time::Instant::now();
    for _ in 0..new {
        next = argmax(seq.feed(&[next], LogitsMode::LastPerSequence)?);
    }
    let s = t.elapsed().as_secs_f64();
    println!(
        "  decode {new} tokens after 512, batch 1  {:>8.2} ms/token  {:>7.0} tok/s",
        s * 1e3 / new as f64,
        new as f64 / s
    );
    Ok(())
}
