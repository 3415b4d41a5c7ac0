//! Token-budget scheduler with continuous batching, chunked prefill and preemption by recompute.
//!
//! There is no prefill phase and no decode phase (vLLM v1's scheduler): every request has
//! `num_computed_tokens`, and each step hands out up to `max_num_batched_tokens` tokens over at most
//! `max_num_seqs` requests, running requests first. A request with many uncomputed tokens gets a chunk
//! (chunked prefill); a decoding request needs one; a prefix-cache hit simply starts with
//! `num_computed_tokens > 0`. When blocks run out, the most recently admitted running request is preempted:
//! its blocks are freed and it goes back to the front of the queue, to be recomputed later.

use std::collections::VecDeque;

use crate::error::{EngineError, Result};
use crate::kv::manager::{CacheScope, KvCacheManager, RequestId};

/// Limits of one scheduler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchedulerConfig {
    /// Tokens computed per step, over all requests.
    pub max_num_batched_tokens: usize,
    /// Requests running at once.
    pub max_num_seqs: usize,
    /// Requests allowed to wait; one more is refused as overloaded.
    pub max_waiting: usize,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            max_num_batched_tokens: 2048,
            max_num_seqs: 16,
            max_waiting: 64,
        }
    }
}

/// One request as the scheduler sees it: its tokens so far and how many have KV in the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeqState {
    /// Engine-wide request id.
    pub id: RequestId,
    /// Prompt followed by the tokens generated so far.
    pub tokens: Vec<u32>,
    /// Length of the prompt within `tokens`.
    pub num_prompt_tokens: usize,
    /// Tokens whose KV is in the cache (computed or reused from the prefix cache).
    pub num_computed_tokens: usize,
    /// Tokens this request may generate in all.
    pub max_new_tokens: usize,
    /// Tokens that were reused from the prefix cache when the request was (last) admitted.
    pub num_cached_tokens: usize,
    /// How many times the request was preempted.
    pub num_preemptions: u32,
    /// The prefix-cache namespace it reads and fills, and its sink window if it streams.
    pub cache_scope: CacheScope,
}

impl SeqState {
    /// A new request for `prompt`, generating at most `max_new_tokens`.
    pub fn new(id: RequestId, prompt: Vec<u32>, max_new_tokens: usize) -> Self {
        let n = prompt.len();
        SeqState {
            id,
            tokens: prompt,
            num_prompt_tokens: n,
            num_computed_tokens: 0,
            max_new_tokens,
            num_cached_tokens: 0,
            num_preemptions: 0,
            cache_scope: CacheScope::default(),
        }
    }

    /// Tokens still to compute before the next token can be sampled.
    pub fn num_pending(&self) -> usize {
        self.tokens.len() - self.num_computed_tokens
    }
}

/// One request's share of a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScheduledSeq {
    /// The request.
    pub id: RequestId,
    /// Index of its first token computed this step (its `num_computed_tokens` before the step).
    pub start: usize,
    /// Tokens computed this step.
    pub num_tokens: usize,
    /// Whether this step reaches the end of its known tokens, so a token must be sampled.
    pub samples: bool,
}

/// The plan of one step.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SchedulerOutput {
    /// Requests computed this step, in batch order.
    pub seqs: Vec<ScheduledSeq>,
    /// Requests preempted while planning this step.
    pub preempted: Vec<RequestId>,
}

impl SchedulerOutput {
    /// Tokens computed this step.
    pub fn num_tokens(&self) -> usize {
        self.seqs.iter().map(|s| s.num_tokens).sum()
    }
}

/// Queues of waiting and running requests over one KV cache.
#[derive(Debug)]
pub struct Scheduler {
    cfg: SchedulerConfig,
    waiting: VecDeque<SeqState>,
    running: Vec<SeqState>,
}

impl Scheduler {
    /// An empty scheduler.
    pub fn new(cfg: SchedulerConfig) -> Result<Self> {
        if cfg.max_num_batched_tokens == 0 || cfg.max_num_seqs == 0 {
            return Err(EngineError::InvalidConfig(
                "scheduler budgets must be positive".into(),
            ));
        }
        Ok(Scheduler {
            cfg,
            waiting: VecDeque::new(),
            running: Vec::new(),
        })
    }

    /// The limits.
    pub fn config(&self) -> &SchedulerConfig {
        &self.cfg
    }

    /// Queue a request. Fails at once when it could not fit even alone in the cache
    /// ([`EngineError::RequestTooLarge`]) or when the queue is full ([`EngineError::Overloaded`]).
    pub fn add(&mut self, seq: SeqState, kv: &KvCacheManager) -> Result<()> {
        let total = seq.tokens.len() + seq.max_new_tokens;
        if !kv.can_ever_fit(
            total,
            self.cfg.max_num_batched_tokens,
            seq.cache_scope.sink_window,
        ) {
            return Err(EngineError::RequestTooLarge {
                tokens: total,
                capacity_tokens: kv.pool().num_blocks() * kv.config().block_size,
            });
        }
        if self.waiting.len() >= self.cfg.max_waiting {
            return Err(EngineError::Overloaded {
                queued: self.waiting.len(),
            });
        }
        self.waiting.push_back(seq);
        Ok(())
    }

    /// Requests waiting to be admitted.
    pub fn num_waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Requests admitted and holding blocks.
    pub fn num_running(&self) -> usize {
        self.running.len()
    }

