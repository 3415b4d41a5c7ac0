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
mod decode_profile;
mod decode_step;
mod device;
mod flash;
mod gemv;
mod graph;
mod kv_blocks;
mod kv_mapped;
mod l2_ahead;
mod matmul;
mod modules;
mod ops;
mod pdl;
mod pools;
mod rope_kv;
mod sample;
mod sublayer;
mod tma;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaSlice, CudaStream, LaunchConfig, PushKernelArg};

use crate::backend::{
    AttnBuffers, AttnShape, AttnWeights, Backend, KvDtype, KvShape, PagedAttnMeta, RmsNormInto,
    RopeKvWrite, SwigluBuffers, SwigluWeights, unfused,
};
use crate::config::RopeFreqs;
use crate::error::{EngineError, Result};
use crate::weights::{TensorRef, WeightDtype};
pub use decode_profile::{PHASE_NAMES, PHASES, PhaseTime, StepProfile};
use device::Device;
pub(crate) use device::cuda_err;
pub use device::{driver_present, visible_devices};
pub use graph::CudaGraphExec;
pub use l2_ahead::L2AheadMode;
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
    /// bf16 copy of matmul activations; only grows.
    scratch: Mutex<Option<CudaSlice<u16>>>,
    /// The last RoPE inverse frequencies uploaded, and their device copy.
    freqs: Mutex<Option<(Vec<f32>, CudaSlice<f32>)>>,
    /// Partial outputs and (max, sum) pairs of split-KV decode; only grow.
    decode_parts: Mutex<Option<(CudaSlice<f32>, CudaSlice<f32>)>>,
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
    /// The prefetch of the next skinny product's weights into L2 ([`l2_ahead`]).
    l2_ahead: l2_ahead::L2Ahead,
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
        let l2_ahead = l2_ahead::L2Ahead::from_env(dev.cc);
        Ok(CudaBackend {
            dev,
            kernels,
            scratch: Mutex::new(None),
            freqs: Mutex::new(None),
            decode_parts: Mutex::new(None),
            staging: Mutex::new(kv_blocks::Staging::default()),
            mapped: Mutex::new(kv_mapped::MappedTransfers::default()),
            graphs: AtomicBool::new(graphs),
            decode_blocks: AtomicUsize::new(0),
            pdl: AtomicBool::new(pdl),
            l2_ahead,
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

impl Backend for CudaBackend {
    type Buf = CudaSlice<f32>;
    type Ids = CudaSlice<u32>;
    type Weight = CudaWeight;
    type Kv = CudaKv;
    type Graph = CudaGraphExec;

    fn name(&self) -> &'static str {
        "cuda"
    }

    fn records_graphs(&self) -> bool {
        self.graphs_on()
    }

    fn begin_capture(&self) -> Result<()> {
        self.settle_transfers()?;
        self.capture_begin()
    }

    fn end_capture(&self) -> Result<CudaGraphExec> {
        self.capture_end()
    }

    fn replay(&self, graph: &CudaGraphExec) -> Result<()> {
        self.settle_transfers()?;
        self.graph_launch(graph)
    }

    fn graph_epoch(&self) -> u64 {
        self.epoch_now()
    }

    fn memory_info(&self) -> Result<Option<(usize, usize)>> {
        self.dev.stream.synchronize().map_err(cuda_err)?;
        self.dev.ctx.mem_get_info().map(Some).map_err(cuda_err)
    }

    fn alloc(&self, len: usize) -> Result<CudaSlice<f32>> {
        self.zeros(len)
    }

    fn alloc_ids(&self, len: usize) -> Result<CudaSlice<u32>> {
        self.zeros(len)
    }

    fn alloc_kv(&self, shape: KvShape) -> Result<CudaKv> {
        let len = shape.num_blocks * shape.block_size * shape.num_kv_heads * shape.head_dim;
        let store = match shape.dtype {
            KvDtype::F32 => CudaKvStore::F32(self.zeros(len)?),
            KvDtype::Bf16 => CudaKvStore::Bf16(self.zeros(len)?),
            KvDtype::Int8 => CudaKvStore::Int8 {
                q: self.zeros(len)?,
                scales: self.zeros(len / shape.head_dim.max(1))?,
            },
        };
        Ok(CudaKv {
            shape,
            store,
            pending: Mutex::new(None),
        })
    }

    fn read_kv_blocks(
        &self,
        pools: &[&CudaKv],
        blocks: &[u32],
        out: &mut [crate::kv::tiers::BlockBuf],
    ) -> Result<()> {
        self.read_blocks(pools, blocks, out)
    }

    fn write_kv_blocks(
        &self,
        pools: &mut [&mut CudaKv],
        blocks: &[u32],
        src: &[crate::kv::tiers::BlockBytes],
    ) -> Result<()> {
        self.write_blocks(pools, blocks, src)
    }

    fn wait_kv_writes(&self, keep: usize) -> Result<()> {
        self.wait_transfers(keep)
    }

    fn host_memory_is_pinned(&self) -> bool {
        true
    }

    fn host_allocator(&self) -> crate::kv::tiers::HostAllocator {
        self.pinned_allocator()
    }

    fn upload_matrix(&self, t: &TensorRef<'_>) -> Result<CudaWeight> {
        let &[rows, cols] = t.shape else {
            return Err(EngineError::TensorShape {
                name: t.name.into(),
                expected: vec![0, 0],
                actual: t.shape.into(),
            });
        };
        let data = match t.dtype {
            WeightDtype::Bf16 => CudaWeightData::Bf16(self.upload(&t.to_bf16_bits())?),
            WeightDtype::F32 | WeightDtype::F16 => CudaWeightData::F32(self.upload(&t.to_f32())?),
        };
        self.forget_l2_ahead();
        Ok(CudaWeight { rows, cols, data })
    }

    fn upload_vector(&self, t: &TensorRef<'_>) -> Result<CudaWeight> {
        Ok(CudaWeight {
            rows: 1,
            cols: t.numel(),
            data: CudaWeightData::F32(self.upload(&t.to_f32())?),
        })
    }

    fn write(&self, dst: &mut CudaSlice<f32>, src: &[f32]) -> Result<()> {
        ops::write(&self.dev.stream, dst, src)
    }

    fn write_ids(&self, dst: &mut CudaSlice<u32>, src: &[u32]) -> Result<()> {
        ops::write(&self.dev.stream, dst, src)
    }

    fn read(&self, src: &CudaSlice<f32>, dst: &mut [f32]) -> Result<()> {
        ops::read(&self.dev.stream, "read", src, dst)?;
        self.release_finished_transfers();
        Ok(())
    }

    fn copy(&self, src: &CudaSlice<f32>, n: usize, dst: &mut CudaSlice<f32>) -> Result<()> {
        check_len("copy src", src.len(), n)?;
        check_len("copy dst", dst.len(), n)?;
        self.dev
            .stream
            .memcpy_dtod(&src.slice(..n), &mut dst.slice_mut(..n))
            .map_err(cuda_err)
    }

    fn embedding(
        &self,
        table: &CudaWeight,
        ids: &CudaSlice<u32>,
        rows: usize,
        first: u32,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        let width = table.cols;
        check_len("embedding ids", ids.len(), rows)?;
        check_len("embedding out", out.len(), rows * width)?;
        let (r, w) = (rows as i32, width as i32);
        let f = match &table.data {
            CudaWeightData::Bf16(_) => "embedding_bf16",
            CudaWeightData::F32(_) => "embedding_f32",
        };
        let f = self.kernels.get(f)?;
        let mut b = self.dev.stream.launch_builder(f);
        match &table.data {
            CudaWeightData::Bf16(t) => b.arg(t),
            CudaWeightData::F32(t) => b.arg(t),
        };
        let table_rows = table.rows as u32;
        b.arg(ids)
            .arg(out)
            .arg(&r)
            .arg(&w)
            .arg(&first)
            .arg(&table_rows);
        // SAFETY: the kernel's arguments match its signature; sizes were checked above.
        unsafe { b.launch(grid(rows * width)) }.map_err(cuda_err)?;
        Ok(())
    }

    fn gather_rows(
        &self,
        x: &CudaSlice<f32>,
        idx: &CudaSlice<u32>,
        rows: usize,
        width: usize,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        check_len("gather_rows idx", idx.len(), rows)?;
        check_len("gather_rows out", out.len(), rows * width)?;
        let (r, w) = (rows as i32, width as i32);
        let f = self.kernels.get("gather_rows_f32")?;
        let mut b = self.dev.stream.launch_builder(f);
        b.arg(x).arg(idx).arg(out).arg(&r).arg(&w);
        // SAFETY: the kernel's arguments match its signature; sizes were checked above.
        unsafe { b.launch(grid(rows * width)) }.map_err(cuda_err)?;
        Ok(())
    }

    fn rms_norm(
        &self,
        x: &CudaSlice<f32>,
        w: &CudaWeight,
        eps: f32,
        rows: usize,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        ops::rms_norm(self, x, w, eps, rows, out)
    }

    fn layer_norm(
        &self,
        x: &CudaSlice<f32>,
        w: &CudaWeight,
        b: &CudaWeight,
        eps: f32,
        rows: usize,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        ops::layer_norm(self, x, (w, b), eps, rows, out)
    }

    fn matmul(
        &self,
        x: &CudaSlice<f32>,
        w: &CudaWeight,
        bias: Option<&CudaWeight>,
        rows: usize,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        matmul::matmul(self, x, w, bias, rows, out)
    }

    fn rope_table(
        &self,
        positions: &CudaSlice<u32>,
        freqs: &RopeFreqs,
        rows: usize,
        table: &mut CudaSlice<f32>,
    ) -> Result<()> {
        ops::rope_table(self, positions, freqs, rows, table)
    }

    fn rope(
        &self,
        x: &mut CudaSlice<f32>,
        table: &CudaSlice<f32>,
        rows: usize,
        num_heads: usize,
        head_dim: usize,
    ) -> Result<()> {
        ops::rope(self, x, table, rows, (num_heads, head_dim))
    }

    fn silu_mul(
        &self,
        gate: &CudaSlice<f32>,
        up: &CudaSlice<f32>,
        n: usize,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        ops::silu_mul(self, gate, up, n, out)
    }

    fn gelu(&self, x: &mut CudaSlice<f32>, n: usize) -> Result<()> {
        ops::gelu(self, x, n)
    }

    fn add(&self, x: &mut CudaSlice<f32>, y: &CudaSlice<f32>, n: usize) -> Result<()> {
        ops::add(self, x, y, n)
    }

    fn matmul_add(
        &self,
        x: &CudaSlice<f32>,
        w: &CudaWeight,
        (rows, width): (usize, usize),
        scratch: &mut CudaSlice<f32>,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        if gemv::bf16_weight(w, rows).is_some() {
            return gemv::gemv(self, (x, w, None), rows, true, out);
        }
        check_len("matmul_add out", out.len(), rows * width)?;
        if let Some(done) = matmul::matmul_accumulate(self, x, w, rows, out) {
            return done;
        }
        unfused::matmul_add(self, (x, w), (rows, width), scratch, out)
    }

    fn gated_matmul(
        &self,
        x: &CudaSlice<f32>,
        norm: Option<RmsNormInto<'_, Self>>,
        (gate_w, up_w): (&CudaWeight, &CudaWeight),
        (rows, width): (usize, usize),
        (gate, up): (&mut CudaSlice<f32>, &mut CudaSlice<f32>),
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        let same = (gate_w.rows, gate_w.cols) == (up_w.rows, up_w.cols);
        let skinny = [gate_w, up_w]
            .iter()
            .all(|w| gemv::bf16_weight(w, rows).is_some());
        let fused_norm = gemv::fused_norm(norm.as_ref())?;
        if same && skinny {
            return gemv::silu_mul(self, (x, fused_norm), (gate_w, up_w), rows, out);
        }
        let products = ([gate_w, up_w], [None, None]);
        let outs = [&mut *gate, &mut *up];
        match matmul::products_of_one_input(self, (x, fused_norm), products, rows, outs) {
            Some(done) => {
                done?;
                ops::silu_mul(self, gate, up, rows * width, out)
            }
            None => {
                let (ws, dims) = ((gate_w, up_w), (rows, width));
                unfused::gated_matmul(self, (x, norm), ws, dims, (gate, up), out)
            }
        }
    }

    fn swiglu_mlp(
        &self,
        x: &mut CudaSlice<f32>,
        norm: Option<(&CudaWeight, f32)>,
        weights: SwigluWeights<'_, Self>,
        dims: (usize, usize, usize),
        (gate, up, act, scratch): SwigluBuffers<'_, Self>,
    ) -> Result<()> {
        let fused_norm = match norm {
            Some((w, eps)) => Some((ops::vector(w)?, eps)),
            None => None,
        };
        let pair = (&mut *gate, &mut *up);
        if let Some(done) = matmul::swiglu_mlp(self, (x, fused_norm), weights, dims, pair) {
            return done;
        }
        unfused::swiglu_mlp(self, (x, norm), weights, dims, (gate, up, act, scratch))
    }

    fn matmul3(
        &self,
        x: &CudaSlice<f32>,
        norm: Option<RmsNormInto<'_, Self>>,
        (w, bias): ([&CudaWeight; 3], [Option<&CudaWeight>; 3]),
        rows: usize,
        outs: [&mut CudaSlice<f32>; 3],
    ) -> Result<()> {
        let fused = w.iter().all(|w| gemv::bf16_weight(w, rows).is_some())
            && w[0].cols == w[1].cols
            && (w[1].rows, w[1].cols) == (w[2].rows, w[2].cols);
        let fused_norm = gemv::fused_norm(norm.as_ref())?;
        if fused {
            return gemv::gemv3(self, (x, fused_norm), (w, bias), rows, outs);
        }
        let [o0, o1, o2] = outs;
        let reborrowed = [&mut *o0, &mut *o1, &mut *o2];
        match matmul::products_of_one_input(self, (x, fused_norm), (w, bias), rows, reborrowed) {
            Some(done) => done,
            None => unfused::matmul3(self, (x, norm), (w, bias), rows, [o0, o1, o2]),
        }
    }

    fn matmul3_rope_kv_write(
        &self,
        x: &CudaSlice<f32>,
        norm: Option<RmsNormInto<'_, Self>>,
        weights: ([&CudaWeight; 3], [Option<&CudaWeight>; 3]),
        rows: usize,
        [q, k, v]: [&mut CudaSlice<f32>; 3],
        mut rope: RopeKvWrite<'_, Self>,
    ) -> Result<()> {
        let fused = gemv::gemv3_rope_kv(
            self,
            (x, gemv::fused_norm(norm.as_ref())?),
            weights,
            rows,
            [&mut *q, &mut *k, &mut *v],
            rope.reborrow(),
        );
        if let Some(done) = fused {
            return done;
        }
        self.matmul3(x, norm, weights, rows, [&mut *q, &mut *k, &mut *v])?;
        let (h, kvh, hd) = rope.heads;
        let (table, slots) = (rope.table, rope.slot_mapping);
        self.rope_kv_write((q, k, v), table, slots, (rows, h, kvh, hd), rope.caches)
    }

    fn attention_sublayer(
        &self,
        x: &mut CudaSlice<f32>,
        weights: AttnWeights<'_, Self>,
        rope: RopeKvWrite<'_, Self>,
        attn: (&PagedAttnMeta<'_, Self>, AttnShape),
        bufs: AttnBuffers<'_, Self>,
    ) -> Result<()> {
        match sublayer::takes(self, &weights, &rope, attn) {
            true => {
                self.bf16_sublayer_runs.fetch_add(1, Ordering::Relaxed);
                sublayer::run(self, x, weights, rope, attn, bufs)
            }
            false => unfused::attention_sublayer(self, x, weights, rope, attn, bufs),
        }
    }

    fn decode_layers(
        &self,
        x: &mut CudaSlice<f32>,
        step: crate::backend::DecodeLayers<'_, Self>,
    ) -> Result<bool> {
        decode_step::run(self, x, step)
    }

    fn runs_decode_layers(&self) -> bool {
        self.persistent_decode()
    }

    fn argmax_rows(
        &self,
        logits: &CudaSlice<f32>,
        dims: (usize, usize),
        ids: &mut CudaSlice<u32>,
    ) -> Result<()> {
        sample::argmax_rows(self, logits, dims, ids)
    }

    fn sample_rows(
        &self,
        logits: &CudaSlice<f32>,
        picks: &CudaSlice<f32>,
        dims: (usize, usize),
        ids: &mut CudaSlice<u32>,
    ) -> Result<()> {
        sample::sample_rows(self, logits, picks, dims, ids)
    }

    fn rope_kv_write(
        &self,
        qkv: (&mut CudaSlice<f32>, &mut CudaSlice<f32>, &CudaSlice<f32>),
        table: &CudaSlice<f32>,
        slot_mapping: &CudaSlice<u32>,
        dims: (usize, usize, usize, usize),
        caches: (&mut CudaKv, &mut CudaKv),
    ) -> Result<()> {
        if !self.int8_rope_write && matches!(caches.0.store, CudaKvStore::Int8 { .. }) {
            return unfused::rope_kv_write(self, qkv, (table, slot_mapping), dims, caches);
        }
        rope_kv::rope_kv_write(self, qkv, (table, slot_mapping), dims, caches)
    }

    fn read_ids(&self, src: &CudaSlice<u32>, dst: &mut [u32]) -> Result<()> {
        ops::read(&self.dev.stream, "read_ids", src, dst)?;
        self.release_finished_transfers();
        Ok(())
    }

    fn kv_write(
        &self,
        k: &CudaSlice<f32>,
        v: &CudaSlice<f32>,
        slot_mapping: &CudaSlice<u32>,
        rows: usize,
        k_cache: &mut CudaKv,
        v_cache: &mut CudaKv,
    ) -> Result<()> {
        ops::kv_write(self, (k, v), slot_mapping, rows, (k_cache, v_cache))
    }

    fn paged_attention(
        &self,
        q: &CudaSlice<f32>,
        k_cache: &CudaKv,
        v_cache: &CudaKv,
        meta: &PagedAttnMeta<'_, Self>,
        shape: AttnShape,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        attention::paged(self, q, (k_cache, v_cache), meta, shape, out)
    }

    fn varlen_attention(
        &self,
        q: &CudaSlice<f32>,
        k: &CudaSlice<f32>,
        v: &CudaSlice<f32>,
        query_start_loc: &CudaSlice<u32>,
        seqs_tokens: (usize, usize),
        shape: AttnShape,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        attention::varlen(self, q, (k, v), query_start_loc, seqs_tokens, shape, out)
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
