//! Sink-window attention (StreamingLLM) on the CPU backend against a direct reference: for every query, the
//! reference keeps the sinks and the last `window` tokens, gives them positions 0, 1, 2… within that cache
//! (the query last), rotates raw keys and query with those positions in f64, and attends densely.
//!
//! The engine path is the one a forward pass takes: the KV cache manager hands out and frees blocks as the
//! window slides, `Batch::build` describes the step, keys are rotated at their original positions and
//! written once, and each query scores the sinks with a copy of itself rotated to its position within the
//! cache. A dense sequence shares every batch, so both kinds of rows are checked side by side.

use crate::common;

use common::Rng;
use docqa_engine::backend::cpu::{CpuBackend, CpuKv};
use docqa_engine::backend::{AttnShape, Backend, KvDtype, KvShape, PagedAttnMeta, WindowedAttn};
use docqa_engine::config::RopeFreqs;
use docqa_engine::kv::manager::{CacheScope, KvCacheConfig, KvCacheManager, SinkWindow};
use docqa_engine::models::{Batch, FREED_BLOCK, LogitsMode, SeqInput};

const BLOCK: usize = 4;
/// Head layouts: head_dim 64 takes the blocked AVX-512 kernel where the CPU has it, 40 the portable path.
fn shape(head_dim: usize) -> AttnShape {
    AttnShape {
        num_heads: 4,
        num_kv_heads: 2,
        head_dim,
        scale: 1.0 / (head_dim as f32).sqrt(),
    }
}
const WINDOW: SinkWindow = SinkWindow {
    num_sink_tokens: 4,
    window: 12,
};
/// Largest difference allowed between the engine (f32) and the f64 reference.
const TOLERANCE: f32 = 2e-5;

fn inv_freq(hd: usize) -> Vec<f32> {
    (0..hd / 2)
        .map(|i| 10_000f64.powf(-((2 * i) as f64) / hd as f64) as f32)
        .collect()
}

/// HF "rotate_half" RoPE of one head at `pos`, in f64.
fn rotate(x: &[f32], pos: usize, freqs: &[f32]) -> Vec<f64> {
    let half = x.len() / 2;
    let mut out = vec![0.0; x.len()];
    for i in 0..half {
        let (s, c) = (pos as f64 * freqs[i] as f64).sin_cos();
        let (a, b) = (x[i] as f64, x[i + half] as f64);
        out[i] = a * c - b * s;
        out[i + half] = b * c + a * s;
    }
    out
}

/// Raw (unrotated) per-token rows of one sequence: `[tokens, kv_heads * hd]` keys and values, and
/// `[tokens, heads * hd]` queries.
struct Raw {
    k: Vec<f32>,
    v: Vec<f32>,
    q: Vec<f32>,
    shape: AttnShape,
}

impl Raw {
    fn new(tokens: usize, shape: AttnShape, rng: &mut Rng) -> Self {
        let (h, kvh, hd) = (shape.num_heads, shape.num_kv_heads, shape.head_dim);
        Raw {
            k: rng.vec(tokens * kvh * hd, 1.0),
            v: rng.vec(tokens * kvh * hd, 1.0),
            q: rng.vec(tokens * h * hd, 1.0),
            shape,
        }
    }
}

/// The reference output of query `p` (all heads) over the keys `window` keeps, at in-cache positions.
fn reference_row(raw: &Raw, p: usize, window: Option<SinkWindow>) -> Vec<f32> {
    let s = raw.shape;
    let (h, kvh, hd) = (s.num_heads, s.num_kv_heads, s.head_dim);
    let kept: Vec<usize> = match window {
        Some(w) => w.visible_tokens(p + 1).into_iter().flatten().collect(),
        None => (0..=p).collect(),
    };
    let freqs = inv_freq(hd);
    let q_pos = kept.len() - 1;
    let mut out = Vec::with_capacity(h * hd);
    for head in 0..h {
        let g = head / (h / kvh);
        let q = rotate(&raw.q[(p * h + head) * hd..][..hd], q_pos, &freqs);
        let scores: Vec<f64> = kept
            .iter()
            .enumerate()
            .map(|(slot, &j)| {
                let k = rotate(&raw.k[(j * kvh + g) * hd..][..hd], slot, &freqs);
                q.iter().zip(&k).map(|(a, b)| a * b).sum::<f64>() * s.scale as f64
            })
            .collect();
        let m = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
        let z: f64 = e.iter().sum();
        for d in 0..hd {
            let acc: f64 = kept
                .iter()
                .zip(&e)
                .map(|(&j, w)| w * raw.v[(j * kvh + g) * hd + d] as f64)
                .sum();
            out.push((acc / z) as f32);
        }
    }
    out
}

