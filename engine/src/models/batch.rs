//! The host-side description of one forward pass over a mixed batch (vLLM v1 style: no prefill phase
//! and no decode phase, just sequences that each contribute some new tokens).
//!
//! Tokens of all sequences are flattened; sequence `s` owns rows `query_start_loc[s]..query_start_loc[s+1]`,
//! its context after the step is `seq_lens[s]` tokens, `block_table` row `s` lists its KV blocks and
//! `slot_mapping[t]` is the pool slot where token `t`'s K and V go.
//!
//! A sequence streaming through a sink window ([`SinkWindow`]) holds only its sink blocks and the blocks of
//! its recent window. Its `block_table` row lists the sink blocks followed by the window's blocks, and
//! `windows` tells attention how to map a key index to a row entry and which keys each query sees (see
//! [`WindowMeta`]).

use crate::error::{EngineError, Result};
use crate::kv::manager::SinkWindow;

/// A block-table entry whose block was returned to the pool (it left a sink window).
pub const FREED_BLOCK: u32 = u32::MAX;

/// How attention reads one sequence: `[num_sink_tokens, window, block_offset]`, all 0 for dense attention.
///
/// Under a window, query position `p` sees keys `0..num_sink_tokens` and `p + 1 - window..=p` (everything
/// up to `p` while `p < num_sink_tokens + window`). Key `j` of logical block `b = j / block_size` sits in
/// row entry `b` when `b` is a sink block and `b - block_offset` otherwise.
pub type WindowMeta = [u32; 3];

/// Which positions get logits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogitsMode {
    /// The last new token of each sequence (sampling).
    #[default]
    LastPerSequence,
    /// Every new token (golden tests, perplexity).
    All,
}

/// One sequence's share of a batch.
#[derive(Debug, Clone, Copy)]
pub struct SeqInput<'a> {
    /// The new tokens this step.
    pub tokens: &'a [u32],
    /// Tokens of this sequence already in the KV cache (`num_computed_tokens`).
    pub num_computed_tokens: usize,
    /// The sequence's KV blocks, covering `num_computed_tokens + tokens.len()` tokens, one per logical
    /// block; under a sink window, blocks no query of this step sees may be [`FREED_BLOCK`].
    pub blocks: &'a [u32],
    /// The sink window the sequence streams through, or None for dense attention.
    pub sink_window: Option<SinkWindow>,
}

impl SeqInput<'_> {
    /// The block-table row and window description of this sequence for the step.
    fn attention_view(&self, block_size: usize) -> Result<(Vec<u32>, WindowMeta)> {
        let len = self.num_computed_tokens + self.tokens.len();
        let used = &self.blocks[..len.div_ceil(block_size)];
        let Some(w) = self.sink_window else {
            return Ok((used.to_vec(), [0; 3]));
        };
        let sink_blocks = w.num_sink_tokens.div_ceil(block_size);
        let first_key = (self.num_computed_tokens + 1).saturating_sub(w.window);
        let first_block = (first_key / block_size).max(sink_blocks).min(used.len());
        let row: Vec<u32> = used[..sink_blocks.min(used.len())]
            .iter()
            .chain(&used[first_block..])
            .copied()
            .collect();
        if row.contains(&FREED_BLOCK) {
            return Err(EngineError::InvalidBatch(
                "a windowed sequence lost a block its window still sees".into(),
            ));
        }
        let offset = first_block - sink_blocks.min(first_block);
        Ok((
            row,
            [w.num_sink_tokens as u32, w.window as u32, offset as u32],
        ))
    }
}

/// A forward pass's inputs, flattened.
#[derive(Debug, Clone, Default)]
pub struct Batch {
    /// `[num_tokens]` token ids.
    pub token_ids: Vec<u32>,
    /// `[num_tokens]` positions.
    pub positions: Vec<u32>,
    /// `[num_seqs + 1]` row offsets.
    pub query_start_loc: Vec<u32>,
    /// `[num_seqs]` context lengths after the step.
    pub seq_lens: Vec<u32>,
    /// `[num_seqs]` how attention reads each sequence (all zero when dense).
    pub windows: Vec<WindowMeta>,
    /// `[num_tokens]` the position each query takes when it scores the sink tokens: its own position,
    /// less the tokens a sink window dropped (StreamingLLM's positions within the cache).
    pub sink_positions: Vec<u32>,
    /// `[num_seqs, max_blocks_per_seq]` block ids (unused entries 0).
    pub block_table: Vec<u32>,
    /// Row width of `block_table`.
    pub max_blocks_per_seq: usize,
    /// `[num_tokens]` KV pool slots.
    pub slot_mapping: Vec<u32>,
    /// Which rows get logits.
    pub logits: LogitsMode,
}

