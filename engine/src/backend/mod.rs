//! The backend trait: the narrow set of ops a decoder (or encoder) step needs.
//!
//! Every op writes into caller-owned outputs, so a model preallocates its workspace once (sized by
//! `max_num_batched_tokens`) and a forward pass allocates nothing. Buffers, index arrays, weights and
//! KV pools are the backend's associated types, so a device backend keeps them in device memory; models
//! are generic over the backend (`Model<B: Backend>`, static dispatch). The CPU backend ([`cpu`]) is the
//! reference every other backend is checked against, op by op and end to end.
//!
//! Conventions: activations are row-major `[rows, width]` f32; weight matrices are `[out, in]` as in HF
//! checkpoints, so `matmul` computes `x · Wᵀ`; a KV pool holds one layer's K (or V) as
//! `[num_blocks, block_size, num_kv_heads, head_dim]`, and `slot_mapping[t] = block * block_size + offset`.

pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
mod decode_layers;
pub mod unfused;

pub use decode_layers::{DecodeLayerWeights, DecodeLayers};

use crate::config::RopeFreqs;
use crate::error::Result;
use crate::weights::TensorRef;

/// Element type of the KV cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KvDtype {
    /// f32 keys and values (exact).
    #[default]
    F32,
    /// bf16 keys and values (half the memory).
    Bf16,
    /// int8 keys and values with one f32 scale per (token, head) (CPU backend): `head_dim + 4` bytes per
    /// (token, head), against `2 · head_dim` for bf16.
    Int8,
}

impl KvDtype {
    /// Bytes one (token, head) of K (or V) takes in a pool of this type.
    pub fn bytes_per_head(self, head_dim: usize) -> usize {
        match self {
            KvDtype::F32 => 4 * head_dim,
            KvDtype::Bf16 => 2 * head_dim,
            KvDtype::Int8 => head_dim + 4,
        }
    }
}

/// Shape of one layer's K (or V) pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvShape {
    /// Blocks in the pool.
    pub num_blocks: usize,
    /// Tokens per block.
    pub block_size: usize,
    /// KV heads.
    pub num_kv_heads: usize,
    /// Width of one head.
    pub head_dim: usize,
    /// Element type.
    pub dtype: KvDtype,
}

impl KvShape {
    /// Bytes of one block of such a pool as [`Backend::read_kv_blocks`] lays it out: its elements,
    /// then (int8) its scales.
    pub fn block_bytes(&self) -> usize {
        self.block_size * self.num_kv_heads * self.dtype.bytes_per_head(self.head_dim)
    }

    /// Checks a block transfer over `pools` pools of this shape: every block exists and has one host
    /// record of that many blocks' bytes.
    pub(crate) fn check_block_transfer(
        &self,
        blocks: &[u32],
        mut records: impl ExactSizeIterator<Item = usize>,
        pools: usize,
    ) -> Result<()> {
        let record = pools * self.block_bytes();
        if records.len() != blocks.len() || !records.all(|r| r == record) {
            return Err(crate::EngineError::InvalidBatch(format!(
                "{} KV blocks need as many host records of {record} bytes",
                blocks.len()
            )));
        }
        if let Some(b) = blocks.iter().find(|&&b| b as usize >= self.num_blocks) {
            return Err(crate::EngineError::InvalidBatch(format!(
                "KV block {b} is outside a pool of {} blocks",
                self.num_blocks
            )));
        }
        Ok(())
    }
}

/// The one shape of the pools a block transfer covers, after checking the transfer
/// ([`KvShape::check_block_transfer`]); None when there are no pools.
pub(crate) fn pools_transfer_shape(
    shapes: impl IntoIterator<Item = KvShape>,
    blocks: &[u32],
    records: impl ExactSizeIterator<Item = usize>,
) -> Result<Option<KvShape>> {
    let shapes: Vec<KvShape> = shapes.into_iter().collect();
    let Some(&first) = shapes.first() else {
        return Ok(None);
    };
    if shapes.iter().any(|s| *s != first) {
        return Err(crate::EngineError::InvalidBatch(
            "KV pools of different shapes cannot share block records".into(),
        ));
    }
    first.check_block_transfer(blocks, records, shapes.len())?;
    Ok(Some(first))
}

