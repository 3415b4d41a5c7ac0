//! The engine core's side of the tiered KV cache: carrying out the copies the KV cache manager queues
//! ([`KvTransfer`]) between the device pool and the lower tiers, before each forward pass, in order.
//!
//! Blocks coming back from disk are read here, in batches that fit the host memory set aside for
//! records: while the device reads one batch, the next is read from disk, so a document of any size
//! streams through a bounded set of pinned buffers instead of spilling into heap memory.

use std::collections::HashSet;
use std::sync::Arc;

use super::group_blocks::GroupBlocks;
use crate::backend::Backend;
use crate::error::Result;
use crate::kv::manager::{KvCacheManager, KvTransfer, Reload, RequestId};
use crate::kv::tiers::BlockBytes;

/// Bytes copied down ahead of eviction per step at most, so a step above the high-water mark is not
/// held up long.
const OFFLOAD_BYTES_PER_STEP: usize = 32 << 20;

/// Bytes copied down as they are computed (write-through) per step at most: a whole prompt chunk of an
/// 8B model (8,192 tokens, 1 GiB), as long as host memory for records has room.
const COPY_BYTES_PER_STEP: usize = 1 << 30;

/// Records read from disk in one batch at least, when the set-aside memory is short (the rest of the
/// batch then lands in heap memory).
const MIN_READ_BATCH: usize = 4;

/// Blocks whose records are `record_bytes` long copied down ahead of eviction per step at most.
pub(super) fn offload_blocks_per_step(record_bytes: usize) -> usize {
    (OFFLOAD_BYTES_PER_STEP / record_bytes.max(1)).max(1)
}

/// Blocks whose records are `record_bytes` long copied down as they are computed per step at most.
pub(super) fn copies_per_step(record_bytes: usize) -> usize {
    (COPY_BYTES_PER_STEP / record_bytes.max(1)).max(1)
}

/// Carries out every queued copy: runs of offloads are read from the device in one go and handed to
/// the tiers, runs of reloads written in batches. Returns the requests that hold a block whose record
/// turned out unreadable, to be admitted again ([`KvCacheManager::reloads_failed`]).
pub(super) fn move_blocks<B: Backend>(
    kv: &mut KvCacheManager,
    group: &mut GroupBlocks<'_, B>,
) -> Result<Vec<RequestId>> {
    let transfers = kv.take_transfers();
    let same_kind = |a: &KvTransfer, b: &KvTransfer| {
        matches!(
            (a, b),
            (KvTransfer::Offload { .. }, KvTransfer::Offload { .. })
                | (KvTransfer::Reload(_), KvTransfer::Reload(_))
        )
    };
    let mut again = Vec::new();
    for run in transfers.chunk_by(same_kind) {
        match &run[0] {
            KvTransfer::Offload { .. } => offload(kv, group, run)?,
            KvTransfer::Reload(_) => {
                let reloads = run.iter().filter_map(|t| match t {
                    KvTransfer::Reload(r) => Some(r.clone()),
                    KvTransfer::Offload { .. } => None,
                });
                again.extend(reload(kv, group, reloads.collect())?);
            }
        }
    }
    again.sort_unstable();
    again.dedup();
    Ok(again)
}

fn offload<B: Backend>(
    kv: &mut KvCacheManager,
    group: &GroupBlocks<'_, B>,
    run: &[KvTransfer],
) -> Result<()> {
    let blocks: Vec<_> = run
        .iter()
        .filter_map(|t| match t {
            KvTransfer::Offload {
                block,
                still_cached,
            } => Some((*block, *still_cached)),
            KvTransfer::Reload(_) => None,
        })
        .collect();
    let ids: Vec<u32> = blocks.iter().map(|(b, _)| b.block).collect();
    let started = std::time::Instant::now();
    let contents = group.read(kv, &ids)?;
    let read = started.elapsed();
    let debug = tracing::enabled!(tracing::Level::DEBUG);
    let pushed_out = |kv: &KvCacheManager| match debug {
        true => kv.tier_stats().map_or(0, |s| s.host_evictions),
        false => 0,
    };
    let before = pushed_out(kv);
    for ((block, still_cached), bytes) in blocks.into_iter().zip(contents) {
        kv.offloaded(block, still_cached, Arc::new(bytes));
    }
    tracing::debug!(
        blocks = ids.len(),
        read_us = read.as_micros() as u64,
        store_us = (started.elapsed() - read).as_micros() as u64,
        pushed_out_of_host = pushed_out(kv) - before,
        "KV blocks copied down"
    );
    Ok(())
}

