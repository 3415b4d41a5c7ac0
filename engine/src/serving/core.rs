//! The serving engine's core loop: scheduler + KV cache manager + model + samplers, one step at a time.
//!
//! Each [`EngineCore::step`] asks the scheduler for a plan, turns it into one mixed batch (chunked prefill
//! and decode rows together), runs the model once, samples a token for every request that reached the end
//! of its known tokens, and reports tokens and endings as [`GenerationEvent`]s. The core is synchronous and
//! owned by one thread; [`super::EngineHandle`] puts it behind channels.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use super::config::EngineConfig;
use super::group_blocks::GroupBlocks;
use super::ranks::Followers;
use super::request::{FinishReason, GenerateRequest, GenerationEvent, Usage};
use super::stats::{EngineStats, PromptRead, attention_weight};
use super::tier_moves;
use crate::backend::{Backend, KvShape};
use crate::error::{EngineError, Result};
use crate::kv::manager::{
    CacheNamespace, CacheScope, KvCacheConfig, KvCacheManager, PrefixCacheStats, RequestId,
    SinkWindow,
};
use crate::kv::tiers::{KvTiers, TierSettings};
use crate::models::llama::{Llama, WorkspaceSize};
use crate::models::workspace::LlamaWorkspace;
use crate::models::{Batch, FREED_BLOCK, KvPool, LogitsMode, SeqInput};
use crate::sampling::{Pick, Sampler, StopStringMatcher, repetition};
use crate::scheduler::{ScheduledSeq, Scheduler, SchedulerConfig, SeqState};
use crate::text::{IncrementalDecoder, TextTokenizer};

/// Per-request state the core keeps beside the scheduler's.
struct Active {
    sampler: Sampler,
    decoder: IncrementalDecoder,
    stops: StopStringMatcher,
    eos: Vec<u32>,
    top_logprobs: usize,
    admitted: Instant,
    first_token: Option<Instant>,
}

/// The counters of an engine, its prefix cache and its decode graphs at one moment.
#[derive(Debug, Clone, Copy)]
pub(super) struct Counters {
    engine: EngineStats,
    prefix: PrefixCacheStats,
    graph_replays: u64,
}

impl Counters {
    /// These counters with the prefill steps' measure of `now` ([`EngineStats::keep_prefill_measure`]).
    pub(super) fn with_prefill_measure_of(mut self, now: &Counters) -> Counters {
        self.engine.keep_prefill_measure(&now.engine);
        self
    }
}

/// A model, its KV cache and its scheduler, stepped by the caller.
pub struct EngineCore<B: Backend> {
    /// The model, or rank 0 of a tensor-parallel group (the rank whose logits are sampled).
    model: Llama<B>,
    /// Ranks 1.. of a tensor-parallel group (None for a whole model).
    followers: Option<Followers>,
    tokenizer: TextTokenizer,
    kv_pool: KvPool<B>,
    ws: LlamaWorkspace<B>,
    kv: KvCacheManager,
    scheduler: Scheduler,
    active: HashMap<RequestId, Active>,
    logits: Vec<f32>,
    next_id: RequestId,
    stats: EngineStats,
}

impl<B: Backend> Drop for EngineCore<B> {
    /// An engine dropped while its thread unwinds from a panic may leave its other ranks inside a
    /// collective of the pass it was running; stopping the group lets them go before they are joined.
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.model.stop_group("rank 0 panicked");
        }
    }
}

impl<B: Backend> EngineCore<B> {
    /// An engine over `model`, with a KV cache sized by `cfg.kv_cache` (after the workspace, so a
    /// budget by device share counts it).
    pub fn new(model: Llama<B>, tokenizer: TextTokenizer, cfg: &EngineConfig) -> Result<Self>
    where
        B: 'static,
    {
        Self::with_ranks(vec![model], tokenizer, cfg)
    }

