//! The collectives a tensor-parallel forward pass needs, over one backend's buffers: a sum over the
//! ranks (after the row-parallel o and down products, and the vocabulary-parallel embedding) and a
//! gather of the LM head's vocabulary parts into whole logit rows.

use super::Shard;
use crate::backend::Backend;
use crate::error::Result;

/// One rank's end of a group of ranks that run the same forward pass on their parts of a model.
///
/// Every rank calls the same collectives in the same order; a call returns (or, on a device, is
/// ordered on the rank's stream) once every rank has contributed. A rank that cannot go on stops the
/// group ([`Collective::abort`]) instead of leaving the others waiting for it.
pub trait Collective<B: Backend>: Send + Sync {
    /// This rank and the size of its group.
    fn shard(&self) -> Shard;

    /// `x[..n]` becomes the sum over the ranks of their `x[..n]`, the same on every rank.
    fn all_reduce_sum(&self, backend: &B, x: &mut B::Buf, n: usize) -> Result<()>;

    /// `out [rows, world · width]` becomes the ranks' `part [rows, width]` side by side, rank 0's
    /// columns first, on every rank. `stacked` holds `world · rows · width` values where the
    /// collective gathers the parts one after the other before placing them.
    fn all_gather_cols(
        &self,
        backend: &B,
        part: &B::Buf,
        dims: (usize, usize),
        stacked: &mut B::Buf,
        out: &mut B::Buf,
    ) -> Result<()>;

    /// Stops the whole group for good: every rank's collective that is waiting, and every later
    /// one, fails with an error that gives `why` (the first reason given wins).
    fn abort(&self, why: &str);

    /// Why the group stopped, once it has.
    fn stopped(&self) -> Option<String>;
}

/// The error a collective of a stopped group fails with.
pub(crate) fn stopped(why: &str) -> crate::error::EngineError {
    crate::error::EngineError::Internal(format!("the tensor-parallel group has stopped: {why}"))
}
