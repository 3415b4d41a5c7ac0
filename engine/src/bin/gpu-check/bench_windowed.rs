//! Timings of prefill attention through a sink window (`DOCQA_BENCH_PREFILL=windowed`): a 2,048-row
//! step of one sequence after 8K and 32K tokens, every row past its sinks and window, at SmolLM2-135M's
//! and Llama-3.2-1B's head counts (head_dim 64, bf16 KV), with the window tiles in 1, 2, 4 and 8
//! splits (the launch policy's choice printed beside them). TFLOP/s count the keys each row sees: `4 · heads · head_dim` a
//! (row, key) pair.

use docqa_engine::Result;
use docqa_engine::backend::cuda::CudaBackend;
use docqa_engine::backend::{AttnShape, Backend, KvDtype, PagedAttnMeta, WindowedAttn};

use crate::attention::compact_windowed_rows;
use crate::bench::{BLOCK, filled_pools, median_ms};
use crate::inputs::Rng;

const ROWS: usize = 2048;
const SINKS: usize = 4;
const WINDOW: usize = 8188;
/// The splits timed (1: the launch before splits).
const SPLITS: [usize; 4] = [1, 2, 4, 8];

/// Prints the windowed prefill rows.
pub fn run(gpu: &CudaBackend, rng: &mut Rng) -> Result<()> {
    println!(
        "bench: paged_attention prefill through a sink window (sinks {SINKS}, window {WINDOW}), \
         {ROWS} rows of one sequence, bf16 KV, head_dim 64"
    );
    for (model, heads, kv_heads) in [("SmolLM2-135M", 9, 3), ("Llama-3.2-1B", 32, 8)] {
        let policy = windowed_policy(gpu, heads);
        for before in [8192, 32768] {
            let times = step_ms(gpu, rng, (heads, kv_heads), before, &SPLITS)?;
            let flops = 4.0 * (heads * 64) as f64 * visible_pairs(before) as f64;
            let rows: Vec<String> = SPLITS
                .iter()
                .zip(&times)
                .map(|(n, ms)| format!("{n}: {ms:.3} ms {:.1} TFLOP/s", flops / ms * 1e-9))
                .collect();
            println!(
                "  {model:<13} after {before:>6} (policy {policy} splits)  {}",
                rows.join(", ")
            );
        }
    }
    Ok(())
}

/// The splits the split policy gives a step of [`ROWS`] rows at `heads` heads (the mma.sync kernel's
/// query tiles of 128 rows and one partial tile).
fn windowed_policy(gpu: &CudaBackend, heads: usize) -> usize {
    let setting = gpu.windowed_prefill_splits();
    gpu.set_windowed_prefill_splits(None);
    let n = gpu.windowed_prefill_splits_for((ROWS / 128 + 1) * heads);
    gpu.set_windowed_prefill_splits(setting);
    n
}

/// (row, key) pairs a step of [`ROWS`] rows after `before` tokens attends to.
fn visible_pairs(before: usize) -> usize {
    (before..before + ROWS)
        .map(|pos| (pos + 1).min(SINKS + WINDOW))
        .sum()
}

/// The step's attention time in each of `splits` splits.
fn step_ms(
    gpu: &CudaBackend,
    rng: &mut Rng,
    (heads, kv_heads): (usize, usize),
    before: usize,
    splits: &[usize],
) -> Result<Vec<f64>> {
    let hd = 64;
    let ctx = before + ROWS;
    let (kc, vc, mut table, per) = filled_pools(gpu, rng, (1, ctx), (kv_heads, hd), KvDtype::Bf16)?;
    let windows = compact_windowed_rows(&mut table, per, &[(ROWS, ctx)], BLOCK, (SINKS, WINDOW));
    let ids = |v: &[u32]| -> Result<_> {
        let mut b = gpu.alloc_ids(v.len())?;
        gpu.write_ids(&mut b, v)?;
        Ok(b)
    };
    let (qsl, lens, table, windows) = (
        ids(&[0, ROWS as u32])?,
        ids(&[ctx as u32])?,
        ids(&table)?,
        ids(&windows)?,
    );
    let n = ROWS * heads * hd;
    let (mut q, mut q_sinks, mut out) = (gpu.alloc(n)?, gpu.alloc(n)?, gpu.alloc(n)?);
    gpu.write(&mut q, &rng.vec(n, 3.0))?;
    gpu.write(&mut q_sinks, &rng.vec(n, 3.0))?;
    let meta = PagedAttnMeta {
        query_start_loc: &qsl,
        seq_lens: &lens,
        block_table: &table,
        max_blocks_per_seq: per,
        num_seqs: 1,
        num_tokens: ROWS,
        max_seq_len: ctx,
        windows: Some(WindowedAttn {
            windows: &windows,
            q_sinks: &q_sinks,
        }),
    };
    let shape = AttnShape {
        num_heads: heads,
        num_kv_heads: kv_heads,
        head_dim: hd,
        scale: 1.0 / (hd as f32).sqrt(),
    };
    let setting = gpu.windowed_prefill_splits();
    let mut times = Vec::with_capacity(splits.len());
    for &n in splits {
        gpu.set_windowed_prefill_splits(Some(n));
        let ms = median_ms(gpu, 9, || {
            gpu.paged_attention(&q, &kc, &vc, &meta, shape, &mut out)
        });
        gpu.set_windowed_prefill_splits(setting);
        times.push(ms?);
    }
    Ok(times)
}
