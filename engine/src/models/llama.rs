//! The Llama-family decoder (Llama 2/3, SmolLM2, Mistral, Qwen2 with q/k/v bias), generic over the
//! backend.
//!
//! Weights in HF layout and names (`model.layers.{i}.self_attn.q_proj.weight`, ...): RMSNorm, RoPE in
//! HF's half-split ("rotate_half") convention, grouped-query attention with causal masking over the
//! paged KV, SwiGLU MLP, tied or untied LM head. One forward pass takes a [`Batch`] of sequences of
//! different lengths, prefill and decode tokens mixed, and returns logits for the rows its
//! [`LogitsMode`] asks for.
//!
//! Sliding-window attention (Mistral, Qwen2 with `use_sliding_window`): on the layers the config marks,
//! a query at position `p` sees keys `p + 1 - window..=p`. A sequence longer than the window reads those
//! layers through the same window description as a sink window without sinks; its KV blocks stay
//! whole, so the other layers and a later question's cached prefix still have them.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use crate::adapter::Adapter;
use crate::backend::{
    AttnShape, AttnWeights, Backend, DecodeLayerWeights, DecodeLayers, PagedAttnMeta, RmsNormInto,
    RopeKvWrite, WindowedAttn,
};
use crate::config::{LlamaConfig, RopeFreqs, RopeScaling};
use crate::error::Result;
use crate::models::batch::WindowMeta;
use crate::models::graphs::GraphKey;
use crate::models::workspace::{LlamaWorkspace, write_changed};
use crate::models::{Batch, KvPool, Part, adapted_matrix, opt_vector_part, too_big, vector};
use crate::parallel::{Collective, Shard};
use crate::weights::Weights;

pub use crate::models::workspace::WorkspaceSize;

/// The weights of one decoder layer.
struct Layer<B: Backend> {
    input_norm: B::Weight,
    q: B::Weight,
    k: B::Weight,
    v: B::Weight,
    q_bias: Option<B::Weight>,
    k_bias: Option<B::Weight>,
    v_bias: Option<B::Weight>,
    o: B::Weight,
    post_norm: B::Weight,
    gate: B::Weight,
    up: B::Weight,
    down: B::Weight,
}

/// A Llama-family model on backend `B`.
pub struct Llama<B: Backend> {
    /// The backend the weights live on.
    pub backend: B,
    /// The model's configuration.
    pub config: LlamaConfig,
    /// The configuration of the part this rank holds: [`Llama::config`] with the rank's share of the
    /// heads, KV heads, MLP features and vocabulary (the same as it for a whole model).
    part: LlamaConfig,
    /// The other ranks of a tensor-parallel group, or None for a whole model.
    group: Option<Arc<dyn Collective<B>>>,
    /// The embedding (and tied LM head): this rank's rows of the vocabulary ([`Shard::part`]).
    embed: B::Weight,
    layers: Vec<Layer<B>>,
    norm: B::Weight,
    lm_head: Option<B::Weight>,
    freqs: RopeFreqs,
    /// Longest span attention may cover: the trained context unless [`Llama::extend_context`] changed it.
    max_context: usize,
}

impl<B: Backend> Llama<B> {
    /// Loads `config.json` and the safetensors weights of the HF-style directory `dir`.
    pub fn load(backend: B, dir: &Path) -> Result<Self> {
        Self::load_with(backend, dir, None)
    }

    /// [`Llama::load`] with a LoRA adapter merged into the projections as they are uploaded (checked
    /// against them first, so a misfit adapter fails before anything is uploaded).
    pub fn load_with(backend: B, dir: &Path, adapter: Option<&Adapter>) -> Result<Self> {
        Self::load_part(backend, dir, adapter, None)
    }

