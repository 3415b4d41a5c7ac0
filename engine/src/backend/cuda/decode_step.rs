//! A decode step's layers for one sequence in one persistent launch (`decode_step.cu`, compute
//! capability 9.0): one block an SM, all resident at once (a cooperative launch), each warp
//! streaming the weight rows it will multiply, across every layer, through a ring of its own in
//! shared memory while the block runs the layers' phases between grid-wide barriers. It replaces the ~6 launches a
//! layer of the op-by-op decode at batch 1, whose waits between kernels leave the memory idle.
//!
//! Off by default (`DOCQA_CUDA_PERSISTENT_DECODE=1` or [`CudaBackend::set_persistent_decode`] turns
//! it on); where it is on and a step does not suit it (more than one token, a sink window, biases,
//! int8 or f32 pools, a head_dim other than 64 or 128, a context past [`MAX_CONTEXT`]), the layers
//! run op by op.
//!
//! The kernel reads its arguments from one device buffer of 8-byte words (`StepArgs`, then one
//! `StepLayer` a layer); the buffers are kept by their words, so a recorded graph that names one
//! stays valid, and they only grow in number.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use cudarc::driver::sys::{
    CUdevice_attribute, CUfunction_attribute, CUlaunchAttribute, CUlaunchAttributeID,
    CUlaunchAttributeValue,
};
use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, DevicePtr, LaunchConfig};

use super::decode_profile::{Profiling, poisoned};
use super::pdl::launch_ex;
use super::{CudaBackend, CudaKv, CudaKvStore, CudaWeight, CudaWeightData, cuda_err};
use crate::backend::{DecodeLayerWeights, DecodeLayers};
use crate::error::Result;

/// Warps a block, and its threads (the kernel's `STEP_WARPS`, `STEP_THREADS`).
const CONSUMER_WARPS: usize = 8;
const THREADS: u32 = CONSUMER_WARPS as u32 * 32;
/// Bytes a ring slot holds (`CHUNK_BYTES`).
const CHUNK_BYTES: usize = 4096;
/// Key splits a KV head at most, and query heads a KV head at most (`STEP_MAX_SPLITS`,
/// `STEP_MAX_GROUP`; at head_dim 128, `max_group` allows 4).
const MAX_SPLITS: usize = 32;
const MAX_GROUP: usize = 8;

/// Query heads a KV head may have at `head_dim` (the kernel's `max_group`).
fn max_group(head_dim: usize) -> usize {
    match head_dim {
        64 => MAX_GROUP,
        _ => 4,
    }
}
/// Ring slots at least: one a warp.
const MIN_SLOTS: usize = CONSUMER_WARPS;
/// Longest context the launch takes: its attention runs one warp a split of at most 32 splits a KV
/// head, well short of the split-KV kernel's bandwidth over long contexts.
const MAX_CONTEXT: usize = 16384;
/// Argument buffers kept at most; past it they are dropped and graphs recorded again.
const MAX_ARG_BUFFERS: usize = 64;

/// The scratch and argument buffers of the persistent decode.
#[derive(Default)]
pub(super) struct State {
    scratch: Option<Scratch>,
    args: HashMap<Vec<u64>, CudaSlice<u64>>,
    pub(super) profiling: Profiling,
}

/// The splits' outputs, their (max, sum) pairs, and the barrier and arrival counters.
struct Scratch {
    parts: CudaSlice<f32>,
    part_ml: CudaSlice<f32>,
    counters: CudaSlice<u32>,
}

impl CudaBackend {
    /// Runs batch-1 decode steps' layers in one persistent launch where they suit it (`on`), or op
    /// by op. Graphs recorded before are recorded again.
    pub fn set_persistent_decode(&self, on: bool) {
        self.persistent_decode.store(on, Ordering::Relaxed);
        self.bump_graph_epoch();
    }

    /// Whether batch-1 decode steps run their layers in one launch where they can.
    pub fn persistent_decode(&self) -> bool {
        self.persistent_decode.load(Ordering::Relaxed)
    }

    /// Caps each warp's ring at `depth` slots (None: as many as shared memory holds), for the
    /// kernel lab, which asks whether the copies in flight slow the step's other loads (on an H100,
    /// 1 to 5 slots a warp timed the same). Graphs recorded before are recorded again.
    pub fn set_persistent_depth(&self, depth: Option<usize>) {
        self.set_lab_count(&self.persistent_depth, depth);
    }

