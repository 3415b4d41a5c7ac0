//! The KV cache manager: per-request block tables over the shared [`BlockPool`], prefix-cache lookups, and
//! sink-token sliding windows.
//!
//! Modelled on vLLM v1's `KVCacheManager`. A request's table has one entry per logical block of its
//! sequence; with a sink window ([`SinkWindow`]) the blocks between the sinks and the recent window are
//! returned to the pool as the sequence grows and their entries become `None`. Positions for attention are
//! then assigned within the cache (StreamingLLM), which the attention code derives from
//! [`KvCacheManager::visible_tokens`].

use std::collections::HashMap;

use super::block_hash::{BlockHash, full_block_hashes};
use super::block_pool::{BlockId, BlockPool};
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

/// Shape and policy of one engine's KV cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvCacheConfig {
    /// Tokens per block.
    pub block_size: usize,
    /// Blocks in the pool.
    pub num_blocks: usize,
    /// Share full blocks between requests with the same prefix.
    pub enable_prefix_caching: bool,
    /// Sink-token sliding window, or None for dense attention.
    pub sink_window: Option<SinkWindow>,
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
    /// For each logical block of the prefix, the cached block (None where a window would drop it anyway).
    pub blocks: Vec<Option<BlockId>>,
    /// Tokens whose KV is reused: a whole number of blocks, always fewer than the prompt.
    pub num_tokens: usize,
    /// The namespace it was looked up in; the request's new blocks are cached there too.
    pub namespace: CacheNamespace,
}

#[derive(Debug, Default)]
struct RequestBlocks {
    table: Vec<Option<BlockId>>,
    num_hashed: usize,
    parent: Option<BlockHash>,
    /// Hash salt of the request's namespace.
    salt: u64,
}

/// Block tables of every live request over one pool.
#[derive(Debug)]
pub struct KvCacheManager {
    cfg: KvCacheConfig,
    pool: BlockPool,
    requests: HashMap<RequestId, RequestBlocks>,
    stats: PrefixCacheStats,
}

