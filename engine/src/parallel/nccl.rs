//! NCCL collectives for a tensor-parallel group of CUDA backends in one process: one communicator a
//! rank, made together (`ncclCommInitAll`) on each backend's stream, so a collective is ordered with
//! the rank's kernels and can be recorded into its graphs. The residual stream is summed in place; the
//! LM head's vocabulary parts are gathered, then placed side by side with one 2-D copy a rank.
//!
//! A rank that stops the group aborts every rank's communicator, which ends the collectives the
//! others wait in; later ones fail at once with the reason.
//!
//! NCCL is loaded when a group is made (`libnccl.so.2`, from NVIDIA's NCCL packages or the
//! `nvidia-nccl` wheel); without it the group fails and names the library. NVLink multicast stays off
//! ([`keep_nvlink_multicast_off`]).

use std::sync::{Arc, Mutex, MutexGuard};

use cudarc::driver::sys::{CUDA_MEMCPY2D, CUmemorytype, cuMemcpy2DAsync_v2};
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut};
use cudarc::nccl::{Comm, ReduceOp};

use super::collective::stopped;
use super::{Collective, Grouped, Shard};
use crate::backend::cuda::{CudaBackend, check_len, cuda_err};
use crate::error::{EngineError, Result};

/// Sets `NCCL_NVLS_ENABLE=0` unless the environment sets it: NVLink multicast (NVLS) can take every
/// GPU of a shared host out of service, and docqa's all-reduces do not need it.
///
/// # Safety
/// Call before any other thread starts (it writes the process environment).
pub unsafe fn keep_nvlink_multicast_off() {
    if std::env::var_os("NCCL_NVLS_ENABLE").is_none() {
        // SAFETY: the caller promises no other thread reads or writes the environment now.
        unsafe { std::env::set_var("NCCL_NVLS_ENABLE", "0") };
    }
}

/// Whether the NCCL library can be loaded.
pub fn nccl_present() -> bool {
    // SAFETY: only tries to dlopen the library by name.
    unsafe { cudarc::nccl::sys::is_culib_present() }
}

/// A communicator, used by one thread at a time.
struct RankComm(Comm);

// SAFETY: NCCL lets a communicator be used from any thread as long as calls do not overlap; the mutex
// in `NcclGroup` serialises them.
unsafe impl Send for RankComm {}

/// One rank's end of an NCCL group (see the module header).
pub struct NcclGroup {
    shard: Shard,
    comms: Arc<GroupComms>,
}

/// Every rank's communicator (None once the group has stopped: dropping a communicator aborts it,
/// which ends the collectives its peers wait in), and why the group stopped.
struct GroupComms {
    ranks: Vec<Mutex<Option<RankComm>>>,
    stopped: Mutex<Option<String>>,
}

impl NcclGroup {
    /// A group over `backends`, rank `i` on `backends[i]`'s device and stream. The devices must differ.
    pub fn over(backends: &[&CudaBackend]) -> Result<Vec<NcclGroup>> {
        let ordinals: Vec<usize> = backends.iter().map(|b| b.ordinal()).collect();
        if (1..ordinals.len()).any(|i| ordinals[..i].contains(&ordinals[i])) {
            return Err(EngineError::InvalidConfig(format!(
                "a tensor-parallel group needs one GPU a rank; asked for GPUs {ordinals:?}"
            )));
        }
        if !nccl_present() {
            return Err(EngineError::InvalidConfig(
                "tensor parallelism on GPUs needs NCCL (libnccl.so.2 on the library path)".into(),
            ));
        }
        let streams = backends.iter().map(|b| b.stream().clone()).collect();
        let comms = Comm::from_devices(streams).map_err(nccl_err)?;
        let world = comms.len();
        let shared = Arc::new(GroupComms {
            ranks: comms
                .into_iter()
                .map(|c| Mutex::new(Some(RankComm(c))))
                .collect(),
            stopped: Mutex::new(None),
        });
        Ok((0..world)
            .map(|rank| NcclGroup {
                shard: Shard { rank, world },
                comms: Arc::clone(&shared),
            })
            .collect())
    }

    /// Runs `f` with this rank's communicator, or fails with the reason the group stopped.
    fn with_comm<T>(&self, f: impl FnOnce(&Comm) -> T) -> Result<T> {
        let comm = lock(&self.comms.ranks[self.shard.rank]);
        match comm.as_ref() {
            Some(RankComm(c)) => Ok(f(c)),
            None => Err(stopped(
                lock(&self.comms.stopped)
                    .as_deref()
                    .unwrap_or("a rank failed"),
            )),
        }
    }
}

