//! Launches of the row-wise and element-wise kernels: norms, RoPE, SiLU·mul, GELU, add, KV write,
//! and host-to-device writes.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, DeviceRepr, LaunchConfig, PushKernelArg};

use super::{CudaBackend, CudaKv, CudaWeight, CudaWeightData, check_len, cuda_err, grid, pools};
use crate::config::RopeFreqs;
use crate::error::{EngineError, Result};

/// Threads per block of the row kernels (one block per row).
const ROW_THREADS: u32 = 256;

fn row_grid(rows: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (rows as u32, 1, 1),
        block_dim: (ROW_THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// The f32 elements of a vector weight.
pub(super) fn vector(w: &CudaWeight) -> Result<&CudaSlice<f32>> {
    match &w.data {
        CudaWeightData::F32(v) => Ok(v),
        CudaWeightData::Bf16(_) => Err(EngineError::Internal(
            "vector weights are uploaded as f32".into(),
        )),
    }
}

/// Copies the front of a device buffer to the host and waits for it (`what` names the op in errors).
pub(super) fn read<T: DeviceRepr>(
    stream: &Arc<CudaStream>,
    what: &str,
    src: &CudaSlice<T>,
    dst: &mut [T],
) -> Result<()> {
    check_len(what, src.len(), dst.len())?;
    stream
        .memcpy_dtoh(&src.slice(..dst.len()), dst)
        .map_err(cuda_err)?;
    stream.synchronize().map_err(cuda_err)
}

/// Copies host values into the front of a device buffer.
pub(super) fn write<T: DeviceRepr>(
    stream: &Arc<CudaStream>,
    dst: &mut CudaSlice<T>,
    src: &[T],
) -> Result<()> {
    check_len("write", dst.len(), src.len())?;
    if src.is_empty() {
        return Ok(());
    }
    stream
        .memcpy_htod(src, &mut dst.slice_mut(..src.len()))
        .map_err(cuda_err)
}

/// An element type the norm and element-wise kernels write, by its name in their kernel names.
pub(super) trait KernelOut: DeviceRepr {
    const NAME: &'static str;
}

impl KernelOut for f32 {
    const NAME: &'static str = "f32";
}

/// bf16, as its bit patterns.
impl KernelOut for u16 {
    const NAME: &'static str = "bf16";
}

pub(super) fn rms_norm(
    be: &CudaBackend,
    x: &CudaSlice<f32>,
    w: &CudaWeight,
    eps: f32,
    rows: usize,
    out: &mut CudaSlice<f32>,
) -> Result<()> {
    rms_norm_rows(be, x, (vector(w)?, eps), (rows, w.cols), out)
}

/// `out[rows, width] = x / sqrt(mean(x²) + eps) · w`, stored as `T` (f32, or bf16 for a product).
pub(super) fn rms_norm_rows<T: KernelOut>(
    be: &CudaBackend,
    x: &CudaSlice<f32>,
    (w, eps): (&CudaSlice<f32>, f32),
    (rows, width): (usize, usize),
    out: &mut CudaSlice<T>,
) -> Result<()> {
    check_len("rms_norm x", x.len(), rows * width)?;
    check_len("rms_norm weight", w.len(), width)?;
    check_len("rms_norm out", out.len(), rows * width)?;
    if rows == 0 {
        return Ok(());
    }
    let width = width as i32;
    let name = format!("rms_norm_{}", T::NAME);
    let mut b = be.dev.stream.launch_builder(be.kernels.get(&name)?);
    b.arg(x).arg(w).arg(out).arg(&width).arg(&eps);
    // SAFETY: arguments match the kernel's signature; sizes checked above.
    unsafe { b.launch(row_grid(rows)) }.map_err(cuda_err)?;
    Ok(())
}

/// `out[..n] = bf16(x[..n])`, rounded to nearest even.
pub(super) fn cast_to_bf16(
    be: &CudaBackend,
    x: &CudaSlice<f32>,
    n: usize,
    out: &mut CudaSlice<u16>,
) -> Result<()> {
    check_len("cast x", x.len(), n)?;
    check_len("cast out", out.len(), n)?;
    let len = n as i64;
    let mut b = be
        .dev
        .stream
        .launch_builder(be.kernels.get("cast_f32_bf16")?);
    b.arg(x).arg(out).arg(&len);
    // SAFETY: arguments match the kernel's signature; sizes checked above.
    unsafe { b.launch(grid(n.div_ceil(4))) }.map_err(cuda_err)?;
    Ok(())
}

pub(super) fn layer_norm(
    be: &CudaBackend,
    x: &CudaSlice<f32>,
    (w, bias): (&CudaWeight, &CudaWeight),
    eps: f32,
    rows: usize,
    out: &mut CudaSlice<f32>,
) -> Result<()> {
    let width = w.cols;
    check_len("layer_norm x", x.len(), rows * width)?;
    check_len("layer_norm out", out.len(), rows * width)?;
    check_len("layer_norm bias", bias.cols, width)?;
    if rows == 0 {
        return Ok(());
    }
    let width = width as i32;
    let mut b = be
        .dev
        .stream
        .launch_builder(be.kernels.get("layer_norm_f32")?);
    b.arg(x).arg(vector(w)?).arg(vector(bias)?).arg(out);
    b.arg(&width).arg(&eps);
    // SAFETY: arguments match the kernel's signature; sizes checked above.
    unsafe { b.launch(row_grid(rows)) }.map_err(cuda_err)?;
    Ok(())
}

pub(super) fn rope_table(
    be: &CudaBackend,
    positions: &CudaSlice<u32>,
    freqs: &RopeFreqs,
    rows: usize,
    table: &mut CudaSlice<f32>,
) -> Result<()> {
    let half = freqs.inv_freq.len();
    check_len("rope_table positions", positions.len(), rows)?;
    check_len("rope_table table", table.len(), rows * 2 * half)?;
    let mut cache = be.freqs.lock().unwrap_or_else(|e| e.into_inner());
    if cache
        .as_ref()
        .is_none_or(|(host, _)| *host != freqs.inv_freq)
    {
        *cache = Some((freqs.inv_freq.clone(), be.upload(&freqs.inv_freq)?));
        be.bump_graph_epoch();
    }
    let Some((_, inv_freq)) = cache.as_ref() else {
        unreachable!("filled above")
    };
    let (r, h) = (rows as i32, half as i32);
    let mut b = be
        .dev
        .stream
        .launch_builder(be.kernels.get("rope_table_f32")?);
    b.arg(positions).arg(inv_freq).arg(table);
    b.arg(&r).arg(&h).arg(&freqs.mscale);
    // SAFETY: arguments match the kernel's signature; sizes checked above.
    unsafe { b.launch(grid(rows * half)) }.map_err(cuda_err)?;
    Ok(())
}

pub(super) fn rope(
    be: &CudaBackend,
    x: &mut CudaSlice<f32>,
    table: &CudaSlice<f32>,
    rows: usize,
    (heads, head_dim): (usize, usize),
) -> Result<()> {
    check_len("rope x", x.len(), rows * heads * head_dim)?;
    check_len("rope table", table.len(), rows * head_dim)?;
    let (r, h, d) = (rows as i32, heads as i32, head_dim as i32);
    let mut b = be.dev.stream.launch_builder(be.kernels.get("rope_f32")?);
    b.arg(x).arg(table).arg(&r).arg(&h).arg(&d);
    // SAFETY: arguments match the kernel's signature; sizes checked above.
    unsafe { b.launch(grid(rows * heads * head_dim / 2)) }.map_err(cuda_err)?;
    Ok(())
}

/// `out[..n] = silu(gate) · up`.
pub(super) fn silu_mul(
    be: &CudaBackend,
    gate: &CudaSlice<f32>,
    up: &CudaSlice<f32>,
    n: usize,
    out: &mut CudaSlice<f32>,
) -> Result<()> {
    check_len("silu_mul gate", gate.len(), n)?;
    check_len("silu_mul up", up.len(), n)?;
    check_len("silu_mul out", out.len(), n)?;
    let len = n as i64;
    let mut b = be
        .dev
        .stream
        .launch_builder(be.kernels.get("silu_mul_f32")?);
    b.arg(gate).arg(up).arg(out).arg(&len);
    // SAFETY: arguments match the kernel's signature; sizes checked above.
    unsafe { b.launch(grid(n.div_ceil(4))) }.map_err(cuda_err)?;
    Ok(())
}

/// `out[..n] = bf16(silu(gate) ⊙ up)` over bf16 `gate` and `up` at raw device addresses.
///
/// # Safety
/// `gate` and `up` must each hold `n` bf16 values, valid on the backend's stream.
pub(super) unsafe fn silu_mul_of_bf16(
    be: &CudaBackend,
    (gate, up): (u64, u64),
    n: usize,
    out: &mut CudaSlice<u16>,
) -> Result<()> {
    check_len("silu_mul out", out.len(), n)?;
    let len = n as i64;
    let mut b = be
        .dev
        .stream
        .launch_builder(be.kernels.get("silu_mul_of_bf16")?);
    b.arg(&gate).arg(&up).arg(out).arg(&len);
    // SAFETY: arguments match the kernel's signature; out's size checked above, gate's and up's
    // vouched for by the caller; the pointers are 16-byte aligned (allocations are).
    unsafe { b.launch(grid(n.div_ceil(8))) }.map_err(cuda_err)?;
    Ok(())
}

pub(super) fn gelu(be: &CudaBackend, x: &mut CudaSlice<f32>, n: usize) -> Result<()> {
    check_len("gelu x", x.len(), n)?;
    let len = n as i64;
    let mut b = be.dev.stream.launch_builder(be.kernels.get("gelu_f32")?);
    b.arg(x).arg(&len);
    // SAFETY: arguments match the kernel's signature; sizes checked above.
    unsafe { b.launch(grid(n)) }.map_err(cuda_err)?;
    Ok(())
}

pub(super) fn add(
    be: &CudaBackend,
    x: &mut CudaSlice<f32>,
    y: &CudaSlice<f32>,
    n: usize,
) -> Result<()> {
    check_len("add x", x.len(), n)?;
    check_len("add y", y.len(), n)?;
    let len = n as i64;
    let mut b = be.dev.stream.launch_builder(be.kernels.get("add_f32")?);
    b.arg(x).arg(y).arg(&len);
    // SAFETY: arguments match the kernel's signature; sizes checked above.
    unsafe { b.launch(grid(n)) }.map_err(cuda_err)?;
    Ok(())
}

pub(super) fn kv_write(
    be: &CudaBackend,
    (k, v): (&CudaSlice<f32>, &CudaSlice<f32>),
    slot_mapping: &CudaSlice<u32>,
    rows: usize,
    (kc, vc): (&mut CudaKv, &mut CudaKv),
) -> Result<()> {
    let (heads, hd) = (kc.shape.num_kv_heads, kc.shape.head_dim);
    let width = heads * hd;
    check_len("kv_write k", k.len(), rows * width)?;
    check_len("kv_write v", v.len(), rows * width)?;
    check_len("kv_write slot_mapping", slot_mapping.len(), rows)?;
    let dtype = pools::shared_dtype(kc, vc)?;
    // int8 pools quantise each (row, KV head) with its own scale, one warp each; the others copy
    // element by element.
    let (ints, cfg) = match dtype {
        "int8" => {
            let warps_per_block = 8;
            let cfg = LaunchConfig {
                grid_dim: ((rows * heads).div_ceil(warps_per_block).max(1) as u32, 1, 1),
                block_dim: (32 * warps_per_block as u32, 1, 1),
                shared_mem_bytes: 0,
            };
            (vec![rows, heads, hd], cfg)
        }
        _ => (vec![rows, width], grid(rows * width)),
    };
    let ints: Vec<i32> = ints.into_iter().map(|x| x as i32).collect();
    let name = format!("kv_write_{dtype}");
    let mut b = be.dev.stream.launch_builder(be.kernels.get(&name)?);
    b.arg(k).arg(v).arg(slot_mapping);
    pools::push(&mut b, &be.dev.stream, kc, vc)?;
    for i in &ints {
        b.arg(i);
    }
    // SAFETY: arguments match the kernel's signature; sizes checked above. Slots are the caller's
    // (from the block allocator), as on the CPU backend.
    unsafe { b.launch(cfg) }.map_err(cuda_err)?;
    Ok(())
}
