//! Decode steps replayed as recorded graphs, on backends that record them (CUDA graphs).
//!
//! A step where every sequence brings one token, with dense attention and fixed RoPE frequencies,
//! launches the same kernels with the same sizes whenever the batch has the same number of sequences
//! and its block table the same width. So the block table is padded to a power-of-two width (a
//! bucket), attention is sized for the bucket's whole span (key splits past a sequence's length do no
//! work), and the first step of each (sequences, bucket) runs op by op and is then recorded; later
//! steps upload their inputs and replay the graph. A graph holds the device addresses of the
//! workspace, the KV pool and the backend's scratch buffers, so it is dropped when any of them is
//! replaced.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::models::Batch;

/// Narrowest block-table bucket (256 tokens with 16-token blocks).
const MIN_BUCKET_BLOCKS: usize = 16;

/// Which recorded graph a decode step replays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GraphKey {
    /// Sequences (= tokens) in the step.
    pub seqs: usize,
    /// Width of the padded block table.
    pub blocks: usize,
}

impl GraphKey {
    /// The key of `batch` when it is a step graphs can replay, under a workspace whose block table
    /// holds `max_blocks` entries per sequence.
    pub fn of(batch: &Batch, max_blocks: usize) -> Option<Self> {
        let decode = batch.num_tokens() == batch.num_seqs() && !batch.has_windows();
        let blocks = batch
            .max_blocks_per_seq
            .next_power_of_two()
            .max(MIN_BUCKET_BLOCKS)
            .min(max_blocks);
        (decode && blocks >= batch.max_blocks_per_seq).then_some(GraphKey {
            seqs: batch.num_seqs(),
            blocks,
        })
    }

    /// `batch`'s block table re-laid at this key's width into `out`; the padding is block 0, which
    /// attention never reads past a sequence's length.
    pub fn pad_block_table(&self, batch: &Batch, out: &mut Vec<u32>) {
        out.clear();
        let width = batch.max_blocks_per_seq.max(1);
        for row in batch.block_table.chunks(width) {
            out.extend_from_slice(row);
            out.resize(out.len() + self.blocks - row.len(), 0);
        }
    }
}

/// A fresh id for each KV pool, so graphs recorded against one are never replayed against another.
pub(crate) fn next_pool_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// The graphs a workspace recorded, valid for one KV pool and one backend epoch.
pub struct DecodeGraphs<G> {
    pool: u64,
    epoch: u64,
    recorded: HashMap<GraphKey, G>,
    /// Why recording stopped for this workspace, if it failed once.
    pub failed: Option<String>,
    /// Steps replayed so far (for benchmarks and tests).
    pub replays: u64,
}

impl<G> Default for DecodeGraphs<G> {
    fn default() -> Self {
        DecodeGraphs {
            pool: 0,
            epoch: 0,
            recorded: HashMap::new(),
            failed: None,
            replays: 0,
        }
    }
}

impl<G> DecodeGraphs<G> {
    /// The graph recorded for `key`, after dropping every graph recorded for another pool or epoch.
    pub fn get(&mut self, key: GraphKey, pool: u64, epoch: u64) -> Option<&G> {
        if (self.pool, self.epoch) != (pool, epoch) {
            self.recorded.clear();
            (self.pool, self.epoch) = (pool, epoch);
        }
        self.recorded.get(&key)
    }

    /// Keeps `graph` for `key`, recorded against `pool` under `epoch`.
    pub fn insert(&mut self, key: GraphKey, pool: u64, epoch: u64, graph: G) {
        if (self.pool, self.epoch) != (pool, epoch) {
            self.recorded.clear();
            (self.pool, self.epoch) = (pool, epoch);
        }
        self.recorded.insert(key, graph);
    }

    /// Graphs held now.
    pub fn len(&self) -> usize {
        self.recorded.len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.recorded.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::{LogitsMode, SeqInput};

    fn decode_batch(lens: &[usize]) -> Batch {
        let blocks: Vec<Vec<u32>> = lens
            .iter()
            .enumerate()
            .map(|(s, &l)| {
                (0..l.div_ceil(16) as u32)
                    .map(|b| 100 * s as u32 + b)
                    .collect()
            })
            .collect();
        let tokens = [7u32];
        let seqs: Vec<SeqInput<'_>> = lens
            .iter()
            .zip(&blocks)
            .map(|(&l, b)| SeqInput {
                tokens: &tokens,
                num_computed_tokens: l - 1,
                blocks: b,
                sink_window: None,
            })
            .collect();
        Batch::build(&seqs, 16, LogitsMode::LastPerSequence).expect("valid batch")
    }

    #[test]
    fn decode_steps_of_similar_length_share_a_bucket() {
        let a = GraphKey::of(&decode_batch(&[300, 40]), 512).expect("decode");
        let b = GraphKey::of(&decode_batch(&[500, 12]), 512).expect("decode");
        assert_eq!(a, b);
        assert_eq!(a.blocks, 32);
        let short = GraphKey::of(&decode_batch(&[3]), 512).expect("decode");
        assert_eq!(short.blocks, MIN_BUCKET_BLOCKS);
        let capped = GraphKey::of(&decode_batch(&[1100]), 70).expect("decode");
        assert_eq!(
            capped.blocks, 70,
            "the bucket never exceeds the workspace's table"
        );
    }

    #[test]
    fn a_step_with_a_prompt_chunk_is_not_replayed() {
        let blocks = [0u32, 1];
        let tokens = [1u32, 2, 3];
        let seqs = [SeqInput {
            tokens: &tokens,
            num_computed_tokens: 0,
            blocks: &blocks,
            sink_window: None,
        }];
        let batch = Batch::build(&seqs, 16, LogitsMode::LastPerSequence).expect("valid");
        assert_eq!(GraphKey::of(&batch, 64), None);
    }

    #[test]
    fn padding_keeps_each_row_and_fills_with_block_zero() {
        let batch = decode_batch(&[40, 17]);
        let key = GraphKey::of(&batch, 64).expect("decode");
        let mut out = Vec::new();
        key.pad_block_table(&batch, &mut out);
        assert_eq!(out.len(), 2 * key.blocks);
        assert_eq!(&out[..3], &[0, 1, 2]);
        assert_eq!(&out[key.blocks..key.blocks + 3], &[100, 101, 0]);
        assert!(out[3..key.blocks].iter().all(|&b| b == 0));
    }

    #[test]
    fn graphs_of_another_pool_or_epoch_are_dropped() {
        let mut g: DecodeGraphs<&str> = DecodeGraphs::default();
        let key = GraphKey {
            seqs: 1,
            blocks: 16,
        };
        g.insert(key, 1, 0, "graph");
        assert_eq!(g.get(key, 1, 0), Some(&"graph"));
        assert_eq!(g.get(key, 1, 1), None, "a new epoch drops it");
        g.insert(key, 1, 1, "again");
        assert_eq!(g.get(key, 2, 1), None, "another pool drops it");
        assert!(g.is_empty());
    }
}
