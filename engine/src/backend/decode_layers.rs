//! What [`super::Backend::decode_layers`] takes: a decode step's transformer layers for one
//! sequence, for a backend that runs them all in one launch.

use super::{AttnShape, Backend, PagedAttnMeta};

/// One Llama-style layer's weights: the two RMSNorms, q/k/v (no biases), o, and the SwiGLU MLP.
pub struct DecodeLayerWeights<'a, B: Backend> {
    /// The RMSNorm before q/k/v and the one before gate/up.
    pub norms: [&'a B::Weight; 2],
    /// The q, k and v projections.
    pub qkv: [&'a B::Weight; 3],
    /// The output projection `[hidden, heads · head_dim]`.
    pub o: &'a B::Weight,
    /// Gate, up and down.
    pub mlp: [&'a B::Weight; 3],
}

/// A decode step's layers for a batch of one token of one sequence, dense attention: every layer
/// does `x += o(attention(rope(qkv(norm₁(x)))))`, then `x += down(silu(gate(x')) · up(x'))` with
/// `x' = norm₂(x)`, writing the token's K and V into its slot of each layer's pools.
pub struct DecodeLayers<'a, B: Backend> {
    /// The layers, in order.
    pub layers: Vec<DecodeLayerWeights<'a, B>>,
    /// Each layer's K and V pools.
    pub caches: (&'a [B::Kv], &'a [B::Kv]),
    /// RMSNorm's epsilon.
    pub eps: f32,
    /// The RoPE table's row for the token (`[1, head_dim]`: cos, then sin).
    pub rope: &'a B::Buf,
    /// The token's pool slot.
    pub slot_mapping: &'a B::Ids,
    /// The batch (one sequence, one token, no window) and the heads.
    pub attn: (&'a PagedAttnMeta<'a, B>, AttnShape),
    /// Scratch: the rotated query, attention's output and the MLP's activations.
    pub bufs: [&'a mut B::Buf; 3],
}