/// Head layout of an attention call.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttnShape {
    /// Query heads.
    pub num_heads: usize,
    /// Key/value heads; `num_heads` is a multiple of it (GQA).
    pub num_kv_heads: usize,
    /// Width of one head.
    pub head_dim: usize,
    /// Score scale, usually `1 / sqrt(head_dim)`.
    pub scale: f32,
}

/// The varlen batch description of a paged attention call (vLLM's `CommonAttentionMetadata`).
pub struct PagedAttnMeta<'a, B: Backend> {
    /// `[num_seqs + 1]`: sequence `s` owns query rows `query_start_loc[s]..query_start_loc[s + 1]`.
    pub query_start_loc: &'a B::Ids,
    /// `[num_seqs]`: tokens in each sequence's context, the new ones included.
    pub seq_lens: &'a B::Ids,
    /// `[num_seqs, max_blocks_per_seq]`: block ids holding each sequence's context, in order.
    pub block_table: &'a B::Ids,
    /// Row width of `block_table`.
    pub max_blocks_per_seq: usize,
    /// Sequences in the batch.
    pub num_seqs: usize,
    /// Query rows in the batch.
    pub num_tokens: usize,
    /// Longest context in the batch (launch sizing on devices).
    pub max_seq_len: usize,
    /// Sink windows, when any sequence of the batch streams through one.
    pub windows: Option<WindowedAttn<'a, B>>,
}

/// The sink-window part of a paged attention call (StreamingLLM).
///
/// Sequence `s` reads `windows[3 s..3 s + 3] = [num_sink_tokens, window, block_offset]` (all 0: dense), as
/// [`crate::models::WindowMeta`] describes. A query at position `p` under a window sees the sink keys
/// `0..num_sink_tokens` and the keys `p + 1 - window..=p`; it scores the recent keys with its row of `q`
/// and the sink keys with its row of `q_sinks`, the same query rotated to the position it has within
/// the cache, so no distance exceeds `num_sink_tokens + window`.
pub struct WindowedAttn<'a, B: Backend> {
    /// `[num_seqs * 3]` window descriptions.
    pub windows: &'a B::Ids,
    /// `[num_tokens, num_heads * head_dim]` queries rotated to their positions within the cache.
    pub q_sinks: &'a B::Buf,
}

/// The gate, up and down weights of a SwiGLU MLP.
pub type SwigluWeights<'a, B> = (
    &'a <B as Backend>::Weight,
    &'a <B as Backend>::Weight,
    &'a <B as Backend>::Weight,
);

/// The buffers of a SwiGLU MLP's steps: gate, up, their silu·mul, and a hidden-wide scratch.
pub type SwigluBuffers<'a, B> = (
    &'a mut <B as Backend>::Buf,
    &'a mut <B as Backend>::Buf,
    &'a mut <B as Backend>::Buf,
    &'a mut <B as Backend>::Buf,
);

/// An RMSNorm to apply to a product's input first: its weight and epsilon, and the buffer the
/// normalised rows go to where the backend does not fuse the norm into the product.
pub struct RmsNormInto<'a, B: Backend> {
    /// The norm's weight vector.
    pub weight: &'a B::Weight,
    /// Its epsilon.
    pub eps: f32,
    /// Where the normalised rows are written when not fused.
    pub out: &'a mut B::Buf,
}

/// RoPE and the KV write that follow attention's q/k/v products ([`Backend::rope_kv_write`]), for
/// [`Backend::matmul3_rope_kv_write`]: the rows' cos/sin table, their pool slots, the heads, and the
/// layer's pools.
pub struct RopeKvWrite<'a, B: Backend> {
    /// `[rows, head_dim]`: cos in the first half, sin in the second ([`Backend::rope_table`]).
    pub table: &'a B::Buf,
    /// `[rows]`: each row's pool slot.
    pub slot_mapping: &'a B::Ids,
    /// Query heads, KV heads, head dimension.
    pub heads: (usize, usize, usize),
    /// The layer's K and V pools.
    pub caches: (&'a mut B::Kv, &'a mut B::Kv),
}

