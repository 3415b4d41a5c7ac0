//! Counters and gauges a serving engine reports (for logs and the service's metrics).

use crate::kv::tiers::TierStats;

/// A snapshot of the engine's state and its counters since it started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EngineStats {
    /// KV blocks in the pool.
    pub total_blocks: usize,
    /// KV blocks referenced by requests.
    pub used_blocks: usize,
    /// KV blocks free (some still holding cached prefixes).
    pub free_blocks: usize,
    /// Requests running.
    pub running: usize,
    /// Requests waiting.
    pub waiting: usize,
    /// Steps run.
    pub steps: u64,
    /// Tokens run through the model.
    pub computed_tokens: u64,
    /// Prompt tokens taken from the prefix cache instead of being computed (finished requests).
    pub cached_tokens: u64,
    /// Prompt tokens looked up in the prefix cache.
    pub prefix_queried_tokens: u64,
    /// Of those, tokens found.
    pub prefix_hit_tokens: u64,
    /// Preemptions (requests recomputed later).
    pub preemptions: u64,
    /// Requests finished, cancelled included.
    pub finished_requests: u64,
    /// Decode steps replayed from recorded graphs (CUDA graphs; 0 on the CPU).
    pub graph_replays: u64,
    /// Tokens computed in steps that read prompt (chunks of prompts, with any decode tokens beside them).
    pub prefill_tokens: u64,
    /// Wall-clock microseconds of those steps.
    pub prefill_micros: u64,
    /// Steps that only decoded (one new token per running request).
    pub decode_steps: u64,
    /// Wall-clock microseconds of those steps.
    pub decode_micros: u64,
    /// The lower KV tiers (all zero without them).
    pub tiers: TierStats,
    /// Whether lower KV tiers are attached.
    pub tiers_attached: bool,
}

/// Steps' worth of measurement below which a rate is not reported (the first steps run op by op
/// and record CUDA graphs, so they say little about the steady pace).
const MIN_PREFILL_TOKENS: u64 = 1024;
const MIN_DECODE_STEPS: u64 = 16;

impl EngineStats {
    /// Prompt tokens read per second, measured over the engine's prefill steps so far; None until a
    /// thousand tokens were read.
    pub fn prefill_tokens_per_second(&self) -> Option<f64> {
        (self.prefill_tokens >= MIN_PREFILL_TOKENS && self.prefill_micros > 0)
            .then(|| self.prefill_tokens as f64 * 1e6 / self.prefill_micros as f64)
    }

    /// Seconds a decode step takes, measured over the decode steps so far; None until sixteen ran.
    pub fn seconds_per_decode_step(&self) -> Option<f64> {
        (self.decode_steps >= MIN_DECODE_STEPS)
            .then(|| self.decode_micros as f64 / 1e6 / self.decode_steps as f64)
    }

    /// Share of looked-up prompt tokens found in the prefix cache.
    pub fn prefix_hit_rate(&self) -> f64 {
        if self.prefix_queried_tokens == 0 {
            0.0
        } else {
            self.prefix_hit_tokens as f64 / self.prefix_queried_tokens as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_appear_once_enough_was_measured() {
        let mut s = EngineStats {
            prefill_tokens: 512,
            prefill_micros: 50_000,
            decode_steps: 8,
            decode_micros: 80_000,
            ..EngineStats::default()
        };
        assert_eq!(s.prefill_tokens_per_second(), None);
        assert_eq!(s.seconds_per_decode_step(), None);
        s.prefill_tokens = 2048;
        s.prefill_micros = 100_000;
        s.decode_steps = 20;
        s.decode_micros = 200_000;
        assert_eq!(s.prefill_tokens_per_second(), Some(20_480.0));
        assert_eq!(s.seconds_per_decode_step(), Some(0.01));
    }
}
