//! The KV cache manager: per-request block tables over the shared [`BlockPool`], prefix-cache lookups, and
//! sink-token sliding windows.
//!
//! Modelled on vLLM v1's `KVCacheManager`. A request's table has one entry per logical block of its
//! sequence; with a sink window ([`SinkWindow`]) the blocks between the sinks and the recent window are
//! returned to the pool as the sequence grows and their entries become `None`. The window is a property of
//! the request (its [`CacheScope`]), so dense and streaming requests share one pool. Positions for
//! attention are then assigned within the cache (StreamingLLM, see [`SinkWindow::visible_tokens`]).
//!
//! A token's KV depends on what it attended to, so a windowed request's blocks past the first
//! `num_sink_tokens + window` tokens differ from a dense request's: their hashes carry the window, and
//! the blocks before that point are shared between dense and windowed requests.
//!
//! With lower tiers attached ([`KvCacheManager::attach_tiers`]), a prefix lookup continues past the
//! blocks on the device into the tiers, a new request's blocks found there are brought back instead of
//! recomputed, and cached blocks evicted from the pool are copied down first. The copies themselves are
//! queued as [`KvTransfer`]s for the engine core, which owns the device memory, to carry out before the
//! next forward pass. A dense sequence's blocks past what the tiers hold at once are never copied down:
//! no lookup could reach them without the blocks before them, which they would push out.

mod reloads;
mod write_through;

use std::collections::{HashMap, VecDeque};

use super::block_hash::{BlockHash, full_block_hashes};
use super::block_pool::{BlockId, BlockPool, Evicted};
use super::lineage::Lineage;
use super::tiers::{BlockBuf, BlockBytes, BlockOwner, KvTiers, TierStats};
use crate::error::{EngineError, Result};

/// Identifies a request inside the engine.
pub type RequestId = u64;

/// StreamingLLM's cache policy: keep the first `num_sink_tokens` and the last `window` tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SinkWindow {
    /// Tokens at the start that every later token keeps attending to (4 in the paper).
    pub num_sink_tokens: usize,
    /// Most recent tokens kept besides the sinks.
    pub window: usize,
}

impl SinkWindow {
    /// Logical token ranges attention may see in a sequence of `num_tokens`: the sinks and the last
    /// `window` tokens once the sequence is longer than both, else everything. Positions within the cache
    /// follow this order.
    pub fn visible_tokens(&self, num_tokens: usize) -> Vec<std::ops::Range<usize>> {
        if num_tokens > self.num_sink_tokens + self.window {
            vec![
                0..self.num_sink_tokens,
                num_tokens - self.window..num_tokens,
            ]
        } else {
            std::iter::once(0..num_tokens).collect()
        }
    }

    /// Tokens whose KV is the same as under dense attention: the first `num_sink_tokens + window`.
    pub fn dense_prefix(&self) -> usize {
        self.num_sink_tokens + self.window
    }

    /// A hash-salt component that tells this window's KV from any other's.
    fn tag(&self) -> u64 {
        (self.num_sink_tokens as u64)
            .wrapping_mul(0xD6E8_FEB8_6659_FD93)
            .rotate_left(17)
            ^ (self.window as u64).wrapping_mul(0xA076_1D64_78BD_642F)
            ^ 0x0051_5749_4E44_4F57
    }
}

/// How one request uses the cache: whose prefix cache it reads and fills, and whether it streams through a
/// sink window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheScope {
    /// The prefix-cache namespace.
    pub namespace: CacheNamespace,
    /// Sink-token sliding window, or None for dense attention.
    pub sink_window: Option<SinkWindow>,
    /// A one-off prompt (a RAG prompt, say): its blocks are copied down only if they are evicted,
    /// never written through ([`crate::kv::tiers::TierSettings::write_through`]), so they do not take
    /// the lower tiers' room and bandwidth from documents that are read again.
    pub transient: bool,
    /// A scratch read (a warm-up's or a calibration's, forgotten when it ends): its blocks are never
    /// copied to the lower tiers, neither written through nor at their eviction.
    pub scratch: bool,
}

impl CacheScope {
    /// Dense attention in `namespace`.
    pub fn dense(namespace: CacheNamespace) -> Self {
        CacheScope {
            namespace,
            sink_window: None,
            transient: false,
            scratch: false,
        }
    }
}

