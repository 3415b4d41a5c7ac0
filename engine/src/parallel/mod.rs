//! Tensor parallelism: one model split over the ranks of a group, each rank running the same forward
//! pass on its part ([`Shard`]) and joining the others through [`Collective`]s.
//!
//! The model code ([`crate::models::llama`]) loads a rank's part and calls the collectives
//! ([`crate::models::split`] loads every rank's); which collectives a group uses is its backend's
//! business ([`Grouped`]): threads on the CPU ([`ThreadGroup`], the reference), NCCL on GPUs
//! (`nccl`).

mod collective;
mod grouped;
#[cfg(feature = "cuda")]
pub mod nccl;
mod shard;
mod threads;

pub use collective::Collective;
pub use grouped::Grouped;
pub use shard::Shard;
pub use threads::ThreadGroup;
