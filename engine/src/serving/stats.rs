//! Counters and gauges a serving engine reports (for logs and the service's metrics).

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
}

impl EngineStats {
    /// Share of looked-up prompt tokens found in the prefix cache.
    pub fn prefix_hit_rate(&self) -> f64 {
        if self.prefix_queried_tokens == 0 {
            0.0
        } else {
            self.prefix_hit_tokens as f64 / self.prefix_queried_tokens as f64
        }
    }
}
