//! bf16 products through cuBLASLt with one algorithm per size class of rows.
//!
//! cuBLAS chooses an algorithm for every new problem shape by its heuristics, on the host, and caches
//! the choice by the exact shape. A prefill step's row count is its prompt's length (or the rest of it
//! past the last full chunk), so nearly every new question met a shape not seen before, and each of
//! its products paid the heuristics again: about 10 ms of issuing for a step at the Llama-3.2-1B shape
//! on an H100, more than the step's own work. Here the heuristics run once per size class (the rows
//! rounded up to a power of two) and weight shape, and every row count of that class reuses the
//! algorithm, so only a class's first step pays. A product cuBLASLt refuses with that algorithm falls
//! back to the plain cuBLAS call (`cublasGemmEx`).

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Mutex;

use cudarc::cublas::sys::cudaDataType_t as BlasDataType;
use cudarc::cublaslt::result as lt;
use cudarc::cublaslt::sys::{
    cublasComputeType_t, cublasLtHandle_t, cublasLtMatmulAlgo_t, cublasLtMatmulDescAttributes_t,
    cublasLtMatmulPreferenceAttributes_t, cublasLtMatrixLayout_t, cudaDataType,
};
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut};

use super::cuda_err;
use crate::error::Result;

/// Device workspace the chosen algorithms may use (split-K reductions and the like).
const WORKSPACE_BYTES: usize = 32 << 20;

/// What an algorithm is chosen for: the output features, the size class of the rows, the inputs'
/// width, and the output's element type (as its raw value).
type ShapeClass = (usize, usize, usize, u32);

/// A cuBLASLt handle, its workspace, and the algorithm chosen for each shape class so far.
pub(super) struct LtGemm {
    handle: cublasLtHandle_t,
    workspace: Mutex<CudaSlice<u8>>,
    algos: Mutex<HashMap<ShapeClass, Option<cublasLtMatmulAlgo_t>>>,
}

// SAFETY: the handle is only used under the backend's one stream, and cuBLASLt handles may be used
// from any thread; the workspace and the algorithms are behind mutexes.
unsafe impl Send for LtGemm {}
unsafe impl Sync for LtGemm {}

impl Drop for LtGemm {
    fn drop(&mut self) {
        // SAFETY: the handle was created in `new` and is destroyed once.
        let _ = unsafe { lt::destroy_handle(self.handle) };
    }
}

/// The size class of `rows`: the next power of two (a class holds the row counts above half of it).
fn size_class(rows: usize) -> usize {
    rows.next_power_of_two()
}

/// A descriptor created for one call and destroyed when dropped.
struct Layouts {
    desc: cudarc::cublaslt::sys::cublasLtMatmulDesc_t,
    a: cublasLtMatrixLayout_t,
    b: cublasLtMatrixLayout_t,
    c: cublasLtMatrixLayout_t,
}

impl Layouts {
    /// `outᵀ [n, rows] = W [n, k] · xᵀ [k, rows]` in column-major terms: A is W read transposed
    /// (`k × n`, leading dimension k), B is x (`k × rows`), C and D are `n × rows` of `c_type`.
    fn new(n: usize, rows: usize, k: usize, c_type: cudaDataType) -> Result<Self> {
        let desc = lt::create_matmul_desc(
            cublasComputeType_t::CUBLAS_COMPUTE_32F,
            cudaDataType::CUDA_R_32F,
        )
        .map_err(cuda_err)?;
        let layouts = Layouts {
            desc,
            a: lt::create_matrix_layout(cudaDataType::CUDA_R_16BF, k as u64, n as u64, k as i64)
                .map_err(cuda_err)?,
            b: lt::create_matrix_layout(cudaDataType::CUDA_R_16BF, k as u64, rows as u64, k as i64)
                .map_err(cuda_err)?,
            c: lt::create_matrix_layout(c_type, n as u64, rows as u64, n as i64)
                .map_err(cuda_err)?,
        };
        let transposed: i32 = 1; // CUBLAS_OP_T
        // SAFETY: the descriptor was just created; the attribute is a 32-bit operation enum.
        unsafe {
            lt::set_matmul_desc_attribute(
                desc,
                cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSA,
                (&transposed) as *const i32 as *const c_void,
                std::mem::size_of::<i32>(),
            )
        }
        .map_err(cuda_err)?;
        Ok(layouts)
    }
}

impl Drop for Layouts {
    fn drop(&mut self) {
        // SAFETY: each was created in `new` and is destroyed once.
        unsafe {
            let _ = lt::destroy_matrix_layout(self.a);
            let _ = lt::destroy_matrix_layout(self.b);
            let _ = lt::destroy_matrix_layout(self.c);
            let _ = lt::destroy_matmul_desc(self.desc);
        }
    }
}

