//! The pool of KV blocks: reference counts, a free queue in eviction order, and the prefix-cache map.
//!
//! Follows vLLM v1's block pool. A block whose reference count drops to zero goes to the tail of the free
//! queue but keeps its content hash, so a later request with the same prefix can take it back (a prefix-cache
//! hit) until it reaches the head and is handed out again (evicted, least recently freed first). The free
//! queue is an intrusive doubly linked list over block ids so a cache hit leaves it in O(1).

use std::collections::HashMap;

use super::block_hash::BlockHash;
use super::manager::CacheNamespace;
use crate::error::{EngineError, Result};

/// Index of a block in the KV storage of every layer.
pub type BlockId = u32;

#[derive(Debug, Clone, Default)]
struct BlockMeta {
    ref_cnt: u32,
    hash: Option<BlockHash>,
    /// The namespace whose prefix `hash` is (meaningful while `hash` is set).
    namespace: CacheNamespace,
    prev: Option<BlockId>,
    next: Option<BlockId>,
    queued: bool,
}

/// Counters the pool keeps about itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolCounters {
    /// Cached blocks whose content was dropped to hand the block out again.
    pub evictions: u64,
}

/// Fixed set of KV blocks with reference counts and prefix caching.
#[derive(Debug)]
pub struct BlockPool {
    meta: Vec<BlockMeta>,
    head: Option<BlockId>,
    tail: Option<BlockId>,
    num_free: usize,
    cached: HashMap<BlockHash, BlockId>,
    enable_caching: bool,
    counters: PoolCounters,
}

impl BlockPool {
    /// A pool of `num_blocks` free blocks; `enable_caching` turns prefix caching on.
    pub fn new(num_blocks: usize, enable_caching: bool) -> Self {
        let mut pool = BlockPool {
            meta: vec![BlockMeta::default(); num_blocks],
            head: None,
            tail: None,
            num_free: 0,
            cached: HashMap::new(),
            enable_caching,
            counters: PoolCounters::default(),
        };
        for id in 0..num_blocks as BlockId {
            pool.push_tail(id);
        }
        pool
    }

    /// Total number of blocks.
    pub fn num_blocks(&self) -> usize {
        self.meta.len()
    }

    /// Blocks with no reference (some may still hold cached content).
    pub fn num_free(&self) -> usize {
        self.num_free
    }

    /// Blocks referenced by at least one request.
    pub fn num_used(&self) -> usize {
        self.meta.len() - self.num_free
    }

    /// Whether prefix caching is on.
    pub fn caching_enabled(&self) -> bool {
        self.enable_caching
    }

    /// Counters since the pool was made.
    pub fn counters(&self) -> PoolCounters {
        self.counters
    }

    /// Reference count of `id`.
    pub fn ref_count(&self, id: BlockId) -> u32 {
        self.meta[id as usize].ref_cnt
    }

    /// The cached block holding exactly this prefix, if any.
    pub fn lookup(&self, hash: BlockHash) -> Option<BlockId> {
        if !self.enable_caching {
            return None;
        }
        self.cached.get(&hash).copied()
    }