    /// The cap on each warp's ring, where one is set.
    pub fn persistent_depth(&self) -> Option<usize> {
        lab_count(&self.persistent_depth)
    }

    /// Has each warp keep `chunks` weight chunks past its ring asked of L2, topped up at every
    /// phase's end (None or 0: none), so that the memory streams the coming weights while the
    /// blocks stage, attend and wait at barriers. A lab switch: on an H100, 6 chunks made the
    /// Llama-3.2-1B shape's step 2.6 % faster and SmolLM2's 12 % slower (BENCHMARKS.md, run 7).
    /// Graphs recorded before are recorded again.
    pub fn set_persistent_l2_ahead(&self, chunks: Option<usize>) {
        self.set_lab_count(&self.persistent_l2_ahead, chunks);
    }

    /// The chunks each warp keeps prefetched past its ring, where set.
    pub fn persistent_l2_ahead(&self) -> Option<usize> {
        lab_count(&self.persistent_l2_ahead)
    }

    /// Decode steps whose layers ran in one launch so far, for checks that the path was taken.
    pub fn persistent_decode_runs(&self) -> u64 {
        self.persistent_decode_runs.load(Ordering::Relaxed)
    }

    /// Sets one of the kernel's lab counts (None: 0, unset); graphs recorded before are recorded
    /// again.
    fn set_lab_count(&self, count: &AtomicUsize, value: Option<usize>) {
        count.store(value.unwrap_or(0), Ordering::Relaxed);
        self.bump_graph_epoch();
    }
}

/// A lab count where it is set (not 0).
fn lab_count(count: &AtomicUsize) -> Option<usize> {
    Some(count.load(Ordering::Relaxed)).filter(|&c| c > 0)
}

/// The sizes of a step the kernel takes.
#[derive(Clone, Copy)]
struct Dims {
    hidden: usize,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    inter: usize,
}

impl Dims {
    /// The activations a block stages at once: the widest product input, in pieces of 8.
    fn stage_elems(&self) -> usize {
        let widest = self.hidden.max(self.inter).max(self.heads * self.head_dim);
        widest.div_ceil(8) * 8
    }

    /// Shared memory besides the ring: barriers and reduction scratch (rounded as the kernel
    /// rounds them), the staged activations, every warp's attention scratch.
    fn smem_bytes(&self, slots: usize) -> usize {
        let head = (8 * slots + 4 * CONSUMER_WARPS).div_ceil(128) * 128;
        let group = max_group(self.head_dim);
        let scratch = CONSUMER_WARPS * (group * self.head_dim + group * 32 + 32) * 4;
        head + slots * CHUNK_BYTES + self.stage_elems() * 2 + scratch
    }

    /// The most ring slots `limit` bytes of shared memory hold, the same number for every warp.
    fn slots_within(&self, limit: usize) -> usize {
        let mut slots = (limit / CHUNK_BYTES).max(1);
        while slots > 0 && self.smem_bytes(slots) > limit {
            slots -= 1;
        }
        slots - slots % CONSUMER_WARPS
    }
}

/// The bf16 elements of `w` when it is `[rows, cols]`.
fn bf16_of(w: &CudaWeight, rows: usize, cols: usize) -> Option<&CudaSlice<u16>> {
    match &w.data {
        CudaWeightData::Bf16(d) if w.rows == rows && w.cols == cols => Some(d),
        _ => None,
    }
}

/// An f32 vector of `len` values.
fn vector_of(w: &CudaWeight, len: usize) -> Option<&CudaSlice<f32>> {
    match &w.data {
        CudaWeightData::F32(d) if w.rows * w.cols == len => Some(d),
        _ => None,
    }
}

/// A bf16 pool of `kv_heads` heads of `head_dim`.
fn bf16_pool(kv: &CudaKv, dims: Dims) -> Option<&CudaSlice<u16>> {
    match &kv.store {
        CudaKvStore::Bf16(d)
            if kv.shape.num_kv_heads == dims.kv_heads && kv.shape.head_dim == dims.head_dim =>
        {
            Some(d)
        }
        _ => None,
    }
}