    /// [`Llama::load_with`] for one rank of a tensor-parallel `group` (None: the whole model): the
    /// rank uploads only its part of each matrix (see [`crate::parallel::Shard`]) and joins the other
    /// ranks through the group in every forward pass.
    pub fn load_part(
        backend: B,
        dir: &Path,
        adapter: Option<&Adapter>,
        group: Option<Arc<dyn Collective<B>>>,
    ) -> Result<Self> {
        let config = LlamaConfig::load(&dir.join("config.json"))?;
        let shard = group.as_ref().map_or(Shard::WHOLE, |g| g.shard());
        shard.check(&config)?;
        if let Some(adapter) = adapter {
            adapter.check_targets(&projection_shapes(&config))?;
        }
        let weights = Weights::open_dir(dir)?;
        let (h, v) = (config.hidden_size, config.vocab_size);
        let layers = (0..config.num_hidden_layers)
            .map(|i| load_layer(&backend, &weights, &config, i, (adapter, shard)))
            .collect::<Result<_>>()?;
        let vocab = Part::rows(shard, v);
        let table = |name| adapted_matrix(&backend, &weights, (name, [v, h]), None, vocab.clone());
        let lm_head = match config.tie_word_embeddings {
            true => None,
            false => Some(table("lm_head.weight")?),
        };
        Ok(Llama {
            embed: table("model.embed_tokens.weight")?,
            norm: vector(&backend, &weights, "model.norm.weight", h)?,
            freqs: config.rope_freqs(0),
            max_context: config.context_window(),
            part: shard.config(&config),
            group,
            layers,
            lm_head,
            config,
            backend,
        })
    }

    /// The configuration of the part of the model this rank holds (heads, KV heads, MLP features and
    /// vocabulary divided over a tensor-parallel group; the whole configuration otherwise): what its KV
    /// pool is shaped by.
    pub fn part_config(&self) -> &LlamaConfig {
        &self.part
    }

    /// Lets attention span `max_context` tokens with positions encoded by `scaling` (linear interpolation,
    /// NTK-aware dynamic scaling, YaRN, or plain RoPE to extrapolate), for experiments past the trained
    /// context; `config.max_position_embeddings` stays the trained context the scalings refer to.
    pub fn extend_context(&mut self, scaling: RopeScaling, max_context: usize) {
        self.config.rope_scaling = scaling;
        self.freqs = self.config.rope_freqs(0);
        self.max_context = max_context;
    }

    /// Longest span attention may cover (dense sequence length, or sinks + window).
    pub fn max_context(&self) -> usize {
        self.max_context
    }

    /// Buffers for forward passes of up to `size`.
    pub fn workspace(&self, size: WorkspaceSize) -> Result<LlamaWorkspace<B>> {
        let group = self.group.as_ref().map(|g| g.shard().world);
        LlamaWorkspace::new(&self.backend, &self.part, size, group)
    }

    /// This rank's place in its tensor-parallel group.
    pub fn shard(&self) -> Shard {
        self.group.as_ref().map_or(Shard::WHOLE, |g| g.shard())
    }

    /// Stops this rank's tensor-parallel group (nothing for a whole model): the other ranks' passes
    /// fail with `why` instead of waiting for this one.
    pub fn stop_group(&self, why: &str) {
        if let Some(group) = &self.group {
            group.abort(why);
        }
    }

    /// Why this rank's tensor-parallel group stopped, once it has (never for a whole model).
    pub fn group_stopped(&self) -> Option<String> {
        self.group.as_ref().and_then(|g| g.stopped())
    }

    /// Runs one forward pass: writes the new tokens' K/V into `kv` and leaves `rows × vocab` logits in
    /// `ws.logits`, one row per position the batch's [`crate::models::LogitsMode`] selects. Returns `rows`.
    ///
    /// On a backend that records graphs, a decode step (one token per sequence, dense attention, fixed
    /// RoPE) replays a recorded graph when one fits (see [`crate::models::graphs`]). A rank of a
    /// tensor-parallel group whose pass fails stops the group, so the others fail too, not wait.
    pub fn forward(
        &self,
        batch: &Batch,
        kv: &mut KvPool<B>,
        ws: &mut LlamaWorkspace<B>,
    ) -> Result<usize> {
        let rows = self.forward_pass(batch, kv, ws);
        if let Err(e) = &rows {
            self.stop_group(&format!("rank {} failed: {e}", self.shard().rank));
        }
        rows
    }

