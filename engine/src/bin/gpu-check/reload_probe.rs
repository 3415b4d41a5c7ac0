//! How fast whole KV blocks come back from host memory, alone: one 8K-token document of the
//! Llama-3.1-8B shape (512 blocks of 16 tokens, 64 bf16 pools, 1 GiB) written into the pools from
//! pinned records (read by the device where they lie, on the reload stream) and from heap records
//! (through the pinned bounce buffer), each timed from the call to the end of a synchronisation.
//! `DOCQA_PROBE_RELOAD=1 gpu-check` prints the medians of five runs after one to warm up.

use std::sync::Arc;
use std::time::Instant;

use docqa_engine::Result;
use docqa_engine::backend::cuda::{CudaBackend, CudaKv};
use docqa_engine::backend::{Backend, KvDtype, KvShape};
use docqa_engine::kv::tiers::{BlockArena, BlockBuf, BlockBytes, heap_allocator};

const BLOCKS: usize = 512;
const POOLS: usize = 64;

pub fn run(gpu: &CudaBackend) -> Result<()> {
    let shape = KvShape {
        num_blocks: BLOCKS + 16,
        block_size: 16,
        num_kv_heads: 8,
        head_dim: 128,
        dtype: KvDtype::Bf16,
    };
    let mut pools: Vec<CudaKv> = (0..POOLS)
        .map(|_| gpu.alloc_kv(shape))
        .collect::<Result<_>>()?;
    let record = POOLS * shape.block_bytes();
    let blocks: Vec<u32> = (0..BLOCKS as u32).rev().collect();
    for (label, allocator) in [("pinned", gpu.host_allocator()), ("heap", heap_allocator())] {
        let arena = BlockArena::new(record, (BLOCKS + 8) * record, allocator);
        let records: Vec<BlockBytes> = (0..BLOCKS)
            .map(|_| Arc::new(BlockBuf::new_in(&arena)))
            .collect();
        let mut times = Vec::new();
        for _ in 0..6 {
            let t = Instant::now();
            let mut refs: Vec<&mut CudaKv> = pools.iter_mut().collect();
            gpu.write_kv_blocks(&mut refs, &blocks, &records)?;
            let issued = t.elapsed().as_secs_f64();
            gpu.synchronize()?;
            times.push((t.elapsed().as_secs_f64(), issued));
        }
        times.remove(0);
        times.sort_by(|a, b| a.0.total_cmp(&b.0));
        let (total, issued) = times[times.len() / 2];
        let gib = (BLOCKS * record) as f64 / f64::from(1u32 << 30);
        println!(
            "reload of {BLOCKS} blocks ({gib:.2} GiB) from {label} records: {:.2} ms ({:.1} GB/s), \
             the call returning after {:.2} ms",
            total * 1e3,
            (BLOCKS * record) as f64 / total / 1e9,
            issued * 1e3
        );
    }
    Ok(())
}
