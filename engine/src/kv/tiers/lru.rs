//! A least-recently-used index over block hashes: each entry carries a value and a use stamp, the
//! oldest entry comes out first, and the index keeps the total size of its values. Both lower tiers
//! keep their blocks in one.

use std::collections::{BTreeMap, HashMap};

use crate::kv::block_hash::BlockHash;

/// A value whose size the index adds up.
pub(crate) trait HasSize {
    /// Its size in bytes.
    fn size(&self) -> usize;
}

/// Entries keyed by block hash, ordered by last use.
#[derive(Debug)]
pub(crate) struct LruIndex<V> {
    entries: HashMap<BlockHash, (u64, V)>,
    order: BTreeMap<u64, BlockHash>,
    clock: u64,
    bytes: usize,
}

impl<V> Default for LruIndex<V> {
    fn default() -> Self {
        LruIndex {
            entries: HashMap::new(),
            order: BTreeMap::new(),
            clock: 0,
            bytes: 0,
        }
    }
}

impl<V: HasSize> LruIndex<V> {
    /// Entries held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// The sizes of the values held, added up.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Whether `hash` is held.
    pub fn contains(&self, hash: BlockHash) -> bool {
        self.entries.contains_key(&hash)
    }

    /// Inserts (or replaces) `hash` as the most recently used entry; returns the value it replaced.
    pub fn insert(&mut self, hash: BlockHash, value: V) -> Option<V> {
        let old = self.remove(hash);
        self.clock += 1;
        self.order.insert(self.clock, hash);
        self.bytes += value.size();
        self.entries.insert(hash, (self.clock, value));
        old
    }

    /// Marks `hash` as just used; returns its value.
    pub fn touch(&mut self, hash: BlockHash) -> Option<&V> {
        let (stamp, _) = self.entries.get(&hash)?;
        self.order.remove(stamp);
        self.clock += 1;
        self.order.insert(self.clock, hash);
        let entry = self.entries.get_mut(&hash)?;
        entry.0 = self.clock;
        Some(&entry.1)
    }

    /// Removes `hash`; returns its value.
    pub fn remove(&mut self, hash: BlockHash) -> Option<V> {
        let (stamp, value) = self.entries.remove(&hash)?;
        self.order.remove(&stamp);
        self.bytes -= value.size();
        Some(value)
    }

    /// Removes and returns the least recently used entry.
    pub fn pop_oldest(&mut self) -> Option<(BlockHash, V)> {
        let (_, hash) = self.order.pop_first()?;
        let (_, value) = self.entries.remove(&hash)?;
        self.bytes -= value.size();
        Some((hash, value))
    }

    /// Every entry, least recently used first.
    pub fn iter_oldest_first(&self) -> impl Iterator<Item = (BlockHash, &V)> {
        self.order
            .values()
            .filter_map(|h| self.entries.get(h).map(|(_, v)| (*h, v)))
    }

    /// Removes every entry whose value matches `pred`; returns them.
    pub fn remove_where(&mut self, pred: impl Fn(&V) -> bool) -> Vec<(BlockHash, V)> {
        let hashes: Vec<BlockHash> = self
            .entries
            .iter()
            .filter(|(_, (_, v))| pred(v))
            .map(|(h, _)| *h)
            .collect();
        hashes
            .into_iter()
            .filter_map(|h| self.remove(h).map(|v| (h, v)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(n: u128) -> BlockHash {
        BlockHash(n)
    }

    impl HasSize for i32 {
        fn size(&self) -> usize {
            *self as usize
        }
    }

    #[test]
    fn the_least_recently_used_entry_comes_out_first_and_a_touch_renews_an_entry() {
        let mut lru = LruIndex::default();
        for n in 1..=3 {
            lru.insert(h(n), n as i32);
        }
        assert_eq!(lru.touch(h(1)), Some(&1));
        assert_eq!(lru.pop_oldest(), Some((h(2), 2)));
        assert_eq!(lru.pop_oldest(), Some((h(3), 3)));
        assert_eq!(lru.pop_oldest(), Some((h(1), 1)));
        assert_eq!(lru.pop_oldest(), None);
    }

    #[test]
    fn reinserting_replaces_the_value_and_removing_by_predicate_keeps_the_rest() {
        let mut lru = LruIndex::default();
        assert_eq!(lru.insert(h(1), 10), None);
        assert_eq!(lru.insert(h(1), 11), Some(10));
        lru.insert(h(2), 20);
        lru.insert(h(3), 31);
        let mut gone = lru.remove_where(|v| v % 2 == 1);
        gone.sort();
        assert_eq!(gone, vec![(h(1), 11), (h(3), 31)]);
        assert_eq!((lru.len(), lru.bytes()), (1, 20));
        assert!(lru.contains(h(2)));
    }
}
