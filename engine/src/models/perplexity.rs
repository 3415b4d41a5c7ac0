//! Perplexity of a long token stream, read in chunks through the KV cache manager as a serving request
//! would be: dense, or streaming through a sink window. Reported per segment of the stream (e.g. every
//! 1,000 tokens), so a curve shows where a model degrades past its trained context and whether a window
//! keeps it flat, together with the KV blocks the stream held at its peak. A model split over a
//! tensor-parallel group reads the stream with every rank, rank 0 scoring ([`perplexity_split`]).

use std::sync::Arc;
use std::time::Instant;

use crate::backend::{Backend, KvDtype, KvShape};
use crate::error::{EngineError, Result};
use crate::kv::manager::{CacheScope, KvCacheConfig, KvCacheManager, SinkWindow};
use crate::models::llama::{Llama, WorkspaceSize};
use crate::models::{Batch, FREED_BLOCK, KvPool, LogitsMode, SeqInput};
use crate::serving::ranks::Followers;

/// Tokens per KV block of the perplexity driver (the engine's default).
const BLOCK_SIZE: usize = 16;

/// How the stream is read.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PerplexityOptions {
    /// Sink window to stream through, or None for dense attention over everything so far.
    pub sink_window: Option<SinkWindow>,
    /// Tokens per forward pass.
    pub chunk: usize,
    /// Tokens per reported segment.
    pub segment: usize,
    /// Element type of the KV cache.
    pub kv_dtype: KvDtype,
}

/// Mean negative log-likelihood of the predicted tokens of one segment of the stream.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Segment {
    /// Position of the segment's last predicted token, plus one.
    pub end: usize,
    /// Predicted tokens in the segment.
    pub tokens: usize,
    /// Mean negative log-likelihood (nats).
    pub nll: f64,
}

impl Segment {
    /// `exp(nll)`.
    pub fn perplexity(&self) -> f64 {
        self.nll.exp()
    }
}

/// What a perplexity run measured.
#[derive(Debug, Clone, PartialEq)]
pub struct PerplexityReport {
    /// Per-segment results, in stream order.
    pub segments: Vec<Segment>,
    /// Mean negative log-likelihood over every predicted token.
    pub nll: f64,
    /// Most KV blocks held at once (during a step: the window and the chunk being computed).
    pub peak_blocks: usize,
    /// Most KV blocks held between steps (after the blocks that left a sink window were freed).
    pub peak_blocks_between_steps: usize,
    /// Wall time of the run.
    pub seconds: f64,
}

impl PerplexityReport {
    /// Perplexity over the whole stream.
    pub fn perplexity(&self) -> f64 {
        self.nll.exp()
    }
}

/// Negative log-likelihood of `target` under `logits` (log-sum-exp in f64).
pub fn token_nll(logits: &[f32], target: u32) -> f64 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let sum: f64 = logits.iter().map(|&l| (l as f64 - max).exp()).sum();
    max + sum.ln() - logits[target as usize] as f64
}

/// Reads `tokens` through `model` and scores every token after the first.
pub fn perplexity<B: Backend>(
    model: &Llama<B>,
    tokens: &[u32],
    opts: &PerplexityOptions,
) -> Result<PerplexityReport> {
    let sizes = pool_and_workspace(model, tokens, opts)?;
    read_stream(model, None, sizes, (tokens, opts))
}

/// [`perplexity`] of a model split over the ranks of a tensor-parallel group, rank 0 first (as
/// [`crate::models::split::load_ranks`] loads them): rank 0 reads and scores in the caller's thread,
/// the others each read in a thread of their own, with a KV pool and workspace of their own.
pub fn perplexity_split<B: Backend + 'static>(
    ranks: Vec<Llama<B>>,
    tokens: &[u32],
    opts: &PerplexityOptions,
) -> Result<PerplexityReport> {
    let (model, others) = crate::serving::ranks::leader_and_others(ranks, "perplexity")?;
    let (shape, size) = pool_and_workspace(&model, tokens, opts)?;
    let followers = match others.is_empty() {
        true => None,
        false => Some(Followers::spawn(others, shape, size)?),
    };
    read_stream(&model, followers.as_ref(), (shape, size), (tokens, opts))
}

/// The KV pool (a rank's share of the KV heads) and workspace the stream needs.
fn pool_and_workspace<B: Backend>(
    model: &Llama<B>,
    tokens: &[u32],
    opts: &PerplexityOptions,
) -> Result<(KvShape, WorkspaceSize)> {
    if tokens.len() < 2 || opts.chunk == 0 || opts.segment == 0 {
        return Err(EngineError::InvalidBatch(
            "perplexity needs two tokens, a chunk and a segment".into(),
        ));
    }
    let held = match opts.sink_window {
        Some(w) => w.dense_prefix() + opts.chunk + 2 * BLOCK_SIZE,
        None => tokens.len() + BLOCK_SIZE,
    };
    let num_blocks = held.div_ceil(BLOCK_SIZE) + 1;
    let part = model.part_config();
    let shape = KvShape {
        num_blocks,
        block_size: BLOCK_SIZE,
        num_kv_heads: part.num_key_value_heads,
        head_dim: part.head_dim,
        dtype: opts.kv_dtype,
    };
    let size = WorkspaceSize {
        max_num_batched_tokens: opts.chunk,
        max_num_seqs: 1,
        max_blocks_per_seq: num_blocks,
        max_logit_rows: opts.chunk,
    };
    Ok((shape, size))
}

