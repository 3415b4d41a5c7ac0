//! Whole blocks of a KV pool to and from the host, for the tiered KV cache.
//!
//! A pool has one or two parts (its elements; int8 pools also their scales), each `[num_blocks, …]`.
//! Going out, a kernel packs the blocks of each part into a device buffer (part by part, in the order
//! asked), one copy brings the whole buffer into pinned host memory, and every core assembles the
//! host records from it. Coming back, the same in reverse. Block ids are rarely consecutive (a freed
//! request's blocks return to the pool last first), so one copy per block would be thousands of small
//! copies; this is one copy and two launches per call.

use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut, PinnedHostSlice, PushKernelArg};
use rayon::prelude::*;

use super::{CudaBackend, CudaKv, CudaKvStore, cuda_err, grid};
use crate::error::Result;

/// One part of a pool: its device address and bytes per block.
#[derive(Clone, Copy)]
struct Part {
    base: u64,
    per_block: usize,
}

/// The device and pinned host buffers a transfer passes through; both only grow.
#[derive(Default)]
pub(super) struct Staging {
    host: Option<PinnedHostSlice<u8>>,
    device: Option<CudaSlice<u8>>,
}

impl CudaBackend {
    /// Runs `f` with the pool's parts; their device pointers stay valid for its duration.
    fn with_parts<T>(&self, kv: &CudaKv, f: impl FnOnce(&[Part]) -> Result<T>) -> Result<T> {
        let s = &self.dev.stream;
        let elems = kv.shape.block_size * kv.shape.num_kv_heads * kv.shape.head_dim;
        match &kv.store {
            CudaKvStore::F32(d) => {
                let (p, _g) = d.device_ptr(s);
                f(&[Part {
                    base: p,
                    per_block: elems * 4,
                }])
            }
            CudaKvStore::Bf16(d) => {
                let (p, _g) = d.device_ptr(s);
                f(&[Part {
                    base: p,
                    per_block: elems * 2,
                }])
            }
            CudaKvStore::Int8 { q, scales } => {
                let ((pq, _gq), (ps, _gs)) = (q.device_ptr(s), scales.device_ptr(s));
                let per_scale = elems / kv.shape.head_dim.max(1) * 4;
                f(&[
                    Part {
                        base: pq,
                        per_block: elems,
                    },
                    Part {
                        base: ps,
                        per_block: per_scale,
                    },
                ])
            }
        }
    }

    /// Runs `f` on staging buffers of at least `len` bytes each: the pinned host buffer and the device
    /// buffer's address.
    fn with_staging<T>(
        &self,
        len: usize,
        f: impl FnOnce(&mut [u8], u64) -> Result<T>,
    ) -> Result<T> {
        let mut staging = self.staging.lock().unwrap_or_else(|e| e.into_inner());
        if staging.host.as_ref().is_none_or(|h| h.len() < len) {
            staging.host = None;
            // SAFETY: the buffer is only read after the copies that fill it have finished.
            let fresh = unsafe { self.dev.ctx.alloc_pinned_with_flags(len.max(1 << 20), 0) };
            staging.host = Some(fresh.map_err(cuda_err)?);
        }
        if staging.device.as_ref().is_none_or(|d| d.len() < len) {
            staging.device = None;
            staging.device = Some(self.zeros::<u8>(len.max(1 << 20))?);
        }
        let Staging {
            host: Some(host),
            device: Some(device),
        } = &mut *staging
        else {
            unreachable!("filled above")
        };
        let (dptr, _g) = device.device_ptr_mut(&self.dev.stream);
        let host = host.as_mut_slice().map_err(cuda_err)?;
        f(&mut host[..len], dptr)
    }