/// One sequence as the test drives it.
struct Seq {
    id: u64,
    tokens: Vec<u32>,
    raw: Raw,
    scope: CacheScope,
    computed: usize,
}

/// Runs one step in which each sequence computes `chunk[s]` more tokens; returns the largest difference
/// from the reference over every new row.
fn step(
    b: &CpuBackend,
    kv: &mut KvCacheManager,
    pools: &mut (CpuKv, CpuKv),
    seqs: &mut [Seq],
    chunks: &[usize],
) -> f32 {
    let shape = seqs[0].raw.shape;
    let (h, kvh, hd) = (shape.num_heads, shape.num_kv_heads, shape.head_dim);
    let mut tables = Vec::new();
    for (s, &n) in seqs.iter().zip(chunks) {
        let admit = (s.computed == 0).then(|| kv.find_cached_prefix(&s.tokens, s.scope, false));
        assert!(kv.allocate(s.id, s.computed + n, admit.as_ref()).unwrap());
        let table: Vec<u32> = kv
            .block_table(s.id)
            .unwrap()
            .iter()
            .map(|b| b.unwrap_or(FREED_BLOCK))
            .collect();
        tables.push(table);
    }
    let inputs: Vec<SeqInput<'_>> = seqs
        .iter()
        .zip(chunks)
        .zip(&tables)
        .map(|((s, &n), t)| SeqInput {
            tokens: &s.tokens[s.computed..s.computed + n],
            num_computed_tokens: s.computed,
            blocks: t,
            sink_window: s.scope.sink_window,
        })
        .collect();
    let batch = Batch::build(&inputs, BLOCK, LogitsMode::All).unwrap();
    batch
        .validate(kv.pool().num_blocks(), BLOCK, 64, 1 << 20)
        .unwrap();
    let n = batch.num_tokens();
    let gather = |rows: &dyn Fn(&Seq) -> &Vec<f32>, width: usize| -> Vec<f32> {
        seqs.iter()
            .zip(chunks)
            .flat_map(|(s, &c)| rows(s)[s.computed * width..(s.computed + c) * width].to_vec())
            .collect()
    };
    let (mut k, v, q_raw) = (
        gather(&|s| &s.raw.k, kvh * hd),
        gather(&|s| &s.raw.v, kvh * hd),
        gather(&|s| &s.raw.q, h * hd),
    );
    let freqs = RopeFreqs {
        inv_freq: inv_freq(hd),
        mscale: 1.0,
    };
    let (mut table, mut sink_table) = (vec![0.0; n * hd], vec![0.0; n * hd]);
    b.rope_table(&batch.positions, &freqs, n, &mut table)
        .unwrap();
    b.rope_table(&batch.sink_positions, &freqs, n, &mut sink_table)
        .unwrap();
    b.rope(&mut k, &table, n, kvh, hd).unwrap();
    let (mut q, mut q_sinks) = (q_raw.clone(), q_raw);
    b.rope(&mut q, &table, n, h, hd).unwrap();
    b.rope(&mut q_sinks, &sink_table, n, h, hd).unwrap();
    b.kv_write(&k, &v, &batch.slot_mapping, n, &mut pools.0, &mut pools.1)
        .unwrap();
    let windows = batch.windows.as_flattened().to_vec();
    let meta = PagedAttnMeta::<CpuBackend> {
        query_start_loc: &batch.query_start_loc,
        seq_lens: &batch.seq_lens,
        block_table: &batch.block_table,
        max_blocks_per_seq: batch.max_blocks_per_seq,
        num_seqs: batch.num_seqs(),
        num_tokens: n,
        max_seq_len: batch.max_seq_len(),
        windows: Some(WindowedAttn {
            windows: &windows,
            q_sinks: &q_sinks,
        }),
    };
    let mut out = vec![f32::NAN; n * h * hd];
    b.paged_attention(&q, &pools.0, &pools.1, &meta, shape, &mut out)
        .unwrap();
    let mut worst = 0f32;
    let mut row = 0;
    for (s, &c) in seqs.iter_mut().zip(chunks) {
        for p in s.computed..s.computed + c {
            let want = reference_row(&s.raw, p, s.scope.sink_window);
            let got = &out[row * h * hd..(row + 1) * h * hd];
            for (a, b) in got.iter().zip(&want) {
                worst = worst.max((a - b).abs());
            }
            row += 1;
        }
        s.computed += c;
        kv.commit_computed(s.id, &s.tokens, s.computed).unwrap();
    }
    worst
}

