//! The CUDA backend: the [`Backend`] ops on an NVIDIA GPU, with docqa's own kernels (`docqa-kernels`)
//! and cuBLAS for the matmuls.
//!
//! Same conventions as the CPU reference: f32 activations `[rows, width]`, weights `[out, in]` (bf16
//! weights stay bf16, f32 weights stay f32), KV pools `[num_blocks, block_size, num_kv_heads,
//! head_dim]` in f32 or bf16. Every op is issued in order on one stream; [`Backend::read`] waits for
//! it. A machine without the driver, cuBLAS or a GPU gets [`EngineError::NoCudaDevice`] from
//! [`CudaBackend::new`], never a panic.
//!
//! bf16 matmuls round the f32 activations to bf16 first (as the CPU backend does on AVX-512 BF16),
//! then multiply in cuBLAS with f32 accumulation and f32 output.

mod attention;
mod backend_ops;
mod decode_profile;
mod decode_step;
mod device;
mod flash;
mod gemv;
mod graph;
mod kv_blocks;
mod kv_mapped;
mod lt_gemm;
mod matmul;
mod modules;
mod ops;
mod pdl;
mod pools;
mod rope_kv;
mod sample;
mod sublayer;
mod tma;
mod windowed_splits;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaSlice, CudaStream, LaunchConfig};

use crate::backend::KvShape;
use crate::error::{EngineError, Result};
pub use decode_profile::{PHASE_NAMES, PHASES, PhaseTime, StepProfile};
use device::Device;
pub(crate) use device::cuda_err;
pub use device::{driver_present, visible_devices};
pub use graph::CudaGraphExec;
/// Most activation rows the skinny decode products take; wider products go to cuBLAS.
pub const SKINNY_MAX_ROWS: usize = gemv::MAX_ROWS;
use modules::Kernels;

/// A weight in device memory: a matrix `[rows, cols]` or a vector (`rows == 1`).
pub struct CudaWeight {
    /// Output features (matrix rows).
    pub rows: usize,
    /// Input features (matrix columns).
    pub cols: usize,
    /// The elements, row-major.
    pub data: CudaWeightData,
}

/// Element storage of a [`CudaWeight`].
pub enum CudaWeightData {
    /// bf16 bit patterns.
    Bf16(CudaSlice<u16>),
    /// f32 values.
    F32(CudaSlice<f32>),
}

/// One layer's K (or V) pool in device memory.
pub struct CudaKv {
    /// Its shape.
    pub shape: KvShape,
    /// Its elements.
    pub store: CudaKvStore,
    /// Blocks being brought back into it on the reload stream, which ops on the compute stream wait for.
    pending: Mutex<Option<kv_mapped::PendingTransfer>>,
}

/// Element storage of a [`CudaKv`].
pub enum CudaKvStore {
    /// f32 elements.
    F32(CudaSlice<f32>),
    /// bf16 bit patterns.
    Bf16(CudaSlice<u16>),
    /// int8 elements and `[num_blocks * block_size * num_kv_heads]` scales: element `e` of (slot,
    /// head) is `q[e] * scales[slot * num_kv_heads + head]`, as on the CPU backend.
    Int8 {
        /// Quantised elements.
        q: CudaSlice<i8>,
        /// One scale per (slot, head).
        scales: CudaSlice<f32>,
    },
}