    fn forward_pass(
        &self,
        batch: &Batch,
        kv: &mut KvPool<B>,
        ws: &mut LlamaWorkspace<B>,
    ) -> Result<usize> {
        let cfg = &self.config;
        batch.validate(
            kv.shape.num_blocks,
            kv.shape.block_size,
            self.max_context,
            cfg.vocab_size,
        )?;
        check_capacity(batch, ws.size)?;
        let sliding = self.sliding_windows(batch);
        let dynamic_rope = matches!(cfg.rope_scaling, RopeScaling::Dynamic { .. });
        let replayable = !dynamic_rope
            && sliding.is_none()
            && self.backend.records_graphs()
            && ws.graphs.failed.is_none();
        if let Some(key) = GraphKey::of(batch, ws.size.max_blocks_per_seq).filter(|_| replayable) {
            return self.forward_recorded(batch, key, kv, ws);
        }
        let rows = self.upload_batch(batch, &batch.block_table, ws)?;
        if let Some(windows) = &sliding {
            self.backend
                .write_ids(&mut ws.sliding_windows, windows.as_flattened())?;
        }
        let dims = StepDims {
            tokens: batch.num_tokens(),
            seqs: batch.num_seqs(),
            blocks_per_seq: batch.max_blocks_per_seq,
            max_seq_len: batch.max_seq_len(),
            windowed: batch.has_windows(),
            sliding: sliding.is_some(),
            logit_rows: rows,
        };
        let freqs = match dynamic_rope {
            true => &cfg.rope_freqs(batch.max_seq_len()),
            false => &self.freqs,
        };
        self.compute(&dims, freqs, kv, ws)?;
        Ok(rows)
    }

    /// A decode step at a graph key: uploads the inputs with the block table padded to the key's
    /// width, then replays the recorded graph, or runs op by op and records it for the next step.
    fn forward_recorded(
        &self,
        batch: &Batch,
        key: GraphKey,
        kv: &mut KvPool<B>,
        ws: &mut LlamaWorkspace<B>,
    ) -> Result<usize> {
        let mut table = std::mem::take(&mut ws.host_table);
        key.pad_block_table(batch, &mut table);
        let uploaded = self.upload_batch(batch, &table, ws);
        ws.host_table = table;
        let rows = uploaded?;
        let b = &self.backend;
        if let Some(graph) = ws.graphs.get(key, kv.id, b.graph_epoch()) {
            b.replay(graph)?;
            ws.graphs.replays += 1;
            return Ok(rows);
        }
        let dims = StepDims {
            tokens: key.seqs,
            seqs: key.seqs,
            blocks_per_seq: key.blocks,
            max_seq_len: key.blocks * kv.shape.block_size,
            windowed: false,
            sliding: false,
            logit_rows: rows,
        };
        self.compute(&dims, &self.freqs, kv, ws)?;
        self.record(key, &dims, kv, ws);
        Ok(rows)
    }

    /// The window descriptions the sliding-window layers read in this batch, or None when they attend
    /// like the others (no sliding window, or no sequence longer than it). A sequence streaming through
    /// a sink window keeps its own description.
    fn sliding_windows(&self, batch: &Batch) -> Option<Vec<WindowMeta>> {
        let window = self.config.sliding_window?;
        let dense = |s: usize| batch.windows[s] == [0; 3];
        let longer = |s: usize| batch.seq_lens[s] as usize > window;
        if !(0..batch.num_seqs()).any(|s| dense(s) && longer(s)) {
            return None;
        }
        let slide = [0, window as u32, 0];
        Some(
            (0..batch.num_seqs())
                .map(|s| match dense(s) && longer(s) {
                    true => slide,
                    false => batch.windows[s],
                })
                .collect(),
        )
    }