/// The step's sizes, when the kernel takes it.
fn dims_of(
    be: &CudaBackend,
    x: &CudaSlice<f32>,
    step: &DecodeLayers<'_, CudaBackend>,
) -> Option<Dims> {
    let (meta, shape) = step.attn;
    let first = step.layers.first()?;
    let dims = Dims {
        hidden: first.o.rows,
        heads: shape.num_heads,
        kv_heads: shape.num_kv_heads,
        head_dim: shape.head_dim,
        inter: first.mlp[0].rows,
    };
    let one_token = meta.num_seqs == 1
        && meta.num_tokens == 1
        && meta.windows.is_none()
        && meta.max_seq_len <= MAX_CONTEXT;
    let heads_fit = matches!(dims.head_dim, 64 | 128)
        && dims.kv_heads > 0
        && dims.heads.is_multiple_of(dims.kv_heads)
        && dims.heads / dims.kv_heads <= max_group(dims.head_dim);
    // The kernel deals each product's rows over the blocks in 32-bit arithmetic.
    let pairs = [
        dims.inter,
        dims.hidden,
        (dims.heads + 2 * dims.kv_heads) * dims.head_dim,
    ];
    let widths_fit = dims.hidden.is_multiple_of(8)
        && dims.inter.is_multiple_of(8)
        && pairs.iter().all(|&n| n * be.dev.sm_count < 1 << 32);
    let pools =
        step.caches.0.len() >= step.layers.len() && step.caches.1.len() >= step.layers.len();
    let bufs = x.len() >= dims.hidden
        && step.bufs[0].len() >= dims.heads * dims.head_dim
        && step.bufs[1].len() >= dims.heads * dims.head_dim
        && step.bufs[2].len() >= dims.inter;
    let on = be.persistent_decode() && be.dev.cc == (9, 0);
    (on && one_token && heads_fit && widths_fit && pools && bufs).then_some(dims)
}

/// One layer's 11 words (`StepLayer`), when its weights and pools are what the kernel reads.
fn layer_words(
    l: &DecodeLayerWeights<'_, CudaBackend>,
    (kc, vc): (&CudaKv, &CudaKv),
    d: Dims,
    stream: &CudaStream,
) -> Option<[u64; 11]> {
    let (q_rows, kv_rows) = (d.heads * d.head_dim, d.kv_heads * d.head_dim);
    let mats = [
        bf16_of(l.qkv[0], q_rows, d.hidden)?,
        bf16_of(l.qkv[1], kv_rows, d.hidden)?,
        bf16_of(l.qkv[2], kv_rows, d.hidden)?,
        bf16_of(l.o, d.hidden, q_rows)?,
        bf16_of(l.mlp[0], d.inter, d.hidden)?,
        bf16_of(l.mlp[1], d.inter, d.hidden)?,
        bf16_of(l.mlp[2], d.hidden, d.inter)?,
    ];
    let norms = [
        vector_of(l.norms[0], d.hidden)?,
        vector_of(l.norms[1], d.hidden)?,
    ];
    let pools = [bf16_pool(kc, d)?, bf16_pool(vc, d)?];
    let mut w = [0u64; 11];
    for (i, m) in mats.iter().enumerate() {
        w[i] = m.device_ptr(stream).0;
    }
    w[7] = norms[0].device_ptr(stream).0;
    w[8] = norms[1].device_ptr(stream).0;
    w[9] = pools[0].device_ptr(stream).0;
    w[10] = pools[1].device_ptr(stream).0;
    Some(w)
}

