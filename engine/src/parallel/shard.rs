//! Which part of a model one rank of a tensor-parallel group holds.
//!
//! The split is Megatron's: attention heads and KV heads, and the MLP's intermediate features, are
//! divided evenly over the ranks (q/k/v and gate/up by their output rows, o and down by their input
//! columns), and so is the vocabulary of the embedding and the LM head. RMSNorm weights are whole on
//! every rank.

use std::ops::Range;

use crate::config::LlamaConfig;
use crate::error::{EngineError, Result};

/// Rank `rank` of a group of `world` ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// This rank, `0..world`.
    pub rank: usize,
    /// The number of ranks.
    pub world: usize,
}

impl Shard {
    /// The whole model on one rank.
    pub const WHOLE: Shard = Shard { rank: 0, world: 1 };

    /// Rank `rank` of `world`.
    pub fn new(rank: usize, world: usize) -> Result<Self> {
        match rank < world {
            true => Ok(Shard { rank, world }),
            false => Err(EngineError::InvalidConfig(format!(
                "rank {rank} of a tensor-parallel group of {world}"
            ))),
        }
    }

    /// Whether this rank holds the whole model.
    pub fn is_whole(&self) -> bool {
        self.world == 1
    }

    /// This rank's even part of `0..total` (which the world divides: see [`Shard::check`]).
    pub fn part(&self, total: usize) -> Range<usize> {
        let len = total / self.world;
        self.rank * len..(self.rank + 1) * len
    }

    /// Fails, saying what does not divide, unless `world` ranks can split `cfg`.
    pub fn check(&self, cfg: &LlamaConfig) -> Result<()> {
        let sizes = [
            ("attention heads", cfg.num_attention_heads),
            ("key/value heads", cfg.num_key_value_heads),
            ("MLP features (intermediate_size)", cfg.intermediate_size),
            ("vocabulary entries", cfg.vocab_size),
        ];
        match sizes.iter().find(|(_, n)| n % self.world != 0) {
            None => Ok(()),
            Some((what, n)) => Err(EngineError::InvalidConfig(format!(
                "tensor parallelism over {} ranks needs the model's {what} ({n}) to be a multiple of {}",
                self.world, self.world
            ))),
        }
    }

    /// The configuration of this rank's part: its heads, KV heads, MLP features and vocabulary.
    pub fn config(&self, cfg: &LlamaConfig) -> LlamaConfig {
        let mut part = cfg.clone();
        part.num_attention_heads /= self.world;
        part.num_key_value_heads /= self.world;
        part.intermediate_size /= self.world;
        part.vocab_size /= self.world;
        part
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(heads: usize, kv_heads: usize, vocab: usize) -> LlamaConfig {
        LlamaConfig::from_json(&format!(
            r#"{{"architectures": ["LlamaForCausalLM"], "hidden_size": 4096,
                "intermediate_size": 14336, "num_hidden_layers": 2, "num_attention_heads": {heads},
                "num_key_value_heads": {kv_heads}, "vocab_size": {vocab},
                "max_position_embeddings": 131072}}"#
        ))
        .unwrap()
    }

    #[test]
    fn ranks_take_consecutive_equal_parts() {
        let parts: Vec<_> = (0..4).map(|r| Shard::new(r, 4).unwrap().part(32)).collect();
        assert_eq!(parts, [0..8, 8..16, 16..24, 24..32]);
    }

    #[test]
    fn a_rank_past_the_group_is_refused() {
        assert!(Shard::new(2, 2).is_err());
    }

    #[test]
    fn a_part_config_divides_heads_features_and_vocabulary() {
        let cfg = config(32, 8, 128_256);
        let part = Shard::new(1, 2).unwrap().config(&cfg);
        assert_eq!(
            (part.num_attention_heads, part.num_key_value_heads),
            (16, 4)
        );
        assert_eq!(part.intermediate_size, cfg.intermediate_size / 2);
        assert_eq!(part.vocab_size, 64_128);
        assert_eq!(part.hidden_size, cfg.hidden_size);
    }

    #[test]
    fn key_value_heads_that_do_not_divide_are_named_in_the_error() {
        let err = Shard::new(0, 4).unwrap().check(&config(32, 2, 128_256));
        let text = err.unwrap_err().to_string();
        assert!(text.contains("key/value heads (2)"), "{text}");
    }

    #[test]
    fn an_odd_vocabulary_is_refused_for_two_ranks() {
        assert!(
            Shard::new(0, 2)
                .unwrap()
                .check(&config(8, 2, 49_153))
                .is_err()
        );
        assert!(
            Shard::new(0, 2)
                .unwrap()
                .check(&config(8, 2, 49_152))
                .is_ok()
        );
    }
}