    /// Records the step just run, so the next step with the same key replays it. Recording launches
    /// nothing; a failure switches recording off for this workspace and says why in `ws.graphs`.
    fn record(
        &self,
        key: GraphKey,
        dims: &StepDims,
        kv: &mut KvPool<B>,
        ws: &mut LlamaWorkspace<B>,
    ) {
        let b = &self.backend;
        let epoch = b.graph_epoch();
        let recorded = b.begin_capture().and_then(|()| {
            let ran = self.compute(dims, &self.freqs, kv, ws);
            let graph = b.end_capture();
            ran.and(graph)
        });
        match recorded {
            Ok(graph) if b.graph_epoch() == epoch => ws.graphs.insert(key, kv.id, epoch, graph),
            Ok(_) => {} // a scratch buffer was replaced meanwhile: record at the next step
            Err(e) => ws.graphs.failed = Some(e.to_string()),
        }
    }

    /// Copies the batch's index arrays (with `block_table` as the table) and the logit rows to the
    /// device; returns the number of logit rows.
    fn upload_batch(
        &self,
        batch: &Batch,
        block_table: &[u32],
        ws: &mut LlamaWorkspace<B>,
    ) -> Result<usize> {
        let b = &self.backend;
        b.write_ids(&mut ws.ids, &batch.token_ids)?;
        b.write_ids(&mut ws.positions, &batch.positions)?;
        let [qsl, table, logit_rows] = &mut ws.sent;
        write_changed(b, &mut ws.query_start_loc, qsl, &batch.query_start_loc)?;
        b.write_ids(&mut ws.seq_lens, &batch.seq_lens)?;
        write_changed(b, &mut ws.block_table, table, block_table)?;
        b.write_ids(&mut ws.slots, &batch.slot_mapping)?;
        if batch.has_windows() {
            b.write_ids(&mut ws.sink_positions, &batch.sink_positions)?;
            b.write_ids(&mut ws.windows, batch.windows.as_flattened())?;
        }
        let mut rows = std::mem::take(&mut ws.host_rows);
        rows.clear();
        rows.extend(batch.logit_rows());
        let n = rows.len();
        let written = match n > ws.size.max_logit_rows {
            true => Err(too_big("logit rows", n, ws.size.max_logit_rows)),
            false => write_changed(b, &mut ws.logit_rows, logit_rows, &rows),
        };
        ws.host_rows = rows;
        written.map(|()| n)
    }

    /// The device work of a pass whose inputs are uploaded: embedding, layers, LM head.
    fn compute(
        &self,
        dims: &StepDims,
        freqs: &RopeFreqs,
        kv: &mut KvPool<B>,
        ws: &mut LlamaWorkspace<B>,
    ) -> Result<()> {
        let (b, n) = (&self.backend, dims.tokens);
        let first = self.shard().part(self.config.vocab_size).start as u32;
        b.embedding(&self.embed, &ws.ids, n, first, &mut ws.x)?;
        self.sum_over_ranks(&mut ws.x, n)?;
        b.rope_table(&ws.positions, freqs, n, &mut ws.rope)?;
        if dims.windowed {
            b.rope_table(&ws.sink_positions, freqs, n, &mut ws.rope_sinks)?;
        }
        if !self.decode_layers_at_once(dims, kv, ws)? {
            for (i, layer) in self.layers.iter().enumerate() {
                self.attention_block(layer, dims, kv, i, ws)?;
                self.mlp_block(layer, n, ws)?;
            }
        }
        self.lm_head(dims.logit_rows, dims.tokens, ws)
    }