/// The CUDA backend on one device.
pub struct CudaBackend {
    dev: Device,
    kernels: Kernels,
    /// The skinny decode products' block shape, read from the loaded kernels.
    gemv_blocks: gemv::GemvBlocks,
    /// bf16 copy of matmul activations; only grows.
    scratch: Mutex<Option<CudaSlice<u16>>>,
    /// The last RoPE inverse frequencies uploaded, and their device copy.
    freqs: Mutex<Option<(Vec<f32>, CudaSlice<f32>)>>,
    /// Partial outputs and (max, sum) pairs of split-KV decode; only grow.
    decode_parts: Mutex<Option<(CudaSlice<f32>, CudaSlice<f32>)>>,
    /// Split outputs and (reference, sum) pairs of windowed prefill ([`windowed_splits`]); only grow.
    prefill_parts: Mutex<Option<(CudaSlice<f32>, CudaSlice<f32>)>>,
    /// Splits of a windowed prefill launch; 0 (the default) leaves them to the split policy
    /// ([`windowed_splits::splits_for`]; BENCHMARKS.md, "Sink-window prefill in splits").
    windowed_splits: AtomicUsize,
    /// The device staging and pinned bounce buffers KV blocks pass through to and from the host, and
    /// where the host tier's pinned memory lies.
    staging: Mutex<kv_blocks::Staging>,
    /// Blocks brought back from pinned host memory on a stream of their own.
    mapped: Mutex<kv_mapped::MappedTransfers>,
    /// Whether decode steps are recorded into graphs and replayed.
    graphs: AtomicBool,
    /// Blocks a split-KV decode launch aims for; 0 leaves it to the split policy.
    decode_blocks: AtomicUsize,
    /// Whether the skinny products start while the kernel before them finishes (programmatic
    /// dependent launch, compute capability 9.0 and later).
    pdl: AtomicBool,
    /// Whether prefill over bf16 pools runs the warpgroup-MMA kernel (compute capability 9.0).
    hopper_prefill: AtomicBool,
    /// Whether that kernel loads K and V with TMA (its `_tma` form) where the block size allows.
    hopper_tma: AtomicBool,
    /// Whether RoPE and the write into int8 pools run as one launch (`DOCQA_CUDA_INT8_ROPE_WRITE=0`:
    /// RoPE on q, on k, then the write, for comparison).
    int8_rope_write: bool,
    /// Whether a prefill's attention sublayer runs in bf16 from product to product where it can
    /// ([`sublayer`]; `DOCQA_CUDA_BF16_SUBLAYER=0`: op by op with f32 between the steps).
    bf16_sublayer: AtomicBool,
    /// Attention sublayers run in bf16 so far, for checks that the path was taken.
    bf16_sublayer_runs: AtomicU64,
    /// Whether batch-1 decode steps run their layers in one persistent launch ([`decode_step`]).
    persistent_decode: AtomicBool,
    /// Steps run so.
    persistent_decode_runs: AtomicU64,
    /// Its ring's slots a warp at most (0: as many as fit; `DOCQA_CUDA_PERSISTENT_DEPTH`).
    persistent_depth: AtomicUsize,
    /// Chunks each of its warps keeps prefetched into L2 past its ring (`DOCQA_CUDA_PERSISTENT_L2_AHEAD`).
    persistent_l2_ahead: AtomicUsize,
    /// That launch's scratch and argument buffers.
    persistent: Mutex<decode_step::State>,
    /// Moves whenever a buffer above is replaced (see [`graph`]).
    epoch: AtomicU64,
    /// bf16 products through cuBLASLt with an algorithm per size class of rows ([`lt_gemm`]); None
    /// where it could not be set up or `DOCQA_CUDA_LT_GEMM=0` asks for plain cuBLAS, which chooses
    /// again for every new row count.
    lt: Option<lt_gemm::LtGemm>,
}

/// Fails unless a buffer of `len` elements holds `need`.
pub(crate) fn check_len(what: &str, len: usize, need: usize) -> Result<()> {
    match len >= need {
        true => Ok(()),
        false => Err(EngineError::InvalidBatch(format!(
            "{what}: buffer of {len} elements, {need} needed"
        ))),
    }
}

/// A 1-D grid-stride launch over `n` elements.
pub(super) fn grid(n: usize) -> LaunchConfig {
    let blocks = n.div_ceil(256).clamp(1, 1 << 16) as u32;
    LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    }
}

