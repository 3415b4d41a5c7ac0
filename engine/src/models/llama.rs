//! The Llama-family decoder (Llama 2/3, SmolLM2, Mistral, Qwen2 with q/k/v bias), generic over the
//! backend.
//!
//! Weights in HF layout and names (`model.layers.{i}.self_attn.q_proj.weight`, ...): RMSNorm, RoPE in
//! HF's half-split ("rotate_half") convention, grouped-query attention with causal masking over the
//! paged KV, SwiGLU MLP, tied or untied LM head. One forward pass takes a [`Batch`] of sequences of
//! different lengths, prefill and decode tokens mixed, and returns logits for the rows its
//! [`LogitsMode`] asks for.

use std::path::Path;

use crate::backend::{AttnShape, Backend, PagedAttnMeta, WindowedAttn};
use crate::config::{LlamaConfig, RopeFreqs, RopeScaling};
use crate::error::Result;
use crate::models::workspace::LlamaWorkspace;
use crate::models::{Batch, KvPool, matrix, opt_vector, too_big, vector};
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
        let config = LlamaConfig::load(&dir.join("config.json"))?;
        let weights = Weights::open_dir(dir)?;
        let (h, v) = (config.hidden_size, config.vocab_size);
        let layers = (0..config.num_hidden_layers)
            .map(|i| load_layer(&backend, &weights, &config, i))
            .collect::<Result<_>>()?;
        let lm_head = match config.tie_word_embeddings {
            true => None,
            false => Some(matrix(&backend, &weights, "lm_head.weight", [v, h])?),
        };
        Ok(Llama {
            embed: matrix(&backend, &weights, "model.embed_tokens.weight", [v, h])?,
            norm: vector(&backend, &weights, "model.norm.weight", h)?,
            freqs: config.rope_freqs(0),
            max_context: config.max_position_embeddings,
            layers,
            lm_head,
            config,
            backend,
        })
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
        LlamaWorkspace::new(&self.backend, &self.config, size)
    }

    /// Runs one forward pass: writes the new tokens' K/V into `kv` and leaves `rows × vocab` logits in
    /// `ws.logits`, one row per position the batch's [`crate::models::LogitsMode`] selects. Returns `rows`.
    pub fn forward(
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
        let n = self.upload_batch(batch, ws)?;
        let b = &self.backend;
        b.embedding(&self.embed, &ws.ids, n, &mut ws.x)?;
        let dynamic_freqs;
        let freqs = match cfg.rope_scaling {
            RopeScaling::Dynamic { .. } => {
                dynamic_freqs = cfg.rope_freqs(batch.max_seq_len());
                &dynamic_freqs
            }
            _ => &self.freqs,
        };
        b.rope_table(&ws.positions, freqs, n, &mut ws.rope)?;
        if batch.has_windows() {
            b.rope_table(&ws.sink_positions, freqs, n, &mut ws.rope_sinks)?;
        }
        for (i, layer) in self.layers.iter().enumerate() {
            self.attention_block(layer, batch, n, kv, i, ws)?;
            self.mlp_block(layer, n, ws)?;
        }
        self.lm_head(batch, ws)
    }

    /// Copies the batch's index arrays to the device; returns the token count.
    fn upload_batch(&self, batch: &Batch, ws: &mut LlamaWorkspace<B>) -> Result<usize> {
        let (n, s, cap) = (batch.num_tokens(), batch.num_seqs(), ws.size);
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
        let b = &self.backend;
        b.write_ids(&mut ws.ids, &batch.token_ids)?;
        b.write_ids(&mut ws.positions, &batch.positions)?;
        b.write_ids(&mut ws.query_start_loc, &batch.query_start_loc)?;
        b.write_ids(&mut ws.seq_lens, &batch.seq_lens)?;
        b.write_ids(&mut ws.block_table, &batch.block_table)?;
        b.write_ids(&mut ws.slots, &batch.slot_mapping)?;
        if batch.has_windows() {
            b.write_ids(&mut ws.sink_positions, &batch.sink_positions)?;
            b.write_ids(&mut ws.windows, batch.windows.as_flattened())?;
        }
        Ok(n)
    }

    fn attention_block(
        &self,
        l: &Layer<B>,
        batch: &Batch,
        n: usize,
        kv: &mut KvPool<B>,
        i: usize,
        ws: &mut LlamaWorkspace<B>,
    ) -> Result<()> {
        let (b, cfg) = (&self.backend, &self.config);
        b.rms_norm(&ws.x, &l.input_norm, cfg.rms_norm_eps, n, &mut ws.h)?;
        b.matmul(&ws.h, &l.q, l.q_bias.as_ref(), n, &mut ws.q)?;
        b.matmul(&ws.h, &l.k, l.k_bias.as_ref(), n, &mut ws.k)?;
        b.matmul(&ws.h, &l.v, l.v_bias.as_ref(), n, &mut ws.v)?;
        let windowed = batch.has_windows();
        if windowed {
            let width = n * cfg.num_attention_heads * cfg.head_dim;
            b.copy(&ws.q, width, &mut ws.q_sinks)?;
            b.rope(
                &mut ws.q_sinks,
                &ws.rope_sinks,
                n,
                cfg.num_attention_heads,
                cfg.head_dim,
            )?;
        }
        b.rope(
            &mut ws.q,
            &ws.rope,
            n,
            cfg.num_attention_heads,
            cfg.head_dim,
        )?;
        b.rope(
            &mut ws.k,
            &ws.rope,
            n,
            cfg.num_key_value_heads,
            cfg.head_dim,
        )?;
        b.kv_write(&ws.k, &ws.v, &ws.slots, n, &mut kv.k[i], &mut kv.v[i])?;
        let meta = PagedAttnMeta {
            query_start_loc: &ws.query_start_loc,
            seq_lens: &ws.seq_lens,
            block_table: &ws.block_table,
            max_blocks_per_seq: batch.max_blocks_per_seq,
            num_seqs: batch.num_seqs(),
            num_tokens: n,
            max_seq_len: batch.max_seq_len(),
            windows: windowed.then_some(WindowedAttn {
                windows: &ws.windows,
                q_sinks: &ws.q_sinks,
            }),
        };
        let shape = AttnShape {
            num_heads: cfg.num_attention_heads,
            num_kv_heads: cfg.num_key_value_heads,
            head_dim: cfg.head_dim,
            scale: 1.0 / (cfg.head_dim as f32).sqrt(),
        };
        b.paged_attention(&ws.q, &kv.k[i], &kv.v[i], &meta, shape, &mut ws.attn)?;
        b.matmul(&ws.attn, &l.o, None, n, &mut ws.h)?;
        b.add(&mut ws.x, &ws.h, n * cfg.hidden_size)
    }

    fn mlp_block(&self, l: &Layer<B>, n: usize, ws: &mut LlamaWorkspace<B>) -> Result<()> {
        let (b, cfg) = (&self.backend, &self.config);
        b.rms_norm(&ws.x, &l.post_norm, cfg.rms_norm_eps, n, &mut ws.h)?;
        b.matmul(&ws.h, &l.gate, None, n, &mut ws.gate)?;
        b.matmul(&ws.h, &l.up, None, n, &mut ws.up)?;
        b.silu_mul(&ws.gate, &ws.up, n * cfg.intermediate_size, &mut ws.act)?;
        b.matmul(&ws.act, &l.down, None, n, &mut ws.h)?;
        b.add(&mut ws.x, &ws.h, n * cfg.hidden_size)
    }

    /// Final norm and LM head on the selected rows only.
    fn lm_head(&self, batch: &Batch, ws: &mut LlamaWorkspace<B>) -> Result<usize> {
        let (b, cfg) = (&self.backend, &self.config);
        let mut rows = std::mem::take(&mut ws.host_rows);
        rows.clear();
        rows.extend(batch.logit_rows());
        if rows.len() > ws.size.max_logit_rows {
            return Err(too_big("logit rows", rows.len(), ws.size.max_logit_rows));
        }
        b.write_ids(&mut ws.logit_rows, &rows)?;
        let n = rows.len();
        ws.host_rows = rows;
        let rows = &ws.host_rows[..n];
        b.gather_rows(
            &ws.x,
            &ws.logit_rows,
            rows.len(),
            cfg.hidden_size,
            &mut ws.last,
        )?;
        b.rms_norm(
            &ws.last,
            &self.norm,
            cfg.rms_norm_eps,
            rows.len(),
            &mut ws.last_norm,
        )?;
        let head = self.lm_head.as_ref().unwrap_or(&self.embed);
        b.matmul(&ws.last_norm, head, None, rows.len(), &mut ws.logits)?;
        Ok(rows.len())
    }
}

