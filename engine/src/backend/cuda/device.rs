//! Opening a CUDA device: probe the driver and libraries first (cudarc panics when a library it
//! loads dynamically is missing), then create the context, the stream and the cuBLAS handle.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use cudarc::cublas::CudaBlas;
use cudarc::driver::sys::CUdevice_attribute;
use cudarc::driver::{CudaContext, CudaStream};

use crate::error::{EngineError, Result};

/// A context, its one stream, and a cuBLAS handle bound to that stream.
pub struct Device {
    /// The device's primary context.
    pub ctx: Arc<CudaContext>,
    /// The stream every op is issued on, in order.
    pub stream: Arc<CudaStream>,
    /// cuBLAS on `stream`.
    pub blas: CudaBlas,
    /// Compute capability (major, minor).
    pub cc: (i32, i32),
    /// The device's name.
    pub name: String,
    /// Whether pinned host memory is mapped into the device's address space at its host addresses
    /// (unified addressing), so kernels can read it.
    pub maps_host_memory: bool,
    /// Streaming multiprocessors.
    pub sm_count: usize,
}

/// Whether the CUDA driver library can be loaded at all.
pub fn driver_present() -> bool {
    // SAFETY: only tries to dlopen the library by name.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// Whether NVRTC (the run-time compiler) can be loaded.
pub fn nvrtc_present() -> bool {
    // SAFETY: only tries to dlopen the library by name.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// How many CUDA devices this process sees (0 without a driver).
pub fn visible_devices() -> usize {
    match driver_present() {
        true => guarded("counting CUDA devices", || {
            CudaContext::device_count().map_err(no_device)
        })
        .map_or(0, |n| n.max(0) as usize),
        false => 0,
    }
}

fn no_device(why: impl std::fmt::Display) -> EngineError {
    EngineError::NoCudaDevice(why.to_string())
}

/// Maps any CUDA-side error to [`EngineError::Cuda`].
pub fn cuda_err(e: impl std::fmt::Debug) -> EngineError {
    EngineError::Cuda(format!("{e:?}"))
}

/// Runs `f`, turning a panic inside cudarc (a symbol missing from an old library) into an error.
fn guarded<T>(what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| Err(no_device(format!("{what} panicked"))))
}

impl Device {
    /// Opens device `ordinal`, or says why there is none.
    pub fn open(ordinal: usize) -> Result<Self> {
        if !driver_present() {
            return Err(no_device(
                "the CUDA driver library (libcuda) is not installed",
            ));
        }
        // SAFETY: only tries to dlopen the library by name.
        if !unsafe { cudarc::cublas::sys::is_culib_present() } {
            return Err(no_device("the cuBLAS library (libcublas) is not installed"));
        }
        guarded("opening the CUDA device", || {
            let count = CudaContext::device_count().map_err(no_device)?;
            if ordinal >= count.max(0) as usize {
                return Err(no_device(format!("{count} devices, asked for #{ordinal}")));
            }
            let ctx = CudaContext::new(ordinal).map_err(no_device)?;
            // SAFETY: every buffer of this context is used on its one stream, whose order already
            // sequences all reads and writes; per-buffer events would only add a record and a wait
            // to every launch, and a recorded graph must not wait on events from outside it.
            unsafe { ctx.disable_event_tracking() };
            let stream = ctx.new_stream().map_err(cuda_err)?;
            let blas = CudaBlas::new(stream.clone()).map_err(cuda_err)?;
            let cc = ctx.compute_capability().map_err(cuda_err)?;
            let name = ctx.name().map_err(cuda_err)?;
            let unified = CUdevice_attribute::CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING;
            let maps_host_memory = ctx.attribute(unified).map_err(cuda_err)? == 1;
            let sms = CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT;
            let sm_count = ctx.attribute(sms).map_err(cuda_err)?.max(1) as usize;
            Ok(Device {
                ctx,
                stream,
                blas,
                cc,
                name,
                maps_host_memory,
                sm_count,
            })
        })
    }
}