impl CudaBackend {
    /// Opens CUDA device `ordinal` and loads the kernels (prebuilt cubins or NVRTC).
    pub fn new(ordinal: usize) -> Result<Self> {
        let dev = Device::open(ordinal)?;
        let kernels = Kernels::load(&dev.ctx, dev.cc)?;
        let graphs = std::env::var("DOCQA_CUDA_GRAPHS").map_or(true, |v| v != "0");
        let pdl = dev.cc.0 >= 9 && std::env::var("DOCQA_CUDA_PDL").map_or(true, |v| v != "0");
        // DOCQA_HOPPER_PREFILL: 0 (the mma.sync kernel), tma (the TMA form), else the cp.async form.
        let hopper_env = std::env::var("DOCQA_HOPPER_PREFILL").ok();
        let hopper_prefill = dev.cc == (9, 0) && hopper_env.as_deref() != Some("0");
        let hopper_tma = hopper_prefill && hopper_env.as_deref() == Some("tma");
        let lt = lt_gemm::LtGemm::open(&dev.stream);
        let gemv_blocks = gemv::read_blocks(&kernels)?;
        Ok(CudaBackend {
            dev,
            kernels,
            gemv_blocks,
            scratch: Mutex::new(None),
            freqs: Mutex::new(None),
            decode_parts: Mutex::new(None),
            prefill_parts: Mutex::new(None),
            windowed_splits: AtomicUsize::new(
                std::env::var("DOCQA_CUDA_WINDOWED_SPLITS")
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0),
            ),
            staging: Mutex::new(kv_blocks::Staging::default()),
            mapped: Mutex::new(kv_mapped::MappedTransfers::default()),
            graphs: AtomicBool::new(graphs),
            decode_blocks: AtomicUsize::new(0),
            pdl: AtomicBool::new(pdl),
            hopper_prefill: AtomicBool::new(hopper_prefill),
            hopper_tma: AtomicBool::new(hopper_tma),
            int8_rope_write: std::env::var("DOCQA_CUDA_INT8_ROPE_WRITE").map_or(true, |v| v != "0"),
            bf16_sublayer: AtomicBool::new(
                std::env::var("DOCQA_CUDA_BF16_SUBLAYER").map_or(true, |v| v != "0"),
            ),
            bf16_sublayer_runs: AtomicU64::new(0),
            persistent_decode: AtomicBool::new(
                std::env::var("DOCQA_CUDA_PERSISTENT_DECODE").is_ok_and(|v| v == "1"),
            ),
            persistent_decode_runs: AtomicU64::new(0),
            persistent_depth: AtomicUsize::new(
                std::env::var("DOCQA_CUDA_PERSISTENT_DEPTH")
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0),
            ),
            persistent_l2_ahead: AtomicUsize::new(
                std::env::var("DOCQA_CUDA_PERSISTENT_L2_AHEAD")
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0),
            ),
            persistent: Mutex::new(decode_step::State::default()),
            epoch: AtomicU64::new(0),
            lt,
        })
    }

    /// Makes a prefill's attention sublayer run in bf16 from product to product where it can (`on`)
    /// or op by op, for checks and benchmarks that compare them.
    pub fn set_bf16_sublayer(&self, on: bool) {
        self.bf16_sublayer.store(on, Ordering::Relaxed);
    }

    /// Whether a prefill's attention sublayer runs in bf16 where it can.
    pub fn bf16_sublayer(&self) -> bool {
        self.bf16_sublayer.load(Ordering::Relaxed)
    }

    /// How many attention sublayers have run in bf16 from product to product on this backend.
    pub fn bf16_sublayer_runs(&self) -> u64 {
        self.bf16_sublayer_runs.load(Ordering::Relaxed)
    }

    /// The stream every op of this backend is issued on.
    pub(crate) fn stream(&self) -> &Arc<CudaStream> {
        &self.dev.stream
    }

    /// The device's ordinal.
    pub(crate) fn ordinal(&self) -> usize {
        self.dev.ctx.ordinal()
    }

    /// The device's name and compute capability, and where the kernels came from.
    pub fn describe(&self) -> String {
        let (name, (major, minor)) = (&self.dev.name, self.dev.cc);
        format!(
            "{name} (sm_{major}{minor}), kernels: {}",
            self.kernels.origin
        )
    }

    /// A pool's elements as f32 (bf16 widened, int8 times its scale), for checks.
    pub fn read_kv(&self, kv: &CudaKv) -> Result<Vec<f32>> {
        kv.await_transfer(&self.dev.stream)?;
        pools::read_kv(&self.dev.stream, kv)
    }

    /// Device milliseconds of the work `f` issues, between two CUDA events on the stream.
    pub fn time_ms(&self, f: impl FnOnce() -> Result<()>) -> Result<f32> {
        let flags = Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
        let s = &self.dev.stream;
        let start = s.record_event(flags).map_err(cuda_err)?;
        f()?;
        let end = s.record_event(flags).map_err(cuda_err)?;
        end.synchronize().map_err(cuda_err)?;
        start.elapsed_ms(&end).map_err(cuda_err)
    }

    /// Waits for every op issued so far, blocks being brought back included.
    pub fn synchronize(&self) -> Result<()> {
        self.settle_transfers()?;
        self.dev.stream.synchronize().map_err(cuda_err)?;
        self.release_finished_transfers();
        Ok(())
    }

    fn zeros<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits>(
        &self,
        len: usize,
    ) -> Result<CudaSlice<T>> {
        self.dev.stream.alloc_zeros(len.max(1)).map_err(cuda_err)
    }

    fn upload<T: cudarc::driver::DeviceRepr>(&self, host: &[T]) -> Result<CudaSlice<T>> {
        self.dev.stream.clone_htod(host).map_err(cuda_err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On a machine without the CUDA driver (CI), opening the backend is a typed error, not a panic;
    /// with a driver and a GPU it opens.
    #[test]
    fn opening_without_a_driver_is_a_no_cuda_device_error() {
        match CudaBackend::new(0) {
            Err(EngineError::NoCudaDevice(_)) => {}
            Err(e) => panic!("expected NoCudaDevice, got {e}"),
            Ok(b) => assert!(
                driver_present(),
                "opened without a driver: {}",
                b.describe()
            ),
        }
    }

    #[test]
    fn buffer_length_checks_name_the_op() {
        let e = check_len("rope x", 3, 4).expect_err("3 < 4");
        assert!(e.to_string().contains("rope x"), "{e}");
        assert!(check_len("rope x", 4, 4).is_ok());
    }
}