/// Reads the stream chunk by chunk into a pool of `shape` with a workspace of `size`, every pass run
/// by rank 0 and (over a group) the `followers`.
fn read_stream<B: Backend>(
    model: &Llama<B>,
    followers: Option<&Followers>,
    (shape, size): (KvShape, WorkspaceSize),
    (tokens, opts): (&[u32], &PerplexityOptions),
) -> Result<PerplexityReport> {
    let started = Instant::now();
    let num_blocks = shape.num_blocks;
    let mut manager = KvCacheManager::new(KvCacheConfig {
        block_size: BLOCK_SIZE,
        num_blocks,
        enable_prefix_caching: false,
        cache_salt: 0,
    })?;
    let cfg = &model.config;
    let mut pool = KvPool::new(&model.backend, cfg.num_hidden_layers, shape)?;
    let mut ws = model.workspace(size)?;
    let scope = CacheScope {
        namespace: 0,
        sink_window: opts.sink_window,
        transient: false,
        scratch: false,
    };
    let admission = manager.find_cached_prefix(tokens, scope, false);
    let vocab = cfg.vocab_size;
    let mut logits = vec![0f32; opts.chunk * vocab];
    let mut sums = Sums::new(opts.segment);
    let (mut done, mut peak_blocks, mut peak_between) = (0, 0, 0);
    while done + 1 < tokens.len() {
        let n = opts.chunk.min(tokens.len() - 1 - done);
        let admit = (done == 0).then_some(&admission);
        if !manager.allocate(1, done + n, admit)? {
            return Err(EngineError::Internal(
                "the KV pool was sized too small".into(),
            ));
        }
        let table: Vec<u32> = manager
            .block_table(1)
            .unwrap_or_default()
            .iter()
            .map(|b| b.unwrap_or(FREED_BLOCK))
            .collect();
        let input = SeqInput {
            tokens: &tokens[done..done + n],
            num_computed_tokens: done,
            blocks: &table,
            sink_window: opts.sink_window,
        };
        let batch = Arc::new(Batch::build(&[input], BLOCK_SIZE, LogitsMode::All)?);
        if let Some(followers) = followers {
            followers.start(&batch)?;
        }
        let led = model.forward(&batch, &mut pool, &mut ws);
        let followed = followers.map_or(Ok(()), Followers::finish);
        let rows = led.and_then(|rows| followed.map(|()| rows))?;
        model
            .backend
            .read(&ws.logits, &mut logits[..rows * vocab])?;
        for r in 0..rows {
            let target = done + r + 1;
            sums.add(
                target,
                token_nll(&logits[r * vocab..(r + 1) * vocab], tokens[target]),
            );
        }
        peak_blocks = peak_blocks.max(manager.pool().num_used());
        manager.commit_computed(1, tokens, done + n)?;
        peak_between = peak_between.max(manager.pool().num_used());
        done += n;
    }
    manager.free(1)?;
    let (segments, nll) = sums.finish();
    Ok(PerplexityReport {
        segments,
        nll,
        peak_blocks,
        peak_blocks_between_steps: peak_between,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Running sums of negative log-likelihoods per segment.
struct Sums {
    segment: usize,
    per_segment: Vec<(f64, usize, usize)>,
}

impl Sums {
    fn new(segment: usize) -> Self {
        Sums {
            segment,
            per_segment: Vec::new(),
        }
    }

    /// Adds the NLL of the token at `position`.
    fn add(&mut self, position: usize, nll: f64) {
        let index = (position - 1) / self.segment;
        if self.per_segment.len() <= index {
            self.per_segment.resize(index + 1, (0.0, 0, 0));
        }
        let s = &mut self.per_segment[index];
        s.0 += nll;
        s.1 += 1;
        s.2 = position + 1;
    }

    fn finish(self) -> (Vec<Segment>, f64) {
        let (total, count) = self
            .per_segment
            .iter()
            .fold((0.0, 0), |(t, c), s| (t + s.0, c + s.1));
        let segments = self
            .per_segment
            .into_iter()
            .filter(|s| s.1 > 0)
            .map(|(sum, tokens, end)| Segment {
                end,
                tokens,
                nll: sum / tokens as f64,
            })
            .collect();
        (segments, total / count.max(1) as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_nll_is_the_negative_log_softmax_of_the_target() {
        let logits = [1.0f32, 2.0, 3.0];
        let z: f64 = [1.0f64, 2.0, 3.0].iter().map(|x| x.exp()).sum();
        assert!((token_nll(&logits, 2) - (z.ln() - 3.0)).abs() < 1e-12);
        assert!((token_nll(&logits, 0) - (z.ln() - 1.0)).abs() < 1e-12);
    }

    #[test]
    fn segments_average_the_tokens_they_hold() {
        let mut s = Sums::new(2);
        for (p, nll) in [(1, 1.0), (2, 3.0), (3, 5.0)] {
            s.add(p, nll);
        }
        let (segments, mean) = s.finish();
        assert_eq!(segments.len(), 2);
        assert_eq!((segments[0].end, segments[0].tokens), (3, 2));
        assert!((segments[0].nll - 2.0).abs() < 1e-12 && (segments[1].nll - 5.0).abs() < 1e-12);
        assert!((mean - 3.0).abs() < 1e-12);
    }
}
