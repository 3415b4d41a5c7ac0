//! A single-sequence driver for a [`Llama`] model: owns a KV pool sized for one context, feeds tokens
//! (prefill in chunks of the workspace's token budget), returns logits, and decodes greedily.
//!
//! This is what tests, benchmarks and simple tools need; the service uses the batching scheduler.

use crate::backend::{Backend, KvDtype, KvShape};
use crate::error::Result;
use crate::kv::{BlockAllocator, SeqBlocks};
use crate::models::llama::{Llama, WorkspaceSize};
use crate::models::workspace::LlamaWorkspace;
use crate::models::{Batch, KvPool, LogitsMode, SeqInput};

/// Tokens per KV block of the single-sequence driver.
pub const BLOCK_SIZE: usize = 16;

/// One sequence's decoding state on a model.
pub struct SingleSequence<'m, B: Backend> {
    model: &'m Llama<B>,
    kv: KvPool<B>,
    ws: LlamaWorkspace<B>,
    alloc: BlockAllocator,
    blocks: SeqBlocks,
    len: usize,
    logits: Vec<f32>,
}

impl<'m, B: Backend> SingleSequence<'m, B> {
    /// A driver for contexts up to `max_context` tokens, feeding at most `chunk` tokens per pass.
    pub fn new(
        model: &'m Llama<B>,
        max_context: usize,
        chunk: usize,
        dtype: KvDtype,
    ) -> Result<Self> {
        let cfg = &model.config;
        let num_blocks = max_context.div_ceil(BLOCK_SIZE);
        let shape = KvShape {
            num_blocks,
            block_size: BLOCK_SIZE,
            num_kv_heads: model.part_config().num_key_value_heads,
            head_dim: cfg.head_dim,
            dtype,
        };
        let size = WorkspaceSize {
            max_num_batched_tokens: chunk,
            max_num_seqs: 1,
            max_blocks_per_seq: num_blocks,
            max_logit_rows: chunk,
        };
        Ok(SingleSequence {
            kv: KvPool::new(&model.backend, cfg.num_hidden_layers, shape)?,
            ws: model.workspace(size)?,
            alloc: BlockAllocator::new(num_blocks, BLOCK_SIZE),
            blocks: SeqBlocks::default(),
            len: 0,
            logits: Vec::new(),
            model,
        })
    }

    /// The decode steps this driver's workspace recorded and replayed.
    pub fn graphs(&self) -> &crate::models::graphs::DecodeGraphs<B::Graph> {
        &self.ws.graphs
    }

    /// Tokens in the context so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the context is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Forgets the context (frees its blocks).
    pub fn reset(&mut self) {
        self.blocks.free(&mut self.alloc);
        self.len = 0;
    }

    /// Appends `tokens` to the context and returns the logits of the last one (`mode` = last) or of
    /// every one (`mode` = all, `tokens.len() × vocab`).
    pub fn feed(&mut self, tokens: &[u32], mode: LogitsMode) -> Result<&[f32]> {
        let vocab = self.model.config.vocab_size;
        let chunk = self.ws.size.max_num_batched_tokens;
        let max_context = self.model.config.max_position_embeddings;
        if self.len + tokens.len() > max_context {
            return Err(crate::EngineError::ContextTooLong {
                len: self.len + tokens.len(),
                max: max_context,
            });
        }
        self.blocks
            .reserve(&mut self.alloc, self.len + tokens.len())?;
        self.logits.clear();
        for piece in tokens.chunks(chunk.max(1)) {
            let seq = SeqInput {
                tokens: piece,
                num_computed_tokens: self.len,
                blocks: self.blocks.blocks(),
                sink_window: None,
            };
            let batch = Batch::build(&[seq], BLOCK_SIZE, mode)?;
            let rows = self.model.forward(&batch, &mut self.kv, &mut self.ws)?;
            let start = if mode == LogitsMode::All {
                self.logits.len()
            } else {
                0
            };
            self.logits.resize(start + rows * vocab, 0.0);
            self.model
                .backend
                .read(&self.ws.logits, &mut self.logits[start..])?;
            self.len += piece.len();
        }
        Ok(&self.logits)
    }

    /// Greedy decoding: feeds `prompt`, then appends the arg-max token until `max_new` tokens or an
    /// end-of-sequence token. Returns the new tokens (the end-of-sequence token excluded).
    pub fn greedy(&mut self, prompt: &[u32], max_new: usize) -> Result<Vec<u32>> {
        let eos = self.model.config.eos_token_ids.clone();
        let mut next = argmax(self.feed(prompt, LogitsMode::LastPerSequence)?);
        let mut out = Vec::with_capacity(max_new);
        while out.len() < max_new && !eos.contains(&next) {
            out.push(next);
            if out.len() == max_new {
                break;
            }
            next = argmax(self.feed(&[next], LogitsMode::LastPerSequence)?);
        }
        Ok(out)
    }
}

/// Index of the largest value (the first of equals).
pub fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, x) in v.iter().enumerate() {
        if *x > v[best] {
            best = i;
        }
    }
    best as u32
}