/// Writes `reloads` batch by batch: a batch's records still on disk are read while the device may
/// still be reading the previous batch's (at most one write in flight when a batch's reading starts).
/// A request whose record cannot be read gets none of its later blocks written; they and the
/// unreadable one are returned to the manager, which says who must be admitted again.
fn reload<B: Backend>(
    kv: &mut KvCacheManager,
    group: &mut GroupBlocks<'_, B>,
    mut reloads: Vec<Reload>,
) -> Result<Vec<RequestId>> {
    let mut failed = Failed::default();
    let mut start = 0;
    while start < reloads.len() {
        group.wait_writes(1)?;
        let mut room = kv.room_for_reads();
        if room == 0 {
            group.wait_writes(0)?;
            room = kv.room_for_reads();
        }
        let end = batch_end(&reloads, start, room);
        let batch = &mut reloads[start..end];
        kv.read_reloads(batch);
        let (ids, contents) = failed.keep_readable(batch);
        if !ids.is_empty() {
            group.write(&ids, &contents)?;
        }
        start = end;
    }
    Ok(kv.reloads_failed(&failed.reloads))
}

/// Reloads not written: from each request's first unreadable record on.
#[derive(Default)]
struct Failed {
    requests: HashSet<RequestId>,
    reloads: Vec<Reload>,
}

impl Failed {
    /// The blocks of `batch` to write and their records, in order, taking the records out; the rest
    /// (unreadable, or after an unreadable one of the same request) are kept as failed.
    fn keep_readable(&mut self, batch: &mut [Reload]) -> (Vec<u32>, Vec<BlockBytes>) {
        let (mut ids, mut contents) = (Vec::new(), Vec::new());
        for r in batch {
            match r.bytes.take() {
                Some(bytes) if !self.requests.contains(&r.request) => {
                    ids.push(r.block);
                    contents.push(bytes);
                }
                _ => {
                    self.requests.insert(r.request);
                    self.reloads.push(r.clone());
                }
            }
        }
        (ids, contents)
    }
}

/// The end of the batch starting at `start`: every reload whose record is in memory is free, and
/// records still on disk are taken up to `room` of them, all that are left when they fit, else half
/// the room (so the next batch finds room while this one is being written), but at least
/// [`MIN_READ_BATCH`].
fn batch_end(reloads: &[Reload], start: usize, room: usize) -> usize {
    let on_disk = reloads[start..]
        .iter()
        .filter(|r| r.bytes.is_none())
        .count();
    let take = match on_disk <= room {
        true => on_disk,
        false => (room / 2).max(MIN_READ_BATCH),
    };
    let mut taken = 0;
    let mut end = start;
    while end < reloads.len() {
        if reloads[end].bytes.is_none() {
            if taken == take {
                break;
            }
            taken += 1;
        }
        end += 1;
    }
    end
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::block_hash::BlockHash;
    use crate::kv::tiers::BlockBuf;

    /// Reloads of request 1, those at `in_memory` with their content, the rest on disk.
    fn reloads(n: usize, in_memory: &[usize]) -> Vec<Reload> {
        (0..n)
            .map(|i| Reload {
                request: 1,
                block: i as u32,
                hash: BlockHash(i as u128),
                bytes: in_memory
                    .contains(&i)
                    .then(|| Arc::new(BlockBuf::from(vec![0u8; 4]))),
            })
            .collect()
    }

    #[test]
    fn a_batch_takes_all_records_that_fit_else_half_the_room_and_memory_records_ride_free() {
        let r = reloads(14, &[0, 1, 5]);
        assert_eq!(
            batch_end(&r, 0, 11),
            14,
            "the eleven on disk fit a room of eleven"
        );
        // Room for ten: half of it, five on disk (2, 3, 4, 6, 7), with the memory records among them.
        assert_eq!(batch_end(&r, 0, 10), 8);
        assert_eq!(batch_end(&r, 8, 10), 14, "the six left fit");
        // No room at all still makes progress, through heap memory.
        assert_eq!(
            batch_end(&r, 0, 0),
            7,
            "{MIN_READ_BATCH} on disk: 2, 3, 4 and 6"
        );
    }
}