impl LtGemm {
    /// A handle and its workspace on `stream`'s device, unless `DOCQA_CUDA_LT_GEMM=0` asks for plain
    /// cuBLAS or cuBLASLt cannot be set up (then every product goes through plain cuBLAS).
    pub(super) fn open(stream: &std::sync::Arc<CudaStream>) -> Option<Self> {
        if std::env::var("DOCQA_CUDA_LT_GEMM").is_ok_and(|v| v == "0") {
            return None;
        }
        // SAFETY: only tries to dlopen the library by name.
        if !unsafe { cudarc::cublaslt::sys::is_culib_present() } {
            return None;
        }
        Self::new(stream)
            .inspect_err(
                |e| tracing::warn!(%e, "cuBLASLt could not be set up; products use cuBLAS"),
            )
            .ok()
    }

    fn new(stream: &std::sync::Arc<CudaStream>) -> Result<Self> {
        let handle = lt::create_handle().map_err(cuda_err)?;
        let workspace = stream
            .alloc_zeros::<u8>(WORKSPACE_BYTES)
            .map_err(cuda_err)?;
        Ok(LtGemm {
            handle,
            workspace: Mutex::new(workspace),
            algos: Mutex::new(HashMap::new()),
        })
    }

    /// The algorithm for `(n, rows, k, c_type)`'s class, chosen by the heuristics on the class's
    /// largest row count the first time; None where they offer none.
    fn algo(
        &self,
        (n, rows, k): (usize, usize, usize),
        c_type: cudaDataType,
    ) -> Option<cublasLtMatmulAlgo_t> {
        let class = (n, size_class(rows), k, c_type as u32);
        let mut algos = self.algos.lock().unwrap_or_else(|e| e.into_inner());
        *algos
            .entry(class)
            .or_insert_with(|| self.heuristic((n, class.1, k), c_type))
    }

    /// The heuristics' first algorithm for `rows` rows of this shape within the workspace, if any.
    fn heuristic(
        &self,
        (n, rows, k): (usize, usize, usize),
        c_type: cudaDataType,
    ) -> Option<cublasLtMatmulAlgo_t> {
        let layouts = Layouts::new(n, rows, k, c_type).ok()?;
        let pref = lt::create_matmul_pref().ok()?;
        let max = WORKSPACE_BYTES as u64;
        // SAFETY: every descriptor is live; the heuristics read shapes only; the preference is
        // destroyed once, after them.
        unsafe {
            let found = lt::set_matmul_pref_attribute(
                pref,
                cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                (&max) as *const u64 as *const c_void,
                std::mem::size_of::<u64>(),
            )
            .and_then(|()| {
                lt::get_matmul_algo_heuristic(
                    self.handle,
                    layouts.desc,
                    layouts.a,
                    layouts.b,
                    layouts.c,
                    layouts.c,
                    pref,
                )
            });
            let _ = lt::destroy_matmul_pref(pref);
            found.ok().map(|h| h.algo)
        }
    }

    /// `C[rows, n] = x · Wᵀ + beta · C` (f32 accumulation) with the class's algorithm; false where
    /// there is none or cuBLASLt refuses it for this row count (the caller then runs the product
    /// another way), true once it is issued.
    ///
    /// # Safety
    /// `c` must hold `rows · n` elements of `c_type` on `stream`; `xb` and `wd` at least
    /// `rows · k` and `n · k` bf16 elements.
    pub(super) unsafe fn try_gemm(
        &self,
        stream: &CudaStream,
        (xb, wd): (&CudaSlice<u16>, &CudaSlice<u16>),
        (rows, n, k): (usize, usize, usize),
        beta: f32,
        (c, c_type): (u64, BlasDataType),
    ) -> Result<bool> {
        let c_type = match c_type {
            BlasDataType::CUDA_R_32F => cudaDataType::CUDA_R_32F,
            BlasDataType::CUDA_R_16BF => cudaDataType::CUDA_R_16BF,
            _ => return Ok(false),
        };
        let Some(algo) = self.algo((n, rows, k), c_type) else {
            return Ok(false);
        };
        let layouts = Layouts::new(n, rows, k, c_type)?;
        let alpha = 1.0f32;
        let (a, _ga) = wd.device_ptr(stream);
        let (b, _gb) = xb.device_ptr(stream);
        let mut workspace = self.workspace.lock().unwrap_or_else(|e| e.into_inner());
        let (w, _gw) = workspace.device_ptr_mut(stream);
        // SAFETY: the layouts describe the buffers as the caller vouches; the workspace is this
        // handle's, used on this one stream.
        let issued = unsafe {
            lt::matmul(
                self.handle,
                layouts.desc,
                (&alpha) as *const f32 as *const c_void,
                (&beta) as *const f32 as *const c_void,
                a as *const c_void,
                layouts.a,
                b as *const c_void,
                layouts.b,
                c as *const c_void,
                layouts.c,
                c as *mut c_void,
                layouts.c,
                &algo,
                w as *mut c_void,
                WORKSPACE_BYTES,
                stream.cu_stream() as *mut _,
            )
        };
        Ok(issued.is_ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_counts_share_a_class_up_to_the_next_power_of_two() {
        assert_eq!(size_class(5), 8);
        assert_eq!(size_class(8), 8);
        assert_eq!(size_class(815), 1024);
        assert_eq!(size_class(1024), 1024);
        assert_eq!(size_class(1499), 2048);
        assert_eq!(size_class(2048), 2048);
    }
}
