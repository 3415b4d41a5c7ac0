//! Whole blocks of a model's KV pools to and from host records, for the tiered KV cache.
//!
//! Going out, one kernel launch packs the blocks of every pool part (each layer's K and V elements; an
//! int8 pool's scales too) into whole records in a device staging buffer, and each record goes to its
//! host buffer in one copy; records whose buffers lie end to end in host memory go in one copy together.
//! The host tier's buffers are pinned ([`CudaBackend::pinned_allocator`]), so the copy engine reaches them
//! directly; other buffers (a record read from disk when the arena had no free slot) pass through a
//! pinned bounce buffer, copied by every core, which is several times faster than the driver's own path
//! for pageable memory. Coming back, the same in reverse, for records not all in pinned memory; pinned
//! records come back without a copy call at all, read by the device where they lie
//! ([`super::kv_mapped`]). A transfer larger than the staging buffer goes in chunks, in stream order,
//! with one synchronisation at the end.

use std::sync::{Arc, Mutex};

use rayon::prelude::*;

use cudarc::driver::{
    CudaContext, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, LaunchConfig, PinnedHostSlice,
    PushKernelArg, SyncOnDrop,
};

use super::{CudaBackend, CudaKv, CudaKvStore, cuda_err};
use crate::backend::{KvDtype, KvShape, pools_transfer_shape};
use crate::error::Result;
use crate::kv::tiers::{BlockBuf, BlockBytes, HostAllocator, HostMemory};

/// Device staging for one chunk of a transfer, at most (a chunk holds at least one record).
const STAGING_BYTES: usize = 64 << 20;

/// The buffers transfers pass through, which only grow, and where the pinned host memory lies.
#[derive(Default)]
pub(super) struct Staging {
    device: Option<CudaSlice<u8>>,
    bounce: Option<PinnedMemory>,
    pinned: Arc<PinnedRanges>,
}

/// The address ranges of the pinned allocations the host tier's arena made.
#[derive(Default)]
pub(super) struct PinnedRanges(Mutex<Vec<(usize, usize)>>);

impl PinnedRanges {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(usize, usize)>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `bytes` lie inside one pinned allocation.
    pub(super) fn holds(&self, bytes: &[u8]) -> bool {
        self.holds_range(bytes.as_ptr(), bytes.len())
    }

    /// Whether `record` lies inside one pinned allocation (asked without waiting for a copy into it).
    pub(super) fn holds_record(&self, record: &BlockBuf) -> bool {
        self.holds_range(record.as_ptr(), record.len())
    }

    fn holds_range(&self, start: *const u8, len: usize) -> bool {
        let (start, end) = (start as usize, start as usize + len);
        self.lock().iter().any(|&(s, e)| s <= start && end <= e)
    }
}

/// The parts of some pools, in record order: device addresses, 16-byte words per block, and where each
/// part's words start in a record.
#[derive(Default)]
pub(super) struct Parts {
    pub(super) bases: Vec<u64>,
    words: Vec<u64>,
    offsets: Vec<u64>,
    pub(super) record_words: u64,
}

impl Parts {
    pub(super) fn push(&mut self, base: u64, bytes_per_block: usize) -> Result<()> {
        if !bytes_per_block.is_multiple_of(16) {
            return Err(crate::EngineError::InvalidConfig(format!(
                "KV blocks of {bytes_per_block} bytes per pool part are not whole 16-byte words"
            )));
        }
        let words = (bytes_per_block / 16) as u64;
        self.bases.push(base);
        self.words.push(words);
        self.offsets.push(self.record_words);
        self.record_words += words;
        Ok(())
    }

    /// The kernels' `parts` argument: bases, then words, then offsets.
    pub(super) fn table(&self) -> Vec<u64> {
        [&self.bases, &self.words, &self.offsets]
            .into_iter()
            .flatten()
            .copied()
            .collect()
    }

    /// Words per block of each part.
    pub(super) fn words(&self) -> impl Iterator<Item = u64> + '_ {
        self.words.iter().copied()
    }

    pub(super) fn record_bytes(&self) -> usize {
        self.record_words as usize * 16
    }
}

