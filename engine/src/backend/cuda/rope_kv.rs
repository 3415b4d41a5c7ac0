//! The fused RoPE + KV write of a layer (`rope_kv_write_*` in `kv.cu`): q and k rotated in place, k
//! and v scattered to their pool slots (int8 pools: quantised a head at a time), in one launch
//! instead of three.

use cudarc::driver::{CudaSlice, LaunchConfig};

use super::pdl::PdlArgs;
use super::{CudaBackend, CudaKv, check_len, grid, pools};
use crate::backend::KvDtype;
use crate::error::{EngineError, Result};

pub(super) fn rope_kv_write(
    be: &CudaBackend,
    (q, k, v): (&mut CudaSlice<f32>, &mut CudaSlice<f32>, &CudaSlice<f32>),
    (table, slots): (&CudaSlice<f32>, &CudaSlice<u32>),
    (rows, heads, kv_heads, head_dim): (usize, usize, usize, usize),
    (kc, vc): (&mut CudaKv, &mut CudaKv),
) -> Result<()> {
    let width = kv_heads * head_dim;
    if (kc.shape.num_kv_heads * kc.shape.head_dim) != width || !head_dim.is_multiple_of(2) {
        return Err(EngineError::InvalidConfig(format!(
            "rope_kv_write: {kv_heads} KV heads of {head_dim} do not match the pool"
        )));
    }
    check_len("rope_kv_write q", q.len(), rows * heads * head_dim)?;
    check_len("rope_kv_write k", k.len(), rows * width)?;
    check_len("rope_kv_write v", v.len(), rows * width)?;
    check_len("rope_kv_write table", table.len(), rows * head_dim)?;
    check_len("rope_kv_write slot_mapping", slots.len(), rows)?;
    let ints = [rows, heads, kv_heads, head_dim].map(|x| x as i32);
    let name = format!("rope_kv_write_{}", pools::shared_dtype(kc, vc)?);
    let stream = &be.dev.stream;
    let mut a = PdlArgs::new();
    a.buf(q, stream)
        .buf(k, stream)
        .buf(v, stream)
        .buf(table, stream)
        .buf(slots, stream);
    pools::push(&mut a, stream, kc, vc)?;
    for i in ints {
        a.int(i);
    }
    let f = be.kernels.get(&name)?;
    let cfg = match kc.shape.dtype {
        // One warp per (row, head): an int8 head's scale needs the whole head.
        KvDtype::Int8 => {
            let warps_per_block = 8;
            LaunchConfig {
                grid_dim: (
                    (rows * (heads + kv_heads)).div_ceil(warps_per_block).max(1) as u32,
                    1,
                    1,
                ),
                block_dim: (32 * warps_per_block as u32, 1, 1),
                shared_mem_bytes: 0,
            }
        }
        // A thread rotates four pairs where head_dim is a multiple of 8 (16-byte loads), else one.
        _ => {
            let pairs_a_thread = if head_dim.is_multiple_of(8) { 4 } else { 1 };
            grid(rows * (heads + kv_heads) * head_dim / 2 / pairs_a_thread)
        }
    };
    // SAFETY: arguments match the kernel's signature; sizes checked above. Slots are the caller's
    // (from the block allocator), as for kv_write. Every thread waits for the previous kernel
    // before it reads anything.
    unsafe { a.launch(f, stream, cfg, be.pdl_on()) }
}
