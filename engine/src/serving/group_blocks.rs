//! Whole KV blocks of the engine's pool as the tiered cache copies them: over a whole model, the pool's
//! own records ([`KvPool::read_blocks`]); over a tensor-parallel group, one record per block joined
//! from every rank's share, rank 0's first.
//!
//! Each rank holds its share of every block's KV heads, so a block's record in host memory or on disk
//! is the concatenation of the ranks' records, `world` times one rank's bytes. The disk tier keeps
//! records of one group size apart from another's through the cache salt
//! ([`super::EngineConfig::cache_salt`]). Over a group the shares travel through heap memory: each
//! rank reads its share (the followers in their threads, at the same time as rank 0), and rank 0's
//! thread joins them into the record; coming back, it cuts the record into shares and every rank
//! writes its own, waiting until the copies are done.

use std::sync::Arc;

use super::ranks::{Followers, read_share};
use crate::backend::Backend;
use crate::error::{EngineError, Result};
use crate::kv::manager::KvCacheManager;
use crate::kv::tiers::{BlockBuf, BlockBytes};
use crate::models::KvPool;

/// The engine's KV pool with the other ranks' pools behind it, for copying whole blocks.
pub(super) struct GroupBlocks<'a, B: Backend> {
    pub(super) pool: &'a mut KvPool<B>,
    pub(super) backend: &'a B,
    pub(super) followers: Option<&'a Followers>,
}

impl<B: Backend> GroupBlocks<'_, B> {
    /// Ranks in the group (1 for a whole model).
    fn world(&self) -> usize {
        1 + self.followers.map_or(0, Followers::len)
    }

    /// Bytes of one block's record: every rank's share.
    pub(super) fn record_bytes(&self) -> usize {
        self.world() * self.pool.block_bytes()
    }

    /// The records of `blocks`, in buffers the manager hands out (perhaps still being written by the
    /// device on return, for a whole model: see [`KvPool::read_blocks`]).
    pub(super) fn read(&self, kv: &KvCacheManager, blocks: &[u32]) -> Result<Vec<BlockBuf>> {
        let mut records: Vec<BlockBuf> = blocks
            .iter()
            .map(|_| kv.block_buffer(self.record_bytes()))
            .collect();
        let Some(followers) = self.followers else {
            self.pool.read_blocks(self.backend, blocks, &mut records)?;
            return Ok(records);
        };
        followers.start_reading(blocks)?;
        let own = read_share(self.backend, self.pool, blocks);
        let others = followers.records_read();
        let shares: Vec<Vec<BlockBuf>> = std::iter::once(own?).chain(others?).collect();
        let share = self.pool.block_bytes();
        for (i, record) in records.iter_mut().enumerate() {
            for (rank, rank_shares) in shares.iter().enumerate() {
                record[rank * share..(rank + 1) * share].copy_from_slice(&rank_shares[i]);
            }
        }
        Ok(records)
    }

    /// Writes `records[i]` (as [`GroupBlocks::read`] reads them) into block `blocks[i]` of every rank.
    pub(super) fn write(&mut self, blocks: &[u32], records: &[BlockBytes]) -> Result<()> {
        let Some(followers) = self.followers else {
            return self.pool.write_blocks(self.backend, blocks, records);
        };
        let whole = self.record_bytes();
        if let Some(bad) = records.iter().find(|r| r.len() != whole) {
            return Err(EngineError::InvalidBatch(format!(
                "a KV block record of {} bytes does not fit this group's records of {whole}",
                bad.len()
            )));
        }
        let share = self.pool.block_bytes();
        let mut shares: Vec<Vec<BlockBytes>> = (0..self.world())
            .map(|rank| {
                let cut = |r: &BlockBytes| r[rank * share..(rank + 1) * share].to_vec();
                records
                    .iter()
                    .map(|r| Arc::new(BlockBuf::from(cut(r))))
                    .collect()
            })
            .collect();
        let own = shares.remove(0);
        followers.start_writing(blocks, shares)?;
        let written = self
            .pool
            .write_blocks(self.backend, blocks, &own)
            .and_then(|()| self.backend.wait_kv_writes(0));
        let theirs = followers.finish();
        written.and(theirs)
    }

    /// Waits until at most `keep` of rank 0's block writes may still be reading their records (the
    /// shares of a group are written before [`GroupBlocks::write`] returns).
    pub(super) fn wait_writes(&self, keep: usize) -> Result<()> {
        self.backend.wait_kv_writes(keep)
    }
}