    /// Packs (`gather`) or unpacks the blocks `ids` of `part` to or from `packed` on the device.
    fn pack(
        &self,
        gather: bool,
        part: Part,
        packed: u64,
        ids: &CudaSlice<u32>,
        n: usize,
    ) -> Result<()> {
        if !part.per_block.is_multiple_of(16) {
            return Err(crate::EngineError::InvalidConfig(format!(
                "KV blocks of {} bytes per pool part are not whole 16-byte words",
                part.per_block
            )));
        }
        let words = (part.per_block / 16) as i32;
        let name = if gather {
            "kv_blocks_gather"
        } else {
            "kv_blocks_scatter"
        };
        let (from, to) = if gather {
            (part.base, packed)
        } else {
            (packed, part.base)
        };
        let count = n as i32;
        let mut b = self.dev.stream.launch_builder(self.kernels.get(name)?);
        b.arg(&from).arg(&to).arg(ids).arg(&count).arg(&words);
        // SAFETY: `from` and `to` hold n blocks of `words` 16-byte words (ids checked against the
        // pool, the packed buffer sized by the caller); the pool's pointers are kept alive by
        // `with_parts` and the packed buffer by `with_staging`.
        unsafe { b.launch(grid(n * words as usize)) }.map_err(cuda_err)?;
        Ok(())
    }

    /// See [`crate::backend::Backend::read_kv_blocks`].
    pub(super) fn read_blocks(
        &self,
        kv: &CudaKv,
        blocks: &[u32],
        out: &mut [&mut [u8]],
    ) -> Result<()> {
        kv.shape
            .check_block_transfer(blocks, out.iter().map(|r| r.len()))?;
        let n = blocks.len();
        let ids = self.dev.stream.clone_htod(blocks).map_err(cuda_err)?;
        self.with_parts(kv, |parts| {
            let total: usize = parts.iter().map(|p| p.per_block * n).sum();
            self.with_staging(total, |host, device| {
                let mut at = 0;
                for &part in parts {
                    self.pack(true, part, device + at as u64, &ids, n)?;
                    at += part.per_block * n;
                }
                let stream = self.dev.stream.cu_stream();
                // SAFETY: `device` holds `total` bytes written by the kernels above, in stream order;
                // the pinned buffer is read only after the synchronisation below.
                unsafe { cudarc::driver::result::memcpy_dtoh_async(&mut *host, device, stream) }
                    .map_err(cuda_err)?;
                self.dev.stream.synchronize().map_err(cuda_err)?;
                let (mut at, mut in_record) = (0, 0);
                for part in parts {
                    let pb = part.per_block;
                    out.par_iter_mut()
                        .zip(host[at..at + n * pb].par_chunks_exact(pb))
                        .for_each(|(record, from)| {
                            record[in_record..in_record + pb].copy_from_slice(from)
                        });
                    at += pb * n;
                    in_record += pb;
                }
                Ok(())
            })
        })
    }

    /// See [`crate::backend::Backend::write_kv_blocks`].
    pub(super) fn write_blocks(
        &self,
        kv: &mut CudaKv,
        blocks: &[u32],
        src: &[&[u8]],
    ) -> Result<()> {
        kv.shape
            .check_block_transfer(blocks, src.iter().map(|r| r.len()))?;
        let n = blocks.len();
        let ids = self.dev.stream.clone_htod(blocks).map_err(cuda_err)?;
        self.with_parts(kv, |parts| {
            let total: usize = parts.iter().map(|p| p.per_block * n).sum();
            self.with_staging(total, |host, device| {
                let (mut at, mut in_record) = (0, 0);
                for part in parts {
                    let pb = part.per_block;
                    host[at..at + n * pb]
                        .par_chunks_exact_mut(pb)
                        .zip(src.par_iter())
                        .for_each(|(to, record)| {
                            to.copy_from_slice(&record[in_record..in_record + pb])
                        });
                    at += pb * n;
                    in_record += pb;
                }
                let stream = self.dev.stream.cu_stream();
                // SAFETY: both buffers hold `total` bytes; the pinned one is not touched again before
                // the synchronisation below.
                unsafe { cudarc::driver::result::memcpy_htod_async(device, &host[..], stream) }
                    .map_err(cuda_err)?;
                let mut at = 0;
                for &part in parts {
                    self.pack(false, part, device + at as u64, &ids, n)?;
                    at += part.per_block * n;
                }
                self.dev.stream.synchronize().map_err(cuda_err)
            })
        })
    }
}
