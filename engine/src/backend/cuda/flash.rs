//! Launches of the tensor-core attention kernels over bf16 and int8 paged KV pools
//! (`flash_prefill.cu`, `flash_prefill_sm90.cu`, `flash_decode.cu`): FlashAttention-2-style prefill
//! on mma.sync, prefill on warpgroup MMAs for bf16 and int8 pools on Hopper (compute capability 9.0), and
//! split-KV decode with its reduce. int8 keys and values are dequantised to bf16 as the kernels load
//! them.
//!
//! They apply to head_dim 64 and 128; decode also needs at most 16 query heads per KV head and one
//! query row per sequence. Q and the output stay f32 (`[rows, heads · head_dim]`); the kernels round
//! Q to bf16 in registers.

use cudarc::driver::sys::CUfunction_attribute::{
    CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES as MAX_DYNAMIC_SMEM,
    CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK as MAX_THREADS,
};
use std::sync::atomic::Ordering;

use cudarc::driver::{CudaSlice, LaunchConfig, PushKernelArg};

use super::pdl::PdlArgs;
use super::{CudaBackend, CudaKv, cuda_err, pools, tma, windowed_splits};
use crate::backend::{AttnShape, KvDtype, PagedAttnMeta};
use crate::error::{EngineError, Result};

/// Most keys per prefill tile (the kernel's `BN_OF(HD)`: 32 or 64); shared memory is sized for it.
const MAX_TILE_KEYS: usize = 64;
/// Keys per decode block step (4 warps × 16 keys): split lengths are multiples of it.
const DECODE_STEP: usize = 64;
/// Shortest key split worth a block of its own.
const MIN_SPLIT: usize = 256;
/// Below this many (sequence, KV head) pairs, splits go down to one step of the block's four warps
/// ([`DECODE_STEP`] keys), so a short context of a small batch is spread over many blocks.
const FEW_GROUPS: usize = 16;
/// Blocks the decode launch of so few pairs aims for: two an SM, one wave. Measured at batch 1 with
/// 8 KV heads (BENCHMARKS.md, "decode products, int8 decode and programmatic launch"), fewer longer
/// splits beat many short ones: each block's fixed cost and the reduce shrink, and a launch a little
/// over the resident limit (three an SM) pays a second wave.
const FEW_GROUPS_TARGET_BLOCKS: usize = 132 * 2;
/// Blocks the decode launch aims for: many short blocks over the H200's 132 SMs, so the last wave
/// is a small share of the time.
const TARGET_BLOCKS: usize = 132 * 16;
/// Most query heads per KV head the decode kernel handles (one mma tile's rows).
const MAX_GROUP: usize = 16;

/// Whether the flash kernels handle this head layout.
pub(super) fn supports(shape: AttnShape) -> bool {
    matches!(shape.head_dim, 64 | 128)
}

/// KV block sizes the prefill kernels take are multiples of this (their `PREFILL_BLOCK_MULTIPLE` and
/// `SM90_BLOCK_MULTIPLE`: each thread copies that many consecutive keys from one block); others go to
/// the plain kernel.
const PREFILL_BLOCK_MULTIPLE: usize = 8;

/// Whether the prefill kernel takes pools of this block size.
pub(super) fn prefill_takes_block_size(block_size: usize) -> bool {
    block_size.is_multiple_of(PREFILL_BLOCK_MULTIPLE)
}

/// Whether a batch is pure decode the decode kernel handles: one query row per sequence (every
/// scheduled sequence has at least one row, so `num_tokens == num_seqs` means exactly one each).
pub(super) fn is_decode(meta: &PagedAttnMeta<'_, CudaBackend>, shape: AttnShape) -> bool {
    meta.num_tokens == meta.num_seqs && shape.num_heads / shape.num_kv_heads <= MAX_GROUP
}

/// Keys in the Hopper prefill kernel's K/V ring (`flash_prefill_sm90.cu`): 3 stages of 128-key
/// tiles at head_dim 64, of 64-key tiles at 128 (its `SM90_STAGES_*` · `SM90_BN_*`; kernel-lab
/// rings beyond it need this raised).
fn sm90_ring_keys(head_dim: usize) -> usize {
    match head_dim {
        64 => 3 * 128,
        _ => 3 * 64,
    }
}

