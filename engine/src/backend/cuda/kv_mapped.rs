//! Whole blocks moved between the KV pools and records in pinned host memory on a transfer stream of
//! their own, so the forward pass runs beside the copy: blocks brought back from the host tier
//! (reloads), and blocks copied down to it (offloads).
//!
//! The device reaches the records where they lie: pinned host memory is mapped into its address space
//! at the same addresses. The pools are taken in groups, in order (at most [`MAX_GROUPS`]; a layer's K
//! and V pools at a 32-layer shape); one launch per group (`kv_blocks_scatter_mapped` or
//! `kv_blocks_gather_mapped`) moves its slice of every record over the bus, and an event marks the
//! group done. Each pool remembers its group's event, and the first op on the compute stream that
//! touches the pool waits for it ([`CudaKv::await_transfer`]): layer 0 of the question's forward pass
//! computes while the later layers' blocks are still arriving, and blocks being copied down are not
//! overwritten before they have left. No copy call is made per record, and no staging buffer is used.
//! A transfer starts after everything issued on the compute stream before it, so it moves the blocks
//! that stream last wrote. Transfers run in order on their stream, so a pool's latest event covers the
//! earlier ones.
//!
//! A reload's records are kept until it is done. An offload's records are marked with its fence
//! ([`crate::kv::tiers::BlockBuf::written_by`]): whoever reads one on the host (the disk writer) or
//! lets its slot go waits for the copy first.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, MutexGuard};

use cudarc::driver::{
    CudaContext, CudaEvent, CudaStream, DevicePtr, LaunchConfig, PushKernelArg, SyncOnDrop,
};

use super::kv_blocks::{Parts, push_pool_to_read, push_pool_to_write};
use super::{CudaBackend, CudaKv, cuda_err};
use crate::backend::KvShape;
use crate::error::Result;
use crate::kv::tiers::{BlockBuf, BlockBytes, DeviceFence};

/// Groups a transfer is cut into at most: the finer, the sooner the first layer can start.
const MAX_GROUPS: usize = 32;

/// The events of one transfer, one per group of pools, recorded on the transfer stream.
pub(super) struct TransferFence {
    events: Vec<CudaEvent>,
    /// Whether the compute stream has already waited for the last event (and so for every group).
    settled: AtomicBool,
}

impl DeviceFence for TransferFence {
    fn wait(&self) -> bool {
        self.events.last().is_none_or(|e| e.synchronize().is_ok())
    }
}

/// What a pool waits for before its next op: group `group` of a transfer.
pub(super) struct PendingTransfer {
    fence: Arc<TransferFence>,
    group: usize,
}

/// The transfer stream and the transfers under way.
#[derive(Default)]
pub(super) struct MappedTransfers {
    stream: Option<Arc<CudaStream>>,
    in_flight: Vec<InFlight>,
}

/// A transfer whose copies may still be running, with the records a reload reads (an offload's
/// records carry its fence themselves).
struct InFlight {
    fence: Arc<TransferFence>,
    _records: Vec<BlockBytes>,
}

impl Drop for MappedTransfers {
    fn drop(&mut self) {
        if let Some(stream) = &self.stream {
            // Nothing useful can be done with an error here; the records must outlive the copies.
            let _ = stream.synchronize();
        }
    }
}

impl MappedTransfers {
    fn stream(&mut self, ctx: &Arc<CudaContext>) -> Result<Arc<CudaStream>> {
        if self.stream.is_none() {
            self.stream = Some(ctx.new_stream().map_err(cuda_err)?);
        }
        Ok(Arc::clone(self.stream.as_ref().expect("created above")))
    }

    /// Lets go of the transfers whose copies are done (and of a reload's records).
    fn release_finished(&mut self) {
        self.in_flight
            .retain(|f| f.fence.events.last().is_some_and(|e| !e.is_complete()));
    }
}