    /// Runs every layer of a step of one token of one sequence (dense attention, a whole model, no
    /// q/k/v biases) in one launch where the backend can ([`Backend::decode_layers`]); false where
    /// the layers are to run op by op.
    fn decode_layers_at_once(
        &self,
        dims: &StepDims,
        kv: &mut KvPool<B>,
        ws: &mut LlamaWorkspace<B>,
    ) -> Result<bool> {
        let biased = |l: &Layer<B>| l.q_bias.is_some() || l.k_bias.is_some() || l.v_bias.is_some();
        let one_token = dims.tokens == 1 && dims.seqs == 1 && !dims.windowed && !dims.sliding;
        if !self.backend.runs_decode_layers() || !one_token || self.group.is_some() {
            return Ok(false);
        }
        if self.layers.iter().any(biased) {
            return Ok(false);
        }
        let meta = dense_meta(dims, (&ws.query_start_loc, &ws.seq_lens, &ws.block_table));
        let layers = self
            .layers
            .iter()
            .map(|l| DecodeLayerWeights {
                norms: [&l.input_norm, &l.post_norm],
                qkv: [&l.q, &l.k, &l.v],
                o: &l.o,
                mlp: [&l.gate, &l.up, &l.down],
            })
            .collect();
        let step = DecodeLayers {
            layers,
            caches: (&kv.k, &kv.v),
            eps: self.part.rms_norm_eps,
            rope: &ws.rope,
            slot_mapping: &ws.slots,
            attn: (&meta, self.attn_shape()),
            bufs: [&mut ws.q, &mut ws.attn, &mut ws.act],
        };
        self.backend.decode_layers(&mut ws.x, step)
    }

    /// This part's attention heads and scale.
    fn attn_shape(&self) -> AttnShape {
        let cfg = &self.part;
        AttnShape {
            num_heads: cfg.num_attention_heads,
            num_kv_heads: cfg.num_key_value_heads,
            head_dim: cfg.head_dim,
            scale: 1.0 / (cfg.head_dim as f32).sqrt(),
        }
    }

    fn attention_block(
        &self,
        l: &Layer<B>,
        dims: &StepDims,
        kv: &mut KvPool<B>,
        i: usize,
        ws: &mut LlamaWorkspace<B>,
    ) -> Result<()> {
        let (b, cfg, n) = (&self.backend, &self.part, dims.tokens);
        let qkv = (
            [&l.q, &l.k, &l.v],
            [l.q_bias.as_ref(), l.k_bias.as_ref(), l.v_bias.as_ref()],
        );
        let (heads, kv_heads, hd) = (
            cfg.num_attention_heads,
            cfg.num_key_value_heads,
            cfg.head_dim,
        );
        if dims.windowed {
            // The sinks' queries are rotated from the products before RoPE at the rows' positions.
            let norm = RmsNormInto {
                weight: &l.input_norm,
                eps: cfg.rms_norm_eps,
                out: &mut ws.h,
            };
            b.matmul3(&ws.x, Some(norm), qkv, n, [&mut ws.q, &mut ws.k, &mut ws.v])?;
            b.copy(&ws.q, n * heads * hd, &mut ws.q_sinks)?;
            b.rope(&mut ws.q_sinks, &ws.rope_sinks, n, heads, hd)?;
            b.rope_kv_write(
                (&mut ws.q, &mut ws.k, &ws.v),
                &ws.rope,
                &ws.slots,
                (n, heads, kv_heads, hd),
                (&mut kv.k[i], &mut kv.v[i]),
            )?;
        }
        let mut meta = dense_meta(dims, (&ws.query_start_loc, &ws.seq_lens, &ws.block_table));
        meta.windows = match (dims.sliding && cfg.sliding_layers[i], dims.windowed) {
            (true, _) => Some(&ws.sliding_windows),
            (false, true) => Some(&ws.windows),
            (false, false) => None,
        }
        .map(|windows| WindowedAttn {
            windows,
            q_sinks: &ws.q_sinks,
        });
        let shape = self.attn_shape();
        if dims.windowed {
            b.paged_attention(&ws.q, &kv.k[i], &kv.v[i], &meta, shape, &mut ws.attn)?;
            match self.adds_residual() {
                true => b.matmul_add(&ws.attn, &l.o, (n, cfg.hidden_size), &mut ws.h, &mut ws.x)?,
                false => b.matmul(&ws.attn, &l.o, None, n, &mut ws.x)?,
            }
        } else {
            let weights = AttnWeights {
                norm: (&l.input_norm, cfg.rms_norm_eps),
                qkv,
                o: &l.o,
                hidden: cfg.hidden_size,
                adds_residual: self.adds_residual(),
            };
            let rope = RopeKvWrite {
                table: &ws.rope,
                slot_mapping: &ws.slots,
                heads: (heads, kv_heads, hd),
                caches: (&mut kv.k[i], &mut kv.v[i]),
            };
            let bufs = (&mut ws.h, [&mut ws.q, &mut ws.k, &mut ws.v], &mut ws.attn);
            b.attention_sublayer(&mut ws.x, weights, rope, (&meta, shape), bufs)?;
        }
        self.sum_over_ranks(&mut ws.x, n)
    }