    /// Take `n` blocks from the head of the free queue, each with reference count 1, evicting their cached
    /// content. Returns None, changing nothing, when fewer than `n` are free.
    pub fn allocate(&mut self, n: usize) -> Option<Vec<BlockId>> {
        if n > self.num_free {
            return None;
        }
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let id = self.head?;
            self.unlink(id);
            if let Some(hash) = self.meta[id as usize].hash.take() {
                if self.cached.get(&hash) == Some(&id) {
                    self.cached.remove(&hash);
                }
                self.counters.evictions += 1;
            }
            self.meta[id as usize].ref_cnt = 1;
            out.push(id);
        }
        Some(out)
    }

    /// Add one reference to each block (a prefix-cache hit), taking unreferenced ones off the free queue.
    pub fn touch(&mut self, ids: &[BlockId]) {
        for &id in ids {
            if self.meta[id as usize].ref_cnt == 0 {
                self.unlink(id);
            }
            self.meta[id as usize].ref_cnt += 1;
        }
    }

    /// Drop one reference from each block, in the given order; blocks reaching zero join the free queue's
    /// tail, so pass a request's blocks last-first to have its tail evicted before its shared prefix.
    pub fn free(&mut self, ids: &[BlockId]) -> Result<()> {
        for &id in ids {
            let meta = self
                .meta
                .get_mut(id as usize)
                .ok_or_else(|| EngineError::Internal(format!("block {id} does not exist")))?;
            if meta.ref_cnt == 0 {
                return Err(EngineError::Internal(format!("block {id} freed twice")));
            }
            meta.ref_cnt -= 1;
            if meta.ref_cnt == 0 {
                self.push_tail(id);
            }
        }
        Ok(())
    }

    /// Record that block `id` now holds the full prefix `hash` of `namespace`. A prefix already cached in
    /// another block keeps that block; `id` then stays unhashed and is simply reused when freed.
    pub fn cache(&mut self, id: BlockId, hash: BlockHash, namespace: CacheNamespace) {
        if !self.enable_caching || self.meta[id as usize].hash.is_some() {
            return;
        }
        if let std::collections::hash_map::Entry::Vacant(slot) = self.cached.entry(hash) {
            slot.insert(id);
            let meta = &mut self.meta[id as usize];
            meta.hash = Some(hash);
            meta.namespace = namespace;
        }
    }

    /// Forget every cached prefix of `namespace` (contents stay until their blocks are reused); returns
    /// how many blocks it held.
    pub fn uncache_namespace(&mut self, namespace: CacheNamespace) -> usize {
        let hashes: Vec<BlockHash> = self
            .cached
            .iter()
            .filter(|&(_, &id)| self.meta[id as usize].namespace == namespace)
            .map(|(&hash, _)| hash)
            .collect();
        hashes.iter().filter(|&&h| self.uncache(h)).count()
    }

    /// Forget that a block holds prefix `hash` (its content stays until the block is reused); true when
    /// one did.
    pub fn uncache(&mut self, hash: BlockHash) -> bool {
        match self.cached.remove(&hash) {
            Some(id) => {
                self.meta[id as usize].hash = None;
                true
            }
            None => false,
        }
    }

    /// Drop every cached hash (content stays, but no future request can hit it).
    pub fn reset_prefix_cache(&mut self) {
        self.cached.clear();
        for m in &mut self.meta {
            m.hash = None;
        }
    }

    /// Check the pool's invariants; Err names the first one broken. Used by tests and debug builds.
    pub fn check_invariants(&self) -> std::result::Result<(), String> {
        let mut queued = 0;
        let mut cursor = self.head;
        let mut prev = None;
        while let Some(id) = cursor {
            let m = &self.meta[id as usize];
            if m.ref_cnt != 0 {
                return Err(format!(
                    "block {id} is free and referenced ({} refs)",
                    m.ref_cnt
                ));
            }
            if m.prev != prev || !m.queued {
                return Err(format!("free queue links broken at block {id}"));
            }
            queued += 1;
            if queued > self.meta.len() {
                return Err("free queue has a cycle".into());
            }
            prev = Some(id);
            cursor = m.next;
        }
        if queued != self.num_free || self.tail != prev {
            return Err(format!("free count {} but {queued} queued", self.num_free));
        }
        let referenced = self.meta.iter().filter(|m| m.ref_cnt > 0).count();
        if referenced + self.num_free != self.meta.len() {
            return Err(format!(
                "{referenced} used + {} free != {}",
                self.num_free,
                self.meta.len()
            ));
        }
        for (hash, &id) in &self.cached {
            if self.meta[id as usize].hash != Some(*hash) {
                return Err(format!(
                    "cache map points at block {id}, which holds another hash"
                ));
            }
        }
        Ok(())
    }

    fn push_tail(&mut self, id: BlockId) {
        let meta = &mut self.meta[id as usize];
        meta.prev = self.tail;
        meta.next = None;
        meta.queued = true;
        match self.tail {
            Some(t) => self.meta[t as usize].next = Some(id),
            None => self.head = Some(id),
        }
        self.tail = Some(id);
        self.num_free += 1;
    }

    fn unlink(&mut self, id: BlockId) {
        let (prev, next) = {
            let m = &mut self.meta[id as usize];
            let links = (m.prev, m.next);
            m.prev = None;
            m.next = None;
            m.queued = false;
            links
        };
        match prev {
            Some(p) => self.meta[p as usize].next = next,
            None => self.head = next,
        }
        match next {
            Some(n) => self.meta[n as usize].prev = prev,
            None => self.tail = prev,
        }
        self.num_free -= 1;
    }
}