/// Shape and policy of one engine's KV cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvCacheConfig {
    /// Tokens per block.
    pub block_size: usize,
    /// Blocks in the pool.
    pub num_blocks: usize,
    /// Share full blocks between requests with the same prefix.
    pub enable_prefix_caching: bool,
    /// Separates block hashes of caches that must never share content (dtype, RoPE settings...).
    pub cache_salt: u64,
}

/// Whose prefix cache a request reads and fills. Requests share cached KV only within one namespace, so a
/// caller cannot learn from timing whether another namespace (another tenant) processed the same text.
pub type CacheNamespace = u64;

/// Prefix-cache counters of the manager.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PrefixCacheStats {
    /// Prompt tokens looked up in the prefix cache.
    pub queried_tokens: u64,
    /// Of those, tokens whose KV was found and reused.
    pub hit_tokens: u64,
}

/// What a prefix-cache lookup found for a new request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CachedPrefix {
    /// For each logical block of the prefix, the cached block (None where a window would drop it anyway,
    /// or where a lower tier holds it: see `reload`).
    pub blocks: Vec<Option<BlockId>>,
    /// Logical blocks of the prefix that a lower tier holds, with their hashes, in order.
    pub reload: Vec<(usize, BlockHash)>,
    /// Tokens whose KV is reused: a whole number of blocks, always fewer than the prompt.
    pub num_tokens: usize,
    /// The scope it was looked up in; the request's new blocks are cached there too.
    pub scope: CacheScope,
}

#[derive(Debug, Default)]
struct RequestBlocks {
    table: Vec<Option<BlockId>>,
    num_hashed: usize,
    parent: Option<BlockHash>,
    /// The request's namespace and window.
    scope: CacheScope,
}

/// A copy between the device pool and the lower tiers, for the engine core to carry out before the
/// next forward pass, in queue order.
#[derive(Debug, Clone)]
pub enum KvTransfer {
    /// Copy a block's content down ([`KvCacheManager::offloaded`] takes the bytes). `still_cached`:
    /// the block stays cached on the device (copied ahead of eviction, above the high-water mark);
    /// otherwise it was just evicted and is about to be written.
    Offload {
        /// The block and the prefix it holds.
        block: Evicted,
        /// Whether the block keeps its content on the device.
        still_cached: bool,
    },
    /// Write a block's content brought back from a lower tier.
    Reload(Reload),
}

/// A block brought back from a lower tier into the device pool.
#[derive(Debug, Clone)]
pub struct Reload {
    /// The request admitted with it (others admitted in the same step may share it).
    pub request: RequestId,
    /// The device block to write.
    pub block: BlockId,
    /// The prefix it holds.
    pub hash: BlockHash,
    /// Its content when it was in host memory at admission; None when it is still on disk, to be read
    /// when the copy is carried out ([`KvCacheManager::read_reloads`]), a batch at a time, so a
    /// document larger than the host memory set aside for transfers streams through it.
    pub bytes: Option<BlockBytes>,
}

/// Block tables of every live request over one pool.
#[derive(Debug)]
pub struct KvCacheManager {
    cfg: KvCacheConfig,
    pool: BlockPool,
    requests: HashMap<RequestId, RequestBlocks>,
    stats: PrefixCacheStats,
    tiers: Option<KvTiers>,
    transfers: Vec<KvTransfer>,
    lineage: Lineage,
    /// Blocks cached since they were computed, oldest first, to be copied down under
    /// [`crate::kv::tiers::TierSettings::write_through`] (some may have been evicted or copied since).
    fresh: VecDeque<Evicted>,
    /// How many of a dense sequence's first blocks the lower tiers can give back
    /// ([`lower_tiers_can_keep`]).
    blocks_kept_below: usize,
}

impl KvCacheManager {
    /// A manager over a fresh pool.
    pub fn new(cfg: KvCacheConfig) -> Result<Self> {
        if cfg.block_size == 0 || cfg.num_blocks == 0 {
            return Err(EngineError::InvalidConfig(
                "block_size and num_blocks must be positive".into(),
            ));
        }
        let pool = BlockPool::new(cfg.num_blocks, cfg.enable_prefix_caching);
        Ok(KvCacheManager {
            cfg,
            pool,
            requests: HashMap::new(),
            stats: PrefixCacheStats::default(),
            tiers: None,
            transfers: Vec::new(),
            lineage: Lineage::default(),
            fresh: VecDeque::new(),
            blocks_kept_below: usize::MAX,
        })
    }

