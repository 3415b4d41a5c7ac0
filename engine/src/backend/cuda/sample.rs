//! Launches of the token-picking kernels (`sample.cu`): the arg-max of each row of logits, and the
//! host sampler's temperature / top-k / top-p draw made on the device, so a decode step reads back
//! one id per sequence instead of its logits.

use cudarc::driver::{CudaSlice, LaunchConfig, PushKernelArg};

use super::{CudaBackend, check_len, cuda_err};
use crate::error::Result;

/// Threads per row (the kernels' launch bound).
const THREADS: u32 = 1024;

fn per_row(rows: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (rows as u32, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// `ids[r]` = arg-max of row `r` of `logits [rows, vocab]`, one block per row.
pub(super) fn argmax_rows(
    be: &CudaBackend,
    logits: &CudaSlice<f32>,
    dims: (usize, usize),
    ids: &mut CudaSlice<u32>,
) -> Result<()> {
    pick_rows(be, logits, None, dims, ids)
}

/// `ids[r]` = the token picked from row `r` of `logits [rows, vocab]` with row `r` of
/// `picks [rows, 4]` (temperature, top-k, top-p, draw), one block per row.
pub(super) fn sample_rows(
    be: &CudaBackend,
    logits: &CudaSlice<f32>,
    picks: &CudaSlice<f32>,
    dims: (usize, usize),
    ids: &mut CudaSlice<u32>,
) -> Result<()> {
    pick_rows(be, logits, Some(picks), dims, ids)
}

/// One block per row: `sample_rows_f32` with the pick parameters, else `argmax_rows_f32`.
fn pick_rows(
    be: &CudaBackend,
    logits: &CudaSlice<f32>,
    picks: Option<&CudaSlice<f32>>,
    (rows, vocab): (usize, usize),
    ids: &mut CudaSlice<u32>,
) -> Result<()> {
    check_len("pick logits", logits.len(), rows * vocab)?;
    check_len("pick ids", ids.len(), rows)?;
    if let Some(p) = picks {
        check_len("pick parameters", p.len(), rows * 4)?;
    }
    if rows == 0 || vocab == 0 {
        return Ok(());
    }
    let name = match picks {
        Some(_) => "sample_rows_f32",
        None => "argmax_rows_f32",
    };
    let v = vocab as i32;
    let mut b = be.dev.stream.launch_builder(be.kernels.get(name)?);
    b.arg(logits);
    if let Some(p) = picks {
        b.arg(p);
    }
    b.arg(ids).arg(&v);
    // SAFETY: arguments match the kernel's signature (logits, [picks,] ids, vocab); sizes checked
    // above.
    unsafe { b.launch(per_row(rows)) }.map_err(cuda_err)?;
    Ok(())
}