    /// An engine over the ranks of a tensor-parallel group, rank 0 first (each loaded with
    /// [`Llama::load_part`] on its own device), or over one whole model. Rank 0 runs in the engine's
    /// thread; the others each get a thread, a KV pool with the same blocks as rank 0's (sized by
    /// rank 0's device) and a workspace, and run every step with it.
    pub fn with_ranks(
        ranks: Vec<Llama<B>>,
        tokenizer: TextTokenizer,
        cfg: &EngineConfig,
    ) -> Result<Self>
    where
        B: 'static,
    {
        let (model, others) = super::ranks::leader_and_others(ranks, "an engine")?;
        let mc = model.part_config();
        let size = WorkspaceSize {
            max_num_batched_tokens: cfg.max_num_batched_tokens,
            max_num_seqs: cfg.max_num_seqs,
            // A window of up to the context, plus the chunk computed beside it and partial blocks.
            max_blocks_per_seq: (model.max_context() + cfg.max_num_batched_tokens)
                .div_ceil(cfg.block_size)
                + 2,
            max_logit_rows: cfg.max_num_seqs,
        };
        let ws = model.workspace(size)?;
        let kv_bytes = cfg.kv_cache.bytes(model.backend.memory_info()?)?;
        let num_blocks = cfg.num_kv_blocks(mc, kv_bytes);
        if num_blocks == 0 {
            return Err(EngineError::InvalidConfig(format!(
                "a KV budget of {kv_bytes} bytes holds no block of {} bytes",
                cfg.kv_block_bytes(mc)
            )));
        }
        let kv = KvCacheManager::new(KvCacheConfig {
            block_size: cfg.block_size,
            num_blocks,
            enable_prefix_caching: cfg.enable_prefix_caching,
            cache_salt: cfg.cache_salt(&model.config, model.shard().world),
        })?;
        let shape = KvShape {
            num_blocks,
            block_size: cfg.block_size,
            num_kv_heads: mc.num_key_value_heads,
            head_dim: mc.head_dim,
            dtype: cfg.kv_dtype,
        };
        let scheduler = Scheduler::new(SchedulerConfig {
            max_num_batched_tokens: cfg.max_num_batched_tokens,
            max_num_seqs: cfg.max_num_seqs,
            max_waiting: cfg.max_waiting,
        })?;
        let kv_pool = KvPool::new(&model.backend, mc.num_hidden_layers, shape)?;
        let followers = match others.is_empty() {
            true => None,
            false => Some(Followers::spawn(others, shape, size)?),
        };
        let logits = vec![0.0; cfg.max_num_seqs * model.config.vocab_size];
        let stats = EngineStats {
            total_blocks: num_blocks,
            attention_weight: attention_weight(&model.config),
            step_tokens: cfg.max_num_batched_tokens,
            ..EngineStats::default()
        };
        Ok(EngineCore {
            model,
            followers,
            tokenizer,
            kv_pool,
            ws,
            kv,
            scheduler,
            active: HashMap::new(),
            logits,
            next_id: 1,
            stats,
        })
    }

    /// Puts host-memory and disk tiers behind the KV pool ([`crate::kv::tiers`]): cached blocks the
    /// pool evicts are copied down instead of lost, and found there by later requests. The disk tier's
    /// directory may hold blocks from an earlier run, which are found again by the same model.
    ///
    /// Over a tensor-parallel group a block's record holds every rank's share of it
    /// ([`super::group_blocks`]).
    pub fn attach_tiers(&mut self, settings: &TierSettings) -> Result<()> {
        if settings.enabled() {
            let mut tiers = KvTiers::open(settings)?;
            let backend = &self.model.backend;
            tiers.use_host_memory(
                self.kv_block_bytes(),
                backend.host_allocator(),
                backend.host_memory_is_pinned(),
            );
            self.kv.attach_tiers(tiers);
        }
        Ok(())
    }