impl Batch {
    /// Flattens the sequences' new tokens into one batch; `block_size` is the KV pool's.
    pub fn build(seqs: &[SeqInput<'_>], block_size: usize, logits: LogitsMode) -> Result<Self> {
        for s in seqs {
            let len = s.num_computed_tokens + s.tokens.len();
            if s.tokens.is_empty() || len.div_ceil(block_size) > s.blocks.len() {
                return Err(EngineError::InvalidBatch(format!(
                    "a sequence brings {} new tokens to {} with {} blocks of {block_size}",
                    s.tokens.len(),
                    len,
                    s.blocks.len()
                )));
            }
        }
        let views = seqs
            .iter()
            .map(|s| s.attention_view(block_size))
            .collect::<Result<Vec<_>>>()?;
        let max_blocks_per_seq = views
            .iter()
            .map(|(row, _)| row.len())
            .max()
            .unwrap_or(0)
            .max(1);
        let mut b = Batch {
            max_blocks_per_seq,
            logits,
            query_start_loc: vec![0],
            ..Batch::default()
        };
        for (s, (row, window)) in seqs.iter().zip(views) {
            let len = s.num_computed_tokens + s.tokens.len();
            for (i, &tok) in s.tokens.iter().enumerate() {
                let pos = s.num_computed_tokens + i;
                let dropped = s
                    .sink_window
                    .map_or(0, |w| (pos + 1).saturating_sub(w.dense_prefix()));
                b.token_ids.push(tok);
                b.positions.push(pos as u32);
                b.sink_positions.push((pos - dropped) as u32);
                b.slot_mapping.push(
                    s.blocks[pos / block_size] * block_size as u32 + (pos % block_size) as u32,
                );
            }
            b.query_start_loc.push(b.token_ids.len() as u32);
            b.seq_lens.push(len as u32);
            b.windows.push(window);
            b.block_table.extend(row);
            b.block_table
                .resize(b.seq_lens.len() * max_blocks_per_seq, 0);
        }
        Ok(b)
    }

    /// Whether any sequence streams through a sink window.
    pub fn has_windows(&self) -> bool {
        self.windows.iter().any(|w| w[1] > 0)
    }

    /// Sequences in the batch.
    pub fn num_seqs(&self) -> usize {
        self.seq_lens.len()
    }

    /// New tokens in the batch.
    pub fn num_tokens(&self) -> usize {
        self.token_ids.len()
    }

    /// Rows that get logits, as indices into the flattened tokens.
    pub fn logit_rows(&self) -> impl Iterator<Item = u32> + '_ {
        let last = self.query_start_loc[1..].iter().map(|&e| e - 1);
        let all = 0..self.num_tokens() as u32;
        match self.logits {
            LogitsMode::LastPerSequence => itertools_either(Some(last), None),
            LogitsMode::All => itertools_either(None, Some(all)),
        }
    }

    /// Checks internal consistency against a KV pool of `num_blocks` blocks of `block_size` and a context
    /// window of `max_context` tokens.
    pub fn validate(
        &self,
        num_blocks: usize,
        block_size: usize,
        max_context: usize,
        vocab: usize,
    ) -> Result<()> {
        let bad = |m: String| Err(EngineError::InvalidBatch(m));
        let (n, s) = (self.num_tokens(), self.num_seqs());
        if s == 0 || self.query_start_loc.len() != s + 1 || self.query_start_loc[0] != 0 {
            return bad("query_start_loc must start at 0 and have num_seqs + 1 entries".into());
        }
        if self.positions.len() != n
            || self.slot_mapping.len() != n
            || self.query_start_loc[s] as usize != n
        {
            return bad(
                "positions, slot_mapping and query_start_loc disagree on the token count".into(),
            );
        }
        if self.block_table.len() != s * self.max_blocks_per_seq
            || self.windows.len() != s
            || self.sink_positions.len() != n
        {
            return bad("block_table, windows or sink_positions have the wrong size".into());
        }
        for (&len, w) in self.seq_lens.iter().zip(&self.windows) {
            // A window bounds the distances attention sees; a dense sequence is bounded by its length.
            let span = if w[1] > 0 {
                (w[0] + w[1]) as usize
            } else {
                len as usize
            };
            if span > max_context {
                return Err(EngineError::ContextTooLong {
                    len: span,
                    max: max_context,
                });
            }
        }
        for (i, w) in self.query_start_loc.windows(2).enumerate() {
            let q_len = w[1].saturating_sub(w[0]) as usize;
            let seq_len = self.seq_lens[i] as usize;
            let row_len = seq_len.div_ceil(block_size) - self.windows[i][2] as usize;
            if w[1] <= w[0] || q_len > seq_len || row_len > self.max_blocks_per_seq {
                return bad(format!("sequence {i} has inconsistent lengths"));
            }
        }
        if self.token_ids.iter().any(|&t| t as usize >= vocab) {
            return bad(format!("a token id is outside the vocabulary of {vocab}"));
        }
        let slots = num_blocks * block_size;
        if self.slot_mapping.iter().any(|&x| x as usize >= slots)
            || self.block_table.iter().any(|&b| b as usize >= num_blocks)
        {
            return bad("a slot or block id is outside the KV pool".into());
        }
        Ok(())
    }

    /// The longest context in the batch.
    pub fn max_seq_len(&self) -> usize {
        self.seq_lens.iter().copied().max().unwrap_or(0) as usize
    }
}

fn itertools_either<A: Iterator<Item = u32>, B: Iterator<Item = u32>>(
    a: Option<A>,
    b: Option<B>,
) -> impl Iterator<Item = u32> {
    a.into_iter().flatten().chain(b.into_iter().flatten())
}