/// Shared memory of a Hopper prefill block of `rows` query rows: Q, then the ring of K and V tiles,
/// all bf16 and unpadded (swizzled), 1 KiB to align them to the swizzle pattern, and the ring's
/// barriers; over int8 pools then the staging slots, each 2 · 4 keys of a 16-byte piece per producer
/// thread and the K and V scales (f32) of a tile (the kernel's `INT8_SLOT_BYTES`), and the K and V
/// scales of every key in the ring.
fn sm90_smem_bytes(rows: usize, head_dim: usize, int8: bool) -> usize {
    let ring = sm90_ring_keys(head_dim);
    let bf16 = (rows + 2 * ring) * head_dim * 2 + 1024 + 128;
    let tile = ring / 3;
    match int8 {
        true => {
            bf16 + SM90_INT8_SLOTS * (2 * 4 * SM90_PRODUCERS * 16 + 2 * tile * 4) + 2 * ring * 4
        }
        false => bf16,
    }
}

/// Keys in a tile of the Hopper prefill kernel at either head_dim (the smaller of its `SM90_BN_*`): its
/// TMA form takes the block sizes that divide it, each block one box.
const SM90_TILE_KEYS: usize = 64;

/// Staging slots of the Hopper prefill kernel's producer over int8 pools (its `INT8_SLOTS`).
const SM90_INT8_SLOTS: usize = 2;

/// Threads of the Hopper prefill kernel's producer warpgroup (the rest are consumers, 64 query rows
/// per warpgroup of 128: three of them).
const SM90_PRODUCERS: usize = 128;

/// Shared memory of a prefill block of `rows` query rows: Q rows, then two stages of bf16 K and V
/// tiles (bf16 pools), or one stage and two staging slots of raw tiles and their scales (int8 pools,
/// 32-key tiles at head_dim 128, the kernel's `tile_keys`); rows padded by 8 elements.
fn prefill_smem_bytes(rows: usize, head_dim: usize, int8: bool) -> usize {
    let padded = (head_dim + 8) * 2;
    match int8 {
        false => (rows + 4 * MAX_TILE_KEYS) * padded,
        true => {
            let keys = if head_dim == 128 { 32 } else { MAX_TILE_KEYS };
            (rows + 2 * keys) * padded + 4 * keys * (head_dim + 4)
        }
    }
}

/// How a prefill launch lays its blocks out over (query tile, head).
#[derive(Clone, Copy, Debug, PartialEq)]
enum PrefillBlocks {
    /// The Hopper kernel's cp.async form over bf16 pools: one block an SM (at most one an item),
    /// each claiming items along x until none is left.
    Persistent,
    /// The Hopper kernel's TMA and int8 forms: a block an item, along x.
    PerItem,
    /// The mma.sync kernels: a block a query tile (x) and head (y).
    PerTileAndHead,
}

impl PrefillBlocks {
    /// The grid of a launch of `query_tiles` tiles a head over `heads` heads on `sms` SMs.
    fn grid(self, query_tiles: usize, heads: usize, sms: usize) -> (u32, u32, u32) {
        let items = query_tiles * heads;
        match self {
            PrefillBlocks::Persistent => (items.min(sms) as u32, 1, 1),
            PrefillBlocks::PerItem => (items as u32, 1, 1),
            PrefillBlocks::PerTileAndHead => (query_tiles as u32, heads as u32, 1),
        }
    }
}

/// Where prefill reads its queries and writes its output, both `[num_tokens, num_heads, head_dim]`.
pub(super) enum PrefillIo<'a> {
    /// f32 buffers.
    F32(&'a CudaSlice<f32>, &'a mut CudaSlice<f32>),
    /// Device addresses of bf16 arrays, for the Hopper kernel's `_bf16io` forms (bf16 and int8
    /// pools, no windows); the caller vouches that they hold the batch's rows.
    Bf16 { q: u64, out: u64 },
}