    /// How many of a document's first tokens the lower KV tiers can keep at once, when there are tiers:
    /// a dense read's KV past them is not copied down ([`KvCacheManager::blocks_lower_tiers_keep`]).
    pub fn tokens_lower_tiers_keep(&self) -> Option<usize> {
        self.kv
            .blocks_lower_tiers_keep()
            .map(|blocks| blocks * self.kv.config().block_size)
    }

    /// Copies every cached KV block down to the lower tiers and the host tier's blocks on to disk, so
    /// an engine started later on the same disk tier finds them (a graceful shutdown); returns how
    /// many blocks the disk tier then holds (0 without one).
    pub fn persist_kv(&mut self) -> Result<usize> {
        self.kv.offload_all_cached();
        // Only offloads are queued outside a step: no request can be waiting on a reload.
        self.move_blocks()?;
        self.kv.persist_host_tier();
        Ok(self.kv.tier_stats().map_or(0, |s| s.disk_blocks as usize))
    }

    /// Whether copies to the lower tiers are pending: blocks computed and not copied down yet
    /// (write-through), or blocks the disk writer has not written yet.
    pub fn copies_pending(&self) -> bool {
        self.kv.copies_pending()
    }

    /// Between requests, under write-through: copies down blocks computed earlier that the copies
    /// during the steps did not reach, as far as the tiers have room now; returns whether copies are
    /// still pending ([`EngineCore::copies_pending`]).
    pub fn copy_down_while_idle(&mut self) -> Result<bool> {
        let (queued, waiting) = self
            .kv
            .copy_down_idle(tier_moves::copies_per_step(self.kv_block_bytes()));
        if queued > 0 {
            // Only offloads are queued outside a step: no request can be waiting on a reload.
            self.move_blocks()?;
        }
        Ok(waiting)
    }

    /// Waits up to `timeout` until the host memory of the KV tiers is all allocated (pinned on CUDA;
    /// done in the background from [`EngineCore::attach_tiers`] on); whether it is.
    pub fn wait_for_kv_host_memory(&self, timeout: std::time::Duration) -> bool {
        self.kv.wait_for_tier_memory(timeout)
    }

    /// Waits until every KV block queued for the disk tier is written.
    pub fn flush_kv_tiers(&self) {
        self.kv.flush_tiers();
    }

    /// Bytes of one KV block over all layers and, over a tensor-parallel group, all ranks (what a
    /// lower tier stores per block).
    pub fn kv_block_bytes(&self) -> usize {
        self.model.shard().world * self.kv_pool.block_bytes()
    }

    /// The tokenizer the engine detokenises with.
    pub fn tokenizer(&self) -> &TextTokenizer {
        &self.tokenizer
    }

    /// The model's context window.
    pub fn max_context(&self) -> usize {
        self.model.max_context()
    }

    /// Queue a request; fails at once when the prompt is empty or too long (dense) or its sink window
    /// does not fit the model's context, when it could never fit in the KV cache, or when the queue is
    /// full.
    pub fn add_request(&mut self, req: GenerateRequest) -> Result<RequestId> {
        let max = self.max_context();
        if req.prompt.is_empty() {
            return Err(EngineError::InvalidBatch("the prompt is empty".into()));
        }
        let max_new = match req.cache_scope.sink_window {
            Some(w) => {
                self.check_window(&w)?;
                req.params.max_tokens
            }
            None if req.prompt.len() >= max => {
                return Err(EngineError::ContextTooLong {
                    len: req.prompt.len(),
                    max,
                });
            }
            None => req.params.max_tokens.min(max - req.prompt.len()),
        };
        let id = self.next_id;
        let mut seq = SeqState::new(id, req.prompt, max_new);
        seq.cache_scope = req.cache_scope;
        self.scheduler.add(seq, &self.kv)?;
        self.next_id += 1;
        let mut eos = self.tokenizer.eos_token_ids().to_vec();
        eos.extend(&req.params.stop_token_ids);
        self.active.insert(
            id,
            Active {
                sampler: Sampler::new(&req.params),
                decoder: IncrementalDecoder::default(),
                stops: StopStringMatcher::new(&req.params.stop_strings),
                eos,
                top_logprobs: req.top_logprobs,
                admitted: Instant::now(),
                first_token: None,
            },
        );
        Ok(id)
    }

