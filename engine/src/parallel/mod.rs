//! Tensor parallelism: one model split over the ranks of a group, each rank running the same forward
//! pass on its part ([`Shard`]) and joining the others through [`Collective`]s.
//!
//! The model code ([`crate::models::llama`]) loads a rank's part and calls the collectives; which
//! collectives a group uses is its backend's business: threads on the CPU ([`ThreadGroup`], the
//! reference), NCCL on GPUs.

mod collective;
mod load;
mod shard;
mod threads;

pub use collective::Collective;
pub use load::{Grouped, load_ranks};
pub use shard::Shard;
pub use threads::ThreadGroup;