    /// Puts lower tiers behind the pool: evicted cached blocks are queued for copying down, and prefix
    /// lookups find blocks there.
    pub fn attach_tiers(&mut self, tiers: KvTiers) {
        self.pool.record_evictions(true);
        self.blocks_kept_below = tiers.blocks_held_at_once().unwrap_or(usize::MAX);
        self.tiers = Some(tiers);
    }

    /// How many of a dense sequence's first blocks the lower tiers can keep at once, when there are
    /// tiers and a block's size is known: blocks past them are never copied down
    /// ([`lower_tiers_can_keep`]).
    pub fn blocks_lower_tiers_keep(&self) -> Option<usize> {
        (self.tiers.is_some() && self.blocks_kept_below < usize::MAX)
            .then_some(self.blocks_kept_below)
    }

    /// The lower tiers' counters, when there are tiers.
    pub fn tier_stats(&self) -> Option<TierStats> {
        self.tiers.as_ref().map(KvTiers::stats)
    }

    /// The copies queued since the last call, in the order they must happen.
    pub fn take_transfers(&mut self) -> Vec<KvTransfer> {
        self.drain_evictions();
        std::mem::take(&mut self.transfers)
    }

    /// A buffer for one block record of `bytes` to copy down into: host-tier memory when there is some
    /// free.
    pub fn block_buffer(&self, bytes: usize) -> BlockBuf {
        match &self.tiers {
            Some(t) => t.block_buffer(bytes),
            None => BlockBuf::from(vec![0; bytes]),
        }
    }

    /// Hands the tiers the content of a block queued by [`KvTransfer::Offload`].
    pub fn offloaded(&mut self, block: Evicted, still_cached: bool, bytes: BlockBytes) {
        let Some(tiers) = self.tiers.as_mut() else {
            return;
        };
        let owner = BlockOwner {
            namespace: block.namespace,
            parent: self.lineage.parent_of(block.hash),
        };
        tiers.store(block.hash, owner, bytes);
        if still_cached && self.pool.lookup(block.hash) == Some(block.block) {
            self.pool.mark_backed(block.block);
        }
    }

    /// Above the tiers' high-water mark (running requests' blocks plus cached blocks no tier holds,
    /// over all blocks), queues up to `max` of the cached free blocks next in line for eviction to be
    /// copied down while they stay cached; returns how many.
    pub fn offload_above_high_water(&mut self, max: usize) -> usize {
        let Some(tiers) = self.tiers.as_ref() else {
            return 0;
        };
        let total = self.pool.num_blocks();
        let occupied = self.pool.num_used() + self.pool.num_lossy_free();
        let mark = (tiers.high_water() * total as f64).floor() as usize;
        let over = occupied.saturating_sub(mark).min(max);
        let blocks = self.pool.lossy_free_blocks(over);
        let n = blocks.len();
        self.transfers
            .extend(blocks.into_iter().map(|block| KvTransfer::Offload {
                block,
                still_cached: true,
            }));
        n
    }

    /// Queues every cached free block no lower tier holds to be copied down (before a shutdown, so
    /// the disk tier keeps what the device held); returns how many.
    pub fn offload_all_cached(&mut self) -> usize {
        if self.tiers.is_none() {
            return 0;
        }
        let blocks = self.pool.lossy_free_blocks(usize::MAX);
        let n = blocks.len();
        self.transfers
            .extend(blocks.into_iter().map(|block| KvTransfer::Offload {
                block,
                still_cached: true,
            }));
        n
    }

    /// Waits up to `timeout` until the lower tiers' host memory is all allocated; whether it is.
    pub fn wait_for_tier_memory(&self, timeout: std::time::Duration) -> bool {
        self.tiers
            .as_ref()
            .is_none_or(|t| t.wait_for_host_memory(timeout))
    }

