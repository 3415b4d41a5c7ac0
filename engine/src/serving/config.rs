//! Settings of a serving engine: KV budget and layout, batching limits, queue bound.

use crate::backend::KvDtype;
use crate::config::LlamaConfig;
use crate::error::{EngineError, Result};

/// How much memory the KV cache takes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum KvBudget {
    /// A fixed number of bytes over all layers.
    Bytes(usize),
    /// Whatever keeps the device's memory in use at or below this share of its total once the
    /// weights, the workspace and the cache are allocated (vLLM's `gpu_memory_utilization`). Only for
    /// a backend that reports its memory ([`crate::backend::Backend::memory_info`]).
    DeviceShare(f64),
}

impl KvBudget {
    /// The bytes this budget gives on a device with `memory` = `(free, total)` bytes.
    pub fn bytes(self, memory: Option<(usize, usize)>) -> Result<usize> {
        match (self, memory) {
            (KvBudget::Bytes(bytes), _) => Ok(bytes),
            (KvBudget::DeviceShare(share), _) if !(share > 0.0 && share <= 1.0) => Err(
                EngineError::InvalidConfig(format!("a device share of {share} is not in (0, 1]")),
            ),
            (KvBudget::DeviceShare(share), Some((free, total))) => {
                let used = total.saturating_sub(free);
                let ceiling = (total as f64 * share) as usize;
                match ceiling.checked_sub(used) {
                    Some(room) if room > 0 => Ok(room),
                    _ => Err(EngineError::InvalidConfig(format!(
                        "the device already uses {} MiB of {} MiB, over the {:.0} % the KV cache may fill up to",
                        used >> 20,
                        total >> 20,
                        share * 100.0
                    ))),
                }
            }
            (KvBudget::DeviceShare(_), None) => Err(EngineError::InvalidConfig(
                "a KV budget by device share needs a backend that reports its memory (CUDA)".into(),
            )),
        }
    }
}

/// How a serving engine is sized.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EngineConfig {
    /// Memory for the KV cache of all layers; the block count follows from it.
    pub kv_cache: KvBudget,
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
    /// Identifies the weights and adapter the engine serves (a checksum; 0 when unknown). It enters
    /// every KV block's hash, so blocks kept on disk are only found again by the same model.
    pub weights_fingerprint: u64,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            kv_cache: KvBudget::Bytes(512 << 20),
            block_size: 16,
            kv_dtype: KvDtype::F32,
            enable_prefix_caching: true,
            max_num_batched_tokens: 512,
            max_num_seqs: 16,
            max_waiting: 64,
            weights_fingerprint: 0,
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

    /// The salt of every KV block hash of an engine with this configuration over `model` split over
    /// `world` tensor-parallel ranks: the KV dtype, the model's whole configuration (architecture,
    /// RoPE settings and their scaling), the weights fingerprint and, for a group of more than one
    /// rank, its size (a block's record on disk holds the ranks' shares in turn), so no block is
    /// reused across any of them. A group of one lays blocks out as the whole model does.
    pub fn cache_salt(&self, model: &LlamaConfig, world: usize) -> u64 {
        let mut h = xxhash_rust::xxh3::Xxh3::new();
        h.update(format!("{:?}", self.kv_dtype).as_bytes());
        h.update(format!("{model:?}").as_bytes());
        h.update(&self.weights_fingerprint.to_le_bytes());
        if world > 1 {
            h.update(format!("tensor-parallel {world}").as_bytes());
        }
        h.digest()
    }

    /// Blocks that fit in `bytes`.
    pub fn num_kv_blocks(&self, model: &LlamaConfig, bytes: usize) -> usize {
        bytes / self.kv_block_bytes(model).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: usize = 1 << 30;

    #[test]
    fn a_fixed_budget_ignores_the_device() {
        assert_eq!(KvBudget::Bytes(512 << 20).bytes(None).unwrap(), 512 << 20);
        assert_eq!(KvBudget::Bytes(7).bytes(Some((GIB, 2 * GIB))).unwrap(), 7);
    }

    #[test]
    fn a_device_share_fills_up_to_the_high_water_mark() {
        // 139 GiB device, 20 GiB in use (weights, workspace): 85 % is 118.15 GiB, so 98.15 GiB remain.
        let total = 139 * GIB;
        let got = KvBudget::DeviceShare(0.85).bytes(Some((total - 20 * GIB, total)));
        assert_eq!(got.unwrap(), (total as f64 * 0.85) as usize - 20 * GIB);
    }

    #[test]
    fn a_device_share_already_exceeded_or_out_of_range_or_without_a_device_is_refused() {
        let full = KvBudget::DeviceShare(0.5).bytes(Some((GIB, 4 * GIB)));
        assert!(
            matches!(full, Err(EngineError::InvalidConfig(m)) if m.contains("already uses 3072 MiB of 4096 MiB"))
        );
        assert!(
            KvBudget::DeviceShare(1.5)
                .bytes(Some((GIB, 4 * GIB)))
                .is_err()
        );
        assert!(
            KvBudget::DeviceShare(0.0)
                .bytes(Some((GIB, 4 * GIB)))
                .is_err()
        );
        assert!(KvBudget::DeviceShare(0.9).bytes(None).is_err());
    }
}
