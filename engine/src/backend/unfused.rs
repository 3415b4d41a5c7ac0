//! The fused products' op-by-op sequences, in terms of the basic ops: what the [`Backend`] trait's
//! defaults run, and what a backend that fuses some shapes runs for the others.

use super::{
    AttnBuffers, AttnShape, AttnWeights, Backend, PagedAttnMeta, RmsNormInto, RopeKvWrite,
    SwigluBuffers, SwigluWeights,
};
use crate::error::Result;

/// `x`, or `x` RMS-normalised into the norm's buffer.
pub fn rms_norm_into<'b, B: Backend>(
    b: &B,
    x: &'b B::Buf,
    norm: Option<RmsNormInto<'b, B>>,
    rows: usize,
) -> Result<&'b B::Buf> {
    match norm {
        None => Ok(x),
        Some(n) => {
            b.rms_norm(x, n.weight, n.eps, rows, n.out)?;
            Ok(n.out)
        }
    }
}

/// [`Backend::matmul_add`] as a product into `scratch`, then the add.
pub fn matmul_add<B: Backend>(
    b: &B,
    (x, w): (&B::Buf, &B::Weight),
    (rows, width): (usize, usize),
    scratch: &mut B::Buf,
    out: &mut B::Buf,
) -> Result<()> {
    b.matmul(x, w, None, rows, scratch)?;
    b.add(out, scratch, rows * width)
}

/// [`Backend::gated_matmul`] as the norm, two products and silu·mul.
pub fn gated_matmul<B: Backend>(
    b: &B,
    (x, norm): (&B::Buf, Option<RmsNormInto<'_, B>>),
    (gate_w, up_w): (&B::Weight, &B::Weight),
    (rows, width): (usize, usize),
    (gate, up): (&mut B::Buf, &mut B::Buf),
    out: &mut B::Buf,
) -> Result<()> {
    let x = rms_norm_into(b, x, norm, rows)?;
    b.matmul(x, gate_w, None, rows, gate)?;
    b.matmul(x, up_w, None, rows, up)?;
    b.silu_mul(gate, up, rows * width, out)
}

/// [`Backend::swiglu_mlp`] as the gated products (their norm written to `scratch`), then the down
/// product added onto `x` (through `scratch`).
pub fn swiglu_mlp<B: Backend>(
    b: &B,
    (x, norm): (&mut B::Buf, Option<(&B::Weight, f32)>),
    (gate_w, up_w, down_w): SwigluWeights<'_, B>,
    (rows, width, hidden): (usize, usize, usize),
    (gate, up, act, scratch): SwigluBuffers<'_, B>,
) -> Result<()> {
    let norm = norm.map(|(weight, eps)| RmsNormInto {
        weight,
        eps,
        out: &mut *scratch,
    });
    b.gated_matmul(x, norm, (gate_w, up_w), (rows, width), (gate, up), act)?;
    b.matmul_add(act, down_w, (rows, hidden), scratch, x)
}

/// [`Backend::matmul3`] as the norm and three products.
pub fn matmul3<B: Backend>(
    b: &B,
    (x, norm): (&B::Buf, Option<RmsNormInto<'_, B>>),
    (w, bias): ([&B::Weight; 3], [Option<&B::Weight>; 3]),
    rows: usize,
    outs: [&mut B::Buf; 3],
) -> Result<()> {
    let x = rms_norm_into(b, x, norm, rows)?;
    for ((w, bias), out) in w.into_iter().zip(bias).zip(outs) {
        b.matmul(x, w, bias, rows, out)?;
    }
    Ok(())
}

/// [`Backend::rope_kv_write`] as RoPE on `q`, RoPE on `k`, then the KV write.
pub fn rope_kv_write<B: Backend>(
    b: &B,
    (q, k, v): (&mut B::Buf, &mut B::Buf, &B::Buf),
    (table, slot_mapping): (&B::Buf, &B::Ids),
    (rows, heads, kv_heads, head_dim): (usize, usize, usize, usize),
    (k_cache, v_cache): (&mut B::Kv, &mut B::Kv),
) -> Result<()> {
    b.rope(q, table, rows, heads, head_dim)?;
    b.rope(k, table, rows, kv_heads, head_dim)?;
    b.kv_write(k, v, slot_mapping, rows, k_cache, v_cache)
}

/// [`Backend::attention_sublayer`] as the norm with the q/k/v products, RoPE and the KV write, paged
/// attention, and the output product (added onto `x` through the norm's buffer, or written over it).
pub fn attention_sublayer<B: Backend>(
    b: &B,
    x: &mut B::Buf,
    weights: AttnWeights<'_, B>,
    rope: RopeKvWrite<'_, B>,
    (meta, shape): (&PagedAttnMeta<'_, B>, AttnShape),
    (h, [q, k, v], attn): AttnBuffers<'_, B>,
) -> Result<()> {
    let rows = meta.num_tokens;
    let (kc, vc) = normed_qkv_rope(b, x, &weights, rope, rows, (&mut *h, [&mut *q, k, v]))?;
    b.paged_attention(q, kc, vc, meta, shape, attn)?;
    output_product(b, attn, &weights, rows, (h, x))
}

/// The first steps of an attention sublayer: the norm with the q/k/v products, RoPE and the KV write
/// (`h` takes the normalised input). Hands back the pools for the attention that reads them.
pub fn normed_qkv_rope<'p, B: Backend>(
    b: &B,
    x: &B::Buf,
    weights: &AttnWeights<'_, B>,
    rope: RopeKvWrite<'p, B>,
    rows: usize,
    (h, qkv): (&mut B::Buf, [&mut B::Buf; 3]),
) -> Result<(&'p mut B::Kv, &'p mut B::Kv)> {
    let mut rope = rope;
    let norm = RmsNormInto {
        weight: weights.norm.0,
        eps: weights.norm.1,
        out: h,
    };
    b.matmul3_rope_kv_write(x, Some(norm), weights.qkv, rows, qkv, rope.reborrow())?;
    Ok(rope.caches)
}

/// The last step of an attention sublayer: the output product of attention's output `attn`, added onto
/// `x` (through the scratch `h`) or written over it.
pub fn output_product<B: Backend>(
    b: &B,
    attn: &B::Buf,
    weights: &AttnWeights<'_, B>,
    rows: usize,
    (h, x): (&mut B::Buf, &mut B::Buf),
) -> Result<()> {
    match weights.adds_residual {
        true => b.matmul_add(attn, weights.o, (rows, weights.hidden), h, x),
        false => b.matmul(attn, weights.o, None, rows, x),
    }
}
