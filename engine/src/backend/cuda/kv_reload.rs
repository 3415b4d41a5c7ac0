//! Blocks brought back into the KV pools from pinned host memory on a stream of their own, so the
//! forward pass that needs them runs beside the copy.
//!
//! The device reads the records where they lie: pinned host memory is mapped into its address space at
//! the same addresses. The pools are taken in groups, in order (at most [`MAX_GROUPS`]; a layer's K and
//! V pools at a 32-layer shape); one launch of `kv_blocks_scatter_mapped` per group reads its slice of
//! every record over the bus into the group's pools, and an event marks the group done. Each pool
//! remembers its group's event, and the first op on the compute stream that touches the pool waits for
//! it ([`CudaKv::await_reload`]): layer 0 of the question's forward pass computes while the later
//! layers' blocks are still arriving. No copy call is made per record, and no staging buffer is used.
//! The reload starts after everything issued on the compute stream before it, so blocks that stream
//! still reads or writes are not overwritten. The records are kept until the reload is done.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, MutexGuard};

use cudarc::driver::{
    CudaContext, CudaEvent, CudaStream, DevicePtr, LaunchConfig, PushKernelArg, SyncOnDrop,
};

use super::kv_blocks::{Parts, push_pool_to_write};
use super::{CudaBackend, CudaKv, cuda_err};
use crate::backend::KvShape;
use crate::error::Result;
use crate::kv::tiers::BlockBytes;

/// Groups a reload is cut into at most: the finer, the sooner the first layer can start.
const MAX_GROUPS: usize = 32;

/// The events of one reload, one per group of pools, recorded on the reload stream.
pub(super) struct ReloadFence {
    events: Vec<CudaEvent>,
    /// Whether the compute stream has already waited for the last event (and so for every group).
    settled: AtomicBool,
}

/// What a pool waits for before its next op: group `group` of a reload.
pub(super) struct PendingReload {
    fence: Arc<ReloadFence>,
    group: usize,
}

/// The reload stream and the reloads under way.
#[derive(Default)]
pub(super) struct Reloads {
    stream: Option<Arc<CudaStream>>,
    in_flight: Vec<InFlight>,
}

/// A reload whose copies may still be reading its records.
struct InFlight {
    fence: Arc<ReloadFence>,
    _records: Vec<BlockBytes>,
}

impl Drop for Reloads {
    fn drop(&mut self) {
        if let Some(stream) = &self.stream {
            // Nothing useful can be done with an error here; the records must outlive the copies.
            let _ = stream.synchronize();
        }
    }
}

impl Reloads {
    fn stream(&mut self, ctx: &Arc<CudaContext>) -> Result<Arc<CudaStream>> {
        if self.stream.is_none() {
            self.stream = Some(ctx.new_stream().map_err(cuda_err)?);
        }
        Ok(Arc::clone(self.stream.as_ref().expect("created above")))
    }

    /// Lets go of the records of reloads whose copies are done.
    fn release_finished(&mut self) {
        self.in_flight
            .retain(|f| f.fence.events.last().is_some_and(|e| !e.is_complete()));
    }
}

impl CudaKv {
    /// Makes `stream` wait for the blocks being brought back into this pool, once.
    pub(super) fn await_reload(&self, stream: &CudaStream) -> Result<()> {
        let pending = self
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        match pending {
            Some(p) if !p.fence.settled.load(Ordering::Acquire) => {
                stream.wait(&p.fence.events[p.group]).map_err(cuda_err)
            }
            _ => Ok(()),
        }
    }
}

impl Drop for CudaKv {
    fn drop(&mut self) {
        let pending = self.pending.get_mut().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = pending.take() {
            // The pool's memory must not be freed under a copy still writing into it.
            let _ = p.fence.events[p.group].synchronize();
        }
    }
}

/// A group of consecutive pools: their parts (offsets from the group's start in a record), where the
/// group starts in a record and how many bytes of it are the group's, and which pools it holds.
struct Group {
    parts: Parts,
    start: usize,
    bytes: usize,
    pools: std::ops::Range<usize>,
}

/// The pools cut into at most [`MAX_GROUPS`] groups of consecutive pools, with their device addresses.
fn groups_of<'a>(
    pools: &'a mut [&mut CudaKv],
    shape: &KvShape,
    stream: &'a CudaStream,
    guards: &mut Vec<SyncOnDrop<'a>>,
) -> Result<Vec<Group>> {
    let per_group = pools.len().div_ceil(MAX_GROUPS).max(1);
    let mut groups: Vec<Group> = Vec::new();
    for (i, kv) in pools.iter_mut().enumerate() {
        if i % per_group == 0 {
            groups.push(Group {
                parts: Parts::default(),
                start: i * shape.block_bytes(),
                bytes: 0,
                pools: i..i,
            });
        }
        let g = groups.last_mut().expect("pushed above");
        push_pool_to_write(&mut g.parts, guards, kv, shape, stream)?;
        g.bytes = g.parts.record_bytes();
        g.pools.end = i + 1;
    }
    Ok(groups)
}

