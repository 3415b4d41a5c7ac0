//! `out[rows, n] = x[rows, k] · Wᵀ (+ bias)` through cuBLAS (a few rows over bf16 weights go to the
//! skinny kernels of [`super::gemv`] instead).
//!
//! Row-major `out` is column-major `outᵀ [n, rows]`, so the call is `outᵀ = W · xᵀ` with `W` read
//! transposed: `gemm(T, N, m = n, n = rows, k)`, every leading dimension the row width. bf16 weights:
//! the activations are rounded to bf16 into a scratch buffer (RMS-normalised on the way where a norm
//! comes first, and once for all the products of one input), then `cublasGemmEx` multiplies
//! bf16 × bf16 with f32 accumulation into f32 output, or onto it for a residual add. f32 weights:
//! `cublasSgemm` (full f32, no TF32).

use std::sync::MutexGuard;

use cudarc::cublas::result::{gemm_ex, sgemm};
use cudarc::cublas::sys::{
    cublasComputeType_t, cublasGemmAlgo_t, cublasOperation_t, cudaDataType_t,
};
use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut, PushKernelArg};

use super::gemv::FusedNorm;
use super::ops::{self, vector};
use super::{CudaBackend, CudaWeight, CudaWeightData, check_len, cuda_err, grid};
use crate::error::Result;

/// The backend's bf16 scratch buffer, locked while a caller's products read it.
pub(super) struct Staged<'a>(MutexGuard<'a, Option<CudaSlice<u16>>>);

impl Staged<'_> {
    pub(super) fn buf(&mut self) -> &mut CudaSlice<u16> {
        let Some(buf) = self.0.as_mut() else {
            unreachable!("staged buffers are allocated")
        };
        buf
    }
}

/// Rounds `x[rows, k]` to bf16 into the backend's scratch buffer (grown to at least `capacity`
/// elements), RMS-normalised first with `norm`.
pub(super) fn staged_bf16<'a>(
    be: &'a CudaBackend,
    (x, norm): (&CudaSlice<f32>, FusedNorm<'_>),
    (rows, k): (usize, usize),
    capacity: usize,
) -> Result<Staged<'a>> {
    let n = rows * k;
    check_len("bf16 activations", x.len(), n)?;
    let mut scratch = be.scratch.lock().unwrap_or_else(|e| e.into_inner());
    let need = n.max(capacity);
    if scratch.as_ref().is_none_or(|s| s.len() < need) {
        *scratch = Some(be.zeros(need)?);
        be.bump_graph_epoch();
    }
    let mut staged = Staged(scratch);
    let buf = staged.buf();
    match norm {
        Some(norm) => ops::rms_norm_rows(be, x, norm, (rows, k), buf)?,
        None => ops::cast_to_bf16(be, x, n, buf)?,
    }
    Ok(staged)
}

/// `out[rows, n] = xb · Wᵀ + beta · out` for bf16 activations `xb [rows, k]` and bf16 weights
/// `W [n, k]`, accumulated in f32.
pub(super) fn gemm_bf16(
    be: &CudaBackend,
    (xb, wd): (&CudaSlice<u16>, &CudaSlice<u16>),
    (rows, n, k): (usize, usize, usize),
    beta: f32,
    out: &mut CudaSlice<f32>,
) -> Result<()> {
    check_len("gemm out", out.len(), rows * n)?;
    let (c, _gc) = out.device_ptr_mut(&be.dev.stream);
    // SAFETY: C is [rows, n] f32 (checked above), on this stream.
    unsafe {
        gemm_bf16_into(
            be,
            (xb, wd),
            (rows, n, k),
            beta,
            (c, cudaDataType_t::CUDA_R_32F),
        )
    }
}

