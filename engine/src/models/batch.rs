//! The host-side description of one forward pass over a mixed batch (vLLM v1 style: no prefill phase
//! and no decode phase, just sequences that each contribute some new tokens).
//!
//! Tokens of all sequences are flattened; sequence `s` owns rows `query_start_loc[s]..query_start_loc[s+1]`,
//! its context after the step is `seq_lens[s]` tokens, `block_table` row `s` lists its KV blocks and
//! `slot_mapping[t]` is the pool slot where token `t`'s K and V go.

use crate::error::{EngineError, Result};

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
    /// The sequence's KV blocks, covering `num_computed_tokens + tokens.len()` tokens.
    pub blocks: &'a [u32],
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
        let max_blocks_per_seq = seqs
            .iter()
            .map(|s| s.blocks.len())
            .max()
            .unwrap_or(0)
            .max(1);
        let mut b = Batch {
            max_blocks_per_seq,
            logits,
            query_start_loc: vec![0],
            ..Batch::default()
        };
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
            for (i, &tok) in s.tokens.iter().enumerate() {
                let pos = s.num_computed_tokens + i;
                b.token_ids.push(tok);
                b.positions.push(pos as u32);
                b.slot_mapping.push(
                    s.blocks[pos / block_size] * block_size as u32 + (pos % block_size) as u32,
                );
            }
            b.query_start_loc.push(b.token_ids.len() as u32);
            b.seq_lens.push(len as u32);
            b.block_table.extend(s.blocks);
            b.block_table
                .resize(b.seq_lens.len() * max_blocks_per_seq, 0);
        }
        Ok(b)
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
        if self.block_table.len() != s * self.max_blocks_per_seq {
            return bad("block_table is not num_seqs × max_blocks_per_seq".into());
        }
        if let Some(&len) = self.seq_lens.iter().find(|&&l| l as usize > max_context) {
            return Err(EngineError::ContextTooLong {
                len: len as usize,
                max: max_context,
            });
        }
        for (i, w) in self.query_start_loc.windows(2).enumerate() {
            let q_len = w[1].saturating_sub(w[0]) as usize;
            let seq_len = self.seq_lens[i] as usize;
            if w[1] <= w[0]
                || q_len > seq_len
                || seq_len.div_ceil(block_size) > self.max_blocks_per_seq
            {
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