/// Causal prefill (any batch shape) over bf16 or int8 pools; with windows in `meta`, sequences may
/// stream through sink windows (each query reads the sinks with its row of `q_sinks`).
pub(super) fn prefill(
    be: &CudaBackend,
    io: PrefillIo<'_>,
    (kc, vc): (&CudaKv, &CudaKv), // [num_blocks, block_size, num_kv_heads, head_dim]
    meta: &PagedAttnMeta<'_, CudaBackend>,
    shape: AttnShape,
) -> Result<()> {
    let dtype = pools::shared_dtype(kc, vc)?;
    let hopper = dtype != "f32" && meta.windows.is_none() && be.hopper_prefill();
    let tma = hopper && be.prefill_loads_with_tma(kc.shape.dtype, kc.shape.block_size);
    let kind = match (meta.windows.is_some(), hopper, tma) {
        (true, _, _) => "_windowed",
        (false, true, true) => "_sm90_tma",
        (false, true, false) => "_sm90",
        (false, false, _) => "",
    };
    let bf16io = match (&io, hopper) {
        (PrefillIo::F32(..), _) => "",
        (PrefillIo::Bf16 { .. }, true) => "_bf16io",
        (PrefillIo::Bf16 { .. }, false) => {
            return Err(EngineError::Internal(
                "bf16 queries go to the Hopper prefill kernel only, without windows".into(),
            ));
        }
    };
    let name = format!("flash_prefill{kind}_{dtype}_hd{}{bf16io}", shape.head_dim);
    let func = be.kernels.get(&name)?;
    // The kernel's launch bound is its block size: 32 query rows per warp (PREFILL_WARPS · 32), or
    // 64 per consumer warpgroup of 128 threads (the Hopper kernel).
    let threads = func.get_attribute(MAX_THREADS).map_err(cuda_err)? as usize / 32 * 32;
    let rows = match hopper {
        true => (threads - SM90_PRODUCERS) / 2,
        false => threads,
    };
    // Above the 48 KiB default.
    let smem = match hopper {
        true => sm90_smem_bytes(rows, shape.head_dim, dtype == "int8"),
        false => prefill_smem_bytes(rows, shape.head_dim, dtype == "int8"),
    };
    func.set_attribute(MAX_DYNAMIC_SMEM, smem as i32)
        .map_err(cuda_err)?;
    // Query tiles a head (an upper bound: a sequence's partial tile each).
    let query_tiles = meta.num_tokens / rows + meta.num_seqs;
    let blocks = match (hopper, tma || dtype == "int8") {
        (true, false) => PrefillBlocks::Persistent,
        (true, true) => PrefillBlocks::PerItem,
        (false, _) => PrefillBlocks::PerTileAndHead,
    };
    // Windowed launches of few blocks split their window tiles ([`windowed_splits`]).
    let splittable = windowed_splits::has_split_form(dtype, shape.head_dim);
    let splits = match meta.windows.is_some() && splittable {
        true => be.windowed_prefill_splits_for(query_tiles * shape.num_heads),
        false => 1,
    };
    let (x, y, _) = blocks.grid(query_tiles, shape.num_heads, be.dev.sm_count);
    let cfg = LaunchConfig {
        grid_dim: (x, y, splits as u32),
        block_dim: (threads as u32, 1, 1),
        shared_mem_bytes: smem as u32,
    };
    // The split rows of each (token, head): outputs and (reference, sum) pairs.
    let mut parts = be.prefill_parts.lock().unwrap_or_else(|e| e.into_inner());
    let rows = splits * meta.num_tokens * shape.num_heads;
    let split_parts = match splits > 1 {
        true => {
            let sizes = (rows * shape.head_dim, rows * 2);
            let (part_o, part_ml) = grown_parts(be, &mut parts, sizes, Graphed::No)?;
            Some((&*part_o, &*part_ml))
        }
        false => None,
    };
    // The Hopper kernel takes the query tiles a head after the other sizes.
    let ints = [
        meta.num_seqs,
        shape.num_heads,
        shape.num_kv_heads,
        kc.shape.block_size,
        meta.max_blocks_per_seq,
        query_tiles,
    ]
    .map(|v| v as i32);
    let ints = match hopper {
        true => &ints[..],
        false => &ints[..5],
    };
    let stream = &be.dev.stream;
    // The TMA form takes the pools as tensor maps; their guards live until the launch is queued.
    let maps = match tma {
        true => Some((tma::pool_map(kc, stream)?, tma::pool_map(vc, stream)?)),
        false => None,
    };
    let (q_at, out_at) = match &io {
        PrefillIo::Bf16 { q, out } => (*q, *out),
        PrefillIo::F32(..) => (0, 0),
    };
    let mut b = stream.launch_builder(func);
    match &io {
        PrefillIo::F32(q, _) => b.arg(*q),
        PrefillIo::Bf16 { .. } => b.arg(&q_at),
    };
    if let Some(w) = &meta.windows {
        b.arg(w.q_sinks);
    }
    match &maps {
        Some(((k_map, _), (v_map, _))) => {
            b.arg(k_map).arg(v_map);
        }
        None => pools::push(&mut b, stream, kc, vc)?,
    }
    b.arg(meta.query_start_loc)
        .arg(meta.seq_lens)
        .arg(meta.block_table);
    if let Some(w) = &meta.windows {
        b.arg(w.windows);
    }
    // A split launch writes the split buffers, not the output, which the merge writes after it.
    let null = 0u64;
    let merge_into = match io {
        PrefillIo::F32(_, out) if split_parts.is_some() => {
            b.arg(&null);
            Some(out)
        }
        PrefillIo::F32(_, out) => {
            b.arg(out);
            None
        }
        PrefillIo::Bf16 { .. } => {
            b.arg(&out_at);
            None
        }
    };
    match split_parts {
        Some((part_o, part_ml)) => {
            b.arg(part_o).arg(part_ml);
        }
        None if meta.windows.is_some() => {
            b.arg(&null).arg(&null);
        }
        None => {}
    }
    for i in ints {
        b.arg(i);
    }
    b.arg(&shape.scale);
    // SAFETY: arguments match the kernel's signature; the caller checked the buffer sizes; the
    // block table and lengths come from the KV bookkeeping, as for the other attention kernels; the
    // split buffers hold `splits` rows for each of the batch's (token, head) rows.
    unsafe { b.launch(cfg) }.map_err(cuda_err)?;
    if let (Some((part_o, part_ml)), Some(out)) = (split_parts, merge_into) {
        windowed_splits::merge(be, (part_o, part_ml), (splits, meta.num_tokens), shape, out)?;
    }
    Ok(())
}