    /// Waits until every block queued for the disk tier is written.
    pub fn flush_tiers(&self) {
        if let Some(t) = &self.tiers {
            t.flush();
        }
    }

    /// Writes the host tier's blocks to the disk tier too; returns how many were written.
    pub fn persist_host_tier(&mut self) -> usize {
        self.tiers.as_mut().map_or(0, KvTiers::persist_host_blocks)
    }

    fn drain_evictions(&mut self) {
        let evicted = self.pool.take_evicted();
        self.transfers
            .extend(evicted.into_iter().map(|block| KvTransfer::Offload {
                block,
                still_cached: false,
            }));
    }

    /// Takes `n` blocks from the pool, queueing the cached content it evicts for copying down.
    fn take_blocks(&mut self, n: usize) -> Option<Vec<BlockId>> {
        let out = self.pool.allocate(n);
        self.drain_evictions();
        out
    }

    /// The configuration.
    pub fn config(&self) -> &KvCacheConfig {
        &self.cfg
    }

    /// The pool (read only).
    pub fn pool(&self) -> &BlockPool {
        &self.pool
    }

    /// Prefix-cache counters.
    pub fn prefix_stats(&self) -> PrefixCacheStats {
        self.stats
    }

    /// Sets the prefix cache's counters back to `stats` (taken before work that should not count, such
    /// as a warm-up).
    pub fn restore_prefix_stats(&mut self, stats: PrefixCacheStats) {
        self.stats = stats;
    }

    /// Checks that `window` can be used with this cache: it must hold at least one block.
    pub fn check_window(&self, window: &SinkWindow) -> Result<()> {
        if window.window < self.cfg.block_size {
            return Err(EngineError::InvalidConfig(format!(
                "a sink window of {} tokens is shorter than a block ({})",
                window.window, self.cfg.block_size
            )));
        }
        Ok(())
    }

    /// Blocks a request of `num_tokens` tokens holds at most at once, when computed `chunk` tokens a step.
    /// Under a sink window that is the sinks and the window between steps, plus the chunk during one.
    pub fn max_blocks_for(
        &self,
        num_tokens: usize,
        chunk: usize,
        window: Option<SinkWindow>,
    ) -> usize {
        let bs = self.cfg.block_size;
        let dense = num_tokens.div_ceil(bs);
        match window {
            Some(w) => dense.min(
                w.num_sink_tokens.div_ceil(bs) + w.window.div_ceil(bs) + 1 + chunk.div_ceil(bs),
            ),
            None => dense,
        }
    }

    /// Whether a request of `num_tokens` tokens could ever fit, alone in an empty pool.
    pub fn can_ever_fit(
        &self,
        num_tokens: usize,
        chunk: usize,
        window: Option<SinkWindow>,
    ) -> bool {
        self.max_blocks_for(num_tokens, chunk, window) <= self.pool.num_blocks()
    }

    /// Look up the longest prefix of `prompt` cached in `scope`. Never covers the whole prompt: the
    /// last token is always computed, since its logits are needed. Only counts towards the statistics
    /// when `record` is set.
    pub fn find_cached_prefix(
        &mut self,
        prompt: &[u32],
        scope: CacheScope,
        record: bool,
    ) -> CachedPrefix {
        let found = self.lookup_prefix(prompt, scope);
        if record {
            self.stats.queried_tokens += prompt.len() as u64;
            self.stats.hit_tokens += found.num_tokens as u64;
        }
        found
    }

    /// Tokens at the start of `prompt` whose KV a request of `scope` would take from the prefix cache
    /// now (no statistics recorded).
    pub fn cached_prefix_len(&self, prompt: &[u32], scope: CacheScope) -> usize {
        self.lookup_prefix(prompt, scope).num_tokens
    }

    /// Hashes of every full block of `tokens` in `scope`.
    fn block_hashes(&self, tokens: &[u32], scope: CacheScope) -> Vec<BlockHash> {
        let cfg = self.cfg;
        full_block_hashes(tokens, cfg.block_size, |b| block_salt(&cfg, scope, b))
    }

