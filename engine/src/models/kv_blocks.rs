//! Whole KV blocks of every layer in and out of a [`KvPool`]: the unit the tiered cache
//! ([`crate::kv::tiers`]) copies down to host memory and disk and brings back.
//!
//! A block's bytes are its K then V content, layer by layer, each as the backend lays one block of a
//! pool out ([`crate::backend::Backend::read_kv_blocks`]).

use super::KvPool;
use crate::backend::Backend;
use crate::error::Result;
use crate::kv::tiers::{BlockBuf, BlockBytes};

impl<B: Backend> KvPool<B> {
    /// Bytes of one block over all layers, K and V.
    pub fn block_bytes(&self) -> usize {
        2 * self.k.len() * self.shape.block_bytes()
    }

    /// Reads the content of each of `blocks` into `out[i]`, of [`KvPool::block_bytes`] each (perhaps
    /// still under way on return: see [`Backend::read_kv_blocks`]).
    pub fn read_blocks(&self, backend: &B, blocks: &[u32], out: &mut [BlockBuf]) -> Result<()> {
        let pools: Vec<&B::Kv> = self
            .k
            .iter()
            .zip(&self.v)
            .flat_map(|(k, v)| [k, v])
            .collect();
        backend.read_kv_blocks(&pools, blocks, out)
    }

    /// Writes `contents[i]` (as [`KvPool::read_blocks`] reads it) into block `blocks[i]`.
    pub fn write_blocks(
        &mut self,
        backend: &B,
        blocks: &[u32],
        contents: &[BlockBytes],
    ) -> Result<()> {
        let whole = self.block_bytes();
        if let Some(bad) = contents.iter().find(|c| c.len() != whole) {
            return Err(crate::EngineError::InvalidBatch(format!(
                "a KV block of {} bytes does not fit this pool's blocks of {whole}",
                bad.len()
            )));
        }
        let mut pools: Vec<&mut B::Kv> = self
            .k
            .iter_mut()
            .zip(self.v.iter_mut())
            .flat_map(|(k, v)| [k, v])
            .collect();
        backend.write_kv_blocks(&mut pools, blocks, contents)
    }
}
