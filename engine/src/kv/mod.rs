//! The paged KV block pool: a free list of block ids with reference counts, and the per-sequence
//! block list that turns token positions into `slot_mapping` entries and a `block_table` row.
//!
//! The layout every backend uses is per layer K and V each `[num_blocks, block_size, num_kv_heads,
//! head_dim]`; slot `block * block_size + offset` is one token. Blocks are handed out from the front of
//! the free list and returned to its back, so the list is already in eviction order (least recently
//! freed first) for the prefix cache that will hash full blocks by (parent hash, token ids).

use std::collections::VecDeque;

use crate::error::{EngineError, Result};

/// Hands out KV blocks and counts their users.
#[derive(Debug, Clone)]
pub struct BlockAllocator {
    block_size: usize,
    free: VecDeque<u32>,
    ref_counts: Vec<u32>,
}

impl BlockAllocator {
    /// A pool of `num_blocks` blocks of `block_size` tokens, all free.
    pub fn new(num_blocks: usize, block_size: usize) -> Self {
        BlockAllocator {
            block_size,
            free: (0..num_blocks as u32).collect(),
            ref_counts: vec![0; num_blocks],
        }
    }

    /// Tokens per block.
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// Blocks currently free.
    pub fn num_free(&self) -> usize {
        self.free.len()
    }

    /// Takes `n` blocks, or none if fewer than `n` are free.
    pub fn allocate(&mut self, n: usize) -> Result<Vec<u32>> {
        if n > self.free.len() {
            return Err(EngineError::KvCacheFull {
                needed: n,
                free: self.free.len(),
            });
        }
        let blocks: Vec<u32> = self.free.drain(..n).collect();
        blocks.iter().for_each(|&b| self.ref_counts[b as usize] = 1);
        Ok(blocks)
    }

    /// Adds a user to blocks shared with another sequence.
    pub fn share(&mut self, blocks: &[u32]) {
        blocks
            .iter()
            .for_each(|&b| self.ref_counts[b as usize] += 1);
    }

    /// Drops one user of each block; blocks without users go to the back of the free list.
    pub fn release(&mut self, blocks: &[u32]) {
        for &b in blocks {
            let count = &mut self.ref_counts[b as usize];
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.free.push_back(b);
            }
        }
    }
}

/// The blocks one sequence owns, in position order.
#[derive(Debug, Clone, Default)]
pub struct SeqBlocks {
    blocks: Vec<u32>,
}

impl SeqBlocks {
    /// The block ids, in order.
    pub fn blocks(&self) -> &[u32] {
        &self.blocks
    }

    /// Allocates blocks until `len` tokens fit.
    pub fn reserve(&mut self, alloc: &mut BlockAllocator, len: usize) -> Result<()> {
        let needed = len
            .div_ceil(alloc.block_size())
            .saturating_sub(self.blocks.len());
        if needed > 0 {
            self.blocks.extend(alloc.allocate(needed)?);
        }
        Ok(())
    }

    /// The pool slot of position `pos` (which must be reserved).
    pub fn slot(&self, pos: usize, block_size: usize) -> u32 {
        self.blocks[pos / block_size] * block_size as u32 + (pos % block_size) as u32
    }

    /// Returns every block to the allocator.
    pub fn free(&mut self, alloc: &mut BlockAllocator) {
        alloc.release(&self.blocks);
        self.blocks.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exhausted_pool_refuses_and_freed_blocks_return_last() {
        let mut a = BlockAllocator::new(3, 4);
        let mut s = SeqBlocks::default();
        s.reserve(&mut a, 9).expect("3 blocks fit");
        assert_eq!(s.blocks(), &[0, 1, 2]);
        assert_eq!(s.slot(5, 4), 5);
        assert!(matches!(
            a.allocate(1),
            Err(EngineError::KvCacheFull { needed: 1, free: 0 })
        ));
        a.share(&[1]);
        s.free(&mut a);
        assert_eq!(a.num_free(), 2, "the shared block stays in use");
        assert_eq!(a.allocate(2).expect("two free"), vec![0, 2]);
    }
}