    /// Carries out the copies between the pool (every rank's) and the lower tiers that the KV cache
    /// manager queued ([`tier_moves::move_blocks`]).
    fn move_blocks(&mut self) -> Result<Vec<RequestId>> {
        let mut group = GroupBlocks {
            pool: &mut self.kv_pool,
            backend: &self.model.backend,
            followers: self.followers.as_ref(),
        };
        tier_moves::move_blocks(&mut self.kv, &mut group)
    }

    /// A sink window must fit the model's context (so no distance exceeds what it was trained on) and hold
    /// at least one KV block.
    fn check_window(&self, w: &SinkWindow) -> Result<()> {
        if w.dense_prefix() > self.max_context() {
            return Err(EngineError::ContextTooLong {
                len: w.dense_prefix(),
                max: self.max_context(),
            });
        }
        self.kv.check_window(w)
    }

    /// Whether any request is queued or running.
    pub fn has_work(&self) -> bool {
        self.scheduler.has_work()
    }

    /// Cancel a request, freeing its blocks; returns its final event, or None if it is unknown.
    pub fn abort(&mut self, id: RequestId) -> Result<Option<GenerationEvent>> {
        if !self.active.contains_key(&id) {
            return Ok(None);
        }
        self.finish(id, FinishReason::Cancelled).map(Some)
    }

    /// Why the engine's tensor-parallel group stopped (a rank's pass failed), once it has: every
    /// later step would fail, so the engine should stop.
    pub fn group_stopped(&self) -> Option<String> {
        self.model.group_stopped()
    }

    /// Run one step; returns each request's events of this step, in batch order. Each step logs where
    /// its host time went at debug level (`RUST_LOG=docqa_engine::serving=debug`, event "engine step"):
    /// scheduling, the tier moves, building the batch, the forward pass (on CUDA: issuing its kernels,
    /// unless an op waits on the device), and the picks (waiting for the device, then sampling).
    pub fn step(&mut self) -> Result<Vec<(RequestId, GenerationEvent)>> {
        let entered = std::time::Instant::now();
        let record_bytes = self.kv_block_bytes();
        self.kv
            .copy_down_fresh(tier_moves::copies_per_step(record_bytes));
        self.kv
            .offload_above_high_water(tier_moves::offload_blocks_per_step(record_bytes));
        let mut plan = self.scheduler.schedule(&mut self.kv)?;
        let scheduled = std::time::Instant::now();
        let again = self.move_blocks()?;
        self.scheduler
            .admit_again(&again, &mut plan, &mut self.kv)?;
        self.stats.preemptions += plan.preempted.len() as u64;
        if plan.seqs.is_empty() {
            return Ok(Vec::new());
        }
        let started = std::time::Instant::now();
        let batch = Arc::new(self.build_batch(&plan.seqs)?);
        let built = started.elapsed();
        let recording = self.ws.graphs.failed.is_none();
        if let Some(followers) = &self.followers {
            followers.start(&batch)?;
        }
        let led = self.model.forward(&batch, &mut self.kv_pool, &mut self.ws);
        let followed = self.followers.as_ref().map_or(Ok(()), Followers::finish);
        let rows = led.and_then(|rows| followed.map(|()| rows))?;
        let forwarded = started.elapsed();
        if let (true, Some(why)) = (recording, &self.ws.graphs.failed) {
            tracing::warn!(%why, "recording decode steps into graphs failed; they run op by op");
        }
        let picked = self.pick_where_logits_are(&plan.seqs, rows)?;
        if picked.is_none() {
            let vocab = self.model.config.vocab_size;
            self.model
                .backend
                .read(&self.ws.logits, &mut self.logits[..rows * vocab])?;
        }
        let took = started.elapsed();
        tracing::debug!(
            tokens = batch.num_tokens(),
            seqs = plan.seqs.len(),
            schedule_us = (scheduled - entered).as_micros() as u64,
            tiers_us = (started - scheduled).as_micros() as u64,
            build_us = built.as_micros() as u64,
            forward_us = (forwarded - built).as_micros() as u64,
            picks_us = (took - forwarded).as_micros() as u64,
            "engine step"
        );
        self.count_step(&plan.seqs, batch.num_tokens(), took);
        self.scheduler.complete_step(&plan, &mut self.kv)?;
        self.stats.steps += 1;
        self.stats.computed_tokens += batch.num_tokens() as u64;
        let mut events = Vec::new();
        for (row, planned) in plan.seqs.iter().enumerate() {
            if planned.samples {
                let token = picked.as_ref().map(|ids| ids[row]);
                self.sample_one(planned.id, row, token, &mut events)?;
            } else if let Some(seq) = self.scheduler.get(planned.id) {
                // A chunk of the prompt (not of a preempted request's recomputation, whose prompt
                // was read before).
                let total = seq.num_prompt_tokens;
                if seq.tokens.len() == total {
                    let computed = planned.start + planned.num_tokens;
                    events.push((planned.id, GenerationEvent::Progress { computed, total }));
                }
            }
        }
        Ok(events)
    }

