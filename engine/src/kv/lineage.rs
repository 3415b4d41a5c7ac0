//! Which cached blocks were computed after which. A block's KV depends on every token before it, so the
//! blocks of a question asked about a document hold KV computed over the document: deleting the document
//! must forget them too, though their hashes cannot be derived from the document's tokens alone. The
//! manager records each block it caches under the block before it, and forgetting a document's prefix
//! takes every block recorded below its last block.
//!
//! Each block's parent also travels with it to the disk tier (in its file's header), so after a restart
//! the record of a namespace is rebuilt from its files before anything of it is forgotten. Entries of
//! blocks no tier holds any more are swept out whenever the record doubles in size.

use std::collections::HashMap;

use super::block_hash::BlockHash;

/// Entries the record holds before its first sweep.
const FIRST_SWEEP_AT: usize = 1 << 16;

/// Blocks cached after each cached block, and the block each was cached after.
#[derive(Debug)]
pub(crate) struct Lineage {
    children: HashMap<BlockHash, Vec<BlockHash>>,
    parents: HashMap<BlockHash, BlockHash>,
    sweep_at: usize,
}

impl Default for Lineage {
    fn default() -> Self {
        Lineage {
            children: HashMap::new(),
            parents: HashMap::new(),
            sweep_at: FIRST_SWEEP_AT,
        }
    }
}

impl Lineage {
    /// Records `child` as computed right after `parent`.
    pub fn record(&mut self, parent: BlockHash, child: BlockHash) {
        let kids = self.children.entry(parent).or_default();
        if !kids.contains(&child) {
            kids.push(child);
        }
        self.parents.insert(child, parent);
    }

    /// The block `child` was recorded as computed right after.
    pub fn parent_of(&self, child: BlockHash) -> Option<BlockHash> {
        self.parents.get(&child).copied()
    }

    /// Every block recorded below `root`, at any depth, forgetting their entries.
    pub fn take_descendants(&mut self, root: BlockHash) -> Vec<BlockHash> {
        let mut out = Vec::new();
        let mut stack = vec![root];
        while let Some(h) = stack.pop() {
            for kid in self.children.remove(&h).unwrap_or_default() {
                self.parents.remove(&kid);
                out.push(kid);
                stack.push(kid);
            }
        }
        out
    }

    /// Forgets the entries of blocks `held` says no tier holds, once the record has grown past its
    /// sweep mark; the mark then moves to twice what is left. A block still held keeps its place under
    /// its parent even when the parent is gone: recomputing the parent makes the block reachable again.
    pub fn sweep_if_large(&mut self, held: impl Fn(BlockHash) -> bool) {
        if self.children.len() < self.sweep_at {
            return;
        }
        self.children.retain(|_, kids| {
            kids.retain(|&k| held(k));
            !kids.is_empty()
        });
        self.parents.retain(|&child, _| held(child));
        self.sweep_at = (2 * self.children.len()).max(FIRST_SWEEP_AT);
    }

    /// Entries held.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.children.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descendants_are_found_at_every_depth_and_siblings_of_the_root_are_kept() {
        let mut l = Lineage::default();
        let h = BlockHash;
        l.record(h(1), h(2));
        l.record(h(2), h(3));
        l.record(h(2), h(4));
        l.record(h(3), h(5));
        l.record(h(1), h(9));
        l.record(h(2), h(3));
        let mut got = l.take_descendants(h(2));
        got.sort_by_key(|b| b.0);
        assert_eq!(got, [h(3), h(4), h(5)]);
        assert_eq!(
            l.take_descendants(h(1)),
            [h(2), h(9)],
            "2 itself is still 1's child; what was below it is gone"
        );
        assert!(l.take_descendants(h(7)).is_empty());
        assert_eq!(l.parent_of(h(9)), None, "taken with 1's descendants");
    }

    #[test]
    fn a_sweep_keeps_only_blocks_still_held() {
        let mut l = Lineage::default();
        for i in 0..FIRST_SWEEP_AT as u128 {
            l.record(BlockHash(i), BlockHash(i + 1_000_000));
        }
        let even_children = |h: BlockHash| h.0 >= 1_000_000 && h.0.is_multiple_of(2);
        l.sweep_if_large(even_children);
        assert_eq!(l.len(), FIRST_SWEEP_AT / 2);
        assert_eq!(l.parent_of(BlockHash(1_000_002)), Some(BlockHash(2)));
        assert_eq!(l.parent_of(BlockHash(1_000_001)), None);
        l.sweep_if_large(|_| false);
        assert_eq!(
            l.len(),
            FIRST_SWEEP_AT / 2,
            "below its mark the record is left alone"
        );
    }
}