/// Bidirectional attention within each sequence of a packed batch (BERT): K and V rounded to bf16
/// into scratch rows, then the tensor-core prefill kernel without a cache or a causal mask.
pub(super) fn bidirectional(
    be: &CudaBackend,
    q: &CudaSlice<f32>,                         // [rows, num_heads, head_dim]
    (k, v): (&CudaSlice<f32>, &CudaSlice<f32>), // [rows, num_kv_heads, head_dim]
    query_start_loc: &CudaSlice<u32>,
    (num_seqs, rows): (usize, usize),
    shape: AttnShape,
    out: &mut CudaSlice<f32>, // [rows, num_heads, head_dim]
) -> Result<()> {
    let n = rows * shape.num_kv_heads * shape.head_dim;
    let stream = &be.dev.stream;
    // SAFETY: the casts below write all n elements before the kernel reads them.
    let (mut k16, mut v16) = unsafe { (stream.alloc::<u16>(n), stream.alloc::<u16>(n)) };
    let (k16, v16) = (
        k16.as_mut().map_err(cuda_err)?,
        v16.as_mut().map_err(cuda_err)?,
    );
    super::ops::cast_to_bf16(be, k, n, k16)?;
    super::ops::cast_to_bf16(be, v, n, v16)?;
    let func = be
        .kernels
        .get(&format!("flash_prefill_bidir_bf16_hd{}", shape.head_dim))?;
    let threads = func.get_attribute(MAX_THREADS).map_err(cuda_err)? as usize / 32 * 32;
    let smem = prefill_smem_bytes(threads, shape.head_dim, false);
    func.set_attribute(MAX_DYNAMIC_SMEM, smem as i32)
        .map_err(cuda_err)?;
    let cfg = LaunchConfig {
        grid_dim: (
            (rows / threads + num_seqs) as u32,
            shape.num_heads as u32,
            1,
        ),
        block_dim: (threads as u32, 1, 1),
        shared_mem_bytes: smem as u32,
    };
    let ints = [num_seqs, shape.num_heads, shape.num_kv_heads].map(|v| v as i32);
    let mut b = stream.launch_builder(func);
    b.arg(q).arg(&*k16).arg(&*v16).arg(query_start_loc).arg(out);
    for i in &ints {
        b.arg(i);
    }
    b.arg(&shape.scale);
    // SAFETY: arguments match the kernel's signature; the caller checked q, k, v and out hold `rows`
    // rows and query_start_loc num_seqs + 1 offsets within them.
    unsafe { b.launch(cfg) }.map_err(cuda_err)?;
    Ok(())
}