    /// Adds a step's time to the prefill or the decode measure: a step that read any prompt chunk
    /// counts as prefill (with the keys its rows attended to), one that only decoded as decode.
    fn count_step(&mut self, seqs: &[ScheduledSeq], tokens: usize, took: std::time::Duration) {
        let micros = took.as_micros() as u64;
        if seqs.iter().any(|s| s.num_tokens > 1) {
            let reads: Vec<PromptRead> = seqs
                .iter()
                .map(|s| PromptRead {
                    cached: s.start,
                    tokens: s.num_tokens,
                    window: self
                        .scheduler
                        .get(s.id)
                        .and_then(|q| q.cache_scope.sink_window),
                })
                .collect();
            let keys = reads.iter().map(PromptRead::attended_keys).sum();
            let windowed = reads.iter().any(|r| r.window.is_some());
            self.stats
                .count_prefill_step(tokens as u64, keys, micros, windowed);
        } else {
            self.stats.decode_steps += 1;
            self.stats.decode_micros += micros;
        }
    }

    /// When no sampling row needs its logits on the host (no repetition penalty, no top
    /// log-probabilities), picks every row's token where the logits are
    /// ([`Backend::sample_rows`]) and returns the ids; otherwise `None`, and nothing is drawn.
    fn pick_where_logits_are(
        &mut self,
        seqs: &[ScheduledSeq],
        rows: usize,
    ) -> Result<Option<Vec<u32>>> {
        let sampling = seqs.iter().filter(|s| s.samples);
        let on_device = sampling.clone().all(|s| {
            self.active
                .get(&s.id)
                .is_some_and(|a| a.top_logprobs == 0 && a.sampler.picks_from_raw_logits())
        });
        if !on_device || rows != seqs.len() {
            return Ok(None);
        }
        let mut params = Vec::with_capacity(rows * 4);
        for s in seqs {
            let pick = match self.active.get_mut(&s.id) {
                Some(a) if s.samples => a.sampler.next_pick(),
                _ => Pick::GREEDY,
            };
            params.extend_from_slice(&pick.to_row());
        }
        let backend = &self.model.backend;
        backend.write(&mut self.ws.picks, &params)?;
        let vocab = self.model.config.vocab_size;
        backend.sample_rows(
            &self.ws.logits,
            &self.ws.picks,
            (rows, vocab),
            &mut self.ws.picked,
        )?;
        let mut ids = vec![0; rows];
        backend.read_ids(&self.ws.picked, &mut ids)?;
        Ok(Some(ids))
    }