/// Runs the step's layers in one launch and returns true, or returns false having done nothing
/// where the step does not suit the kernel.
pub(super) fn run(
    be: &CudaBackend,
    x: &mut CudaSlice<f32>,
    step: DecodeLayers<'_, CudaBackend>,
) -> Result<bool> {
    let Some(d) = dims_of(be, x, &step) else {
        return Ok(false);
    };
    let stream = &be.dev.stream;
    let mut layers = Vec::with_capacity(step.layers.len());
    for (i, l) in step.layers.iter().enumerate() {
        let pools = (&step.caches.0[i], &step.caches.1[i]);
        let Some(words) = layer_words(l, pools, d, stream) else {
            return Ok(false);
        };
        layers.push(words);
    }
    let Some((f, slots, smem)) = kernel_for(be, d)? else {
        return Ok(false);
    };
    for i in 0..step.layers.len() {
        step.caches.0[i].await_transfer(stream)?;
        step.caches.1[i].await_transfer(stream)?;
    }
    let grid = be.dev.sm_count as u32;
    let mut state = be.persistent.lock().map_err(|_| poisoned())?;
    let profile = state
        .profiling
        .address(be, step.layers.len(), grid as usize)?;
    let scratch = scratch_for(be, &mut state, d, step.layers.len())?;
    let mut words = step_words(x, &step, scratch, stream);
    words.push(profile);
    let block_size = step.caches.0[0].shape.block_size;
    let sizes = [
        step.layers.len(),
        d.hidden,
        d.heads,
        d.kv_heads,
        d.head_dim,
        d.inter,
    ];
    let ahead = be.persistent_l2_ahead.load(Ordering::Relaxed);
    words.extend(
        sizes
            .iter()
            .chain(&[block_size, slots, ahead])
            .map(|&v| v as u64),
    );
    words.push(u64::from(step.eps.to_bits()));
    words.push(u64::from(step.attn.1.scale.to_bits()));
    words.extend(layers.iter().flatten());
    stream
        .memset_zeros(&mut scratch.counters)
        .map_err(cuda_err)?;
    let args = args_buffer(be, &mut state, words)?;
    // SAFETY: the argument buffer holds the StepArgs and StepLayer words the kernel reads, every
    // pointer in it checked above for its size and type; the launch is cooperative, so all blocks
    // are resident together, as the kernel's barriers need.
    unsafe { launch_cooperative(&f, stream, grid, smem as u32, args.device_ptr(stream).0) }?;
    be.persistent_decode_runs.fetch_add(1, Ordering::Relaxed);
    Ok(true)
}

/// The kernel for the step's head_dim, its ring's slots and its shared memory, set as the launch
/// needs; None where fewer than [`MIN_SLOTS`] slots fit or a block an SM does not.
fn kernel_for(be: &CudaBackend, d: Dims) -> Result<Option<(CudaFunction, usize, usize)>> {
    let f = be
        .kernels
        .get(&format!("decode_layers_bf16_hd{}", d.head_dim))?;
    let optin = CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN;
    let limit = be.dev.ctx.attribute(optin).map_err(cuda_err)? as usize;
    let mut slots = d.slots_within(limit);
    let depth = be.persistent_depth.load(Ordering::Relaxed);
    if depth > 0 {
        slots = slots.min(depth * CONSUMER_WARPS);
    }
    if slots < MIN_SLOTS {
        return Ok(None);
    }
    let smem = d.smem_bytes(slots);
    let max_smem = CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
    f.set_attribute(max_smem, smem as i32).map_err(cuda_err)?;
    let resident = f.occupancy_max_active_blocks_per_multiprocessor(THREADS, smem, None);
    match resident.map_err(cuda_err)? {
        0 => Ok(None),
        _ => Ok(Some((f.clone(), slots, smem))),
    }
}

/// The `StepArgs` words that are buffers' addresses, in the kernel's order, but the profile's.
fn step_words(
    x: &CudaSlice<f32>,
    step: &DecodeLayers<'_, CudaBackend>,
    scratch: &Scratch,
    stream: &CudaStream,
) -> Vec<u64> {
    let ptr = |b: &CudaSlice<f32>| b.device_ptr(stream).0;
    let ids = |b: &CudaSlice<u32>| b.device_ptr(stream).0;
    let meta = step.attn.0;
    vec![
        ptr(x),
        ptr(step.bufs[0]),
        ptr(step.bufs[1]),
        ptr(step.bufs[2]),
        ptr(&scratch.parts),
        ptr(&scratch.part_ml),
        scratch.counters.device_ptr(stream).0,
        ptr(step.rope),
        ids(step.slot_mapping),
        ids(meta.block_table),
        ids(meta.seq_lens),
    ]
}