    /// Removes the prefix-cache entries of every full block of `tokens` in `scope`, and of every block
    /// cached after its last one (questions asked about it, whose KV was computed over it), so no later
    /// request can reuse that KV (e.g. the document was deleted). Blocks in use keep their content for
    /// their requests. Returns how many entries were dropped.
    pub fn forget_prefix(&mut self, tokens: &[u32], scope: CacheScope) -> usize {
        let mut doomed = self.block_hashes(tokens, scope);
        if let Some(tiers) = self.tiers.as_mut() {
            for (parent, child) in tiers.disk_lineage(scope.namespace) {
                self.lineage.record(parent, child);
            }
        }
        if let Some(&last) = doomed.last() {
            let below = self.lineage.take_descendants(last);
            doomed.extend(below);
        }
        doomed
            .into_iter()
            .filter(|&h| {
                let device = self.pool.uncache(h);
                let lower = self.tiers.as_mut().is_some_and(|t| t.remove(h));
                device || lower
            })
            .count()
    }

    /// Removes every prefix-cache entry of `namespace` (a tenant dropping all its cached KV), whole reads
    /// and sink windows alike; other namespaces keep theirs. Returns how many entries were dropped.
    pub fn forget_namespace(&mut self, namespace: CacheNamespace) -> usize {
        let lower = self
            .tiers
            .as_mut()
            .map_or(0, |t| t.remove_namespace(namespace));
        self.pool.uncache_namespace(namespace) + lower
    }

    /// Where block `hash` is: on the device (Some(Some(id))), in a lower tier (Some(None)), or nowhere.
    fn locate(&self, hash: BlockHash) -> Option<Option<BlockId>> {
        match self.pool.lookup(hash) {
            Some(id) => Some(Some(id)),
            None if self.tiers.as_ref().is_some_and(|t| t.contains(hash)) => Some(None),
            None => None,
        }
    }

    fn lookup_prefix(&self, prompt: &[u32], scope: CacheScope) -> CachedPrefix {
        let empty = CachedPrefix {
            scope,
            ..CachedPrefix::default()
        };
        if !self.pool.caching_enabled() || prompt.len() < 2 {
            return empty;
        }
        let bs = self.cfg.block_size;
        let usable = (prompt.len() - 1) / bs;
        let hashes = self.block_hashes(&prompt[..usable * bs], scope);
        if scope.sink_window.is_none() {
            // Dense: the leading run of cached blocks, on the device or below.
            let mut found = CachedPrefix { scope, ..empty };
            for (b, &h) in hashes.iter().enumerate() {
                let Some(place) = self.locate(h) else { break };
                if place.is_none() {
                    found.reload.push((b, h));
                }
                found.blocks.push(place);
            }
            found.num_tokens = found.blocks.len() * bs;
            return found;
        }
        // Sink window: the longest prefix whose sink and window blocks are all cached.
        for n in (1..=usable).rev() {
            let live = live_block_range(bs, scope.sink_window, n * bs);
            let mut found = CachedPrefix {
                blocks: vec![None; n],
                num_tokens: n * bs,
                ..empty.clone()
            };
            let all = (0..n)
                .filter(|&b| live(b))
                .all(|b| match self.locate(hashes[b]) {
                    Some(Some(id)) => {
                        found.blocks[b] = Some(id);
                        true
                    }
                    Some(None) => {
                        found.reload.push((b, hashes[b]));
                        true
                    }
                    None => false,
                });
            if all {
                return found;
            }
        }
        empty
    }

    /// Give `request` room for `num_tokens` tokens in total, starting from `prefix` when it is new (a new
    /// request without one is dense, in namespace 0; see [`KvCacheManager::admit`]).
    /// Returns Ok(false), changing nothing, when the pool has too few free blocks.
    pub fn allocate(
        &mut self,
        request: RequestId,
        num_tokens: usize,
        prefix: Option<&CachedPrefix>,
    ) -> Result<bool> {
        let bs = self.cfg.block_size;
        let Some(entry) = self.requests.get(&request) else {
            let none = CachedPrefix::default();
            let prefix = prefix.unwrap_or(&none);
            return Ok(self.admit(request, prefix, num_tokens)?.is_some());
        };
        // Every block of the new tokens is allocated, since they are written this step; blocks that leave a
        // sink window are freed afterwards, in `commit_computed`.
        let new_needed = num_tokens.div_ceil(bs).saturating_sub(entry.table.len());
        if new_needed > self.pool.num_free() {
            return Ok(false);
        }
        let fresh = self
            .take_blocks(new_needed)
            .ok_or_else(|| EngineError::Internal("free count lied".into()))?;
        let entry = self
            .requests
            .get_mut(&request)
            .ok_or_else(|| EngineError::Internal("request vanished".into()))?;
        entry.table.extend(fresh.into_iter().map(Some));
        Ok(true)
    }

