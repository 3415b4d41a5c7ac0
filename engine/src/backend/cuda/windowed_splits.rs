//! Split launches of the windowed prefill kernel (`flash_prefill.cu`'s `_windowed` entry points) and
//! the merge after them. Under sink windows a block reads only its query rows' windows, so a step of a
//! few thousand rows at a small model's head count has about one block an SM, each with a long run of
//! key tiles: too few warps to keep the tensor cores busy. Split, each block reads a share of its
//! window's tiles (the first split the sinks too) and writes its rows normalised by its own softmax
//! sum with their reference and sum beside them; `flash_prefill_merge` weighs the splits together.

use std::sync::atomic::Ordering;

use cudarc::driver::{CudaSlice, LaunchConfig, PushKernelArg};

use super::{CudaBackend, cuda_err};
use crate::backend::AttnShape;
use crate::error::Result;

/// Blocks of the windowed kernels an SM holds at once (252–255 registers a thread, 128 threads).
const RESIDENT_BLOCKS_PER_SM: usize = 2;
/// Splits of a launch that does not fill the GPU once, and the most of any launch.
const MAX_SPLITS: usize = 8;

/// Whether the windowed prefill kernel over `dtype` pools (`bf16`, `int8`) at `head_dim` has a split
/// form: all but bf16 at head_dim 128, whose split store would spill at the register limit.
pub(super) fn has_split_form(dtype: &str, head_dim: usize) -> bool {
    !(dtype == "bf16" && head_dim == 128)
}

/// Splits of a windowed prefill launch of `blocks` blocks (a query tile and head each) on `sms` SMs:
/// [`MAX_SPLITS`] where the launch is less than one wave of resident blocks, none otherwise; `fixed`
/// (above 0) instead. On an H100 (BENCHMARKS.md, "Sink-window prefill in splits"), a 2,048-row step
/// at SmolLM2's 9 heads (153 blocks, 0.6 of a wave) took 0.349 ms a layer in one split, 0.351 in two,
/// 0.275 in four and 0.249 in eight; at Llama-3.2-1B's 32 heads (544 blocks, 2.1 waves) 0.689 ms in
/// one and 0.716–0.809 in two to eight.
pub(super) fn splits_for(blocks: usize, sms: usize, fixed: usize) -> usize {
    match fixed {
        0 if blocks < RESIDENT_BLOCKS_PER_SM * sms => MAX_SPLITS,
        0 => 1,
        n => n,
    }
}

impl CudaBackend {
    /// Fixes the splits of windowed prefill launches (1: none), or with `None` leaves them to
    /// [`splits_for`]'s policy; for checks and benchmarks that compare them
    /// (`DOCQA_CUDA_WINDOWED_SPLITS` sets it at start: N that many; unset or 0, the policy).
    pub fn set_windowed_prefill_splits(&self, splits: Option<usize>) {
        self.windowed_splits
            .store(splits.unwrap_or(0), Ordering::Relaxed);
    }

    /// The splits windowed prefill launches are fixed to, or None where the policy chooses.
    pub fn windowed_prefill_splits(&self) -> Option<usize> {
        match self.windowed_splits.load(Ordering::Relaxed) {
            0 => None,
            n => Some(n),
        }
    }

    /// The splits a windowed prefill launch of `blocks` blocks takes.
    pub fn windowed_prefill_splits_for(&self, blocks: usize) -> usize {
        let fixed = self.windowed_splits.load(Ordering::Relaxed);
        splits_for(blocks, self.dev.sm_count, fixed)
    }
}

/// Queues `flash_prefill_merge`: the `splits` split outputs of `num_tokens` rows weighed into `out`
/// (`[num_tokens, num_heads, head_dim]`).
pub(super) fn merge(
    be: &CudaBackend,
    (part_o, part_ml): (&CudaSlice<f32>, &CudaSlice<f32>),
    (splits, num_tokens): (usize, usize),
    shape: AttnShape,
    out: &mut CudaSlice<f32>,
) -> Result<()> {
    let rows = num_tokens * shape.num_heads;
    let threads = rows * shape.head_dim / 4;
    let cfg = LaunchConfig {
        grid_dim: (threads.div_ceil(256) as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    let func = be.kernels.get("flash_prefill_merge")?;
    let ints = [rows, shape.head_dim, splits].map(|v| v as i32);
    let mut b = be.dev.stream.launch_builder(func);
    b.arg(part_o).arg(part_ml).arg(out);
    for i in &ints {
        b.arg(i);
    }
    // SAFETY: the buffers hold `splits` split rows of `rows` (token, head) rows and `out` `rows`
    // rows of head_dim (a multiple of 4); the split launch before it on the stream wrote them.
    unsafe { b.launch(cfg) }.map_err(cuda_err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::splits_for;

    #[test]
    fn a_windowed_step_under_one_wave_is_split_eight_ways_and_a_fuller_launch_is_not() {
        // SmolLM2's 9 heads, a 2,048-row step in 128-row tiles (17 a head with the partial one):
        // 153 blocks against 264 resident at once on 132 SMs.
        assert_eq!(splits_for(17 * 9, 132, 0), 8);
        // 32 heads: 544 blocks, two waves and more.
        assert_eq!(splits_for(17 * 32, 132, 0), 1);
        assert_eq!(splits_for(264, 132, 0), 1);
        assert_eq!(splits_for(9, 132, 0), 8);
        // Fixed counts are taken as they are.
        assert_eq!(splits_for(9, 132, 1), 1);
        assert_eq!(splits_for(17 * 32, 132, 4), 4);
    }
}
