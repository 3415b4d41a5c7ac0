//! Kernel launches with programmatic dependent launch (compute capability 9.0 and later): such a
//! launch lets the kernel's blocks start while the kernel before it on the stream is still running.
//! The kernel must execute `griddepcontrol.wait` (`wait_for_previous_grid` in `common.cuh`) in every
//! thread before it reads anything an earlier kernel wrote; what it does before that (the skinny
//! products fetch their first weights, which no kernel writes) overlaps the previous kernel's tail
//! and the launch's own latency. Recorded CUDA graphs keep these launches' programmatic edges.
//!
//! Arguments are passed as the driver takes them: an array of pointers, one per parameter, each to
//! the parameter's bytes (8-byte slots here; a 4-byte parameter reads the slot's low half).

use cudarc::driver::sys::{
    CUlaunchAttribute, CUlaunchAttributeID, CUlaunchAttributeValue, CUlaunchConfig,
};
use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, DevicePtr, LaunchConfig};

use super::{CudaBackend, cuda_err};
use crate::error::Result;

impl CudaBackend {
    /// Switches programmatic dependent launch of a decode layer's kernels (the skinny products, the
    /// RoPE + KV write, the decode attention and its merge) on or off (on by default on
    /// compute capability 9.0 and later; `DOCQA_CUDA_PDL=0` starts with it off). Graphs recorded
    /// before are recorded again.
    pub fn set_pdl(&self, on: bool) {
        self.pdl.store(
            on && self.dev.cc.0 >= 9,
            std::sync::atomic::Ordering::Relaxed,
        );
        self.bump_graph_epoch();
    }

    /// Whether a decode layer's kernels are launched with programmatic dependent launch.
    pub fn pdl_on(&self) -> bool {
        self.pdl.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// One launch's parameters, in the kernel's order.
pub(super) struct PdlArgs {
    slots: Vec<u64>,
}

impl PdlArgs {
    pub(super) fn new() -> Self {
        PdlArgs {
            slots: Vec::with_capacity(16),
        }
    }

    /// A device buffer's address. The stream must be the one the kernel runs on; the backend runs
    /// everything on one stream and does not track buffer events, so no guard is kept.
    pub(super) fn buf<T>(&mut self, b: &CudaSlice<T>, stream: &CudaStream) -> &mut Self {
        let (ptr, _sync) = b.device_ptr(stream);
        self.slots.push(ptr);
        self
    }

    /// An optional buffer: its address, or a null pointer.
    pub(super) fn maybe_buf<T>(&mut self, b: Option<&CudaSlice<T>>, s: &CudaStream) -> &mut Self {
        match b {
            Some(b) => self.buf(b, s),
            None => {
                self.slots.push(0);
                self
            }
        }
    }

    /// A device address the caller vouches for (memory lent by a buffer of another element type).
    pub(super) fn addr(&mut self, ptr: u64) -> &mut Self {
        self.slots.push(ptr);
        self
    }

    pub(super) fn int(&mut self, v: i32) -> &mut Self {
        self.slots.push(u64::from(v as u32));
        self
    }

    pub(super) fn float(&mut self, v: f32) -> &mut Self {
        self.slots.push(u64::from(v.to_bits()));
        self
    }

    /// Launches `f` on `stream`, with programmatic serialization when `programmatic`, else as a
    /// plain launch.
    ///
    /// # Safety
    /// The arguments must match the kernel's parameters in number, order and type, and every
    /// buffer must be valid for what the kernel reads and writes; with `programmatic`, every thread
    /// of the kernel must wait for the previous grid before its first dependent read.
    pub(super) unsafe fn launch(
        mut self,
        f: &CudaFunction,
        stream: &CudaStream,
        cfg: LaunchConfig,
        programmatic: bool,
    ) -> Result<()> {
        let mut params: Vec<*mut std::ffi::c_void> = self
            .slots
            .iter_mut()
            .map(|s| (s as *mut u64).cast())
            .collect();
        // SAFETY: a zeroed union is a valid value; the one field the attribute reads is set next.
        let mut value: CUlaunchAttributeValue = unsafe { std::mem::zeroed() };
        value.programmaticStreamSerializationAllowed = 1;
        let attr = CUlaunchAttribute {
            id: CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
            pad: [0; 4],
            value,
        };
        // SAFETY: as the caller vouches for.
        unsafe { launch_ex(f, stream, cfg, &mut params, programmatic.then_some(attr)) }
    }
}

/// Launches `f` on `stream` with `params` (one pointer a parameter) and at most one launch
/// attribute.
///
/// # Safety
/// `params` must match the kernel's parameters, and the attribute what the kernel expects of it.
pub(super) unsafe fn launch_ex(
    f: &CudaFunction,
    stream: &CudaStream,
    cfg: LaunchConfig,
    params: &mut [*mut std::ffi::c_void],
    attr: Option<CUlaunchAttribute>,
) -> Result<()> {
    // SAFETY: a zeroed attribute is a valid value; it is read only when `attr` is given.
    let mut attr_slot: CUlaunchAttribute = attr.unwrap_or(unsafe { std::mem::zeroed() });
    let config = CUlaunchConfig {
        gridDimX: cfg.grid_dim.0,
        gridDimY: cfg.grid_dim.1,
        gridDimZ: cfg.grid_dim.2,
        blockDimX: cfg.block_dim.0,
        blockDimY: cfg.block_dim.1,
        blockDimZ: cfg.block_dim.2,
        sharedMemBytes: cfg.shared_mem_bytes,
        hStream: stream.cu_stream(),
        attrs: &mut attr_slot,
        numAttrs: u32::from(attr.is_some()),
    };
    stream.context().bind_to_thread().map_err(cuda_err)?;
    // SAFETY: the caller vouches for the arguments; `params` and the attribute outlive the call,
    // which copies them.
    unsafe {
        cudarc::driver::sys::cuLaunchKernelEx(
            &config,
            f.cu_function(),
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    }
    .result()
    .map_err(cuda_err)
}
