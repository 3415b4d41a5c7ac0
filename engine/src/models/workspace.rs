//! Preallocated buffers of a Llama forward pass, sized once by `max_num_batched_tokens`, so a forward
//! pass allocates nothing.

use crate::backend::Backend;
use crate::config::LlamaConfig;
use crate::error::Result;
use crate::models::graphs::DecodeGraphs;

/// Capacities of a [`LlamaWorkspace`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkspaceSize {
    /// Most new tokens in one forward pass.
    pub max_num_batched_tokens: usize,
    /// Most sequences in one forward pass.
    pub max_num_seqs: usize,
    /// Width of the block table (longest context / block size, rounded up).
    pub max_blocks_per_seq: usize,
    /// Most rows of logits one pass returns (`max_num_seqs` unless all-position logits are wanted).
    pub max_logit_rows: usize,
}

/// Device buffers of one forward pass.
pub struct LlamaWorkspace<B: Backend> {
    /// Its capacities.
    pub size: WorkspaceSize,
    pub(crate) ids: B::Ids,
    pub(crate) positions: B::Ids,
    pub(crate) query_start_loc: B::Ids,
    pub(crate) seq_lens: B::Ids,
    pub(crate) block_table: B::Ids,
    pub(crate) slots: B::Ids,
    pub(crate) windows: B::Ids,
    /// The windows the sliding-window layers read (see [`crate::models::llama`]).
    pub(crate) sliding_windows: B::Ids,
    pub(crate) sink_positions: B::Ids,
    pub(crate) logit_rows: B::Ids,
    /// Host copy of the logit row indices (reused, so a pass allocates nothing).
    pub(crate) host_rows: Vec<u32>,
    pub(crate) x: B::Buf,
    pub(crate) h: B::Buf,
    pub(crate) q: B::Buf,
    pub(crate) k: B::Buf,
    pub(crate) v: B::Buf,
    pub(crate) attn: B::Buf,
    pub(crate) gate: B::Buf,
    pub(crate) up: B::Buf,
    pub(crate) act: B::Buf,
    pub(crate) rope: B::Buf,
    /// Queries and RoPE table at the positions queries take towards the sink tokens (sink windows).
    pub(crate) q_sinks: B::Buf,
    pub(crate) rope_sinks: B::Buf,
    pub(crate) last: B::Buf,
    pub(crate) last_norm: B::Buf,
    /// `[rows, vocab]` logits of the last forward pass.
    pub logits: B::Buf,
    /// A tensor-parallel rank's LM head output and the gathered parts (None for a whole model).
    pub(crate) vocab_parts: Option<VocabParts<B>>,
    /// `[rows, 4]` pick parameters per logits row, and the ids picked on the device
    /// ([`Backend::sample_rows`]).
    pub(crate) picks: B::Buf,
    pub(crate) picked: B::Ids,
    /// Decode steps recorded for replay (see [`crate::models::graphs`]).
    pub graphs: DecodeGraphs<B::Graph>,
    /// Host copy of a block table padded for a recorded step (reused).
    pub(crate) host_table: Vec<u32>,
    /// What was last written to `query_start_loc`, `block_table` and `logit_rows`: decode steps
    /// mostly repeat them, and an unchanged array is not copied again.
    pub(crate) sent: [Vec<u32>; 3],
}

/// Writes `src` to `dst` unless `sent` says `dst` already holds it; remembers what it wrote.
pub(crate) fn write_changed<B: Backend>(
    b: &B,
    dst: &mut B::Ids,
    sent: &mut Vec<u32>,
    src: &[u32],
) -> Result<()> {
    if sent.as_slice() == src {
        return Ok(());
    }
    sent.clear();
    let written = b.write_ids(dst, src);
    if written.is_ok() {
        sent.extend_from_slice(src);
    }
    written
}

/// The logits of one rank's vocabulary part, and the room to gather every rank's.
pub(crate) struct VocabParts<B: Backend> {
    /// `[rows, vocab / world]`.
    pub(crate) part: B::Buf,
    /// `[world, rows, vocab / world]`.
    pub(crate) stacked: B::Buf,
}

impl<B: Backend> LlamaWorkspace<B> {
    /// Allocates every buffer for `cfg` at the given capacities: a whole model's (`group` None), or
    /// one rank's part of a model split over a tensor-parallel group of `group` ranks.
    pub fn new(
        b: &B,
        cfg: &LlamaConfig,
        size: WorkspaceSize,
        group: Option<usize>,
    ) -> Result<Self> {
        let world = group.unwrap_or(1);
        let t = size.max_num_batched_tokens;
        let (hd, h) = (cfg.head_dim, cfg.hidden_size);
        let logits_rows = size.max_logit_rows.max(size.max_num_seqs);
        Ok(LlamaWorkspace {
            ids: b.alloc_ids(t)?,
            positions: b.alloc_ids(t)?,
            query_start_loc: b.alloc_ids(size.max_num_seqs + 1)?,
            seq_lens: b.alloc_ids(size.max_num_seqs)?,
            block_table: b.alloc_ids(size.max_num_seqs * size.max_blocks_per_seq)?,
            slots: b.alloc_ids(t)?,
            windows: b.alloc_ids(size.max_num_seqs * 3)?,
            sliding_windows: b.alloc_ids(size.max_num_seqs * 3)?,
            sink_positions: b.alloc_ids(t)?,
            logit_rows: b.alloc_ids(logits_rows)?,
            host_rows: Vec::with_capacity(logits_rows),
            x: b.alloc(t * h)?,
            h: b.alloc(t * h)?,
            q: b.alloc(t * cfg.num_attention_heads * hd)?,
            k: b.alloc(t * cfg.num_key_value_heads * hd)?,
            v: b.alloc(t * cfg.num_key_value_heads * hd)?,
            attn: b.alloc(t * cfg.num_attention_heads * hd)?,
            gate: b.alloc(t * cfg.intermediate_size)?,
            up: b.alloc(t * cfg.intermediate_size)?,
            act: b.alloc(t * cfg.intermediate_size)?,
            rope: b.alloc(t * hd)?,
            q_sinks: b.alloc(t * cfg.num_attention_heads * hd)?,
            rope_sinks: b.alloc(t * hd)?,
            last: b.alloc(logits_rows * h)?,
            last_norm: b.alloc(logits_rows * h)?,
            logits: b.alloc(logits_rows * cfg.vocab_size * world)?,
            vocab_parts: match group {
                None => None,
                Some(_) => Some(VocabParts {
                    part: b.alloc(logits_rows * cfg.vocab_size)?,
                    stacked: b.alloc(logits_rows * cfg.vocab_size * world)?,
                }),
            },
            picks: b.alloc(logits_rows * 4)?,
            picked: b.alloc_ids(logits_rows)?,
            graphs: DecodeGraphs::default(),
            host_table: Vec::new(),
            sent: Default::default(),
            size: WorkspaceSize {
                max_logit_rows: logits_rows,
                ..size
            },
        })
    }
}