    /// Admit new request `request` with room for `num_tokens` tokens, reusing `prefix`: its blocks on the
    /// device are shared, and its blocks in lower tiers are brought back into fresh blocks (queued as
    /// [`KvTransfer::Reload`]). Returns the tokens reused; or None, changing nothing, when too few
    /// blocks are free. A lower tier's copy found unreadable when it is read makes the engine core
    /// admit the request again ([`KvCacheManager::reloads_failed`]).
    pub fn admit(
        &mut self,
        request: RequestId,
        prefix: &CachedPrefix,
        num_tokens: usize,
    ) -> Result<Option<usize>> {
        if self.requests.contains_key(&request) {
            return Err(EngineError::Internal(format!(
                "request {request} is already admitted"
            )));
        }
        let want = num_tokens.div_ceil(self.cfg.block_size);
        if !self.fits(prefix, want) {
            return Ok(None);
        }
        let hashes: Vec<BlockHash> = prefix.reload.iter().map(|&(_, h)| h).collect();
        let in_memory = match self.tiers.as_mut() {
            Some(t) => t.fetch_in_memory(&hashes),
            None => vec![None; hashes.len()],
        };
        let hits: Vec<BlockId> = prefix.blocks.iter().flatten().copied().collect();
        self.pool.touch(&hits);
        let have = prefix.blocks.len();
        let mut fresh = self
            .take_blocks(want.saturating_sub(have) + prefix.reload.len())
            .ok_or_else(|| EngineError::Internal("free count lied".into()))?
            .into_iter();
        let mut table = prefix.blocks.clone();
        for (&(b, hash), bytes) in prefix.reload.iter().zip(in_memory) {
            let id = fresh
                .next()
                .ok_or_else(|| EngineError::Internal("too few fresh blocks".into()))?;
            table[b] = Some(id);
            self.pool.cache(id, hash, prefix.scope.namespace);
            self.pool.mark_backed(id);
            self.transfers.push(KvTransfer::Reload(Reload {
                request,
                block: id,
                hash,
                bytes: bytes.map(|(b, _)| b),
            }));
        }
        table.extend((have..want).map(|_| fresh.next()));
        self.requests.insert(
            request,
            RequestBlocks {
                table,
                num_hashed: have,
                parent: None,
                scope: prefix.scope,
            },
        );
        Ok(Some(prefix.num_tokens))
    }

    /// Whether a new request reusing `prefix` and needing `want` blocks in all fits in the free blocks.
    fn fits(&self, prefix: &CachedPrefix, want: usize) -> bool {
        let new_needed = want.saturating_sub(prefix.blocks.len()) + prefix.reload.len();
        // Cache hits that sit in the free queue also come out of the free count.
        let hits_from_free = prefix
            .blocks
            .iter()
            .flatten()
            .filter(|&&b| self.pool.ref_count(b) == 0)
            .count();
        new_needed + hits_from_free <= self.pool.num_free()
    }