impl CudaBackend {
    fn lock_reloads(&self) -> MutexGuard<'_, Reloads> {
        self.reloads.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes the compute stream wait for every reload under way, so what follows (an offload, a graph
    /// replay or capture, a transfer through the shared staging) sees the blocks written.
    pub(super) fn settle_reloads(&self) -> Result<()> {
        let mut reloads = self.lock_reloads();
        for f in &reloads.in_flight {
            if !f.fence.settled.swap(true, Ordering::AcqRel)
                && let Some(last) = f.fence.events.last()
            {
                self.dev.stream.wait(last).map_err(cuda_err)?;
            }
        }
        reloads.release_finished();
        Ok(())
    }

    /// Unpacks `n` records (at the addresses in the device array `records`) into blocks `ids` of the
    /// parts, reading each record from byte `start` on, in one launch on `stream`.
    fn scatter_mapped(
        &self,
        stream: &CudaStream,
        (parts, table): (&Parts, u64),
        start: usize,
        records: u64,
        (ids, n): (u64, usize),
    ) -> Result<()> {
        // Four blocks of 512 threads per part keep the bus full (on an H200, one reaches 22.7 GB/s,
        // two 41.2, four 50.6, as many as a copy engine) and leave the other SMs to the forward pass:
        // with 64 per part, a block on nearly every SM kept the matmuls waiting, and a reload of an
        // 8K-token document overlapped its question's forward pass by 4 ms of 21 instead of most of it.
        const THREADS: usize = 512;
        const BLOCKS_PER_PART: usize = 4;
        let widest = parts.words().max().unwrap_or(0) as usize;
        let cfg = LaunchConfig {
            grid_dim: (
                (n * widest).div_ceil(4 * THREADS).clamp(1, BLOCKS_PER_PART) as u32,
                parts.bases.len() as u32,
                1,
            ),
            block_dim: (THREADS as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        let (num_parts, first_word, count) =
            (parts.bases.len() as i32, (start / 16) as i64, n as i32);
        let mut b = stream.launch_builder(self.kernels.get("kv_blocks_scatter_mapped")?);
        b.arg(&table)
            .arg(&num_parts)
            .arg(&records)
            .arg(&first_word)
            .arg(&ids)
            .arg(&count);
        // SAFETY: the table holds every part's base, words and offset; each part holds the blocks `ids`
        // (checked against the pools by the caller); `records` holds n addresses of whole records in
        // pinned host memory, which the caller keeps until the launch is done.
        unsafe { b.launch(cfg) }.map_err(cuda_err)?;
        Ok(())
    }

    /// Waits until at most `keep` reloads are under way, oldest first, and lets go of the records of
    /// those done.
    pub(super) fn wait_reloads(&self, keep: usize) -> Result<()> {
        let mut reloads = self.lock_reloads();
        reloads.release_finished();
        let done = reloads.in_flight.len().saturating_sub(keep);
        for f in &reloads.in_flight[..done] {
            if let Some(last) = f.fence.events.last() {
                last.synchronize().map_err(cuda_err)?;
            }
        }
        reloads.in_flight.drain(..done);
        Ok(())
    }

    /// Lets go of the records of reloads that are done, so their slots go back to the arena; called
    /// after each wait for the compute stream, which has waited for every reload its forward pass used.
    pub(super) fn release_finished_reloads(&self) {
        self.lock_reloads().release_finished();
    }

    /// Brings `src[i]` (all in pinned memory) back into block `blocks[i]` of every pool on the reload
    /// stream, group by group, and returns without waiting; see the module's comment.
    pub(super) fn reload_blocks(
        &self,
        pools: &mut [&mut CudaKv],
        blocks: &[u32],
        src: &[BlockBytes],
        shape: &KvShape,
    ) -> Result<()> {
        let mut reloads = self.lock_reloads();
        reloads.release_finished();
        let copy = reloads.stream(&self.dev.ctx)?;
        let issued = self.dev.stream.record_event(None).map_err(cuda_err)?;
        copy.wait(&issued).map_err(cuda_err)?;
        let mut guards = Vec::new();
        let groups = groups_of(pools, shape, &copy, &mut guards)?;
        let ids = copy.clone_htod(blocks).map_err(cuda_err)?;
        let records: Vec<u64> = src.iter().map(|r| r.as_ptr() as u64).collect();
        let records = copy.clone_htod(&records).map_err(cuda_err)?;
        let table: Vec<u64> = groups.iter().flat_map(|g| g.parts.table()).collect();
        let table = copy.clone_htod(&table).map_err(cuda_err)?;
        let (ids, records, table) = (
            ids.device_ptr(&copy),
            records.device_ptr(&copy),
            table.device_ptr(&copy),
        );
        let enqueue = || -> Result<Vec<CudaEvent>> {
            let mut events = Vec::with_capacity(groups.len());
            let mut table_at = table.0;
            for group in &groups {
                self.scatter_mapped(
                    &copy,
                    (&group.parts, table_at),
                    group.start,
                    records.0,
                    (ids.0, blocks.len()),
                )?;
                events.push(copy.record_event(None).map_err(cuda_err)?);
                table_at += 8 * 3 * group.parts.bases.len() as u64;
            }
            Ok(events)
        };
        let events = enqueue().inspect_err(|_| {
            // The records go back to the caller: nothing may still be reading them.
            let _ = copy.synchronize();
        })?;
        drop(guards);
        let fence = Arc::new(ReloadFence {
            events,
            settled: AtomicBool::new(false),
        });
        for (g, group) in groups.iter().enumerate() {
            for kv in &pools[group.pools.clone()] {
                *kv.pending.lock().unwrap_or_else(|e| e.into_inner()) = Some(PendingReload {
                    fence: Arc::clone(&fence),
                    group: g,
                });
            }
        }
        reloads.in_flight.push(InFlight {
            fence,
            _records: src.to_vec(),
        });
        Ok(())
    }
}