impl CudaKv {
    /// Makes `stream` wait for the blocks being moved in or out of this pool, once.
    pub(super) fn await_transfer(&self, stream: &CudaStream) -> Result<()> {
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

    fn set_pending(&self, fence: &Arc<TransferFence>, group: usize) {
        *self.pending.lock().unwrap_or_else(|e| e.into_inner()) = Some(PendingTransfer {
            fence: Arc::clone(fence),
            group,
        });
    }
}

impl Drop for CudaKv {
    fn drop(&mut self) {
        let pending = self.pending.get_mut().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = pending.take() {
            // The pool's memory must not be freed under a copy still using it.
            let _ = p.fence.events[p.group].synchronize();
        }
    }
}

/// A group of consecutive pools: their parts (offsets from the group's start in a record), where the
/// group starts in a record, and which pools it holds.
struct Group {
    parts: Parts,
    start: usize,
    pools: std::ops::Range<usize>,
}

/// `pools` cut into at most [`MAX_GROUPS`] groups of consecutive pools, each pool's parts added by
/// `push`.
fn groups_of<P>(
    pools: impl ExactSizeIterator<Item = P>,
    shape: &KvShape,
    mut push: impl FnMut(&mut Parts, P) -> Result<()>,
) -> Result<Vec<Group>> {
    let per_group = pools.len().div_ceil(MAX_GROUPS).max(1);
    let mut groups: Vec<Group> = Vec::new();
    for (i, kv) in pools.enumerate() {
        if i % per_group == 0 {
            groups.push(Group {
                parts: Parts::default(),
                start: i * shape.block_bytes(),
                pools: i..i,
            });
        }
        let g = groups.last_mut().expect("pushed above");
        push(&mut g.parts, kv)?;
        g.pools.end = i + 1;
    }
    Ok(groups)
}

/// Makes each of `pools` wait for its group of `fence` before its next op.
fn mark_pending<'k>(
    pools: impl Iterator<Item = &'k CudaKv>,
    groups: &[Group],
    fence: &Arc<TransferFence>,
) {
    for (i, kv) in pools.enumerate() {
        if let Some(g) = groups.iter().position(|g| g.pools.contains(&i)) {
            kv.set_pending(fence, g);
        }
    }
}

/// Which way a transfer goes.
#[derive(Clone, Copy)]
enum Direction {
    /// Records into blocks.
    Reload,
    /// Blocks into records.
    Offload,
}

