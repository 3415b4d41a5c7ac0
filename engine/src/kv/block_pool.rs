//! The pool of KV blocks: reference counts, a free queue in eviction order, and the prefix-cache map.
//!
//! Follows vLLM v1's block pool. A block whose reference count drops to zero goes to the tail of the free
//! queue but keeps its content hash, so a later request with the same prefix can take it back (a prefix-cache
//! hit) until it reaches the head and is handed out again (evicted, least recently freed first). The free
//! queue is an intrusive doubly linked list over block ids so a cache hit leaves it in O(1).
//!
//! With lower KV tiers behind the pool ([`crate::kv::tiers`]), a block may also be *backed*: its content
//! has been copied down, so evicting it loses nothing. Evicting a cached block that is not backed records
//! it ([`BlockPool::take_evicted`]) so its content can be copied down before the block is written again.

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
    /// A lower tier holds a copy of this block's cached content, or could never give it back.
    backed: bool,
    prev: Option<BlockId>,
    next: Option<BlockId>,
    queued: bool,
}

impl BlockMeta {
    /// Whether handing this block out would lose cached content no lower tier holds.
    fn lossy(&self) -> bool {
        self.hash.is_some() && !self.backed
    }
}

/// A cached block handed out again whose content no lower tier held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Evicted {
    /// The block, whose old content is still in place until the next forward pass writes it.
    pub block: BlockId,
    /// The prefix it held.
    pub hash: BlockHash,
    /// Whose prefix it was.
    pub namespace: CacheNamespace,
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
    /// Free blocks whose cached content is not backed.
    lossy_free: usize,
    /// Record unbacked evictions (lower tiers exist).
    record_evictions: bool,
    evicted: Vec<Evicted>,
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
            lossy_free: 0,
            record_evictions: false,
            evicted: Vec::new(),
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
            let meta = &mut self.meta[id as usize];
            let backed = std::mem::take(&mut meta.backed);
            if let Some(hash) = meta.hash.take() {
                if self.record_evictions && !backed {
                    self.evicted.push(Evicted {
                        block: id,
                        hash,
                        namespace: meta.namespace,
                    });
                }
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
            meta.backed = false;
            if meta.queued {
                self.lossy_free += 1;
            }
        }
    }

    /// Record that a lower tier now holds a copy of block `id`'s cached content, or that none could
    /// ever give it back, so evicting it loses nothing worth copying down.
    pub fn mark_backed(&mut self, id: BlockId) {
        let meta = &mut self.meta[id as usize];
        if meta.hash.is_none() || meta.backed {
            return;
        }
        if meta.queued {
            self.lossy_free -= 1;
        }
        meta.backed = true;
    }

    /// Whether block `id` holds the cached prefix `hash` and no lower tier holds a copy of it.
    pub fn holds_unbacked(&self, id: BlockId, hash: BlockHash) -> bool {
        let meta = &self.meta[id as usize];
        meta.hash == Some(hash) && !meta.backed
    }

    /// Start (or stop) recording evictions of cached blocks no lower tier holds.
    pub fn record_evictions(&mut self, on: bool) {
        self.record_evictions = on;
    }

    /// The unbacked cached blocks handed out since the last call, in the order they were handed out.
    pub fn take_evicted(&mut self) -> Vec<Evicted> {
        std::mem::take(&mut self.evicted)
    }

    /// Free blocks holding cached content no lower tier holds.
    pub fn num_lossy_free(&self) -> usize {
        self.lossy_free
    }

    /// Up to `max` free blocks holding unbacked cached content, next to be evicted first, with what
    /// they hold.
    pub fn lossy_free_blocks(&self, max: usize) -> Vec<Evicted> {
        let mut out = Vec::new();
        let mut cursor = self.head;
        while let Some(id) = cursor
            && out.len() < max.min(self.lossy_free)
        {
            let m = &self.meta[id as usize];
            if let (true, Some(hash)) = (m.lossy(), m.hash) {
                out.push(Evicted {
                    block: id,
                    hash,
                    namespace: m.namespace,
                });
            }
            cursor = m.next;
        }
        out
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
                let meta = &mut self.meta[id as usize];
                if meta.queued && meta.lossy() {
                    self.lossy_free -= 1;
                }
                meta.hash = None;
                meta.backed = false;
                true
            }
            None => false,
        }
    }

    /// Drop every cached hash (content stays, but no future request can hit it).
    pub fn reset_prefix_cache(&mut self) {
        self.cached.clear();
        self.lossy_free = 0;
        for m in &mut self.meta {
            m.hash = None;
            m.backed = false;
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
        let lossy = self.meta.iter().filter(|m| m.queued && m.lossy()).count();
        if lossy != self.lossy_free {
            return Err(format!(
                "{lossy} free blocks hold unbacked content but the count says {}",
                self.lossy_free
            ));
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
        if self.meta[id as usize].lossy() {
            self.lossy_free += 1;
        }
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
        if self.meta[id as usize].lossy() {
            self.lossy_free -= 1;
        }
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