/// [`gemm_bf16`] into `c`, a device address of element type `c_type` (f32 or bf16).
///
/// # Safety
/// `c` must hold `rows · n` elements of `c_type`, valid on the backend's stream.
pub(super) unsafe fn gemm_bf16_into(
    be: &CudaBackend,
    (xb, wd): (&CudaSlice<u16>, &CudaSlice<u16>),
    (rows, n, k): (usize, usize, usize),
    beta: f32,
    (c, c_type): (u64, cudaDataType_t),
) -> Result<()> {
    check_len("gemm x", xb.len(), rows * k)?;
    check_len("gemm weight", wd.len(), n * k)?;
    if let Some(lt) = &be.lt {
        // SAFETY: as this function's: x and W checked above, C as the caller vouches.
        if unsafe { lt.try_gemm(&be.dev.stream, (xb, wd), (rows, n, k), beta, (c, c_type))? } {
            return Ok(());
        }
    }
    let (m_, n_, k_) = (n as i32, rows as i32, k as i32);
    let alpha = 1.0f32;
    let stream = &be.dev.stream;
    let (a, _ga) = wd.device_ptr(stream);
    let (b, _gb) = xb.device_ptr(stream);
    // SAFETY: A is [n, k] bf16 and B is [rows, k] bf16 (checked above), C as the caller vouches, all
    // on this stream.
    unsafe {
        gemm_ex(
            *be.dev.blas.handle(),
            cublasOperation_t::CUBLAS_OP_T,
            cublasOperation_t::CUBLAS_OP_N,
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
            c_type,
            m_,
            cublasComputeType_t::CUBLAS_COMPUTE_32F,
            cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
        )
    }
    .map_err(cuda_err)
}

/// `out[rows, n] += bias` row by row.
fn add_bias(
    be: &CudaBackend,
    bias: &CudaWeight,
    (rows, n): (usize, usize),
    out: &mut CudaSlice<f32>,
) -> Result<()> {
    check_len("matmul bias", bias.cols, n)?;
    let (r, c) = (rows as i64, n as i32);
    let mut b = be
        .dev
        .stream
        .launch_builder(be.kernels.get("bias_add_f32")?);
    b.arg(&mut *out).arg(vector(bias)?).arg(&r).arg(&c);
    // SAFETY: arguments match the kernel's signature; sizes checked above.
    unsafe { b.launch(grid(rows * n)) }.map_err(cuda_err)?;
    Ok(())
}

/// The bf16 elements of every weight, when all are bf16.
pub(super) fn all_bf16<const N: usize>(ws: [&CudaWeight; N]) -> Option<[&CudaSlice<u16>; N]> {
    let bf16 = ws.map(|w| match &w.data {
        CudaWeightData::Bf16(d) => Some(d),
        CudaWeightData::F32(_) => None,
    });
    bf16.iter()
        .all(Option::is_some)
        .then(|| bf16.map(|d| d.expect("checked above")))
}

