//! Blocks copied down as soon as they are computed ([`crate::kv::tiers::TierSettings::write_through`]):
//! each block the prefix cache takes in is queued for a copy to the lower tiers while it stays on the
//! device, a running request's included (a full block never changes), as far as host memory for
//! records has room. Evicting such a block later loses nothing and waits for nothing; a block the
//! copies did not reach in time is copied when it is evicted, as without write-through.

use super::{KvCacheManager, KvTransfer};

impl KvCacheManager {
    /// Queues up to `max` of the blocks computed since the last call (oldest first) to be copied down
    /// while they stay cached, as far as the tiers have room for them now; returns how many.
    pub fn copy_down_fresh(&mut self, max: usize) -> usize {
        let Some(tiers) = self.tiers.as_ref() else {
            return 0;
        };
        // Oldest first out when copies fall far behind (they are copied at eviction instead).
        let excess = self.fresh.len().saturating_sub(self.pool.num_blocks());
        self.fresh.drain(..excess);
        let room = tiers.room_for_copies().min(max);
        let mut queued = 0;
        while queued < room
            && let Some(block) = self.fresh.pop_front()
        {
            if self.pool.holds_unbacked(block.block, block.hash) {
                self.transfers.push(KvTransfer::Offload {
                    block,
                    still_cached: true,
                });
                queued += 1;
            }
        }
        queued
    }

    /// Whether blocks computed are still waiting to be copied down.
    pub fn has_fresh_blocks(&self) -> bool {
        !self.fresh.is_empty()
    }

    /// Whether copies are under way or waiting: blocks computed and not copied yet, or blocks the disk
    /// writer has not written yet.
    pub fn copies_pending(&self) -> bool {
        self.has_fresh_blocks() || self.tiers.as_ref().is_some_and(|t| t.writing_to_disk())
    }

    /// [`KvCacheManager::copy_down_fresh`] between requests; returns how many were queued and whether
    /// copies are still pending ([`KvCacheManager::copies_pending`]). When no room can come (nothing
    /// is being written), the waiting blocks are left to be copied at their eviction.
    pub fn copy_down_idle(&mut self, max: usize) -> (usize, bool) {
        let queued = self.copy_down_fresh(max);
        let writing = self.tiers.as_ref().is_some_and(|t| t.writing_to_disk());
        if queued == 0 && !writing {
            self.fresh.clear();
        }
        (queued, self.copies_pending())
    }
}
