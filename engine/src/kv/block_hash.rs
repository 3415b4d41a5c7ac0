//! Content hashes of full KV blocks, the keys of prefix caching.
//!
//! A block's hash covers its parent's hash and its own token ids, so equal hashes mean equal whole prefixes,
//! not merely equal blocks (vLLM v1's scheme). SHA-256 truncated to 128 bits keeps accidental collisions out
//! of reach for any cache size docqa will see.

use sha2::{Digest, Sha256};

/// The hash of one full block together with everything before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockHash(pub u128);

impl BlockHash {
    /// Hash of a block holding `tokens`, following the block whose hash is `parent` (None for the first).
    ///
    /// `extra` separates caches that must never share blocks although their tokens agree, such as different
    /// KV dtypes or RoPE settings of one engine.
    pub fn of(parent: Option<BlockHash>, tokens: &[u32], extra: u64) -> BlockHash {
        let mut hasher = Sha256::new();
        match parent {
            Some(BlockHash(p)) => {
                hasher.update([1u8]);
                hasher.update(p.to_le_bytes());
            }
            None => hasher.update([0u8]),
        }
        hasher.update(extra.to_le_bytes());
        hasher.update((tokens.len() as u64).to_le_bytes());
        for t in tokens {
            hasher.update(t.to_le_bytes());
        }
        let digest = hasher.finalize();
        let mut first = [0u8; 16];
        first.copy_from_slice(&digest[..16]);
        BlockHash(u128::from_le_bytes(first))
    }
}

/// Hashes of every full block of `tokens`, in order; a trailing partial block has none. Block `b` is
/// hashed with the extra key `extra(b)`.
pub fn full_block_hashes(
    tokens: &[u32],
    block_size: usize,
    extra: impl Fn(usize) -> u64,
) -> Vec<BlockHash> {
    let mut parent = None;
    tokens
        .chunks_exact(block_size)
        .enumerate()
        .map(|(b, block)| {
            let h = BlockHash::of(parent, block, extra(b));
            parent = Some(h);
            h
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_blocks_after_different_prefixes_hash_differently() {
        let a = full_block_hashes(&[1, 2, 3, 4, 9, 9, 9, 9], 4, |_| 0);
        let b = full_block_hashes(&[5, 6, 7, 8, 9, 9, 9, 9], 4, |_| 0);
        assert_ne!(a[1], b[1]);
    }

    #[test]
    fn shared_prefixes_share_their_hashes_and_partial_blocks_get_none() {
        let a = full_block_hashes(&[1, 2, 3, 4, 5, 6, 7, 8, 1], 4, |_| 0);
        let b = full_block_hashes(&[1, 2, 3, 4, 5, 6, 7, 8, 2, 3], 4, |_| 0);
        assert_eq!(a.len(), 2);
        assert_eq!(a, b);
    }

    #[test]
    fn the_extra_key_separates_caches() {
        assert_ne!(
            BlockHash::of(None, &[1, 2], 0),
            BlockHash::of(None, &[1, 2], 1)
        );
    }
}
