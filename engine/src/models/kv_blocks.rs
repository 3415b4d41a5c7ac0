//! Whole KV blocks of every layer in and out of a [`KvPool`]: the unit the tiered cache
//! ([`crate::kv::tiers`]) copies down to host memory and disk and brings back.
//!
//! A block's bytes are its K then V content, layer by layer, each as the backend lays one block of a
//! pool out ([`crate::backend::Backend::read_kv_blocks`]).

use std::sync::Arc;

use super::KvPool;
use crate::backend::Backend;
use crate::error::Result;
use crate::kv::tiers::BlockBytes;

impl<B: Backend> KvPool<B> {
    /// Bytes of one block over all layers, K and V.
    pub fn block_bytes(&self) -> usize {
        2 * self.k.len() * self.shape.block_bytes()
    }

    /// The content of each of `blocks`.
    pub fn read_blocks(&self, backend: &B, blocks: &[u32]) -> Result<Vec<BlockBytes>> {
        let per_pool = self.shape.block_bytes();
        let mut out: Vec<Vec<u8>> = blocks
            .iter()
            .map(|_| vec![0u8; self.block_bytes()])
            .collect();
        for (p, pool) in self.pools().enumerate() {
            let mut parts: Vec<&mut [u8]> = out
                .iter_mut()
                .map(|record| &mut record[p * per_pool..(p + 1) * per_pool])
                .collect();
            backend.read_kv_blocks(pool, blocks, &mut parts)?;
        }
        Ok(out.into_iter().map(Arc::new).collect())
    }

    /// Writes `contents[i]` (as [`KvPool::read_blocks`] returns it) into block `blocks[i]`.
    pub fn write_blocks(
        &mut self,
        backend: &B,
        blocks: &[u32],
        contents: &[BlockBytes],
    ) -> Result<()> {
        let per_pool = self.shape.block_bytes();
        let whole = self.block_bytes();
        if let Some(bad) = contents.iter().find(|c| c.len() != whole) {
            return Err(crate::EngineError::InvalidBatch(format!(
                "a KV block of {} bytes does not fit this pool's blocks of {whole}",
                bad.len()
            )));
        }
        let layers = self.k.len();
        for p in 0..2 * layers {
            let parts: Vec<&[u8]> = contents
                .iter()
                .map(|record| &record[p * per_pool..(p + 1) * per_pool])
                .collect();
            let pool = match p % 2 {
                0 => &mut self.k[p / 2],
                _ => &mut self.v[p / 2],
            };
            backend.write_kv_blocks(pool, blocks, &parts)?;
        }
        Ok(())
    }

    /// Every pool in block-byte order: layer 0's K, layer 0's V, layer 1's K...
    fn pools(&self) -> impl Iterator<Item = &B::Kv> {
        self.k.iter().zip(&self.v).flat_map(|(k, v)| [k, v])
    }
}
