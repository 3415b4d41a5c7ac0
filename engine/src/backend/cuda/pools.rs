//! A layer's K and V pools as the kernels take them: their element type's name in kernel names
//! (`f32`, `bf16`, `int8`), their arguments (`k, v`, then for int8 pools `k_scales, v_scales`), and
//! their elements read back for checks.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, LaunchArgs, PushKernelArg};

use super::pdl::PdlArgs;
use super::{CudaKv, CudaKvStore, cuda_err};
use crate::error::{EngineError, Result};

impl CudaKvStore {
    /// The element type's name, as kernel names spell it.
    pub(super) fn dtype_name(&self) -> &'static str {
        match self {
            CudaKvStore::F32(_) => "f32",
            CudaKvStore::Bf16(_) => "bf16",
            CudaKvStore::Int8 { .. } => "int8",
        }
    }
}

/// The dtype name shared by a layer's K and V pools; an error when they differ.
pub(super) fn shared_dtype(kc: &CudaKv, vc: &CudaKv) -> Result<&'static str> {
    let (k, v) = (kc.store.dtype_name(), vc.store.dtype_name());
    match k == v {
        true => Ok(k),
        false => Err(EngineError::Internal(format!(
            "K and V pools of one layer must share a dtype ({k} and {v})"
        ))),
    }
}

/// Pushes the pools' arguments: `k, v`, then for int8 pools `k_scales, v_scales`, after making
/// `stream` (the one `a` launches on) wait for blocks still being brought back into them.
pub(super) fn push<'a, A: KernelArgs<'a>>(
    a: &mut A,
    stream: &CudaStream,
    kc: &'a CudaKv,
    vc: &'a CudaKv,
) -> Result<()> {
    shared_dtype(kc, vc)?;
    kc.await_transfer(stream)?;
    vc.await_transfer(stream)?;
    match (&kc.store, &vc.store) {
        (CudaKvStore::F32(k), CudaKvStore::F32(v)) => {
            a.buffer(k, stream);
            a.buffer(v, stream);
        }
        (CudaKvStore::Bf16(k), CudaKvStore::Bf16(v)) => {
            a.buffer(k, stream);
            a.buffer(v, stream);
        }
        (CudaKvStore::Int8 { q: k, scales: ks }, CudaKvStore::Int8 { q: v, scales: vs }) => {
            a.buffer(k, stream);
            a.buffer(v, stream);
            a.buffer(ks, stream);
            a.buffer(vs, stream);
        }
        _ => unreachable!("dtypes checked above"),
    }
    Ok(())
}

/// A launch's argument list, as cudarc's builder or as a programmatic launch's slots ([`PdlArgs`]).
pub(super) trait KernelArgs<'a> {
    /// Appends a device buffer (used on `stream`).
    fn buffer<T>(&mut self, b: &'a CudaSlice<T>, stream: &CudaStream);
}

impl<'a> KernelArgs<'a> for LaunchArgs<'a> {
    fn buffer<T>(&mut self, b: &'a CudaSlice<T>, _stream: &CudaStream) {
        self.arg(b);
    }
}

impl<'a> KernelArgs<'a> for PdlArgs {
    fn buffer<T>(&mut self, b: &'a CudaSlice<T>, stream: &CudaStream) {
        self.buf(b, stream);
    }
}

/// A pool's elements as f32 (bf16 widened, int8 times its scale).
pub(super) fn read_kv(s: &Arc<CudaStream>, kv: &CudaKv) -> Result<Vec<f32>> {
    let host = match &kv.store {
        CudaKvStore::F32(d) => s.clone_dtoh(d).map_err(cuda_err)?,
        CudaKvStore::Bf16(d) => {
            let bits = s.clone_dtoh(d).map_err(cuda_err)?;
            bits.iter()
                .map(|&b| f32::from_bits((b as u32) << 16))
                .collect()
        }
        CudaKvStore::Int8 { q, scales } => {
            let (q, scales) = (
                s.clone_dtoh(q).map_err(cuda_err)?,
                s.clone_dtoh(scales).map_err(cuda_err)?,
            );
            let hd = kv.shape.head_dim.max(1);
            q.iter()
                .enumerate()
                .map(|(i, &x)| x as f32 * scales[i / hd])
                .collect()
        }
    };
    s.synchronize().map_err(cuda_err)?;
    Ok(host)
}