fn load_layer<B: Backend>(b: &B, w: &Weights, cfg: &LlamaConfig, i: usize) -> Result<Layer<B>> {
    let p = format!("model.layers.{i}");
    let (h, f) = (cfg.hidden_size, cfg.intermediate_size);
    let (qd, kvd) = (
        cfg.num_attention_heads * cfg.head_dim,
        cfg.num_key_value_heads * cfg.head_dim,
    );
    Ok(Layer {
        input_norm: vector(b, w, &format!("{p}.input_layernorm.weight"), h)?,
        q: matrix(b, w, &format!("{p}.self_attn.q_proj.weight"), [qd, h])?,
        k: matrix(b, w, &format!("{p}.self_attn.k_proj.weight"), [kvd, h])?,
        v: matrix(b, w, &format!("{p}.self_attn.v_proj.weight"), [kvd, h])?,
        q_bias: opt_vector(b, w, &format!("{p}.self_attn.q_proj.bias"), qd)?,
        k_bias: opt_vector(b, w, &format!("{p}.self_attn.k_proj.bias"), kvd)?,
        v_bias: opt_vector(b, w, &format!("{p}.self_attn.v_proj.bias"), kvd)?,
        o: matrix(b, w, &format!("{p}.self_attn.o_proj.weight"), [h, qd])?,
        post_norm: vector(b, w, &format!("{p}.post_attention_layernorm.weight"), h)?,
        gate: matrix(b, w, &format!("{p}.mlp.gate_proj.weight"), [f, h])?,
        up: matrix(b, w, &format!("{p}.mlp.up_proj.weight"), [f, h])?,
        down: matrix(b, w, &format!("{p}.mlp.down_proj.weight"), [h, f])?,
    })
}
