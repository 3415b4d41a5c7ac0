//! Backends whose instances can be joined into a tensor-parallel group: threads on the CPU, NCCL on
//! GPUs (`nccl`).

use std::sync::Arc;

use super::{Collective, ThreadGroup};
use crate::backend::Backend;
use crate::backend::cpu::CpuBackend;
use crate::error::Result;

/// A backend whose instances can be joined into a tensor-parallel group.
pub trait Grouped: Backend + 'static {
    /// One collective per backend, rank `i` on `backends[i]`.
    fn join(backends: &[&Self]) -> Result<Vec<Arc<dyn Collective<Self>>>>;
}

impl Grouped for CpuBackend {
    fn join(backends: &[&Self]) -> Result<Vec<Arc<dyn Collective<Self>>>> {
        Ok(ThreadGroup::new(backends.len())
            .into_iter()
            .map(|g| Arc::new(g) as Arc<dyn Collective<Self>>)
            .collect())
    }
}