impl CudaBackend {
    fn lock_transfers(&self) -> MutexGuard<'_, MappedTransfers> {
        self.mapped.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes the compute stream wait for every transfer under way, so what follows (an offload
    /// through the staging buffer, a graph replay or capture) sees the blocks moved.
    pub(super) fn settle_transfers(&self) -> Result<()> {
        let mut transfers = self.lock_transfers();
        for f in &transfers.in_flight {
            if !f.fence.settled.swap(true, Ordering::AcqRel)
                && let Some(last) = f.fence.events.last()
            {
                self.dev.stream.wait(last).map_err(cuda_err)?;
            }
        }
        transfers.release_finished();
        Ok(())
    }

    /// Waits until at most `keep` transfers are under way, oldest first, and lets go of the records of
    /// those done.
    pub(super) fn wait_transfers(&self, keep: usize) -> Result<()> {
        let mut transfers = self.lock_transfers();
        transfers.release_finished();
        let done = transfers.in_flight.len().saturating_sub(keep);
        for f in &transfers.in_flight[..done] {
            if let Some(last) = f.fence.events.last() {
                last.synchronize().map_err(cuda_err)?;
            }
        }
        transfers.in_flight.drain(..done);
        Ok(())
    }

    /// Lets go of the records of reloads that are done, so their slots go back to the arena; called
    /// after each wait for the compute stream, which has waited for every reload its forward pass used.
    pub(super) fn release_finished_transfers(&self) {
        self.lock_transfers().release_finished();
    }

    /// Moves the `n` records at the addresses in the device array `records` to or from blocks `ids`
    /// of the parts, each record from byte `start` on, in one launch on `stream`.
    fn launch_mapped(
        &self,
        stream: &CudaStream,
        direction: Direction,
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
        let name = match direction {
            Direction::Reload => "kv_blocks_scatter_mapped",
            Direction::Offload => "kv_blocks_gather_mapped",
        };
        let (num_parts, first_word, count) =
            (parts.bases.len() as i32, (start / 16) as i64, n as i32);
        let mut b = stream.launch_builder(self.kernels.get(name)?);
        b.arg(&table)
            .arg(&num_parts)
            .arg(&records)
            .arg(&first_word)
            .arg(&ids)
            .arg(&count);
        // SAFETY: the table holds every part's base, words and offset; each part holds the blocks `ids`
        // (checked against the pools by the caller); `records` holds n addresses of whole records in
        // pinned host memory, which the caller keeps (a reload) or fences (an offload) until the
        // launch is done.
        unsafe { b.launch(cfg) }.map_err(cuda_err)?;
        Ok(())
    }

    /// Issues `groups`' launches on `copy` after the compute stream's work so far, for `blocks` and
    /// the records at `records`, and returns their fence.
    fn issue_mapped(
        &self,
        copy: &Arc<CudaStream>,
        direction: Direction,
        groups: &[Group],
        blocks: &[u32],
        records: &[u64],
    ) -> Result<Arc<TransferFence>> {
        let ids = copy.clone_htod(blocks).map_err(cuda_err)?;
        let records = copy.clone_htod(records).map_err(cuda_err)?;
        let table: Vec<u64> = groups.iter().flat_map(|g| g.parts.table()).collect();
        let table = copy.clone_htod(&table).map_err(cuda_err)?;
        let (ids, records, table) = (
            ids.device_ptr(copy),
            records.device_ptr(copy),
            table.device_ptr(copy),
        );
        let enqueue = || -> Result<Vec<CudaEvent>> {
            let mut events = Vec::with_capacity(groups.len());
            let mut table_at = table.0;
            for group in groups {
                self.launch_mapped(
                    copy,
                    direction,
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
            // The records go back to the caller: nothing may still be using them.
            let _ = copy.synchronize();
        })?;
        Ok(Arc::new(TransferFence {
            events,
            settled: AtomicBool::new(false),
        }))
    }

    /// The transfer stream, made to wait for the compute stream's work so far.
    fn transfer_stream(&self, transfers: &mut MappedTransfers) -> Result<Arc<CudaStream>> {
        transfers.release_finished();
        let copy = transfers.stream(&self.dev.ctx)?;
        let issued = self.dev.stream.record_event(None).map_err(cuda_err)?;
        copy.wait(&issued).map_err(cuda_err)?;
        Ok(copy)
    }

    /// Brings `src[i]` (all in pinned memory) back into block `blocks[i]` of every pool on the
    /// transfer stream, group by group, and returns without waiting; see the module's comment.
    pub(super) fn reload_blocks(
        &self,
        pools: &mut [&mut CudaKv],
        blocks: &[u32],
        src: &[BlockBytes],
        shape: &KvShape,
    ) -> Result<()> {
        let mut transfers = self.lock_transfers();
        let copy = self.transfer_stream(&mut transfers)?;
        let mut guards = Vec::new();
        let groups = groups_of(pools.iter_mut(), shape, |parts, kv| {
            push_pool_to_write(parts, &mut guards, kv, shape, &copy)
        })?;
        let records: Vec<u64> = src.iter().map(|r| r.as_ptr() as u64).collect();
        let fence = self.issue_mapped(&copy, Direction::Reload, &groups, blocks, &records)?;
        drop(guards);
        mark_pending(pools.iter().map(|kv| &**kv), &groups, &fence);
        transfers.in_flight.push(InFlight {
            fence,
            _records: src.to_vec(),
        });
        Ok(())
    }

    /// Copies block `blocks[i]` of every pool into `out[i]` (all in pinned memory) on the transfer
    /// stream, group by group, marks each record with the copy's fence and returns without waiting;
    /// see the module's comment.
    pub(super) fn offload_blocks(
        &self,
        pools: &[&CudaKv],
        blocks: &[u32],
        out: &mut [BlockBuf],
        shape: &KvShape,
    ) -> Result<()> {
        let mut transfers = self.lock_transfers();
        let copy = self.transfer_stream(&mut transfers)?;
        let mut guards: Vec<SyncOnDrop<'_>> = Vec::new();
        let groups = groups_of(pools.iter(), shape, |parts, kv| {
            push_pool_to_read(parts, &mut guards, kv, shape, &copy)
        })?;
        let records: Vec<u64> = out.iter().map(|r| r.as_ptr() as u64).collect();
        let fence = self.issue_mapped(&copy, Direction::Offload, &groups, blocks, &records)?;
        drop(guards);
        mark_pending(pools.iter().map(|kv| &**kv), &groups, &fence);
        for record in out.iter_mut() {
            record.written_by(Arc::clone(&fence) as Arc<dyn DeviceFence>);
        }
        transfers.in_flight.push(InFlight {
            fence,
            _records: Vec::new(),
        });
        Ok(())
    }
}