    fn build_batch(&self, seqs: &[ScheduledSeq]) -> Result<Batch> {
        let mut tables = Vec::with_capacity(seqs.len());
        for s in seqs {
            let table = self
                .kv
                .block_table(s.id)
                .ok_or(EngineError::UnknownRequest(s.id))?;
            tables.push(
                table
                    .iter()
                    .map(|b| b.unwrap_or(FREED_BLOCK))
                    .collect::<Vec<u32>>(),
            );
        }
        let mut inputs = Vec::with_capacity(seqs.len());
        for (s, blocks) in seqs.iter().zip(&tables) {
            let seq = self
                .scheduler
                .get(s.id)
                .ok_or(EngineError::UnknownRequest(s.id))?;
            inputs.push(SeqInput {
                tokens: &seq.tokens[s.start..s.start + s.num_tokens],
                num_computed_tokens: s.start,
                blocks,
                sink_window: seq.cache_scope.sink_window,
            });
        }
        Batch::build(
            &inputs,
            self.kv.config().block_size,
            LogitsMode::LastPerSequence,
        )
    }

    fn sample_one(
        &mut self,
        id: RequestId,
        row: usize,
        picked: Option<u32>,
        events: &mut Vec<(RequestId, GenerationEvent)>,
    ) -> Result<()> {
        let vocab = self.model.config.vocab_size;
        let seq = self
            .scheduler
            .get(id)
            .ok_or(EngineError::UnknownRequest(id))?;
        let (generated, max_new, len, streaming) = (
            seq.tokens.len() - seq.num_prompt_tokens,
            seq.max_new_tokens,
            seq.tokens.len(),
            seq.cache_scope.sink_window.is_some(),
        );
        let active = self
            .active
            .get_mut(&id)
            .ok_or(EngineError::UnknownRequest(id))?;
        let (token, top_logprobs) = match picked {
            Some(token) => (token, Vec::new()),
            None => {
                let logits = &mut self.logits[row * vocab..(row + 1) * vocab];
                let top = top_log_probabilities(logits, active.top_logprobs);
                (active.sampler.sample(logits, &seq.tokens), top)
            }
        };
        active.first_token.get_or_insert_with(Instant::now);
        if active.eos.contains(&token) {
            let ev = self.finish(id, FinishReason::Stop)?;
            events.push((id, ev));
            return Ok(());
        }
        self.scheduler.append_token(id, token)?;
        let piece = active
            .decoder
            .push(&self.tokenizer, token)?
            .unwrap_or_default();
        let scan = active.stops.push(&piece);
        events.push((
            id,
            GenerationEvent::Token {
                id: token,
                text: scan.emit,
                top_logprobs,
            },
        ));
        let looping = active.sampler.params().stop_on_repetition
            && self.scheduler.get(id).is_some_and(|s| {
                repetition::repeating_block(&s.tokens[s.num_prompt_tokens..]).is_some()
            });
        let done = if scan.stopped {
            Some(FinishReason::Stop)
        } else if looping {
            Some(FinishReason::Loop)
        } else if generated + 1 >= max_new || (!streaming && len + 1 >= self.max_context()) {
            Some(FinishReason::Length)
        } else {
            None
        };
        if let Some(reason) = done {
            let ev = self.finish(id, reason)?;
            events.push((id, ev));
        }
        Ok(())
    }

    fn finish(&mut self, id: RequestId, reason: FinishReason) -> Result<GenerationEvent> {
        let seq = self.scheduler.finish(id, &mut self.kv)?;
        let mut active = self
            .active
            .remove(&id)
            .ok_or(EngineError::UnknownRequest(id))?;
        let now = Instant::now();
        let usage = seq.map(|s| Usage {
            prompt_tokens: s.num_prompt_tokens,
            cached_prompt_tokens: s.num_cached_tokens,
            completion_tokens: s.tokens.len() - s.num_prompt_tokens,
            preemptions: s.num_preemptions,
            time_to_first_token: active.first_token.unwrap_or(now) - active.admitted,
            total_time: now - active.admitted,
        });
        let usage = usage.unwrap_or_default();
        self.stats.finished_requests += 1;
        self.stats.cached_tokens += usage.cached_prompt_tokens as u64;
        let text = if reason == FinishReason::Cancelled {
            String::new()
        } else {
            active.stops.finish()
        };
        Ok(GenerationEvent::Finished {
            reason,
            text,
            usage,
        })
    }