impl KvCacheManager {
    /// A manager over a fresh pool.
    pub fn new(cfg: KvCacheConfig) -> Result<Self> {
        if cfg.block_size == 0 || cfg.num_blocks == 0 {
            return Err(EngineError::InvalidConfig(
                "block_size and num_blocks must be positive".into(),
            ));
        }
        if let Some(w) = cfg.sink_window
            && w.window < cfg.block_size
        {
            return Err(EngineError::InvalidConfig(format!(
                "sink window of {} tokens is shorter than a block ({})",
                w.window, cfg.block_size
            )));
        }
        let pool = BlockPool::new(cfg.num_blocks, cfg.enable_prefix_caching);
        Ok(KvCacheManager {
            cfg,
            pool,
            requests: HashMap::new(),
            stats: PrefixCacheStats::default(),
        })
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

    /// Blocks a request of `num_tokens` tokens holds at most at once, when computed `chunk` tokens a step.
    /// Under a sink window that is the sinks and the window between steps, plus the chunk during one.
    pub fn max_blocks_for(&self, num_tokens: usize, chunk: usize) -> usize {
        let bs = self.cfg.block_size;
        let dense = num_tokens.div_ceil(bs);
        match self.cfg.sink_window {
            Some(w) => dense.min(
                w.num_sink_tokens.div_ceil(bs) + w.window.div_ceil(bs) + 1 + chunk.div_ceil(bs),
            ),
            None => dense,
        }
    }

    /// Whether a request of `num_tokens` tokens could ever fit, alone in an empty pool.
    pub fn can_ever_fit(&self, num_tokens: usize, chunk: usize) -> bool {
        self.max_blocks_for(num_tokens, chunk) <= self.pool.num_blocks()
    }

    /// Look up the longest prefix of `prompt` cached in `namespace`. Never covers the whole prompt: the
    /// last token is always computed, since its logits are needed. Only counts towards the statistics
    /// when `record` is set.
    pub fn find_cached_prefix(
        &mut self,
        prompt: &[u32],
        namespace: CacheNamespace,
        record: bool,
    ) -> CachedPrefix {
        let found = self.lookup_prefix(prompt, namespace);
        if record {
            self.stats.queried_tokens += prompt.len() as u64;
            self.stats.hit_tokens += found.num_tokens as u64;
        }
        found
    }

    /// Tokens at the start of `prompt` whose KV a request of `namespace` would take from the prefix cache
    /// now (no statistics recorded).
    pub fn cached_prefix_len(&self, prompt: &[u32], namespace: CacheNamespace) -> usize {
        self.lookup_prefix(prompt, namespace).num_tokens
    }

    /// The block-hash salt of a namespace: the engine's salt mixed with it.
    fn salt(&self, namespace: CacheNamespace) -> u64 {
        self.cfg.cache_salt
            ^ namespace
                .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                .rotate_left(29)
    }

    /// Removes the prefix-cache entries of every full block of `tokens` in `namespace`, so no later
    /// request can reuse that KV (e.g. the document was deleted). Blocks in use keep their content for
    /// their requests. Returns how many entries were dropped.
    pub fn forget_prefix(&mut self, tokens: &[u32], namespace: CacheNamespace) -> usize {
        let bs = self.cfg.block_size;
        let full = tokens.len() / bs * bs;
        full_block_hashes(&tokens[..full], bs, self.salt(namespace))
            .into_iter()
            .filter(|h| self.pool.uncache(*h))
            .count()
    }

    fn lookup_prefix(&self, prompt: &[u32], namespace: CacheNamespace) -> CachedPrefix {
        let empty = CachedPrefix {
            namespace,
            ..CachedPrefix::default()
        };
        if !self.pool.caching_enabled() || prompt.len() < 2 {
            return empty;
        }
        let bs = self.cfg.block_size;
        let usable = (prompt.len() - 1) / bs;
        let hashes = full_block_hashes(&prompt[..usable * bs], bs, self.salt(namespace));
        if self.cfg.sink_window.is_none() {
            // Dense: the leading run of cached blocks.
            let blocks: Vec<Option<BlockId>> = hashes
                .iter()
                .map_while(|h| self.pool.lookup(*h).map(Some))
                .collect();
            let num_tokens = blocks.len() * bs;
            return CachedPrefix {
                blocks,
                num_tokens,
                namespace,
            };
        }
        // Sink window: the longest prefix whose sink and window blocks are all cached.
        for n in (1..=usable).rev() {
            let live = self.live_block_range(n * bs);
            let mut blocks = vec![None; n];
            let all = (0..n).filter(|&b| live(b)).all(|b| {
                blocks[b] = self.pool.lookup(hashes[b]);
                blocks[b].is_some()
            });
            if all {
                return CachedPrefix {
                    blocks,
                    num_tokens: n * bs,
                    namespace,
                };
            }
        }
        empty
    }

    /// For a sequence of `num_tokens`, which logical blocks must be kept.
    fn live_block_range(&self, num_tokens: usize) -> impl Fn(usize) -> bool + use<> {
        let bs = self.cfg.block_size;
        let window = self.cfg.sink_window;
        move |b: usize| match window {
            None => true,
            Some(w) => {
                let sink_blocks = w.num_sink_tokens.div_ceil(bs);
                let first_window_token = num_tokens.saturating_sub(w.window);
                b < sink_blocks || (b + 1) * bs > first_window_token
            }
        }
    }

    /// Give `request` room for `num_tokens` tokens in total, starting from `prefix` when it is new (a new
    /// request without one uses namespace 0).
    /// Returns Ok(false), changing nothing, when the pool has too few free blocks.
    pub fn allocate(
        &mut self,
        request: RequestId,
        num_tokens: usize,
        prefix: Option<&CachedPrefix>,
    ) -> Result<bool> {
        let bs = self.cfg.block_size;
        let is_new = !self.requests.contains_key(&request);
        let salt = self.salt(prefix.map_or(0, |p| p.namespace));
        let entry = self
            .requests
            .entry(request)
            .or_insert_with(|| RequestBlocks {
                salt,
                ..RequestBlocks::default()
            });
        let mut hit_blocks: Vec<BlockId> = Vec::new();
        if is_new && let Some(p) = prefix {
            hit_blocks = p.blocks.iter().flatten().copied().collect();
        }
        let have = if is_new {
            prefix.map_or(0, |p| p.blocks.len())
        } else {
            entry.table.len()
        };
        // Every block of the new tokens is allocated, since they are written this step; blocks that leave a
        // sink window are freed afterwards, in `commit_computed`.
        let want = num_tokens.div_ceil(bs);
        let new_needed = want.saturating_sub(have);
        // Cache hits that sit in the free queue also come out of the free count.
        let hits_from_free = hit_blocks
            .iter()
            .filter(|&&b| self.pool.ref_count(b) == 0)
            .count();
        if new_needed + hits_from_free > self.pool.num_free() {
            if is_new {
                self.requests.remove(&request);
            }
            return Ok(false);
        }
        let entry = self
            .requests
            .get_mut(&request)
            .ok_or_else(|| EngineError::Internal("request vanished".into()))?;
        if is_new && let Some(p) = prefix {
            self.pool.touch(&hit_blocks);
            entry.table = p.blocks.clone();
            entry.num_hashed = p.blocks.len();
        }
        let mut fresh = self
            .pool
            .allocate(new_needed)
            .ok_or_else(|| EngineError::Internal("free count lied".into()))?
            .into_iter();
        entry.table.extend((have..want).map(|_| fresh.next()));
        Ok(true)
    }

    /// After the model has written KV for the first `num_computed` tokens of `tokens`, register the newly
    /// full blocks in the prefix cache and, under a sink window, free blocks that left the window.
    pub fn commit_computed(
        &mut self,
        request: RequestId,
        tokens: &[u32],
        num_computed: usize,
    ) -> Result<()> {
        let bs = self.cfg.block_size;
        let live = self.live_block_range(num_computed);
        let entry = self
            .requests
            .get_mut(&request)
            .ok_or(EngineError::UnknownRequest(request))?;
        let salt = entry.salt;
        let full = (num_computed / bs).min(entry.table.len());
        if entry.num_hashed < full && entry.parent.is_none() && entry.num_hashed > 0 {
            let prior = full_block_hashes(&tokens[..entry.num_hashed * bs], bs, salt);
            entry.parent = prior.last().copied();
        }
        for b in entry.num_hashed..full {
            let hash = BlockHash::of(entry.parent, &tokens[b * bs..(b + 1) * bs], salt);
            entry.parent = Some(hash);
            if let Some(id) = entry.table[b] {
                self.pool.cache(id, hash);
            }
            entry.num_hashed = b + 1;
        }
        let dropped: Vec<BlockId> = (0..entry.table.len())
            .filter(|&b| (b + 1) * bs <= num_computed && !live(b))
            .filter_map(|b| entry.table[b].take())
            .collect();
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

    /// Logical token ranges attention may see in a sequence of `num_tokens`: everything when dense; the
    /// sinks and the last `window` tokens under a sink window. Positions within the cache follow this order.
    pub fn visible_tokens(&self, num_tokens: usize) -> Vec<std::ops::Range<usize>> {
        let whole = std::iter::once(0..num_tokens).collect();
        match self.cfg.sink_window {
            Some(w) if num_tokens > w.num_sink_tokens + w.window => {
                vec![0..w.num_sink_tokens, num_tokens - w.window..num_tokens]
            }
            _ => whole,
        }
    }

    /// Live requests.
    pub fn num_requests(&self) -> usize {
        self.requests.len()
    }
}
