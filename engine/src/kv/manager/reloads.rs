//! Blocks on their way back from a lower tier: the records still on disk at admission are read when
//! the engine core carries the copies out, a batch at a time ([`KvCacheManager::read_reloads`]), so a
//! document larger than the host memory set aside for records streams through it. A record found
//! unreadable then (a damaged or vanished file) leaves its block without KV: the blocks concerned
//! leave the prefix cache and the requests holding them are admitted again
//! ([`KvCacheManager::reloads_failed`]), which finds their prefix up to the first block that is gone
//! and recomputes the rest.

use std::collections::HashSet;

use super::{KvCacheManager, Reload, RequestId};

impl KvCacheManager {
    /// Records that can be read from disk now into host memory set aside for them (see
    /// [`crate::kv::tiers::KvTiers::room_for_reads`]); `usize::MAX` without tiers.
    pub fn room_for_reads(&self) -> usize {
        self.tiers
            .as_ref()
            .map_or(usize::MAX, |t| t.room_for_reads())
    }

    /// Reads the content of each of `reloads` that has none yet, the files in parallel; a record that
    /// cannot be read (a damaged file is deleted) stays without content.
    pub fn read_reloads(&mut self, reloads: &mut [Reload]) {
        let Some(tiers) = self.tiers.as_mut() else {
            return;
        };
        let missing: Vec<usize> = (0..reloads.len())
            .filter(|&i| reloads[i].bytes.is_none())
            .collect();
        let hashes: Vec<_> = missing.iter().map(|&i| reloads[i].hash).collect();
        for (i, found) in missing.into_iter().zip(tiers.fetch_many(&hashes)) {
            reloads[i].bytes = found.map(|(bytes, _)| bytes);
        }
    }

    /// `failed` blocks were never written (their record could not be read, or one before them for the
    /// same request could not): they leave the prefix cache, and the requests that hold any of them
    /// are returned, in admission order, to be freed and admitted again.
    pub fn reloads_failed(&mut self, failed: &[Reload]) -> Vec<RequestId> {
        for r in failed {
            if self.pool.lookup(r.hash) == Some(r.block) {
                self.pool.uncache(r.hash);
            }
        }
        let doomed: HashSet<_> = failed.iter().map(|r| r.block).collect();
        let mut holders: Vec<RequestId> = self
            .requests
            .iter()
            .filter(|(_, entry)| entry.table.iter().flatten().any(|b| doomed.contains(b)))
            .map(|(&id, _)| id)
            .collect();
        holders.sort_unstable();
        holders
    }
}