/// The scratch for `layers` layers of these sizes, grown (and graphs recorded again) where smaller.
fn scratch_for<'s>(
    be: &CudaBackend,
    state: &'s mut State,
    d: Dims,
    layers: usize,
) -> Result<&'s mut Scratch> {
    let parts = d.heads * MAX_SPLITS * d.head_dim;
    let (part_ml, counters) = (d.heads * MAX_SPLITS * 2, 1 + layers * d.kv_heads);
    let fits = state.scratch.as_ref().is_some_and(|s| {
        s.parts.len() >= parts && s.part_ml.len() >= part_ml && s.counters.len() >= counters
    });
    if !fits {
        state.scratch = Some(Scratch {
            parts: be.zeros(parts)?,
            part_ml: be.zeros(part_ml)?,
            counters: be.zeros(counters)?,
        });
        state.args.clear();
        be.bump_graph_epoch();
    }
    Ok(state.scratch.as_mut().expect("set above"))
}

/// The device buffer holding `words`, uploaded the first time they are seen.
fn args_buffer<'s>(
    be: &CudaBackend,
    state: &'s mut State,
    words: Vec<u64>,
) -> Result<&'s CudaSlice<u64>> {
    if !state.args.contains_key(&words) {
        if state.args.len() >= MAX_ARG_BUFFERS {
            state.args.clear();
            be.bump_graph_epoch();
        }
        let buf = be.upload(&words)?;
        state.args.insert(words.clone(), buf);
    }
    Ok(&state.args[&words])
}

/// Launches `f` on `grid` blocks of [`THREADS`] with `smem` bytes of shared memory, as a
/// cooperative launch, its one parameter the address `args`.
///
/// # Safety
/// `args` must hold what the kernel reads.
unsafe fn launch_cooperative(
    f: &CudaFunction,
    stream: &CudaStream,
    grid: u32,
    smem: u32,
    args: u64,
) -> Result<()> {
    let mut arg = args;
    let mut params = [(&mut arg as *mut u64).cast::<std::ffi::c_void>()];
    // SAFETY: a zeroed union is a valid value; the one field the attribute reads is set next.
    let mut value: CUlaunchAttributeValue = unsafe { std::mem::zeroed() };
    value.cooperative = 1;
    let attr = CUlaunchAttribute {
        id: CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_COOPERATIVE,
        pad: [0; 4],
        value,
    };
    let cfg = LaunchConfig {
        grid_dim: (grid, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: smem,
    };
    // SAFETY: the kernel takes one pointer, `args`, which the caller vouches for.
    unsafe { launch_ex(f, stream, cfg, &mut params, Some(attr)) }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LLAMA_1B: Dims = Dims {
        hidden: 2048,
        heads: 32,
        kv_heads: 8,
        head_dim: 64,
        inter: 8192,
    };
    const LLAMA_8B: Dims = Dims {
        hidden: 4096,
        heads: 32,
        kv_heads: 8,
        head_dim: 128,
        inter: 14336,
    };

    #[test]
    fn the_rings_take_as_many_slots_a_warp_as_the_shared_memory_a_block_may_have_holds() {
        let hopper = 227 * 1024;
        for d in [LLAMA_1B, LLAMA_8B] {
            let slots = d.slots_within(hopper);
            assert!(d.smem_bytes(slots) <= hopper);
            assert!(d.smem_bytes(slots + CONSUMER_WARPS) > hopper);
            assert_eq!(slots % CONSUMER_WARPS, 0);
            assert!(slots >= MIN_SLOTS, "{slots} slots");
        }
        // The 1B shape: 16 KiB of staged activations and 25 KiB of attention scratch leave room for
        // 46 slots, 5 a warp. The 8B shape: 28 KiB staged and 21 KiB of scratch (4 query heads a
        // warp at head_dim 128) leave 44, 5 a warp.
        assert_eq!(LLAMA_1B.slots_within(hopper), 40);
        assert_eq!(LLAMA_8B.slots_within(hopper), 40);
    }

    #[test]
    fn the_stage_holds_the_widest_product_input_in_whole_pieces() {
        assert_eq!(LLAMA_8B.stage_elems(), 14336);
        let odd = Dims {
            inter: 1540,
            hidden: 576,
            heads: 9,
            kv_heads: 3,
            head_dim: 64,
        };
        assert_eq!(odd.stage_elems(), 1544);
    }
}
