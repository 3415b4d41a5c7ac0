//! Settings of a serving engine: KV budget and layout, batching limits, queue bound.

use crate::backend::KvDtype;
use crate::config::LlamaConfig;

/// How a serving engine is sized.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineConfig {
    /// Memory for the KV cache of all layers, in bytes; the block count follows from it.
    pub kv_cache_bytes: usize,
    /// Tokens per KV block.
    pub block_size: usize,
    /// Element type of the KV cache.
    pub kv_dtype: KvDtype,
    /// Share KV blocks between requests with the same prefix.
    pub enable_prefix_caching: bool,
    /// Tokens computed per step over all requests.
    pub max_num_batched_tokens: usize,
    /// Requests running at once.
    pub max_num_seqs: usize,
    /// Requests allowed to wait before new ones are refused as overloaded.
    pub max_waiting: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            kv_cache_bytes: 512 << 20,
            block_size: 16,
            kv_dtype: KvDtype::F32,
            enable_prefix_caching: true,
            max_num_batched_tokens: 512,
            max_num_seqs: 16,
            max_waiting: 64,
        }
    }
}

impl EngineConfig {
    /// Bytes of one KV block over all layers (K and V).
    pub fn kv_block_bytes(&self, model: &LlamaConfig) -> usize {
        2 * model.num_hidden_layers
            * self.block_size
            * model.num_key_value_heads
            * self.kv_dtype.bytes_per_head(model.head_dim)
    }

    /// Blocks that fit in the KV budget.
    pub fn num_kv_blocks(&self, model: &LlamaConfig) -> usize {
        self.kv_cache_bytes / self.kv_block_bytes(model).max(1)
    }
}