#[test]
fn windowed_attention_equals_dense_attention_over_the_sinks_and_window_at_in_cache_positions() {
    let mut rng = Rng::fresh("sink window attention");
    for head_dim in [64, 40] {
        check_windowed_attention(shape(head_dim), &mut rng);
    }
}

fn check_windowed_attention(shape: AttnShape, rng: &mut Rng) {
    let total = 70;
    let mut kv = KvCacheManager::new(KvCacheConfig {
        block_size: BLOCK,
        num_blocks: 64,
        enable_prefix_caching: true,
        cache_salt: 0,
    })
    .unwrap();
    let pool_shape = KvShape {
        num_blocks: 64,
        block_size: BLOCK,
        num_kv_heads: shape.num_kv_heads,
        head_dim: shape.head_dim,
        dtype: KvDtype::F32,
    };
    let mut pools = (CpuKv::zeros(pool_shape), CpuKv::zeros(pool_shape));
    let mut seqs: Vec<Seq> = [(1, Some(WINDOW)), (2, None)]
        .into_iter()
        .map(|(id, sink_window)| Seq {
            id,
            tokens: (0..total as u32).map(|t| t + 1000 * id as u32).collect(),
            raw: Raw::new(total, shape, rng),
            scope: CacheScope {
                namespace: 0,
                sink_window,
                transient: false,
                scratch: false,
            },
            computed: 0,
        })
        .collect();
    let b = CpuBackend::new();
    // A prefill chunk that crosses sinks + window, a chunk well past it, then decode steps.
    let mut plan = vec![[30, 9], [11, 20]];
    plan.extend((0..29).map(|_| [1, 1]));
    let mut worst = 0f32;
    for chunks in plan {
        worst = worst.max(step(&b, &mut kv, &mut pools, &mut seqs, &chunks));
        let held = kv.block_table(1).unwrap().iter().flatten().count();
        assert!(
            held <= WINDOW.dense_prefix().div_ceil(BLOCK) + 1,
            "the windowed sequence holds {held} blocks"
        );
    }
    assert_eq!(seqs[0].computed, total);
    assert!(
        worst < TOLERANCE,
        "head_dim {}: largest difference {worst}",
        shape.head_dim
    );
    assert!(
        kv.block_table(1).unwrap().iter().any(|b| b.is_none()),
        "the window freed blocks"
    );
}

#[test]
fn a_windowed_batch_refuses_a_table_that_lost_a_block_its_window_sees() {
    let w = SinkWindow {
        num_sink_tokens: 4,
        window: 8,
    };
    let tokens = [7u32; 3];
    // Tokens 40..=42 see the sinks and keys 33..=42: logical blocks 0 and 8..=10 must be held.
    let mut blocks: Vec<u32> = (0..11).collect();
    blocks[9] = FREED_BLOCK;
    let build = |blocks: &[u32]| {
        let input = SeqInput {
            tokens: &tokens,
            num_computed_tokens: 40,
            blocks,
            sink_window: Some(w),
        };
        Batch::build(&[input], 4, LogitsMode::All)
    };
    assert!(build(&blocks).is_err());
    blocks[9] = 9;
    blocks[3] = FREED_BLOCK;
    let batch = build(&blocks).unwrap();
    assert_eq!(batch.block_table, vec![0, 8, 9, 10]);
    assert_eq!(batch.windows, vec![[4, 8, 7]]);
    assert_eq!(batch.sink_positions, vec![40 - 29, 41 - 30, 42 - 31]);
}