    /// After the model has written KV for the first `num_computed` tokens of `tokens`, register the newly
    /// full blocks in the prefix cache and, under a sink window, free blocks that left the window.
    pub fn commit_computed(
        &mut self,
        request: RequestId,
        tokens: &[u32],
        num_computed: usize,
    ) -> Result<()> {
        let (cfg, bs) = (self.cfg, self.cfg.block_size);
        let writes_through = self.tiers.as_ref().is_some_and(KvTiers::writes_through);
        let kept_below = self.blocks_kept_below;
        let entry = self
            .requests
            .get_mut(&request)
            .ok_or(EngineError::UnknownRequest(request))?;
        let scope = entry.scope;
        let live = live_block_range(bs, scope.sink_window, num_computed);
        let full = (num_computed / bs).min(entry.table.len());
        if entry.num_hashed < full && entry.parent.is_none() && entry.num_hashed > 0 {
            let prior = full_block_hashes(&tokens[..entry.num_hashed * bs], bs, |b| {
                block_salt(&cfg, scope, b)
            });
            entry.parent = prior.last().copied();
        }
        for b in entry.num_hashed..full {
            let salt = block_salt(&cfg, scope, b);
            let hash = BlockHash::of(entry.parent, &tokens[b * bs..(b + 1) * bs], salt);
            if let Some(parent) = entry.parent {
                self.lineage.record(parent, hash);
            }
            entry.parent = Some(hash);
            if let Some(id) = entry.table[b] {
                self.pool.cache(id, hash, scope.namespace);
                if scope.scratch || !lower_tiers_can_keep(scope, b, kept_below) {
                    // Evicting it loses nothing a lower tier could (or should) keep: it is neither
                    // written through nor copied down at its eviction.
                    self.pool.mark_backed(id);
                } else if !scope.transient && writes_through {
                    self.fresh.push_back(Evicted {
                        block: id,
                        hash,
                        namespace: scope.namespace,
                    });
                }
            }
            entry.num_hashed = b + 1;
        }
        let dropped: Vec<BlockId> = (0..entry.table.len())
            .filter(|&b| (b + 1) * bs <= num_computed && !live(b))
            .filter_map(|b| entry.table[b].take())
            .collect();
        let (pool, tiers) = (&self.pool, &self.tiers);
        self.lineage.sweep_if_large(|h| {
            pool.lookup(h).is_some() || tiers.as_ref().is_some_and(|t| t.contains(h))
        });
        self.pool.free(&dropped)
    }

    /// Release every block of `request` (finished, cancelled or preempted). Unknown requests are ignored.
    pub fn free(&mut self, request: RequestId) -> Result<()> {
        if let Some(entry) = self.requests.remove(&request) {
            let blocks: Vec<BlockId> = entry.table.iter().rev().flatten().copied().collect();
            self.pool.free(&blocks)?;
        }
        Ok(())
    }

    /// The request's table: one entry per logical block, None where a sink window freed it.
    pub fn block_table(&self, request: RequestId) -> Option<&[Option<BlockId>]> {
        self.requests.get(&request).map(|r| r.table.as_slice())
    }

    /// KV slot (block * block_size + offset) of logical token `index`, if its block is held.
    pub fn slot(&self, request: RequestId, index: usize) -> Option<usize> {
        let bs = self.cfg.block_size;
        let block = (*self.requests.get(&request)?.table.get(index / bs)?)?;
        Some(block as usize * bs + index % bs)
    }

    /// Live requests.
    pub fn num_requests(&self) -> usize {
        self.requests.len()
    }
}

/// Whether a lower tier holding `held` blocks at once ([`KvTiers::blocks_held_at_once`]) could ever
/// give block `b` of a sequence of `scope` back. A dense sequence's block is found again only after
/// every block before it, so one at place `held` or later never is: copying it down would only push
/// out the blocks it needs. A sink window needs only its sinks and its window, so any of its blocks
/// may come back.
fn lower_tiers_can_keep(scope: CacheScope, b: usize, held: usize) -> bool {
    scope.sink_window.is_some() || b < held
}

/// The block-hash salt of logical block `b` in `scope`: the engine's salt mixed with the namespace, and with
/// the window for blocks past the window's dense prefix.
fn block_salt(cfg: &KvCacheConfig, scope: CacheScope, b: usize) -> u64 {
    let base = cfg.cache_salt
        ^ scope
            .namespace
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .rotate_left(29);
    match scope.sink_window {
        Some(w) if (b + 1) * cfg.block_size > w.dense_prefix() => base ^ w.tag(),
        _ => base,
    }
}

/// For a sequence of `num_tokens` under `window`, which logical blocks of `block_size` must be kept.
fn live_block_range(
    block_size: usize,
    window: Option<SinkWindow>,
    num_tokens: usize,
) -> impl Fn(usize) -> bool {
    move |b: usize| match window {
        None => true,
        Some(w) => {
            let sink_blocks = w.num_sink_tokens.div_ceil(block_size);
            let first_window_token = num_tokens.saturating_sub(w.window);
            b < sink_blocks || (b + 1) * block_size > first_window_token
        }
    }
}