/// The weights of a decoder layer's attention sublayer, for [`Backend::attention_sublayer`].
pub struct AttnWeights<'a, B: Backend> {
    /// The input RMSNorm's weight and epsilon.
    pub norm: (&'a B::Weight, f32),
    /// The q, k and v projections and their biases.
    pub qkv: ([&'a B::Weight; 3], [Option<&'a B::Weight>; 3]),
    /// The output projection `[hidden, heads · head_dim]`.
    pub o: &'a B::Weight,
    /// The residual stream's width.
    pub hidden: usize,
    /// Whether the output product is added onto `x` (a whole model, or a tensor-parallel group's
    /// first rank) or written over it (the group's other ranks).
    pub adds_residual: bool,
}

/// The buffers of an attention sublayer's steps, where the backend runs them one by one: the
/// normalised input (hidden-wide, then the output product's scratch), q, k, v and attention's
/// output.
pub type AttnBuffers<'a, B> = (
    &'a mut <B as Backend>::Buf,
    [&'a mut <B as Backend>::Buf; 3],
    &'a mut <B as Backend>::Buf,
);

impl<B: Backend> RopeKvWrite<'_, B> {
    /// The same write, borrowing this one's pools for a shorter while (to try a fused path and keep
    /// the pools for the fallback, or for the attention that reads them next).
    pub fn reborrow(&mut self) -> RopeKvWrite<'_, B> {
        RopeKvWrite {
            table: self.table,
            slot_mapping: self.slot_mapping,
            heads: self.heads,
            caches: (&mut *self.caches.0, &mut *self.caches.1),
        }
    }
}

fn no_graphs(backend: &str) -> crate::error::EngineError {
    crate::error::EngineError::Internal(format!("the {backend} backend records no graphs"))
}

/// The narrow set of ops a model step needs. See the module docs for conventions.
pub trait Backend: Send + Sync + Sized {
    /// An f32 buffer in the backend's memory.
    type Buf: Send + Sync;
    /// A u32 index buffer (token ids, positions, slot mapping, block tables).
    type Ids: Send + Sync;
    /// A weight: a matrix `[out, in]` or a vector (`rows == 1`).
    type Weight: Send + Sync;
    /// One layer's K (or V) pool.
    type Kv: Send + Sync;
    /// A recorded sequence of ops replayed with one call (a CUDA graph); `()` where there is none.
    type Graph: Send;

    /// Whether [`Backend::begin_capture`] records: the backend can, and recording is switched on.
    fn records_graphs(&self) -> bool {
        false
    }
    /// Starts recording the ops issued from now on instead of running them. Only called when
    /// [`Backend::records_graphs`] says so; every call is followed by [`Backend::end_capture`].
    fn begin_capture(&self) -> Result<()> {
        Err(no_graphs(self.name()))
    }
    /// Ends the recording begun by [`Backend::begin_capture`] and returns it, ready to replay.
    fn end_capture(&self) -> Result<Self::Graph> {
        Err(no_graphs(self.name()))
    }
    /// Runs a recorded graph: the same ops on the current contents of the buffers it was recorded with.
    fn replay(&self, graph: &Self::Graph) -> Result<()> {
        let _ = graph;
        Err(no_graphs(self.name()))
    }
    /// Changes whenever the backend replaces an internal buffer a recorded graph may point at (a
    /// scratch buffer that grew); a graph recorded under another epoch must not be replayed.
    fn graph_epoch(&self) -> u64 {
        0
    }

    /// `(free, total)` bytes of the device's memory, where the backend owns a device of its own (CUDA);
    /// None on the CPU, whose memory the process shares with everything else.
    fn memory_info(&self) -> Result<Option<(usize, usize)>> {
        Ok(None)
    }