/// Bytes per block of a pool's parts: its values, and (int8) its scales, one f32 per head and token;
/// together [`crate::backend::KvShape::block_bytes`].
pub(super) fn part_bytes(shape: &KvShape) -> (usize, usize) {
    let scales = match shape.dtype {
        KvDtype::Int8 => shape.block_size * shape.num_kv_heads * 4,
        _ => 0,
    };
    (shape.block_bytes() - scales, scales)
}

/// Pinned host memory, written once so it is mapped, freed when dropped (and then forgotten by the
/// ranges it was entered in).
struct PinnedMemory {
    ptr: *mut u8,
    len: usize,
    ranges: Option<Arc<PinnedRanges>>,
    _slice: PinnedHostSlice<u8>,
}

impl Drop for PinnedMemory {
    fn drop(&mut self) {
        if let Some(r) = &self.ranges {
            let range = (self.ptr as usize, self.ptr as usize + self.len);
            r.lock().retain(|&x| x != range);
        }
    }
}

impl PinnedMemory {
    fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: the allocation is `len` bytes, zeroed at allocation, and `&mut self` is the only access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

// SAFETY: the pointer is the pinned allocation's own, which lives as long as this value; who writes
// where is the arena's business (each slot has one owner).
unsafe impl Send for PinnedMemory {}
// SAFETY: as above.
unsafe impl Sync for PinnedMemory {}

impl HostMemory for PinnedMemory {
    fn as_mut_ptr(&self) -> *mut u8 {
        self.ptr
    }
    fn len(&self) -> usize {
        self.len
    }
}

fn alloc_pinned(
    ctx: &Arc<CudaContext>,
    bytes: usize,
    ranges: Option<Arc<PinnedRanges>>,
) -> Result<PinnedMemory> {
    // SAFETY: the memory is zeroed below before anyone reads it.
    let mut slice = unsafe { ctx.alloc_pinned_with_flags::<u8>(bytes, 0) }.map_err(cuda_err)?;
    let ptr = slice.as_mut_ptr().map_err(cuda_err)?;
    // SAFETY: `ptr` points to `bytes` writable bytes just allocated.
    unsafe { std::ptr::write_bytes(ptr, 0, bytes) };
    if let Some(r) = &ranges {
        r.lock().push((ptr as usize, ptr as usize + bytes));
    }
    Ok(PinnedMemory {
        ptr,
        len: bytes,
        ranges,
        _slice: slice,
    })
}

/// Runs of consecutive records whose host buffers lie end to end: (first record, records).
fn contiguous_runs(starts: &[usize], record_bytes: usize) -> Vec<(usize, usize)> {
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for (i, &at) in starts.iter().enumerate() {
        match runs.last_mut() {
            Some((first, len)) if starts[*first] + *len * record_bytes == at => *len += 1,
            _ => runs.push((i, 1)),
        }
    }
    runs
}

impl CudaBackend {
    /// The allocator of the host tier's arena: pinned memory of this device's context.
    pub fn pinned_allocator(&self) -> HostAllocator {
        let ctx = Arc::clone(&self.dev.ctx);
        let ranges = Arc::clone(&self.lock_staging().pinned);
        Arc::new(move |bytes| {
            let memory = alloc_pinned(&ctx, bytes, Some(Arc::clone(&ranges)))?;
            Ok(Box::new(memory) as Box<dyn HostMemory>)
        })
    }