    fn mlp_block(&self, l: &Layer<B>, n: usize, ws: &mut LlamaWorkspace<B>) -> Result<()> {
        let (b, cfg) = (&self.backend, &self.part);
        if self.adds_residual() {
            b.swiglu_mlp(
                &mut ws.x,
                Some((&l.post_norm, cfg.rms_norm_eps)),
                (&l.gate, &l.up, &l.down),
                (n, cfg.intermediate_size, cfg.hidden_size),
                (&mut ws.gate, &mut ws.up, &mut ws.act, &mut ws.h),
            )?;
        } else {
            let norm = RmsNormInto {
                weight: &l.post_norm,
                eps: cfg.rms_norm_eps,
                out: &mut ws.h,
            };
            b.gated_matmul(
                &ws.x,
                Some(norm),
                (&l.gate, &l.up),
                (n, cfg.intermediate_size),
                (&mut ws.gate, &mut ws.up),
                &mut ws.act,
            )?;
            b.matmul(&ws.act, &l.down, None, n, &mut ws.x)?;
        }
        self.sum_over_ranks(&mut ws.x, n)
    }

    /// Whether this rank adds the row-parallel products onto the residual stream `x`. Rank 0 of a
    /// group does (as a whole model does); the others write their partial products over `x`, so that
    /// the sum over the ranks is the residual plus every rank's part.
    fn adds_residual(&self) -> bool {
        self.shard().rank == 0
    }

    /// Sums the `[tokens, hidden]` residual stream over the ranks of a tensor-parallel group (nothing
    /// to do for a whole model).
    fn sum_over_ranks(&self, x: &mut B::Buf, tokens: usize) -> Result<()> {
        match &self.group {
            Some(g) => g.all_reduce_sum(&self.backend, x, tokens * self.config.hidden_size),
            None => Ok(()),
        }
    }

    /// Final norm and LM head on the `rows` uploaded logit rows only (when every token gets logits,
    /// the rows are all of them in order and need no gathering).
    fn lm_head(&self, rows: usize, tokens: usize, ws: &mut LlamaWorkspace<B>) -> Result<()> {
        let (b, cfg) = (&self.backend, &self.config);
        let last = if rows == tokens {
            &ws.x
        } else {
            b.gather_rows(&ws.x, &ws.logit_rows, rows, cfg.hidden_size, &mut ws.last)?;
            &ws.last
        };
        b.rms_norm(last, &self.norm, cfg.rms_norm_eps, rows, &mut ws.last_norm)?;
        let head = self.lm_head.as_ref().unwrap_or(&self.embed);
        let (Some(group), Some(parts)) = (&self.group, &mut ws.vocab_parts) else {
            return b.matmul(&ws.last_norm, head, None, rows, &mut ws.logits);
        };
        b.matmul(&ws.last_norm, head, None, rows, &mut parts.part)?;
        let dims = (rows, self.part.vocab_size);
        group.all_gather_cols(b, &parts.part, dims, &mut parts.stacked, &mut ws.logits)
    }
}

/// The paged-attention description of a pass's batch without windows, over its query starts,
/// sequence lengths and block table.
fn dense_meta<'a, B: Backend>(
    dims: &StepDims,
    (query_start_loc, seq_lens, block_table): (&'a B::Ids, &'a B::Ids, &'a B::Ids),
) -> PagedAttnMeta<'a, B> {
    PagedAttnMeta {
        query_start_loc,
        seq_lens,
        block_table,
        max_blocks_per_seq: dims.blocks_per_seq,
        num_seqs: dims.seqs,
        num_tokens: dims.tokens,
        max_seq_len: dims.max_seq_len,
        windows: None,
    }
}

