//! `out[rows, n] = x[rows, k] · Wᵀ (+ bias)` through cuBLAS (a few rows over bf16 weights go to the
//! skinny kernels of [`super::gemv`] instead).
//!
//! Row-major `out` is column-major `outᵀ [n, rows]`, so the call is `outᵀ = W · xᵀ` with `W` read
//! transposed: `gemm(T, N, m = n, n = rows, k)`, every leading dimension the row width. bf16 weights:
//! the activations are rounded to bf16 into a scratch buffer, then `cublasGemmEx` multiplies bf16 × bf16
//! with f32 accumulation into f32 output. f32 weights: `cublasSgemm` (full f32, no TF32).

use cudarc::cublas::result::{gemm_ex, sgemm};
use cudarc::cublas::sys::{
    cublasComputeType_t, cublasGemmAlgo_t, cublasOperation_t, cudaDataType_t,
};
use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut, PushKernelArg};

use super::ops::vector;
use super::{CudaBackend, CudaWeight, CudaWeightData, check_len, cuda_err, grid};
use crate::error::Result;

/// Rounds `x[..n]` to bf16 into the backend's scratch buffer (grown if needed) and runs `f` on it.
fn with_bf16_copy<T>(
    be: &CudaBackend,
    x: &CudaSlice<f32>,
    n: usize,
    f: impl FnOnce(&CudaSlice<u16>) -> Result<T>,
) -> Result<T> {
    let mut scratch = be.scratch.lock().unwrap_or_else(|e| e.into_inner());
    if scratch.as_ref().is_none_or(|s| s.len() < n) {
        *scratch = Some(be.zeros(n)?);
        be.bump_graph_epoch();
    }
    let Some(buf) = scratch.as_mut() else {
        unreachable!("filled above")
    };
    let len = n as i64;
    let mut b = be
        .dev
        .stream
        .launch_builder(be.kernels.get("cast_f32_bf16")?);
    b.arg(x).arg(&mut *buf).arg(&len);
    // SAFETY: arguments match the kernel's signature; both buffers hold n elements.
    unsafe { b.launch(grid(n)) }.map_err(cuda_err)?;
    f(buf)
}

pub(super) fn matmul(
    be: &CudaBackend,
    x: &CudaSlice<f32>,
    w: &CudaWeight,
    bias: Option<&CudaWeight>,
    rows: usize,
    out: &mut CudaSlice<f32>,
) -> Result<()> {
    if super::gemv::bf16_weight(w, rows).is_some() {
        return super::gemv::gemv(be, (x, w, bias), rows, false, out);
    }
    let (n, k) = (w.rows, w.cols);
    check_len("matmul x", x.len(), rows * k)?;
    check_len("matmul out", out.len(), rows * n)?;
    if rows == 0 {
        return Ok(());
    }
    let (m_, n_, k_) = (n as i32, rows as i32, k as i32);
    let (alpha, beta) = (1.0f32, 0.0f32);
    let stream = &be.dev.stream;
    let handle = *be.dev.blas.handle();
    let (op_t, op_n) = (
        cublasOperation_t::CUBLAS_OP_T,
        cublasOperation_t::CUBLAS_OP_N,
    );
    match &w.data {
        CudaWeightData::Bf16(wd) => with_bf16_copy(be, x, rows * k, |xb| {
            let (a, _ga) = wd.device_ptr(stream);
            let (b, _gb) = xb.device_ptr(stream);
            let (c, _gc) = out.device_ptr_mut(stream);
            // SAFETY: A is [n, k] bf16, B is [rows, k] bf16, C is [rows, n] f32, all on this stream.
            unsafe {
                gemm_ex(
                    handle,
                    op_t,
                    op_n,
                    m_,
                    n_,
                    k_,
                    (&alpha) as *const f32 as *const _,
                    a as *const _,
                    cudaDataType_t::CUDA_R_16BF,
                    k_,
                    b as *const _,
                    cudaDataType_t::CUDA_R_16BF,
                    k_,
                    (&beta) as *const f32 as *const _,
                    c as *mut _,
                    cudaDataType_t::CUDA_R_32F,
                    m_,
                    cublasComputeType_t::CUBLAS_COMPUTE_32F,
                    cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
                )
            }
            .map_err(cuda_err)
        })?,
        CudaWeightData::F32(wd) => {
            let (a, _ga) = wd.device_ptr(stream);
            let (b, _gb) = x.device_ptr(stream);
            let (c, _gc) = out.device_ptr_mut(stream);
            // SAFETY: A is [n, k] f32, B is [rows, k] f32, C is [rows, n] f32, all on this stream.
            unsafe {
                sgemm(
                    handle,
                    op_t,
                    op_n,
                    m_,
                    n_,
                    k_,
                    &alpha,
                    a as *const f32,
                    k_,
                    b as *const f32,
                    k_,
                    &beta,
                    c as *mut f32,
                    m_,
                )
            }
            .map_err(cuda_err)?
        }
    }
    if let Some(bias) = bias {
        check_len("matmul bias", bias.cols, n)?;
        let (r, c) = (rows as i64, n as i32);
        let mut b = stream.launch_builder(be.kernels.get("bias_add_f32")?);
        b.arg(&mut *out).arg(vector(bias)?).arg(&r).arg(&c);
        // SAFETY: arguments match the kernel's signature; sizes checked above.
        unsafe { b.launch(grid(rows * n)) }.map_err(cuda_err)?;
    }
    Ok(())
}