    /// Tokens at the start of `prompt` that a request of `scope` would find in the prefix cache now.
    pub fn cached_prefix_len(&self, prompt: &[u32], scope: CacheScope) -> usize {
        self.kv.cached_prefix_len(prompt, scope)
    }

    /// Drops `scope`'s cached KV of `tokens`' full blocks; returns how many blocks were forgotten.
    pub fn forget_prefix(&mut self, tokens: &[u32], scope: CacheScope) -> usize {
        self.kv.forget_prefix(tokens, scope)
    }

    /// Drops every cached KV block of `namespace`; returns how many blocks were forgotten.
    pub fn forget_namespace(&mut self, namespace: CacheNamespace) -> usize {
        self.kv.forget_namespace(namespace)
    }

    /// The engine's counters, for work that should leave them as it found them
    /// ([`Self::warm_up`]).
    pub(super) fn counters(&self) -> Counters {
        Counters {
            engine: self.stats,
            prefix: self.kv.prefix_stats(),
            graph_replays: self.ws.graphs.replays,
        }
    }

    /// Sets the engine's counters back to `saved`.
    pub(super) fn restore_counters(&mut self, saved: Counters) {
        self.stats = saved.engine;
        self.kv.restore_prefix_stats(saved.prefix);
        self.ws.graphs.replays = saved.graph_replays;
    }

    /// Prompt tokens one step computes at most.
    pub(super) fn step_tokens(&self) -> usize {
        self.scheduler.config().max_num_batched_tokens
    }

    /// Tokens the KV pool holds.
    pub(super) fn kv_capacity_tokens(&self) -> usize {
        self.kv.pool().num_blocks() * self.kv.config().block_size
    }

    /// The model's vocabulary size.
    pub(super) fn vocab_size(&self) -> usize {
        self.model.config.vocab_size
    }

    /// Counters and gauges of the engine now.
    pub fn stats(&self) -> EngineStats {
        let prefix = self.kv.prefix_stats();
        EngineStats {
            used_blocks: self.kv.pool().num_used(),
            free_blocks: self.kv.pool().num_free(),
            running: self.scheduler.num_running(),
            waiting: self.scheduler.num_waiting(),
            prefix_queried_tokens: prefix.queried_tokens,
            prefix_hit_tokens: prefix.hit_tokens,
            graph_replays: self.ws.graphs.replays,
            tiers: self.kv.tier_stats().unwrap_or_default(),
            tiers_attached: self.kv.tier_stats().is_some(),
            ..self.stats
        }
    }
}

/// The `k` largest log-softmax values of `logits`, most likely first.
fn top_log_probabilities(logits: &[f32], k: usize) -> Vec<(u32, f32)> {
    if k == 0 {
        return Vec::new();
    }
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let log_sum = logits
        .iter()
        .map(|&l| ((l - max) as f64).exp())
        .sum::<f64>()
        .ln() as f32
        + max;
    let mut idx: Vec<u32> = (0..logits.len() as u32).collect();
    let k = k.min(idx.len());
    let by_logit = |a: &u32, b: &u32| {
        logits[*b as usize]
            .total_cmp(&logits[*a as usize])
            .then(a.cmp(b))
    };
    idx.select_nth_unstable_by(k - 1, by_logit);
    idx.truncate(k);
    idx.sort_unstable_by(by_logit);
    idx.into_iter()
        .map(|i| (i, logits[i as usize] - log_sum))
        .collect()
}