impl Grouped for CudaBackend {
    fn join(backends: &[&Self]) -> Result<Vec<std::sync::Arc<dyn Collective<Self>>>> {
        Ok(NcclGroup::over(backends)?
            .into_iter()
            .map(|g| std::sync::Arc::new(g) as std::sync::Arc<dyn Collective<Self>>)
            .collect())
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn nccl_err(e: impl std::fmt::Debug) -> EngineError {
    EngineError::Cuda(format!("NCCL: {e:?}"))
}

impl Collective<CudaBackend> for NcclGroup {
    fn shard(&self) -> Shard {
        self.shard
    }

    fn all_reduce_sum(&self, _: &CudaBackend, x: &mut CudaSlice<f32>, n: usize) -> Result<()> {
        check_len("all-reduce", x.len(), n)?;
        let sum =
            self.with_comm(|c| c.all_reduce_in_place(&mut x.slice_mut(..n), &ReduceOp::Sum))?;
        sum.map(drop).map_err(nccl_err)
    }

    fn all_gather_cols(
        &self,
        backend: &CudaBackend,
        part: &CudaSlice<f32>,
        (rows, width): (usize, usize),
        stacked: &mut CudaSlice<f32>,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        let (n, world) = (rows * width, self.shard.world);
        check_len("all-gather part", part.len(), n)?;
        check_len("all-gather out", out.len(), world * n)?;
        if rows == 1 {
            // One row: the ranks' parts stacked are the row.
            let gathered = self
                .with_comm(|c| c.all_gather(&part.slice(..n), &mut out.slice_mut(..world * n)))?;
            return gathered.map(drop).map_err(nccl_err);
        }
        check_len("all-gather stacked parts", stacked.len(), world * n)?;
        let gathered = self
            .with_comm(|c| c.all_gather(&part.slice(..n), &mut stacked.slice_mut(..world * n)))?;
        gathered.map_err(nccl_err)?;
        place_columns(backend.stream(), stacked, (world, rows, width), out)
    }

    /// Records why, then aborts every rank's communicator (`ncclCommAbort`, by dropping it): the
    /// collectives the other ranks' devices wait in end, and later ones fail at once.
    fn abort(&self, why: &str) {
        lock(&self.comms.stopped).get_or_insert_with(|| why.to_string());
        for rank in &self.comms.ranks {
            drop(lock(rank).take());
        }
    }

    fn stopped(&self) -> Option<String> {
        lock(&self.comms.stopped).clone()
    }
}

/// `out [rows, world · width]` from `stacked [world, rows, width]`: rank `r`'s rows go to columns
/// `r · width..`, one pitched copy a rank.
fn place_columns(
    stream: &CudaStream,
    stacked: &CudaSlice<f32>,
    (world, rows, width): (usize, usize, usize),
    out: &mut CudaSlice<f32>,
) -> Result<()> {
    let row_bytes = width * size_of::<f32>();
    let (src, _src_guard) = stacked.device_ptr(stream);
    let (dst, _dst_guard) = out.device_ptr_mut(stream);
    for rank in 0..world {
        let copy = CUDA_MEMCPY2D {
            srcXInBytes: 0,
            srcY: 0,
            srcMemoryType: CUmemorytype::CU_MEMORYTYPE_DEVICE,
            srcHost: std::ptr::null(),
            srcDevice: src + (rank * rows * row_bytes) as u64,
            srcArray: std::ptr::null_mut(),
            srcPitch: row_bytes,
            dstXInBytes: 0,
            dstY: 0,
            dstMemoryType: CUmemorytype::CU_MEMORYTYPE_DEVICE,
            dstHost: std::ptr::null_mut(),
            dstDevice: dst + (rank * row_bytes) as u64,
            dstArray: std::ptr::null_mut(),
            dstPitch: world * row_bytes,
            WidthInBytes: row_bytes,
            Height: rows,
        };
        // SAFETY: both ranges lie inside their buffers (lengths checked by the caller) and the copy is
        // ordered on the stream that owns them.
        unsafe { cuMemcpy2DAsync_v2(&copy, stream.cu_stream()) }
            .result()
            .map_err(cuda_err)?;
    }
    Ok(())
}
