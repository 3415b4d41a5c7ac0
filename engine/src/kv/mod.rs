//! The paged KV cache: block hashes, the block pool, and the per-request manager.

pub mod block_hash;
pub mod block_pool;
mod lineage;
pub mod manager;
pub mod single;
pub mod tiers;

pub use single::{BlockAllocator, SeqBlocks};