    fn lock_staging(&self) -> std::sync::MutexGuard<'_, Staging> {
        self.staging.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` with the device staging buffer's address and the pinned bounce buffer, both grown to
    /// at least `len` bytes, and the pinned ranges.
    fn with_staging<T>(
        &self,
        len: usize,
        f: impl FnOnce(u64, &mut [u8], &PinnedRanges) -> Result<T>,
    ) -> Result<T> {
        let mut staging = self.lock_staging();
        if staging.device.as_ref().is_none_or(|d| d.len() < len) {
            staging.device = None;
            staging.device = Some(self.zeros::<u8>(len.max(1 << 20))?);
        }
        if staging.bounce.as_ref().is_none_or(|b| b.len < len) {
            staging.bounce = None;
            staging.bounce = Some(alloc_pinned(&self.dev.ctx, len.max(1 << 20), None)?);
        }
        let Staging {
            device: Some(device),
            bounce: Some(bounce),
            pinned,
        } = &mut *staging
        else {
            unreachable!("filled above")
        };
        let (dptr, _g) = device.device_ptr_mut(&self.dev.stream);
        f(dptr, bounce.bytes(), pinned)
    }

    /// Packs (`gather`) or unpacks the `n` blocks at `ids` of every part to or from `n` records at
    /// `packed`, in one launch on `stream`.
    pub(super) fn pack(
        &self,
        stream: &CudaStream,
        gather: bool,
        (parts, table): (&Parts, u64),
        (packed, ids, n): (u64, u64, usize),
    ) -> Result<()> {
        let name = if gather {
            "kv_blocks_gather"
        } else {
            "kv_blocks_scatter"
        };
        let widest = parts.words.iter().copied().max().unwrap_or(0) as usize;
        let cfg = LaunchConfig {
            grid_dim: (
                (n * widest).div_ceil(256).clamp(1, 4096) as u32,
                parts.bases.len() as u32,
                1,
            ),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let (num_parts, count, record_words) = (
            parts.bases.len() as i32,
            n as i32,
            parts.record_words as i32,
        );
        let mut b = stream.launch_builder(self.kernels.get(name)?);
        b.arg(&table)
            .arg(&num_parts)
            .arg(&packed)
            .arg(&ids)
            .arg(&count)
            .arg(&record_words);
        // SAFETY: the table holds every part's base, words and offset; each part holds the blocks `ids`
        // (checked against the pools) and `packed` holds n records of `record_words` words; the pools'
        // buffers are kept alive by the caller's guards, `packed` by `with_staging`.
        unsafe { b.launch(cfg) }.map_err(cuda_err)?;
        Ok(())
    }

    /// Moves the records of `blocks` between the parts and the host, chunk by chunk: `copy` moves
    /// records `[first, first + n)` between the host and the staging address it is given, with the
    /// bounce buffer and the pinned ranges at hand.
    fn transfer(
        &self,
        gather: bool,
        parts: &Parts,
        blocks: &[u32],
        mut copy: impl FnMut(Chunk<'_>) -> Result<()>,
    ) -> Result<()> {
        let record = parts.record_bytes();
        if blocks.is_empty() || record == 0 {
            return Ok(());
        }
        let stream = &self.dev.stream;
        let ids = stream.clone_htod(blocks).map_err(cuda_err)?;
        let table = stream.clone_htod(&parts.table()).map_err(cuda_err)?;
        let per_chunk = (STAGING_BYTES / record).max(1).min(blocks.len());
        let ((ids_ptr, _gi), (table_ptr, _gt)) = (ids.device_ptr(stream), table.device_ptr(stream));
        self.with_staging(per_chunk * record, |staging, bounce, pinned| {
            for first in (0..blocks.len()).step_by(per_chunk) {
                let n = per_chunk.min(blocks.len() - first);
                let chunk_ids = ids_ptr + 4 * first as u64;
                let chunk = Chunk {
                    first,
                    n,
                    record,
                    staging,
                    bounce: &mut *bounce,
                    pinned,
                };
                if gather {
                    self.pack(stream, true, (parts, table_ptr), (staging, chunk_ids, n))?;
                    copy(chunk)?;
                } else {
                    copy(chunk)?;
                    self.pack(stream, false, (parts, table_ptr), (staging, chunk_ids, n))?;
                }
            }
            stream.synchronize().map_err(cuda_err)
        })
    }

    /// See [`crate::backend::Backend::read_kv_blocks`]: records all in pinned memory are written on
    /// the transfer stream by the device where they lie, without waiting
    /// ([`CudaBackend::offload_blocks`]); others here, through the bounce buffer.
    pub(super) fn read_blocks(
        &self,
        pools: &[&CudaKv],
        blocks: &[u32],
        out: &mut [BlockBuf],
    ) -> Result<()> {
        let shapes = pools.iter().map(|kv| kv.shape);
        let Some(shape) = pools_transfer_shape(shapes, blocks, out.iter().map(|r| r.len()))? else {
            return Ok(());
        };
        let pinned = Arc::clone(&self.lock_staging().pinned);
        if self.dev.maps_host_memory && out.iter().all(|r| pinned.holds_record(r)) {
            return self.offload_blocks(pools, blocks, out, &shape);
        }
        self.settle_transfers()?;
        let mut out: Vec<&mut [u8]> = out.iter_mut().map(|b| &mut b[..]).collect();
        let s = &self.dev.stream;
        let mut parts = Parts::default();
        let mut guards: Vec<SyncOnDrop<'_>> = Vec::new();
        for kv in pools {
            push_pool_to_read(&mut parts, &mut guards, kv, &shape, s)?;
        }
        let stream = s.cu_stream();
        self.transfer(true, &parts, blocks, |c| {
            let recs = &mut out[c.first..c.first + c.n];
            let direct: Vec<bool> = recs.iter().map(|r| c.pinned.holds(r)).collect();
            let starts = c.host_starts(recs.iter().map(|r| r.as_ptr()), &direct);
            for (i, len) in contiguous_runs(&starts, c.record) {
                // SAFETY: records `i..i + len` of the chunk lie end to end from `starts[i]`
                // (`contiguous_runs`), in `out` (borrowed mutably for this call) or the bounce buffer
                // (held by `with_staging`); the staging chunk holds them, written by the kernel before
                // in stream order. They are read after a synchronisation.
                let host =
                    unsafe { std::slice::from_raw_parts_mut(starts[i] as *mut u8, len * c.record) };
                let src = c.staging + (i * c.record) as u64;
                unsafe { cudarc::driver::result::memcpy_dtoh_async(host, src, stream) }
                    .map_err(cuda_err)?;
            }
            if direct.iter().any(|d| !d) {
                self.dev.stream.synchronize().map_err(cuda_err)?;
                recs.par_iter_mut()
                    .zip(c.bounce.par_chunks_exact(c.record))
                    .zip(direct.par_iter())
                    .filter(|(_, d)| !**d)
                    .for_each(|((to, from), _)| to.copy_from_slice(from));
            }
            Ok(())
        })
    }

    /// See [`crate::backend::Backend::write_kv_blocks`]: records all in pinned memory come back on the
    /// reload stream, read by the device where they lie ([`CudaBackend::reload_blocks`]); others here,
    /// through the bounce buffer.
    pub(super) fn write_blocks(
        &self,
        pools: &mut [&mut CudaKv],
        blocks: &[u32],
        src: &[BlockBytes],
    ) -> Result<()> {
        let shapes = pools.iter().map(|kv| kv.shape);
        let Some(shape) = pools_transfer_shape(shapes, blocks, src.iter().map(|r| r.len()))? else {
            return Ok(());
        };
        let pinned = Arc::clone(&self.lock_staging().pinned);
        if self.dev.maps_host_memory && src.iter().all(|r| pinned.holds_record(r)) {
            return self.reload_blocks(pools, blocks, src, &shape);
        }
        self.settle_transfers()?;
        let src: Vec<&[u8]> = src.iter().map(|r| &r[..]).collect();
        let s = &self.dev.stream;
        let mut parts = Parts::default();
        let mut guards: Vec<SyncOnDrop<'_>> = Vec::new();
        for kv in pools.iter_mut() {
            push_pool_to_write(&mut parts, &mut guards, kv, &shape, s)?;
        }
        let stream = s.cu_stream();
        let mut bounce_in_use = false;
        self.transfer(false, &parts, blocks, |c| {
            let recs = &src[c.first..c.first + c.n];
            let direct: Vec<bool> = recs.iter().map(|r| c.pinned.holds(r)).collect();
            if direct.iter().any(|d| !d) {
                if bounce_in_use {
                    // The previous chunk's copies may still be reading the bounce buffer.
                    self.dev.stream.synchronize().map_err(cuda_err)?;
                }
                c.bounce
                    .par_chunks_exact_mut(c.record)
                    .zip(recs.par_iter())
                    .zip(direct.par_iter())
                    .filter(|(_, d)| !**d)
                    .for_each(|((to, from), _)| to.copy_from_slice(from));
                bounce_in_use = true;
            }
            let starts = c.host_starts(recs.iter().map(|r| r.as_ptr()), &direct);
            for (i, len) in contiguous_runs(&starts, c.record) {
                // SAFETY: records `i..i + len` of the chunk lie end to end from `starts[i]`
                // (`contiguous_runs`), in `src` (borrowed for this call, which ends with a
                // synchronisation) or the bounce buffer (not written again before the copy is done);
                // the staging chunk has room for them.
                let host =
                    unsafe { std::slice::from_raw_parts(starts[i] as *const u8, len * c.record) };
                let dst = c.staging + (i * c.record) as u64;
                unsafe { cudarc::driver::result::memcpy_htod_async(dst, host, stream) }
                    .map_err(cuda_err)?;
            }
            Ok(())
        })
    }
}

/// One chunk of a transfer: records `first..first + n`, each `record` bytes, at `staging` on the device;
/// records outside pinned memory go through `bounce`, at the same offset as in the staging chunk.
struct Chunk<'a> {
    first: usize,
    n: usize,
    record: usize,
    staging: u64,
    bounce: &'a mut [u8],
    pinned: &'a PinnedRanges,
}

impl Chunk<'_> {
    /// Where each record of the chunk is copied from or to on the host: its own buffer when pinned,
    /// else its place in the bounce buffer.
    fn host_starts(&self, records: impl Iterator<Item = *const u8>, direct: &[bool]) -> Vec<usize> {
        records
            .zip(direct)
            .enumerate()
            .map(|(i, (r, &d))| match d {
                true => r as usize,
                false => self.bounce.as_ptr() as usize + i * self.record,
            })
            .collect()
    }
}

fn push_part<'a>(
    parts: &mut Parts,
    guards: &mut Vec<SyncOnDrop<'a>>,
    (base, guard): (u64, SyncOnDrop<'a>),
    bytes_per_block: usize,
) -> Result<()> {
    guards.push(guard);
    parts.push(base, bytes_per_block)
}

/// Adds the parts of a pool about to be read on `stream` to `parts`: its elements, and an int8 pool's
/// scales, each `part_bytes(shape)` per block.
pub(super) fn push_pool_to_read<'a>(
    parts: &mut Parts,
    guards: &mut Vec<SyncOnDrop<'a>>,
    kv: &'a CudaKv,
    shape: &KvShape,
    stream: &'a CudaStream,
) -> Result<()> {
    let (values, scale_bytes) = part_bytes(shape);
    let mut push = |ptr, bytes| push_part(parts, guards, ptr, bytes);
    match &kv.store {
        CudaKvStore::F32(d) => push(d.device_ptr(stream), values),
        CudaKvStore::Bf16(d) => push(d.device_ptr(stream), values),
        CudaKvStore::Int8 { q, scales } => {
            push(q.device_ptr(stream), values)?;
            push(scales.device_ptr(stream), scale_bytes)
        }
    }
}

/// Adds the parts of a pool about to be written on `stream` to `parts`: its elements, and an int8
/// pool's scales, each `part_bytes(shape)` per block.
pub(super) fn push_pool_to_write<'a>(
    parts: &mut Parts,
    guards: &mut Vec<SyncOnDrop<'a>>,
    kv: &'a mut CudaKv,
    shape: &KvShape,
    stream: &'a CudaStream,
) -> Result<()> {
    let (values, scale_bytes) = part_bytes(shape);
    let mut push = |ptr, bytes| push_part(parts, guards, ptr, bytes);
    match &mut kv.store {
        CudaKvStore::F32(d) => push(d.device_ptr_mut(stream), values),
        CudaKvStore::Bf16(d) => push(d.device_ptr_mut(stream), values),
        CudaKvStore::Int8 { q, scales } => {
            push(q.device_ptr_mut(stream), values)?;
            push(scales.device_ptr_mut(stream), scale_bytes)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::contiguous_runs;

    #[test]
    fn records_lying_end_to_end_are_copied_as_one_run() {
        assert_eq!(
            contiguous_runs(&[100, 110, 120, 500, 510, 90], 10),
            [(0, 3), (3, 2), (5, 1)]
        );
        assert!(contiguous_runs(&[], 10).is_empty());
    }
}
