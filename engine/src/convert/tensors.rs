//! GGUF tensors → HF tensors: names, the Q/K row un-permutation, and bf16 `model.safetensors`.
//!
//! For `llama` GGUFs, llama.cpp's HF→GGUF converter reorders the rows of `q_proj` and `k_proj` inside
//! every head so that RoPE can rotate adjacent pairs `(2j, 2j+1)`; HF Llama rotates the two halves
//! `(j, j + head_dim/2)`.
//! Within a head of `head_dim` rows the converter maps HF row `half · head_dim/2 + j` to GGUF row
//! `2j + half`; [`unpermute_rows`] applies the inverse, [`permute_rows`] the forward map (used by tests
//! to prove the round trip). `qwen2` GGUFs keep HF's rows (and add the q/k/v biases).

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;

use half::bf16;
use rayon::prelude::*;
use safetensors::{Dtype, View};

use crate::error::{EngineError, Result};
use crate::gguf::{GgufFile, TensorInfo};

/// One converted tensor: bf16 bytes (little-endian) and the HF shape `[out, in]`.
pub struct Bf16Tensor {
    /// Row-major shape.
    pub shape: Vec<usize>,
    /// Little-endian bf16 bytes.
    pub data: Vec<u8>,
}

impl View for &Bf16Tensor {
    fn dtype(&self) -> Dtype {
        Dtype::BF16
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.data)
    }
    fn data_len(&self) -> usize {
        self.data.len()
    }
}

/// Head counts needed to undo the RoPE permutation, and whether there is one to undo.
#[derive(Debug, Clone, Copy)]
pub struct HeadCounts {
    /// Whether q and k rows are in adjacent RoPE pairs
    /// ([`super::config::Architecture::pairs_rope_rows`]).
    pub paired_rows: bool,
    /// Query heads (`llama.attention.head_count`).
    pub q_heads: usize,
    /// Key/value heads (`llama.attention.head_count_kv`).
    pub kv_heads: usize,
}

/// The HF name of a GGUF Llama or Qwen2 tensor, or `None` for tensors HF does not store (e.g.
/// `rope_freqs`).
pub fn hf_name(gguf_name: &str) -> Result<Option<String>> {
    let fixed = match gguf_name {
        "token_embd.weight" => Some("model.embed_tokens.weight"),
        "output_norm.weight" => Some("model.norm.weight"),
        "output.weight" => Some("lm_head.weight"),
        "rope_freqs.weight" => return Ok(None),
        _ => None,
    };
    if let Some(name) = fixed {
        return Ok(Some(name.to_owned()));
    }
    let unknown = || EngineError::Convert(format!("unexpected tensor {gguf_name} in the GGUF"));
    let rest = gguf_name.strip_prefix("blk.").ok_or_else(unknown)?;
    let (layer, part) = rest.split_once('.').ok_or_else(unknown)?;
    let layer: usize = layer.parse().map_err(|_| unknown())?;
    let hf_part = match part {
        "attn_norm.weight" => "input_layernorm.weight",
        "ffn_norm.weight" => "post_attention_layernorm.weight",
        "attn_q.weight" => "self_attn.q_proj.weight",
        "attn_k.weight" => "self_attn.k_proj.weight",
        "attn_v.weight" => "self_attn.v_proj.weight",
        "attn_q.bias" => "self_attn.q_proj.bias",
        "attn_k.bias" => "self_attn.k_proj.bias",
        "attn_v.bias" => "self_attn.v_proj.bias",
        "attn_output.weight" => "self_attn.o_proj.weight",
        "ffn_gate.weight" => "mlp.gate_proj.weight",
        "ffn_up.weight" => "mlp.up_proj.weight",
        "ffn_down.weight" => "mlp.down_proj.weight",
        _ => return Err(unknown()),
    };
    Ok(Some(format!("model.layers.{layer}.{hf_part}")))
}

