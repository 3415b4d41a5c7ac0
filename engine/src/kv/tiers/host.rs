//! The host-memory tier: KV blocks evicted from the device pool, kept in RAM up to a byte limit, least
//! recently used first out (to the disk tier when there is one).

use super::BlockBytes;
use super::lru::{HasSize, LruIndex};
use super::record::BlockOwner;
use crate::kv::block_hash::BlockHash;
use crate::kv::manager::CacheNamespace;

/// A block held in host memory.
#[derive(Debug, Clone)]
pub(crate) struct HostBlock {
    /// Whose prefix it is, and the block before it (see [`crate::kv::lineage`]).
    pub owner: BlockOwner,
    /// The block's bytes, as the backend reads them out of the pool.
    pub bytes: BlockBytes,
}

impl HasSize for HostBlock {
    fn size(&self) -> usize {
        self.bytes.len()
    }
}

/// Blocks in host memory under a byte limit.
#[derive(Debug)]
pub(crate) struct HostTier {
    blocks: LruIndex<HostBlock>,
    limit: usize,
}

impl HostTier {
    /// An empty tier of at most `limit` bytes.
    pub fn new(limit: usize) -> Self {
        HostTier {
            blocks: LruIndex::default(),
            limit,
        }
    }

    /// Its byte limit.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Blocks held.
    pub fn len(&self) -> usize {
        self.blocks.len()
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.blocks.bytes()
    }

    /// Whether `hash` is held.
    pub fn contains(&self, hash: BlockHash) -> bool {
        self.blocks.contains(hash)
    }

    /// The block's bytes, marking it used.
    pub fn get(&mut self, hash: BlockHash) -> Option<BlockBytes> {
        self.blocks.touch(hash).map(|b| b.bytes.clone())
    }

    /// Keeps `block` as the most recently used; returns the blocks pushed out to stay under the limit,
    /// oldest first. A block larger than the whole limit is returned at once, unkept.
    pub fn insert(&mut self, hash: BlockHash, block: HostBlock) -> Vec<(BlockHash, HostBlock)> {
        if block.bytes.len() > self.limit {
            return vec![(hash, block)];
        }
        self.blocks.insert(hash, block);
        let mut out = Vec::new();
        while self.blocks.bytes() > self.limit {
            let Some(oldest) = self.blocks.pop_oldest() else {
                break;
            };
            out.push(oldest);
        }
        out
    }

    /// Every block held, least recently used first.
    pub fn blocks(&self) -> impl Iterator<Item = (BlockHash, &HostBlock)> {
        self.blocks.iter_oldest_first()
    }

    /// Drops `hash`; true when it was held.
    pub fn remove(&mut self, hash: BlockHash) -> bool {
        self.blocks.remove(hash).is_some()
    }

    /// Drops every block of `namespace`; returns how many.
    pub fn remove_namespace(&mut self, namespace: CacheNamespace) -> usize {
        self.blocks
            .remove_where(|b| b.owner.namespace == namespace)
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(namespace: CacheNamespace, len: usize) -> HostBlock {
        HostBlock {
            owner: namespace.into(),
            bytes: std::sync::Arc::new(vec![namespace as u8; len].into()),
        }
    }

    #[test]
    fn over_its_limit_the_tier_pushes_out_its_least_recently_used_blocks() {
        let mut tier = HostTier::new(300);
        for n in 1..=3 {
            assert!(tier.insert(BlockHash(n), block(0, 100)).is_empty());
        }
        tier.get(BlockHash(1));
        let out = tier.insert(BlockHash(4), block(0, 100));
        assert_eq!(
            out.iter().map(|(h, _)| *h).collect::<Vec<_>>(),
            [BlockHash(2)]
        );
        assert_eq!((tier.len(), tier.bytes()), (3, 300));
        let too_big = tier.insert(BlockHash(5), block(0, 301));
        assert_eq!(too_big.len(), 1);
        assert!(!tier.contains(BlockHash(5)));
    }

    #[test]
    fn removing_a_namespace_keeps_the_other_tenants_blocks() {
        let mut tier = HostTier::new(1000);
        tier.insert(BlockHash(1), block(1, 10));
        tier.insert(BlockHash(2), block(2, 10));
        tier.insert(BlockHash(3), block(1, 10));
        assert_eq!(tier.remove_namespace(1), 2);
        assert_eq!((tier.len(), tier.bytes()), (1, 10));
        assert!(tier.remove(BlockHash(2)));
        assert!(!tier.remove(BlockHash(2)));
        assert_eq!(tier.bytes(), 0);
    }
}