    /// A short name for logs.
    fn name(&self) -> &'static str;
    /// A zeroed f32 buffer of `len` elements.
    fn alloc(&self, len: usize) -> Result<Self::Buf>;
    /// A zeroed index buffer of `len` elements.
    fn alloc_ids(&self, len: usize) -> Result<Self::Ids>;
    /// A zeroed KV pool.
    fn alloc_kv(&self, shape: KvShape) -> Result<Self::Kv>;
    /// Uploads a matrix `[out, in]`, keeping bf16 weights in bf16.
    fn upload_matrix(&self, t: &TensorRef<'_>) -> Result<Self::Weight>;
    /// Uploads a vector (norm weights, biases) as f32.
    fn upload_vector(&self, t: &TensorRef<'_>) -> Result<Self::Weight>;
    /// Copies host data into the front of `dst`.
    fn write(&self, dst: &mut Self::Buf, src: &[f32]) -> Result<()>;
    /// Copies host indices into the front of `dst`.
    fn write_ids(&self, dst: &mut Self::Ids, src: &[u32]) -> Result<()>;
    /// Copies the front of `src` to the host.
    fn read(&self, src: &Self::Buf, dst: &mut [f32]) -> Result<()>;
    /// Copies the first `n` elements of `src` to the front of `dst`.
    fn copy(&self, src: &Self::Buf, n: usize, dst: &mut Self::Buf) -> Result<()>;

    /// `out[t] = table[ids[t] - first]` for `rows` ids, a zero row where `ids[t]` is not among the
    /// table's rows `first..first + table rows` (a tensor-parallel rank's part of the vocabulary;
    /// `first` is 0 for a whole table).
    fn embedding(
        &self,
        table: &Self::Weight,
        ids: &Self::Ids,
        rows: usize,
        first: u32,
        out: &mut Self::Buf,
    ) -> Result<()>;
    /// Copies rows `idx[0..rows]` of `x` (width `width`) to the front of `out`.
    fn gather_rows(
        &self,
        x: &Self::Buf,
        idx: &Self::Ids,
        rows: usize,
        width: usize,
        out: &mut Self::Buf,
    ) -> Result<()>;
    /// RMSNorm of each row: `x / sqrt(mean(x²) + eps) * w`.
    fn rms_norm(
        &self,
        x: &Self::Buf,
        w: &Self::Weight,
        eps: f32,
        rows: usize,
        out: &mut Self::Buf,
    ) -> Result<()>;
    /// LayerNorm of each row: `(x - mean) / sqrt(var + eps) * w + b`.
    fn layer_norm(
        &self,
        x: &Self::Buf,
        w: &Self::Weight,
        b: &Self::Weight,
        eps: f32,
        rows: usize,
        out: &mut Self::Buf,
    ) -> Result<()>;
    /// `out[rows, out_dim] = x[rows, in_dim] · wᵀ (+ bias)`.
    fn matmul(
        &self,
        x: &Self::Buf,
        w: &Self::Weight,
        bias: Option<&Self::Weight>,
        rows: usize,
        out: &mut Self::Buf,
    ) -> Result<()>;
    /// Fills `table[rows, head_dim]` with `mscale·cos(pos·f)` in the first half and `mscale·sin(pos·f)`
    /// in the second, for the inverse frequencies `freqs` and each row's position.
    fn rope_table(
        &self,
        positions: &Self::Ids,
        freqs: &RopeFreqs,
        rows: usize,
        table: &mut Self::Buf,
    ) -> Result<()>;
    /// Rotates every head of `x[rows, num_heads * head_dim]` in place, HF half-split ("rotate_half")
    /// convention, with a table from [`Backend::rope_table`].
    fn rope(
        &self,
        x: &mut Self::Buf,
        table: &Self::Buf,
        rows: usize,
        num_heads: usize,
        head_dim: usize,
    ) -> Result<()>;
    /// `out = silu(gate) * up` over `n` elements.
    fn silu_mul(
        &self,
        gate: &Self::Buf,
        up: &Self::Buf,
        n: usize,
        out: &mut Self::Buf,
    ) -> Result<()>;
    /// Exact (erf) GELU in place over `n` elements.
    fn gelu(&self, x: &mut Self::Buf, n: usize) -> Result<()>;
    /// `x += y` over `n` elements.
    fn add(&self, x: &mut Self::Buf, y: &Self::Buf, n: usize) -> Result<()>;

    /// `out[rows, width] += x · Wᵀ`: a projection added onto the residual stream. `scratch` holds the
    /// product where the backend does not fuse the add.
    fn matmul_add(
        &self,
        x: &Self::Buf,
        w: &Self::Weight,
        (rows, width): (usize, usize),
        scratch: &mut Self::Buf,
        out: &mut Self::Buf,
    ) -> Result<()> {
        unfused::matmul_add(self, (x, w), (rows, width), scratch, out)
    }

    /// `out[rows, width] = silu(x' · Gᵀ) ⊙ (x' · Uᵀ)`, the first half of a SwiGLU MLP, where `x'` is `x`
    /// or, with `norm`, `x` RMS-normalised (written to the norm's buffer where the backend does not
    /// fuse it). `gate` and `up` hold the two products where the backend does not fuse them.
    fn gated_matmul(
        &self,
        x: &Self::Buf,
        norm: Option<RmsNormInto<'_, Self>>,
        (gate_w, up_w): (&Self::Weight, &Self::Weight),
        (rows, width): (usize, usize),
        (gate, up): (&mut Self::Buf, &mut Self::Buf),
        out: &mut Self::Buf,
    ) -> Result<()> {
        let (ws, dims) = ((gate_w, up_w), (rows, width));
        unfused::gated_matmul(self, (x, norm), ws, dims, (gate, up), out)
    }

    /// A whole SwiGLU MLP added onto the residual stream `x [rows, hidden]`:
    /// `x += (silu(x' · Gᵀ) ⊙ (x' · Uᵀ)) · Dᵀ`, with `x'` being `x` or, with a norm (its weight and
    /// epsilon), `x` RMS-normalised. `gate`, `up`, `act` (`[rows, width]`) and `scratch`
    /// (`[rows, hidden]`: the normalised input, then the down product) hold the steps where the
    /// backend does not fuse them.
    fn swiglu_mlp(
        &self,
        x: &mut Self::Buf,
        norm: Option<(&Self::Weight, f32)>,
        weights: SwigluWeights<'_, Self>,
        dims: (usize, usize, usize),
        bufs: SwigluBuffers<'_, Self>,
    ) -> Result<()> {
        unfused::swiglu_mlp(self, (x, norm), weights, dims, bufs)
    }

    /// Three projections of one input (attention's q, k and v): `outs[i] = x' · W[i]ᵀ (+ bias[i])`,
    /// with `x'` as for [`Backend::gated_matmul`].
    fn matmul3(
        &self,
        x: &Self::Buf,
        norm: Option<RmsNormInto<'_, Self>>,
        (w, bias): ([&Self::Weight; 3], [Option<&Self::Weight>; 3]),
        rows: usize,
        outs: [&mut Self::Buf; 3],
    ) -> Result<()> {
        unfused::matmul3(self, (x, norm), (w, bias), rows, outs)
    }

    /// [`Backend::matmul3`] into `outs` (q, k, v), then [`Backend::rope_kv_write`] on them: what a
    /// decode layer does before its attention, fused into one launch where the backend can.
    fn matmul3_rope_kv_write(
        &self,
        x: &Self::Buf,
        norm: Option<RmsNormInto<'_, Self>>,
        weights: ([&Self::Weight; 3], [Option<&Self::Weight>; 3]),
        rows: usize,
        [q, k, v]: [&mut Self::Buf; 3],
        rope: RopeKvWrite<'_, Self>,
    ) -> Result<()> {
        self.matmul3(x, norm, weights, rows, [&mut *q, &mut *k, &mut *v])?;
        let (heads, kv_heads, head_dim) = rope.heads;
        self.rope_kv_write(
            (q, k, v),
            rope.table,
            rope.slot_mapping,
            (rows, heads, kv_heads, head_dim),
            rope.caches,
        )
    }

    /// Runs a decode step's layers for one token of one sequence in one launch, where the backend
    /// has such a kernel and `step` suits it; returns false, having done nothing, otherwise (the
    /// caller then runs the layers op by op).
    fn decode_layers(&self, _x: &mut Self::Buf, _step: DecodeLayers<'_, Self>) -> Result<bool> {
        Ok(false)
    }

    /// Whether [`Backend::decode_layers`] may take a step at all, so that a caller can skip
    /// gathering one where it never would.
    fn runs_decode_layers(&self) -> bool {
        false
    }

    /// A decoder layer's attention sublayer without sink windows: the norm and q/k/v products
    /// ([`Backend::matmul3_rope_kv_write`], whose K and V go to the pools), paged attention over
    /// `meta`'s batch, and the output product added onto `x` (or written over it). A backend may keep
    /// what passes between the steps in a narrower type than `bufs`, which then hold nothing the
    /// caller may read.
    fn attention_sublayer(
        &self,
        x: &mut Self::Buf,
        weights: AttnWeights<'_, Self>,
        rope: RopeKvWrite<'_, Self>,
        (meta, shape): (&PagedAttnMeta<'_, Self>, AttnShape),
        bufs: AttnBuffers<'_, Self>,
    ) -> Result<()> {
        unfused::attention_sublayer(self, x, weights, rope, (meta, shape), bufs)
    }

    /// `ids[r]` = the index of the largest logit of row `r` of `logits [rows, vocab]`, the first of
    /// equals (greedy decoding without reading the logits back).
    fn argmax_rows(
        &self,
        logits: &Self::Buf,
        (rows, vocab): (usize, usize),
        ids: &mut Self::Ids,
    ) -> Result<()> {
        let mut host = vec![0.0; rows * vocab];
        self.read(logits, &mut host)?;
        let picks: Vec<u32> = host
            .chunks(vocab.max(1))
            .map(crate::models::generate::argmax)
            .collect();
        self.write_ids(ids, &picks)
    }

    /// `ids[r]` = the token [`crate::sampling::pick_token`] picks from row `r` of `logits [rows, vocab]`
    /// with row `r` of `picks [rows, 4]` ([`crate::sampling::Pick::to_row`]: temperature, top-k,
    /// top-p, draw), so a sampled decode step reads back token ids, not logits. A backend picking on
    /// the device may differ from the host only where the draw or the top-p cut falls within
    /// rounding of a boundary between two tokens' shares.
    fn sample_rows(
        &self,
        logits: &Self::Buf,
        picks: &Self::Buf,
        (rows, vocab): (usize, usize),
        ids: &mut Self::Ids,
    ) -> Result<()> {
        let mut host = vec![0.0; rows * vocab];
        let mut params = vec![0.0; rows * 4];
        self.read(logits, &mut host)?;
        self.read(picks, &mut params)?;
        let mut scratch = Vec::new();
        let tokens: Vec<u32> = host
            .chunks(vocab.max(1))
            .zip(params.chunks(4))
            .map(|(row, p)| {
                crate::sampling::pick_token(row, &crate::sampling::Pick::from_row(p), &mut scratch)
            })
            .collect();
        self.write_ids(ids, &tokens)
    }

    /// RoPE on `q [rows, heads · head_dim]` and `k [rows, kv_heads · head_dim]` with the rows of
    /// `table`, then `k` and `v` written to the pool slots: [`Backend::rope`] twice and
    /// [`Backend::kv_write`], fused where the backend can.
    fn rope_kv_write(
        &self,
        (q, k, v): (&mut Self::Buf, &mut Self::Buf, &Self::Buf),
        table: &Self::Buf,
        slot_mapping: &Self::Ids,
        (rows, heads, kv_heads, head_dim): (usize, usize, usize, usize),
        (k_cache, v_cache): (&mut Self::Kv, &mut Self::Kv),
    ) -> Result<()> {
        unfused::rope_kv_write(
            self,
            (q, k, v),
            (table, slot_mapping),
            (rows, heads, kv_heads, head_dim),
            (k_cache, v_cache),
        )
    }

    /// Copies the front of an index buffer to the host.
    fn read_ids(&self, src: &Self::Ids, dst: &mut [u32]) -> Result<()>;
    /// Copies whole blocks of KV pools of one shape to host records: record `out[i]` is block
    /// `blocks[i]` of every pool in turn, [`KvShape::block_bytes`] bytes of each: its elements in the
    /// pool's layout then (int8) its scales, in native byte order. The copies may still be under way
    /// when this returns: the backend then marks each record with a fence
    /// ([`crate::kv::tiers::BlockBuf::written_by`]), which its readers wait for, and every later op on
    /// these pools waits for the copies before touching them.
    fn read_kv_blocks(
        &self,
        pools: &[&Self::Kv],
        blocks: &[u32],
        out: &mut [crate::kv::tiers::BlockBuf],
    ) -> Result<()>;
    /// Writes whole blocks of KV pools from host records, `src[i]` into block `blocks[i]` of every
    /// pool, laid out as [`Backend::read_kv_blocks`] reads them. The copies may still be under way when
    /// this returns (the backend keeps the records until they are done); every later op on these pools
    /// sees the blocks written.
    fn write_kv_blocks(
        &self,
        pools: &mut [&mut Self::Kv],
        blocks: &[u32],
        src: &[crate::kv::tiers::BlockBytes],
    ) -> Result<()>;
    /// Waits until at most `keep` of the [`Backend::write_kv_blocks`] calls made so far may still be
    /// reading their records, and lets the others' records go, so a transfer streaming records through
    /// a bounded set of host buffers can reuse them. Backends whose writes are done when the call
    /// returns (the default) have nothing to wait for.
    fn wait_kv_writes(&self, keep: usize) -> Result<()> {
        let _ = keep;
        Ok(())
    }
    /// Whether [`Backend::host_allocator`] pins its memory (slow to allocate, fast to copy).
    fn host_memory_is_pinned(&self) -> bool {
        false
    }
    /// Host memory for the tiered KV cache's block records: pinned where the device copies faster from
    /// it; by default plain heap memory.
    fn host_allocator(&self) -> crate::kv::tiers::HostAllocator {
        crate::kv::tiers::heap_allocator()
    }
    /// Writes `k`, `v` rows (`[rows, num_kv_heads * head_dim]`) to the pool slots `slot_mapping[0..rows]`.
    fn kv_write(
        &self,
        k: &Self::Buf,
        v: &Self::Buf,
        slot_mapping: &Self::Ids,
        rows: usize,
        k_cache: &mut Self::Kv,
        v_cache: &mut Self::Kv,
    ) -> Result<()>;
    /// Causal attention of `q[num_tokens, num_heads * head_dim]` over the paged KV: the last query row of a
    /// sequence sits at position `seq_len - 1` and each row sees every earlier position and itself, or,
    /// under a sink window ([`PagedAttnMeta::windows`]), the sinks and its recent window.
    fn paged_attention(
        &self,
        q: &Self::Buf,
        k_cache: &Self::Kv,
        v_cache: &Self::Kv,
        meta: &PagedAttnMeta<'_, Self>,
        shape: AttnShape,
        out: &mut Self::Buf,
    ) -> Result<()>;
    /// Bidirectional attention within each sequence of a packed varlen batch (encoders): sequence `s` is
    /// rows `query_start_loc[s]..query_start_loc[s + 1]` of `q`, `k` and `v`; `seqs_tokens` is the
    /// number of sequences and of rows (`query_start_loc[num_seqs]`, known to the caller).
    #[allow(clippy::too_many_arguments)]
    fn varlen_attention(
        &self,
        q: &Self::Buf,
        k: &Self::Buf,
        v: &Self::Buf,
        query_start_loc: &Self::Ids,
        seqs_tokens: (usize, usize),
        shape: AttnShape,
        out: &mut Self::Buf,
    ) -> Result<()>;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(dtype: KvDtype) -> KvShape {
        KvShape {
            num_blocks: 4,
            block_size: 2,
            num_kv_heads: 2,
            head_dim: 8,
            dtype,
        }
    }

    #[test]
    fn a_block_transfer_needs_pools_of_one_shape_and_records_of_all_their_bytes() {
        let bf16 = shape(KvDtype::Bf16);
        let whole = 2 * bf16.block_bytes();
        let ok = pools_transfer_shape([bf16, bf16], &[0, 3], [whole, whole].into_iter());
        assert_eq!(ok.unwrap(), Some(bf16));
        let none = pools_transfer_shape([], &[0], [whole].into_iter());
        assert_eq!(none.unwrap(), None);
        let mixed = pools_transfer_shape([bf16, shape(KvDtype::Int8)], &[0], [whole].into_iter());
        assert!(mixed.is_err(), "pools of different shapes");
        let short = pools_transfer_shape([bf16, bf16], &[0], [whole - 1].into_iter());
        assert!(short.is_err(), "a record one byte short");
        let outside = pools_transfer_shape([bf16, bf16], &[4], [whole].into_iter());
        assert!(outside.is_err(), "a block outside the pool");
    }
}
