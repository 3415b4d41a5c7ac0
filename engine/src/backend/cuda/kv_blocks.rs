//! Whole blocks of a KV pool to and from the host, for the tiered KV cache.
//!
//! A pool has one or two parts (its elements; int8 pools also their scales), each `[num_blocks, …]`, so
//! a run of consecutive block ids is one contiguous range per part. Each range is one asynchronous copy
//! into (or out of) a pinned staging buffer, laid out part by part; one wait on the stream ends the
//! batch, and the host side is assembled from the staging buffer in the block layout
//! [`crate::backend::Backend::read_kv_blocks`] describes.

use cudarc::driver::sys::CUdeviceptr;
use cudarc::driver::{DevicePtr, PinnedHostSlice, result};

use super::{CudaBackend, CudaKv, CudaKvStore, cuda_err};
use crate::error::Result;

/// One part of a pool: its device address and bytes per block.
#[derive(Clone, Copy)]
struct Part {
    base: CUdeviceptr,
    per_block: usize,
}

/// `(index in the batch, first block, blocks)` of each run of consecutive block ids.
fn runs(blocks: &[u32]) -> Vec<(usize, usize, usize)> {
    let mut out: Vec<(usize, usize, usize)> = Vec::new();
    for (i, &b) in blocks.iter().enumerate() {
        match out.last_mut() {
            Some((_, first, len)) if *first + *len == b as usize => *len += 1,
            _ => out.push((i, b as usize, 1)),
        }
    }
    out
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

    /// Runs `f` on a pinned staging buffer of at least `len` bytes (grown as needed).
    fn with_staging<T>(&self, len: usize, f: impl FnOnce(&mut [u8]) -> Result<T>) -> Result<T> {
        let mut staging = self.staging.lock().unwrap_or_else(|e| e.into_inner());
        if staging.as_ref().is_none_or(|s| s.len() < len) {
            *staging = None;
            // SAFETY: the buffer is only read after the copies that fill it have finished.
            let fresh: PinnedHostSlice<u8> =
                unsafe { self.dev.ctx.alloc_pinned_with_flags(len.max(1 << 20), 0) }
                    .map_err(cuda_err)?;
            *staging = Some(fresh);
        }
        let Some(buf) = staging.as_mut() else {
            unreachable!("filled above")
        };
        let host = buf.as_mut_slice().map_err(cuda_err)?;
        f(&mut host[..len])
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
        let runs = runs(blocks);
        let stream = self.dev.stream.cu_stream();
        self.with_parts(kv, |parts| {
            let total: usize = parts.iter().map(|p| p.per_block * n).sum();
            self.with_staging(total, |stage| {
                let mut at = 0;
                for part in parts {
                    for &(i, first, len) in &runs {
                        let dst =
                            &mut stage[at + i * part.per_block..at + (i + len) * part.per_block];
                        let src = part.base + (first * part.per_block) as u64;
                        // SAFETY: the range lies inside the pool (block ids checked) and inside the
                        // pinned buffer, which is not touched until the stream is synchronised below.
                        unsafe { result::memcpy_dtoh_async(dst, src, stream) }.map_err(cuda_err)?;
                    }
                    at += part.per_block * n;
                }
                self.dev.stream.synchronize().map_err(cuda_err)?;
                let mut at = 0;
                let mut in_record = 0;
                for part in parts {
                    for (i, record) in out.iter_mut().enumerate() {
                        let from = at + i * part.per_block;
                        record[in_record..in_record + part.per_block]
                            .copy_from_slice(&stage[from..from + part.per_block]);
                    }
                    at += part.per_block * n;
                    in_record += part.per_block;
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
        let runs = runs(blocks);
        let stream = self.dev.stream.cu_stream();
        self.with_parts(kv, |parts| {
            let total: usize = parts.iter().map(|p| p.per_block * n).sum();
            self.with_staging(total, |stage| {
                let (mut at, mut in_record) = (0, 0);
                for part in parts {
                    for (i, record) in src.iter().enumerate() {
                        let to = at + i * part.per_block;
                        stage[to..to + part.per_block]
                            .copy_from_slice(&record[in_record..in_record + part.per_block]);
                    }
                    for &(i, first, len) in &runs {
                        let from = &stage[at + i * part.per_block..at + (i + len) * part.per_block];
                        let dst = part.base + (first * part.per_block) as u64;
                        // SAFETY: as in `read_blocks`; the buffer outlives the copies, which finish
                        // before the stream is synchronised below.
                        unsafe { result::memcpy_htod_async(dst, from, stream) }
                            .map_err(cuda_err)?;
                    }
                    at += part.per_block * n;
                    in_record += part.per_block;
                }
                self.dev.stream.synchronize().map_err(cuda_err)
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::runs;

    #[test]
    fn consecutive_block_ids_make_one_run_each() {
        assert_eq!(
            runs(&[4, 5, 6, 9, 2, 3]),
            vec![(0, 4, 3), (3, 9, 1), (4, 2, 2)]
        );
        assert!(runs(&[]).is_empty());
    }
}