/// Contexts up to this many keys are read by one block per (KV head, sequence), which writes the
/// output itself (no reduce launch).
const ONE_SPLIT_MAX: usize = DECODE_STEP;

impl CudaBackend {
    /// Makes split-KV decode launches aim for about `blocks` blocks, splits going down to one step of
    /// a block's warps; `None` restores the split policy. For benchmarks that sweep it. Recorded
    /// graphs are dropped.
    pub fn set_decode_block_target(&self, blocks: Option<usize>) {
        self.decode_blocks
            .store(blocks.unwrap_or(0), Ordering::Relaxed);
        self.bump_graph_epoch();
    }

    /// Makes prefill over bf16 pools run the warpgroup-MMA kernel (`on`, where the device is compute
    /// capability 9.0) or the mma.sync one, for checks and benchmarks that compare them.
    pub fn set_hopper_prefill(&self, on: bool) {
        self.hopper_prefill
            .store(on && self.dev.cc == (9, 0), Ordering::Relaxed);
    }

    /// Whether prefill over bf16 pools runs the warpgroup-MMA kernel.
    pub fn hopper_prefill(&self) -> bool {
        self.hopper_prefill.load(Ordering::Relaxed)
    }

    /// Makes the warpgroup-MMA prefill kernel load K and V with TMA (its `_tma` form, for pools
    /// whose block size divides its 128-key tile) or with cp.async, for checks and benchmarks that
    /// compare them (`DOCQA_HOPPER_PREFILL=tma` starts with TMA).
    pub fn set_hopper_tma(&self, on: bool) {
        self.hopper_tma.store(on, Ordering::Relaxed);
    }

    /// Whether the warpgroup-MMA prefill kernel loads K and V with TMA.
    pub fn hopper_tma(&self) -> bool {
        self.hopper_tma.load(Ordering::Relaxed)
    }

    /// Whether prefill over pools of `dtype` and `block_size` (head_dim 64 or 128, no sink windows)
    /// runs the warpgroup-MMA kernel's TMA form, which reads bf16 pools only.
    pub fn prefill_loads_with_tma(&self, dtype: KvDtype, block_size: usize) -> bool {
        dtype == KvDtype::Bf16
            && self.hopper_prefill()
            && self.hopper_tma()
            && SM90_TILE_KEYS.is_multiple_of(block_size)
    }

    /// The blocks split-KV decode launches aim for, when a benchmark set them.
    pub fn decode_block_target(&self) -> Option<usize> {
        match self.decode_blocks.load(Ordering::Relaxed) {
            0 => None,
            n => Some(n),
        }
    }
}

/// Keys one step of a decode block's four warps reads: a multiple of every split's length. int8
/// chunks take twice the keys of bf16 ones (the same bytes).
fn decode_step(kc: &CudaKv) -> usize {
    match kc.shape.dtype {
        KvDtype::Int8 => 2 * DECODE_STEP,
        _ => DECODE_STEP,
    }
}

/// Number of key splits and keys per split for a decode batch of `pairs` (sequence, KV head) pairs
/// whose longest sequence has `max_len` keys, its blocks reading `step` keys at once. `target`
/// overrides the blocks the launch aims for (and lets splits go down to one step).
fn splits(max_len: usize, pairs: usize, step: usize, target: Option<usize>) -> (usize, usize) {
    let max_len = max_len.max(1);
    if max_len <= ONE_SPLIT_MAX {
        return (1, max_len.div_ceil(step) * step);
    }
    let pairs = pairs.max(1);
    let min_split = if pairs < FEW_GROUPS || target.is_some() {
        step
    } else {
        MIN_SPLIT
    };
    let most = max_len.div_ceil(min_split);
    let blocks = target.unwrap_or(if pairs < FEW_GROUPS {
        FEW_GROUPS_TARGET_BLOCKS
    } else {
        TARGET_BLOCKS
    });
    let n = blocks.div_ceil(pairs).clamp(1, most.max(1));
    let len = max_len.div_ceil(n).div_ceil(step) * step;
    (max_len.div_ceil(len), len)
}

