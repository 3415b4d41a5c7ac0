//! TMA tensor maps of the KV pools, for the Hopper prefill kernel's TMA form
//! (`flash_prefill_sm90_tma_*`): one map per bf16 pool over [slots, KV heads, head_dim], whose
//! boxes are one KV block of one head, 64 columns (128 bytes) wide, with the 128-byte swizzle the
//! kernel's tiles are laid out in.

use std::ffi::c_void;

use cudarc::driver::{CudaStream, DevicePtr, DeviceRepr, SyncOnDrop, sys};

use super::{CudaKv, CudaKvStore, cuda_err};
use crate::error::{EngineError, Result};

/// A tensor map (CUtensorMap), passed to a kernel by value.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug)]
pub(super) struct TensorMap([u64; 16]);

// SAFETY: 128 plain bytes, as the kernel's `TensorMap` parameter declares them.
unsafe impl DeviceRepr for TensorMap {}

/// Columns of a box: 128 bytes of bf16, the span of the 128-byte swizzle.
const BOX_COLUMNS: u32 = 64;

/// The map of a bf16 pool, after making `stream` wait for blocks still being moved into it. The
/// guard records the kernel's read of the pool when dropped: keep it until the launch is queued.
pub(super) fn pool_map<'a>(
    kv: &'a CudaKv,
    stream: &'a CudaStream,
) -> Result<(TensorMap, SyncOnDrop<'a>)> {
    let CudaKvStore::Bf16(data) = &kv.store else {
        return Err(EngineError::Internal(
            "TMA tensor maps are made for bf16 pools".into(),
        ));
    };
    kv.await_transfer(stream)?;
    let s = kv.shape;
    let dims = [s.head_dim, s.num_kv_heads, s.num_blocks * s.block_size].map(|d| d as u64);
    // Bytes between consecutive elements of dimensions 1 and 2 (dimension 0 is contiguous).
    let strides = [s.head_dim * 2, s.num_kv_heads * s.head_dim * 2].map(|b| b as u64);
    let boxes = [BOX_COLUMNS, 1, s.block_size as u32];
    let steps = [1u32; 3];
    let (ptr, guard) = data.device_ptr(stream);
    let mut map = std::mem::MaybeUninit::<sys::CUtensorMap>::uninit();
    // SAFETY: the arrays hold the rank's (3) entries; `ptr` is the pool's device address, 16-byte
    // aligned as every allocation is, and the strides are multiples of 16 (head_dim 64 or 128).
    unsafe {
        sys::cuTensorMapEncodeTiled(
            map.as_mut_ptr(),
            sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
            3,
            ptr as *mut c_void,
            dims.as_ptr(),
            strides.as_ptr(),
            boxes.as_ptr(),
            steps.as_ptr(),
            sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
            sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    }
    .result()
    .map_err(cuda_err)?;
    // SAFETY: encoded above.
    let map = unsafe { map.assume_init() };
    Ok((TensorMap(map.opaque), guard))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tensor_map_argument_is_the_drivers_128_bytes_aligned_as_the_kernel_declares() {
        assert_eq!(
            std::mem::size_of::<TensorMap>(),
            std::mem::size_of::<sys::CUtensorMap>()
        );
        assert_eq!(std::mem::size_of::<TensorMap>(), 128);
        assert_eq!(std::mem::align_of::<TensorMap>(), 64);
    }
}