/// The sizes one pass's kernels are launched with (a recorded step's are its graph key's).
struct StepDims {
    tokens: usize,
    seqs: usize,
    blocks_per_seq: usize,
    max_seq_len: usize,
    windowed: bool,
    /// Whether the sliding-window layers read `ws.sliding_windows`.
    sliding: bool,
    logit_rows: usize,
}

/// Fails when the batch exceeds the workspace's capacities.
fn check_capacity(batch: &Batch, cap: WorkspaceSize) -> Result<()> {
    let (n, s) = (batch.num_tokens(), batch.num_seqs());
    if n > cap.max_num_batched_tokens {
        return Err(too_big("tokens", n, cap.max_num_batched_tokens));
    }
    if s > cap.max_num_seqs {
        return Err(too_big("sequences", s, cap.max_num_seqs));
    }
    if batch.max_blocks_per_seq > cap.max_blocks_per_seq {
        return Err(too_big(
            "blocks per sequence",
            batch.max_blocks_per_seq,
            cap.max_blocks_per_seq,
        ));
    }
    Ok(())
}

/// Layer `i`'s projection matrices: name and `[out, in]` shape, in the order q, k, v, o, gate, up, down.
fn projections(cfg: &LlamaConfig, i: usize) -> [(String, [usize; 2]); 7] {
    let (h, f) = (cfg.hidden_size, cfg.intermediate_size);
    let (qd, kvd) = (
        cfg.num_attention_heads * cfg.head_dim,
        cfg.num_key_value_heads * cfg.head_dim,
    );
    let p = format!("model.layers.{i}");
    [
        (format!("{p}.self_attn.q_proj.weight"), [qd, h]),
        (format!("{p}.self_attn.k_proj.weight"), [kvd, h]),
        (format!("{p}.self_attn.v_proj.weight"), [kvd, h]),
        (format!("{p}.self_attn.o_proj.weight"), [h, qd]),
        (format!("{p}.mlp.gate_proj.weight"), [f, h]),
        (format!("{p}.mlp.up_proj.weight"), [f, h]),
        (format!("{p}.mlp.down_proj.weight"), [h, f]),
    ]
}

/// Every projection of the model and its shape: what an adapter may adapt.
fn projection_shapes(cfg: &LlamaConfig) -> HashMap<String, [usize; 2]> {
    (0..cfg.num_hidden_layers)
        .flat_map(|i| projections(cfg, i))
        .collect()
}

fn load_layer<B: Backend>(
    b: &B,
    w: &Weights,
    cfg: &LlamaConfig,
    i: usize,
    (adapter, shard): (Option<&Adapter>, Shard),
) -> Result<Layer<B>> {
    let p = format!("model.layers.{i}");
    let (h, qd, kvd, f) = (
        cfg.hidden_size,
        cfg.num_attention_heads * cfg.head_dim,
        cfg.num_key_value_heads * cfg.head_dim,
        cfg.intermediate_size,
    );
    let proj = projections(cfg, i);
    let (rows, cols) = (|n| Part::rows(shard, n), |n| Part::cols(shard, n));
    let m = |j: usize, part| adapted_matrix(b, w, (&proj[j].0, proj[j].1), adapter, part);
    let bias = |name: &str, n| {
        opt_vector_part(
            b,
            w,
            (&format!("{p}.self_attn.{name}.bias"), n),
            shard.part(n),
        )
    };
    Ok(Layer {
        input_norm: vector(b, w, &format!("{p}.input_layernorm.weight"), h)?,
        q: m(0, rows(qd))?,
        k: m(1, rows(kvd))?,
        v: m(2, rows(kvd))?,
        q_bias: bias("q_proj", qd)?,
        k_bias: bias("k_proj", kvd)?,
        v_bias: bias("v_proj", kvd)?,
        o: m(3, cols(qd))?,
        post_norm: vector(b, w, &format!("{p}.post_attention_layernorm.weight"), h)?,
        gate: m(4, rows(f))?,
        up: m(5, rows(f))?,
        down: m(6, cols(f))?,
    })
}
