//! The engine core's side of the tiered KV cache: carrying out the copies the KV cache manager queues
//! ([`KvTransfer`]) between the device pool and the lower tiers, before each forward pass, in order.

use std::sync::Arc;

use crate::backend::Backend;
use crate::error::Result;
use crate::kv::manager::{KvCacheManager, KvTransfer};
use crate::kv::tiers::BlockBuf;
use crate::models::KvPool;

/// Bytes copied down ahead of eviction per step at most, so a step above the high-water mark is not
/// held up long.
const OFFLOAD_BYTES_PER_STEP: usize = 32 << 20;

/// Blocks of `pool` copied down ahead of eviction per step at most.
pub(super) fn offload_blocks_per_step<B: Backend>(pool: &KvPool<B>) -> usize {
    (OFFLOAD_BYTES_PER_STEP / pool.block_bytes().max(1)).max(1)
}

/// Carries out every queued copy: runs of offloads are read from the device in one go and handed to
/// the tiers, runs of reloads written in one go.
pub(super) fn move_blocks<B: Backend>(
    kv: &mut KvCacheManager,
    pool: &mut KvPool<B>,
    backend: &B,
) -> Result<()> {
    let transfers = kv.take_transfers();
    let same_kind = |a: &KvTransfer, b: &KvTransfer| {
        matches!(
            (a, b),
            (KvTransfer::Offload { .. }, KvTransfer::Offload { .. })
                | (KvTransfer::Reload { .. }, KvTransfer::Reload { .. })
        )
    };
    for run in transfers.chunk_by(same_kind) {
        match &run[0] {
            KvTransfer::Offload { .. } => offload(kv, pool, backend, run)?,
            KvTransfer::Reload { .. } => reload(pool, backend, run)?,
        }
    }
    Ok(())
}

fn offload<B: Backend>(
    kv: &mut KvCacheManager,
    pool: &KvPool<B>,
    backend: &B,
    run: &[KvTransfer],
) -> Result<()> {
    let blocks: Vec<_> = run
        .iter()
        .filter_map(|t| match t {
            KvTransfer::Offload {
                block,
                still_cached,
            } => Some((*block, *still_cached)),
            KvTransfer::Reload { .. } => None,
        })
        .collect();
    let ids: Vec<u32> = blocks.iter().map(|(b, _)| b.block).collect();
    let mut contents: Vec<BlockBuf> = ids
        .iter()
        .map(|_| kv.block_buffer(pool.block_bytes()))
        .collect();
    pool.read_blocks(backend, &ids, &mut contents)?;
    for ((block, still_cached), bytes) in blocks.into_iter().zip(contents) {
        kv.offloaded(block, still_cached, Arc::new(bytes));
    }
    Ok(())
}

fn reload<B: Backend>(pool: &mut KvPool<B>, backend: &B, run: &[KvTransfer]) -> Result<()> {
    let (ids, contents): (Vec<u32>, Vec<_>) = run
        .iter()
        .filter_map(|t| match t {
            KvTransfer::Reload { block, bytes } => Some((*block, bytes.clone())),
            KvTransfer::Offload { .. } => None,
        })
        .unzip();
    pool.write_blocks(backend, &ids, &contents)
}