/// Split-KV decode (one query row per sequence) over bf16 or int8 pools, then the reduce (none with
/// one split). Under sink windows, a sequence past its sinks and window reads the window with `q`
/// and, in a second launch into one more split, the sinks with `q_sinks`.
pub(super) fn decode(
    be: &CudaBackend,
    q: &CudaSlice<f32>,           // [num_seqs, num_heads, head_dim]
    (kc, vc): (&CudaKv, &CudaKv), // [num_blocks, block_size, num_kv_heads, head_dim]
    meta: &PagedAttnMeta<'_, CudaBackend>,
    shape: AttnShape,
    out: &mut CudaSlice<f32>, // [num_seqs, num_heads, head_dim]
) -> Result<()> {
    let block_size = kc.shape.block_size;
    let pairs = meta.num_seqs * shape.num_kv_heads;
    let (n, len) = splits(
        meta.max_seq_len,
        pairs,
        decode_step(kc),
        be.decode_block_target(),
    );
    // Under sink windows the sinks take one more split, read with q_sinks by a second launch.
    let total = n + usize::from(meta.windows.is_some());
    let rows = meta.num_seqs * total * shape.num_heads;
    let mut parts = be.decode_parts.lock().unwrap_or_else(|e| e.into_inner());
    let sizes = (rows * shape.head_dim, rows * 2);
    let (part_o, part_ml) = grown_parts(be, &mut parts, sizes, Graphed::Yes)?;
    let launch = DecodeLaunch {
        block_size,
        splits: n,
        split_len: len,
        part: None,
    };
    if total == 1 {
        // One split per (KV head, sequence): its normalized output is the answer, and with one query
        // row per sequence its partial-output row is the output row, so the kernel writes `out`.
        return launch_decode(be, (q, kc, vc), meta, shape, launch, (out, part_ml));
    }
    if let Some(w) = &meta.windows {
        let window = DecodeLaunch {
            part: Some(WindowPart {
                sinks: false,
                split_base: 0,
                splits: total,
            }),
            ..launch
        };
        launch_decode(be, (q, kc, vc), meta, shape, window, (part_o, part_ml))?;
        // One block reads a sequence's sinks, however many (its split length covers any).
        let sinks = DecodeLaunch {
            splits: 1,
            split_len: i32::MAX as usize,
            part: Some(WindowPart {
                sinks: true,
                split_base: n,
                splits: total,
            }),
            ..launch
        };
        launch_decode(
            be,
            (w.q_sinks, kc, vc),
            meta,
            shape,
            sinks,
            (part_o, part_ml),
        )?;
    } else {
        launch_decode(be, (q, kc, vc), meta, shape, launch, (part_o, part_ml))?;
    }
    let cfg = LaunchConfig {
        grid_dim: (shape.num_heads as u32, meta.num_seqs as u32, 1),
        block_dim: (REDUCE_THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    let stream = &be.dev.stream;
    let mut a = PdlArgs::new();
    a.buf(part_o, stream)
        .buf(part_ml, stream)
        .buf(meta.query_start_loc, stream)
        .buf(out, stream);
    for i in [total, shape.num_heads, shape.head_dim] {
        a.int(i as i32);
    }
    let f = be.kernels.get("flash_decode_reduce")?;
    // SAFETY: arguments match the kernel's signature; sizes as above; every thread waits for the
    // decode kernel before it reads the splits.
    unsafe { a.launch(f, stream, cfg, be.pdl_on()) }
}

/// Threads of a reduce block (`REDUCE_THREADS` in `kernels/cuda/flash_decode.cu`): the splits are read
/// in parallel by groups of `head_dim / 4` threads.
const REDUCE_THREADS: u32 = 256;

/// Whether recorded CUDA graphs may read a buffer (decode steps are recorded; prefill steps never are).
#[derive(Clone, Copy, PartialEq)]
enum Graphed {
    Yes,
    No,
}

/// Split outputs and their (max, sum) pairs, `parts` grown to at least `(o, ml)` elements; they only
/// grow. Where recorded graphs read them, a growth moves the graph epoch: those graphs point at the
/// old buffers.
fn grown_parts<'a>(
    be: &CudaBackend,
    parts: &'a mut Option<(CudaSlice<f32>, CudaSlice<f32>)>,
    (o, ml): (usize, usize),
    graphed: Graphed,
) -> Result<(&'a mut CudaSlice<f32>, &'a mut CudaSlice<f32>)> {
    if parts
        .as_ref()
        .is_none_or(|(po, pml)| po.len() < o || pml.len() < ml)
    {
        let stream = &be.dev.stream;
        // SAFETY: every element a merge or reduce reads is written by the split launch before it.
        let grown = unsafe { (stream.alloc::<f32>(o), stream.alloc::<f32>(ml)) };
        *parts = Some((grown.0.map_err(cuda_err)?, grown.1.map_err(cuda_err)?));
        if graphed == Graphed::Yes {
            be.bump_graph_epoch();
        }
    }
    let Some((po, pml)) = parts.as_mut() else {
        unreachable!("filled above")
    };
    Ok((po, pml))
}

/// How a decode launch splits the keys.
#[derive(Clone, Copy)]
struct DecodeLaunch {
    block_size: usize,
    splits: usize,
    split_len: usize,
    /// Under sink windows: which part of the keys, and where its splits go.
    part: Option<WindowPart>,
}

/// One of the two launches of a windowed decode step.
#[derive(Clone, Copy)]
struct WindowPart {
    /// The sinks (read with q_sinks) rather than the window.
    sinks: bool,
    /// Index of this launch's first split among all of the step's.
    split_base: usize,
    /// The step's splits, both launches together.
    splits: usize,
}

/// Dynamic shared memory of a decode block: with int8 pools, its four warps' rings of
/// [`INT8_RING_STAGES`] stages (`Stage` in `kernels/cuda/flash_decode.cu`: a chunk's K and V
/// pieces, `head_dim · 64` bytes, and the two scales of its 32 key rows); none with bf16 pools.
fn decode_ring_bytes(int8: bool, head_dim: usize) -> usize {
    match int8 {
        true => INT8_RING_STAGES * 4 * (head_dim * 64 + 2 * 4 * 32 * 4),
        false => 0,
    }
}

/// Stages of an int8 decode warp's ring (`INT8_RING_STAGES` in `kernels/cuda/flash_decode.cu`).
const INT8_RING_STAGES: usize = 3;

/// The decode kernel: each (KV head, split, sequence) block writes its normalized rows of `part_o`
/// and their (max, sum) pairs.
fn launch_decode(
    be: &CudaBackend,
    (q, kc, vc): (&CudaSlice<f32>, &CudaKv, &CudaKv),
    meta: &PagedAttnMeta<'_, CudaBackend>,
    shape: AttnShape,
    launch: DecodeLaunch,
    (part_o, part_ml): (&CudaSlice<f32>, &CudaSlice<f32>),
) -> Result<()> {
    let kind = match launch.part {
        Some(_) => "_windowed",
        None => "",
    };
    let name = format!(
        "flash_decode{kind}_{}_hd{}",
        pools::shared_dtype(kc, vc)?,
        shape.head_dim
    );
    let dtype = pools::shared_dtype(kc, vc)?;
    let f = be.kernels.get(&name)?;
    let smem = decode_ring_bytes(dtype == "int8", shape.head_dim);
    if smem > 0 {
        f.set_attribute(MAX_DYNAMIC_SMEM, smem as i32)
            .map_err(cuda_err)?;
    }
    let cfg = LaunchConfig {
        // The KV heads fastest: the blocks reading one range of keys for all of a sequence's heads
        // run together, and those heads' rows lie side by side in the pool.
        grid_dim: (
            shape.num_kv_heads as u32,
            launch.splits as u32,
            meta.num_seqs as u32,
        ),
        block_dim: (128, 1, 1),
        shared_mem_bytes: smem as u32,
    };
    let ints = [
        shape.num_heads,
        shape.num_kv_heads,
        launch.block_size,
        meta.max_blocks_per_seq,
        launch.split_len,
    ]
    .map(|v| v as i32);
    let stream = &be.dev.stream;
    let mut a = PdlArgs::new();
    a.buf(q, stream);
    pools::push(&mut a, stream, kc, vc)?;
    a.buf(meta.query_start_loc, stream)
        .buf(meta.seq_lens, stream)
        .buf(meta.block_table, stream);
    if let Some(w) = &meta.windows {
        a.buf(w.windows, stream);
    }
    a.buf(part_o, stream).buf(part_ml, stream);
    for i in ints {
        a.int(i);
    }
    a.float(shape.scale);
    if let Some(p) = launch.part {
        a.int(i32::from(p.sinks))
            .int(p.split_base as i32)
            .int(p.splits as i32);
    }
    // SAFETY: arguments match the kernel's signature; the partial buffers hold
    // num_seqs · splits · num_heads rows (with one split, `part_o` is the output, which holds
    // num_seqs · num_heads rows); the caller checked the other sizes; every thread waits for the
    // kernel before it reads anything.
    unsafe { a.launch(f, stream, cfg, be.pdl_on()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The most dynamic shared memory a block may opt into on compute capability 9.0 (227 KiB).
    const SM90_MAX_BLOCK_SMEM: usize = 227 * 1024;

    #[test]
    fn every_hopper_prefill_block_fits_the_shared_memory_a_block_may_take() {
        // The kernel's consumer warpgroups of 64 query rows: three over either pool type.
        for (head_dim, int8, rows) in [
            (64, false, 3 * 64),
            (128, false, 3 * 64),
            (64, true, 3 * 64),
            (128, true, 3 * 64),
        ] {
            let bytes = sm90_smem_bytes(rows, head_dim, int8);
            assert!(
                bytes <= SM90_MAX_BLOCK_SMEM,
                "head_dim {head_dim}, int8 {int8}: {bytes} bytes"
            );
        }
    }

    #[test]
    fn a_persistent_prefill_has_a_block_an_sm_and_never_more_blocks_than_items() {
        // 16K tokens, 192-row tiles and a partial one, 32 heads, on 132 SMs: 2,752 items.
        let tiles = 16384 / 192 + 1;
        assert_eq!(PrefillBlocks::Persistent.grid(tiles, 32, 132), (132, 1, 1));
        assert_eq!(PrefillBlocks::PerItem.grid(tiles, 32, 132), (86 * 32, 1, 1));
        assert_eq!(
            PrefillBlocks::PerTileAndHead.grid(tiles, 32, 132),
            (86, 32, 1)
        );
        // A short chunk of 2 heads (2 items) takes 2 blocks, not 132.
        assert_eq!(PrefillBlocks::Persistent.grid(1, 2, 132), (2, 1, 1));
    }

    #[test]
    fn every_split_is_whole_steps_and_the_splits_cover_the_context() {
        for step in [DECODE_STEP, 2 * DECODE_STEP] {
            for (len, pairs) in [(65, 1), (1000, 8), (8192, 8), (32768, 64), (131072, 256)] {
                for target in [None, Some(132), Some(1056)] {
                    let (n, split) = splits(len, pairs, step, target);
                    assert_eq!(split % step, 0, "{len} keys, {pairs} pairs, {target:?}");
                    assert!(
                        n * split >= len && (n - 1) * split < len,
                        "{n} x {split} for {len}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_context_of_one_step_or_less_is_one_split() {
        assert_eq!(splits(40, 8, DECODE_STEP, None), (1, DECODE_STEP));
        assert_eq!(splits(64, 8, 2 * DECODE_STEP, None), (1, 2 * DECODE_STEP));
    }

    #[test]
    fn a_few_pairs_over_a_long_context_take_one_wave_of_two_blocks_an_sm() {
        let (n, len) = splits(8192, 8, DECODE_STEP, None);
        assert_eq!((n, len), (32, 256));
        assert!(n * 8 <= FEW_GROUPS_TARGET_BLOCKS);
        // Many pairs keep aiming for many blocks: 2,112 over 64 pairs, 33 splits, whole steps 32.
        assert_eq!(splits(32768, 64, DECODE_STEP, None), (32, 1024));
    }

    #[test]
    fn a_block_target_sets_how_many_blocks_the_launch_has() {
        // 8 KV heads of one sequence over 32K keys, aiming for 264 blocks: 33 splits a head, which
        // whole steps make 32 of 1,024 keys.
        let (n, len) = splits(32768, 8, DECODE_STEP, Some(264));
        assert_eq!((n, len), (32, 1024));
        let (n, _) = splits(32768, 8, DECODE_STEP, Some(1056));
        assert_eq!(n, 128);
    }
}