/// Reorders rows `[rows, cols]` from GGUF's adjacent-pair RoPE layout back to HF's half-split layout.
pub fn unpermute_rows(data: &[f32], cols: usize, n_heads: usize) -> Result<Vec<f32>> {
    reorder_rows(data, cols, n_heads, |head_dim, hf_row| {
        let (half, j) = (hf_row / (head_dim / 2), hf_row % (head_dim / 2));
        2 * j + half
    })
}

/// The forward map of llama.cpp's converter (HF half-split → GGUF adjacent pairs); the inverse of
/// [`unpermute_rows`].
pub fn permute_rows(data: &[f32], cols: usize, n_heads: usize) -> Result<Vec<f32>> {
    reorder_rows(data, cols, n_heads, |head_dim, out_row| {
        let (j, half) = (out_row / 2, out_row % 2);
        half * (head_dim / 2) + j
    })
}

/// Builds `out[h·hd + r] = data[h·hd + src(hd, r)]` row by row.
fn reorder_rows(
    data: &[f32],
    cols: usize,
    n_heads: usize,
    src: impl Fn(usize, usize) -> usize + Sync,
) -> Result<Vec<f32>> {
    let rows = data.len() / cols.max(1);
    if cols == 0
        || n_heads == 0
        || rows * cols != data.len()
        || !rows.is_multiple_of(n_heads)
        || !(rows / n_heads).is_multiple_of(2)
    {
        return Err(EngineError::Convert(format!(
            "cannot split {rows} rows of {cols} into {n_heads} heads of even size"
        )));
    }
    let head_dim = rows / n_heads;
    let mut out = vec![0f32; data.len()];
    out.par_chunks_mut(cols).enumerate().for_each(|(row, dst)| {
        let (head, r) = (row / head_dim, row % head_dim);
        let from = head * head_dim + src(head_dim, r);
        dst.copy_from_slice(&data[from * cols..(from + 1) * cols]);
    });
    Ok(out)
}

/// Rounds to bf16 (round to nearest, ties to even) and returns little-endian bytes.
pub fn to_bf16_bytes(values: &[f32]) -> Vec<u8> {
    let mut out = vec![0u8; values.len() * 2];
    out.par_chunks_mut(2)
        .zip(values.par_iter())
        .for_each(|(o, &v)| {
            o.copy_from_slice(&bf16::from_f32(v).to_le_bytes());
        });
    out
}

/// Dequantises and converts one tensor to its HF form (un-permuting Q and K where they are paired).
pub fn convert_tensor(gguf: &GgufFile, info: &TensorInfo, heads: HeadCounts) -> Result<Bf16Tensor> {
    let shape = info.shape();
    let mut values = gguf.tensor_f32(&info.name)?;
    let cols = *shape.last().unwrap_or(&1);
    let paired_heads = if info.name.ends_with("attn_q.weight") {
        Some(heads.q_heads)
    } else if info.name.ends_with("attn_k.weight") {
        Some(heads.kv_heads)
    } else {
        None
    };
    if let Some(n_heads) = paired_heads.filter(|_| heads.paired_rows) {
        values = unpermute_rows(&values, cols, n_heads)?;
    }
    Ok(Bf16Tensor {
        shape,
        data: to_bf16_bytes(&values),
    })
}

/// Converts every tensor and writes `model.safetensors`. Returns whether an `lm_head` was present.
pub fn write_safetensors(gguf: &GgufFile, heads: HeadCounts, path: &Path) -> Result<bool> {
    let mut converted: Vec<(String, Bf16Tensor)> = Vec::new();
    for info in gguf.tensors() {
        if let Some(name) = hf_name(&info.name)? {
            converted.push((name, convert_tensor(gguf, info, heads)?));
        }
    }
    let has_lm_head = converted.iter().any(|(n, _)| n == "lm_head.weight");
    let meta = HashMap::from([("format".to_owned(), "pt".to_owned())]);
    // Serialised in memory and written with std, so the file gets the usual umask-based permissions.
    let bytes = safetensors::serialize(converted.iter().map(|(n, t)| (n.as_str(), t)), Some(meta))?;
    std::fs::write(path, bytes).map_err(|e| EngineError::io(path, e))?;
    Ok(has_lm_head)
}