/// `outs[i] = x' · W[i]ᵀ (+ bias[i])` for products of one input over bf16 weights of one width `k`,
/// `x'` being `x` or `x` RMS-normalised: the input is rounded (and normalised) once for all of them.
/// `None` when a weight is not bf16 or the widths differ (the caller goes op by op).
pub(super) fn products_of_one_input<const N: usize>(
    be: &CudaBackend,
    (x, norm): (&CudaSlice<f32>, FusedNorm<'_>),
    (ws, biases): ([&CudaWeight; N], [Option<&CudaWeight>; N]),
    rows: usize,
    outs: [&mut CudaSlice<f32>; N],
) -> Option<Result<()>> {
    let k = ws[0].cols;
    let data = all_bf16(ws)?;
    if ws.iter().any(|w| w.cols != k) {
        return None;
    }
    if rows == 0 {
        return Some(Ok(()));
    }
    let products = || {
        let mut staged = staged_bf16(be, (x, norm), (rows, k), 0)?;
        let xb = staged.buf();
        for (((w, wd), bias), out) in ws.iter().zip(data).zip(biases).zip(outs) {
            gemm_bf16(be, (xb, wd), (rows, w.rows, k), 0.0, out)?;
            if let Some(bias) = bias {
                add_bias(be, bias, (rows, w.rows), out)?;
            }
        }
        Ok(())
    };
    Some(products())
}

/// `out[rows, n] += x · Wᵀ` over bf16 weights, the product added by cuBLAS onto `out`; `None` for
/// f32 weights.
pub(super) fn matmul_accumulate(
    be: &CudaBackend,
    x: &CudaSlice<f32>,
    w: &CudaWeight,
    rows: usize,
    out: &mut CudaSlice<f32>,
) -> Option<Result<()>> {
    let [wd] = all_bf16([w])?;
    let (n, k) = (w.rows, w.cols);
    if rows == 0 {
        return Some(Ok(()));
    }
    let mut product = || {
        let mut staged = staged_bf16(be, (x, None), (rows, k), 0)?;
        gemm_bf16(be, (staged.buf(), wd), (rows, n, k), 1.0, out)
    };
    Some(product())
}

/// [`crate::backend::Backend::swiglu_mlp`] over bf16 weights at more rows than the skinny kernels
/// take: the input normalised and rounded to bf16 once, the gate and up products rounded to bf16 (as
/// a bf16 model's reference runs them; f32 products would double the bytes written and read back,
/// and silu·mul is bound by those bytes), their silu·mul rounded to bf16 in place of the input, and
/// the down product added onto `x` by cuBLAS. `None` where that does not apply (the caller goes op
/// by op).
pub(super) fn swiglu_mlp(
    be: &CudaBackend,
    (x, norm): (&mut CudaSlice<f32>, FusedNorm<'_>),
    (gate_w, up_w, down_w): (&CudaWeight, &CudaWeight, &CudaWeight),
    (rows, width, hidden): (usize, usize, usize),
    (gate, up): (&mut CudaSlice<f32>, &mut CudaSlice<f32>),
) -> Option<Result<()>> {
    let [g, u, d] = all_bf16([gate_w, up_w, down_w])?;
    let shapes_fit = [gate_w, up_w]
        .iter()
        .all(|w| (w.rows, w.cols) == (width, hidden))
        && (down_w.rows, down_w.cols) == (hidden, width);
    if !shapes_fit || rows <= super::gemv::MAX_ROWS {
        return None;
    }
    let mut mlp = || {
        let n = rows * width;
        check_len("swiglu gate", gate.len(), n)?;
        check_len("swiglu up", up.len(), n)?;
        let mut staged = staged_bf16(be, (&*x, norm), (rows, hidden), n)?;
        let xb = staged.buf();
        let stream = &be.dev.stream;
        // The bf16 products go in the first half of the f32 scratch buffers' bytes.
        let (gate_at, _gg) = gate.device_ptr_mut(stream);
        let (up_at, _gu) = up.device_ptr_mut(stream);
        for (w, at) in [(g, gate_at), (u, up_at)] {
            // SAFETY: the buffer holds n f32 values (checked above), room for n bf16 ones.
            unsafe {
                gemm_bf16_into(
                    be,
                    (xb, w),
                    (rows, width, hidden),
                    0.0,
                    (at, cudaDataType_t::CUDA_R_16BF),
                )
            }?;
        }
        // SAFETY: both addresses hold the n bf16 products just written, on this stream; xb holds at
        // least n values (staged with that capacity).
        unsafe { ops::silu_mul_of_bf16(be, (gate_at, up_at), n, xb) }?;
        gemm_bf16(be, (xb, d), (rows, hidden, width), 1.0, x)
    };
    Some(mlp())
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
    if let Some(done) = products_of_one_input(be, (x, None), ([w], [bias]), rows, [&mut *out]) {
        return done;
    }
    let CudaWeightData::F32(wd) = &w.data else {
        unreachable!("bf16 weights go through products_of_one_input")
    };
    sgemm_f32(be, (x, wd), (rows, n, k), out)?;
    if let Some(bias) = bias {
        add_bias(be, bias, (rows, n), out)?;
    }
    Ok(())
}

/// `out[rows, n] = x · Wᵀ` in full f32 (no TF32).
fn sgemm_f32(
    be: &CudaBackend,
    (x, wd): (&CudaSlice<f32>, &CudaSlice<f32>),
    (rows, n, k): (usize, usize, usize),
    out: &mut CudaSlice<f32>,
) -> Result<()> {
    let (m_, n_, k_) = (n as i32, rows as i32, k as i32);
    let (alpha, beta) = (1.0f32, 0.0f32);
    let stream = &be.dev.stream;
    let (a, _ga) = wd.device_ptr(stream);
    let (b, _gb) = x.device_ptr(stream);
    let (c, _gc) = out.device_ptr_mut(stream);
    // SAFETY: A is [n, k] f32, B is [rows, k] f32, C is [rows, n] f32, all on this stream.
    unsafe {
        sgemm(
            *be.dev.blas.handle(),
            cublasOperation_t::CUBLAS_OP_T,
            cublasOperation_t::CUBLAS_OP_N,
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
    .map_err(cuda_err)
}
