//! Dequantisation of GGUF tensor data to `f32`: the float types (F32, F16, BF16), ggml's blocks of 32
//! ([`super::legacy_quants`]: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL) and its K-quant super-blocks of 256
//! ([`super::k_quants`]: Q2_K to Q6_K, and IQ4_XS), which together cover the files llama.cpp's
//! `llama-quantize` writes for those types, their `_S/_M/_L` mixes and IQ4_XS (a tensor whose rows are
//! not whole super-blocks falls back to IQ4_NL, Q5_0, Q5_1 or Q8_0 there).
//!
//! Blocks are independent, so the work is split over rayon in runs of blocks.

use half::{bf16, f16};
use rayon::prelude::*;

use super::{GgmlType, TensorInfo, k_quants, legacy_quants};
use crate::error::{EngineError, Result};

/// The names of the tensor types [`dequantize`] reads, in ggml's order of ids, for messages.
pub fn read_types() -> String {
    (0..64)
        .filter(|&id| GgmlType::from_id(id).is_some_and(supports))
        .filter_map(super::dtype::ggml_type_name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Blocks handed to one rayon task: large enough that scheduling costs nothing.
const BLOCKS_PER_TASK: usize = 4096;

/// Dequantises one block of a type into its `block_len` floats.
type BlockFn = fn(&[u8], &mut [f32]);

/// The block dequantiser of a block-quantised type, or `None` where docqa reads none.
fn block_fn(dtype: GgmlType) -> Option<BlockFn> {
    use GgmlType::*;
    Some(match dtype {
        Q4_0 => legacy_quants::q4_0,
        Q4_1 => legacy_quants::q4_1,
        Q5_0 => legacy_quants::q5_0,
        Q5_1 => legacy_quants::q5_1,
        Q8_0 => legacy_quants::q8_0,
        IQ4NL => legacy_quants::iq4_nl,
        Q2K => k_quants::q2_k,
        Q3K => k_quants::q3_k,
        Q4K => k_quants::q4_k,
        Q5K => k_quants::q5_k,
        Q6K => k_quants::q6_k,
        IQ4XS => k_quants::iq4_xs,
        _ => return None,
    })
}

/// Whether [`dequantize`] reads tensors of this type.
pub fn supports(dtype: GgmlType) -> bool {
    matches!(dtype, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16) || block_fn(dtype).is_some()
}

/// Dequantises a whole tensor. `bytes` must be exactly the tensor's data ([`TensorInfo::byte_len`]).
pub fn dequantize(info: &TensorInfo, bytes: &[u8]) -> Result<Vec<f32>> {
    if bytes.len() as u64 != info.byte_len() {
        return Err(EngineError::GgufMalformed(format!(
            "tensor {}: {} data bytes, expected {}",
            info.name,
            bytes.len(),
            info.byte_len()
        )));
    }
    let mut out = vec![0f32; info.len() as usize];
    match info.dtype {
        GgmlType::F32 => per_element::<4>(bytes, &mut out, |b| {
            f32::from_le_bytes([b[0], b[1], b[2], b[3]])
        }),
        GgmlType::F16 => per_element::<2>(bytes, &mut out, |b| {
            f16::from_le_bytes([b[0], b[1]]).to_f32()
        }),
        GgmlType::BF16 => per_element::<2>(bytes, &mut out, |b| {
            bf16::from_le_bytes([b[0], b[1]]).to_f32()
        }),
        other => {
            let f = block_fn(other).ok_or_else(|| EngineError::GgufUnknownTensorType {
                tensor: info.name.clone(),
                type_id: other.id(),
            })?;
            let shape = (other.block_len() as usize, other.block_bytes() as usize);
            per_block(bytes, &mut out, shape, f);
        }
    }
    Ok(out)
}

/// `f` over every block of `(weights, bytes)`.
fn per_block(bytes: &[u8], out: &mut [f32], (weights, block_bytes): (usize, usize), f: BlockFn) {
    out.par_chunks_mut(weights * BLOCKS_PER_TASK)
        .zip(bytes.par_chunks(block_bytes * BLOCKS_PER_TASK))
        .for_each(|(out, bytes)| {
            for (o, b) in out
                .chunks_exact_mut(weights)
                .zip(bytes.chunks_exact(block_bytes))
            {
                f(b, o);
            }
        });
}

fn per_element<const N: usize>(bytes: &[u8], out: &mut [f32], f: impl Fn(&[u8]) -> f32 + Sync) {
    const PER_TASK: usize = 1 << 16;
    out.par_chunks_mut(PER_TASK)
        .zip(bytes.par_chunks(N * PER_TASK))
        .for_each(|(out, bytes)| {
            for (o, b) in out.iter_mut().zip(bytes.chunks_exact(N)) {
                *o = f(b);
            }
        });
}
