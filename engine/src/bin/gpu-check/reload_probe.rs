//! How fast whole KV blocks move between the pools and host memory, alone: one 8K-token document of
//! the Llama-3.1-8B shape (512 blocks of 16 tokens, 64 bf16 pools, 1 GiB) written into the pools
//! (a reload) and read out of them (an offload), with pinned records (reached by the device where they
//! lie, on the transfer stream) and with heap records (through the pinned bounce buffer), each timed
//! from the call to the end of a synchronisation (an offload: until its records can be read).
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
        report("reload", label, record, times);
        drop(records);
        let mut times = Vec::new();
        for _ in 0..6 {
            let mut out: Vec<BlockBuf> = (0..BLOCKS).map(|_| BlockBuf::new_in(&arena)).collect();
            let t = Instant::now();
            let refs: Vec<&CudaKv> = pools.iter().collect();
            gpu.read_kv_blocks(&refs, &blocks, &mut out)?;
            let issued = t.elapsed().as_secs_f64();
            if !out.iter().all(|r| r.settle()) {
                return Err(docqa_engine::EngineError::Internal(
                    "an offload failed".into(),
                ));
            }
            times.push((t.elapsed().as_secs_f64(), issued));
        }
        report("offload", label, record, times);
    }
    Ok(())
}

/// Prints the median of `times` (total, issued) after the first run.
fn report(what: &str, label: &str, record: usize, mut times: Vec<(f64, f64)>) {
    times.remove(0);
    times.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (total, issued) = times[times.len() / 2];
    let gib = (BLOCKS * record) as f64 / f64::from(1u32 << 30);
    println!(
        "{what} of {BLOCKS} blocks ({gib:.2} GiB), {label} records: {:.2} ms ({:.1} GB/s), \
         the call returning after {:.2} ms",
        total * 1e3,
        (BLOCKS * record) as f64 / total / 1e9,
        issued * 1e3
    );
}