    /// Whether any request is left.
    pub fn has_work(&self) -> bool {
        !self.waiting.is_empty() || !self.running.is_empty()
    }

    /// A running or waiting request.
    pub fn get(&self, id: RequestId) -> Option<&SeqState> {
        self.running
            .iter()
            .chain(self.waiting.iter())
            .find(|s| s.id == id)
    }

    /// Plan one step: running requests first (preempting the newest when blocks run out), then waiting ones
    /// in order while the token budget, the sequence limit and the free blocks allow.
    pub fn schedule(&mut self, kv: &mut KvCacheManager) -> Result<SchedulerOutput> {
        let mut out = SchedulerOutput::default();
        let mut budget = self.cfg.max_num_batched_tokens;
        let mut i = 0;
        while i < self.running.len() && budget > 0 {
            let n = self.running[i].num_pending().min(budget);
            let (id, start) = (self.running[i].id, self.running[i].num_computed_tokens);
            if kv.allocate(id, start + n, None)? {
                out.seqs.push(self.plan(i, n));
                budget -= n;
                i += 1;
                continue;
            }
            // Out of blocks: preempt the newest running request (possibly this one) and retry.
            let victim = self
                .running
                .pop()
                .ok_or_else(|| EngineError::Internal("nothing to preempt".into()))?;
            out.seqs.retain(|s| s.id != victim.id);
            out.preempted.push(victim.id);
            self.preempt(victim, kv)?;
        }
        // Only admit new requests when nothing was preempted this step (keeps the order fair).
        while out.preempted.is_empty() && budget > 0 && self.running.len() < self.cfg.max_num_seqs {
            let Some(seq) = self.waiting.front() else {
                break;
            };
            let prefix = kv.find_cached_prefix(&seq.tokens, seq.cache_scope, false);
            let n = (seq.tokens.len() - prefix.num_tokens).min(budget);
            let Some(start) = kv.admit(seq.id, &prefix, prefix.num_tokens + n)? else {
                break;
            };
            let mut seq = self
                .waiting
                .pop_front()
                .ok_or_else(|| EngineError::Internal("queue emptied".into()))?;
            let _ = kv.find_cached_prefix(&seq.tokens, seq.cache_scope, true);
            seq.num_computed_tokens = start;
            seq.num_cached_tokens = start;
            self.running.push(seq);
            out.seqs.push(self.plan(self.running.len() - 1, n));
            budget -= n;
        }
        Ok(out)
    }

    fn plan(&self, index: usize, n: usize) -> ScheduledSeq {
        let s = &self.running[index];
        ScheduledSeq {
            id: s.id,
            start: s.num_computed_tokens,
            num_tokens: n,
            samples: s.num_computed_tokens + n == s.tokens.len(),
        }
    }

    fn preempt(&mut self, mut victim: SeqState, kv: &mut KvCacheManager) -> Result<()> {
        kv.free(victim.id)?;
        victim.num_computed_tokens = 0;
        victim.num_preemptions += 1;
        self.waiting.push_front(victim);
        Ok(())
    }

    /// Sends requests `ids` (in admission order) back to the front of the queue, freeing their blocks
    /// and dropping them from this step's plan `out`: a block they hold turned out to have no KV (a
    /// lower tier's record could not be read). Admitted again, they find their prefix up to that block
    /// and recompute the rest.
    pub fn admit_again(
        &mut self,
        ids: &[RequestId],
        out: &mut SchedulerOutput,
        kv: &mut KvCacheManager,
    ) -> Result<()> {
        for &id in ids.iter().rev() {
            let Some(i) = self.running.iter().position(|s| s.id == id) else {
                continue;
            };
            let mut seq = self.running.remove(i);
            out.seqs.retain(|s| s.id != id);
            kv.free(id)?;
            seq.num_computed_tokens = 0;
            self.waiting.push_front(seq);
        }
        Ok(())
    }

    /// Record that the step `out` ran: computed tokens move forward and their full blocks enter the prefix
    /// cache. Sampled tokens are then added with [`Scheduler::append_token`].
    pub fn complete_step(&mut self, out: &SchedulerOutput, kv: &mut KvCacheManager) -> Result<()> {
        for planned in &out.seqs {
            let seq = self
                .running
                .iter_mut()
                .find(|s| s.id == planned.id)
                .ok_or(EngineError::UnknownRequest(planned.id))?;
            seq.num_computed_tokens = planned.start + planned.num_tokens;
            kv.commit_computed(seq.id, &seq.tokens, seq.num_computed_tokens)?;
        }
        Ok(())
    }

    /// Append a sampled token to a running request.
    pub fn append_token(&mut self, id: RequestId, token: u32) -> Result<()> {
        let seq = self
            .running
            .iter_mut()
            .find(|s| s.id == id)
            .ok_or(EngineError::UnknownRequest(id))?;
        seq.tokens.push(token);
        Ok(())
    }

    /// Remove a request (finished or cancelled), freeing its blocks; returns its final state.
    pub fn finish(&mut self, id: RequestId, kv: &mut KvCacheManager) -> Result<Option<SeqState>> {
        kv.free(id)?;
        if let Some(i) = self.running.iter().position(|s| s.id == id) {
            return Ok(Some(self.running.remove(i)));
        }
        if let Some(i) = self.waiting.iter().position(|s| s.id == id) {
            return Ok(self.waiting.remove(i));
        }
        Ok(None)
    }
}
