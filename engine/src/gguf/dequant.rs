//! Dequantisation of GGUF tensor data to `f32`: F32, F16, BF16, Q8_0 and Q4_1.
//!
//! Block layouts (ggml, little-endian), `d`/`m` are f16:
//! - Q8_0: 34 bytes = `d`, then 32 × `i8` `q`; `w[i] = q[i] · d`.
//! - Q4_1: 20 bytes = `d`, `m`, then 16 bytes `qs`; weight `i < 16` is the low nibble of `qs[i]`, weight
//!   `i + 16` its high nibble; `w = q · d + m`.
//!
//! Blocks are independent, so the work is split over rayon in runs of blocks.

use half::{bf16, f16};
use rayon::prelude::*;

use super::{GgmlType, TensorInfo};
use crate::error::{EngineError, Result};

/// Elements per Q8_0 / Q4_1 block.
pub const QK: usize = 32;
/// Bytes per Q8_0 block.
pub const Q8_0_BLOCK_BYTES: usize = 34;
/// Bytes per Q4_1 block.
pub const Q4_1_BLOCK_BYTES: usize = 20;
/// Blocks handed to one rayon task: large enough that scheduling costs nothing.
const BLOCKS_PER_TASK: usize = 4096;

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
        GgmlType::F32 => per_element::<4>(bytes, &mut out, |b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        GgmlType::F16 => per_element::<2>(bytes, &mut out, |b| f16::from_le_bytes([b[0], b[1]]).to_f32()),
        GgmlType::BF16 => per_element::<2>(bytes, &mut out, |b| bf16::from_le_bytes([b[0], b[1]]).to_f32()),
        GgmlType::Q8_0 => per_block(bytes, &mut out, Q8_0_BLOCK_BYTES, dequantize_q8_0_block),
        GgmlType::Q4_1 => per_block(bytes, &mut out, Q4_1_BLOCK_BYTES, dequantize_q4_1_block),
        other => {
            return Err(EngineError::GgufUnknownTensorType {
                tensor: info.name.clone(),
                type_id: other.id(),
            });
        }
    }
    Ok(out)
}

/// Dequantises one Q8_0 block (34 bytes) into 32 floats.
pub fn dequantize_q8_0_block(block: &[u8], out: &mut [f32]) {
    let d = f16::from_le_bytes([block[0], block[1]]).to_f32();
    for (o, &q) in out.iter_mut().zip(&block[2..2 + QK]) {
        *o = f32::from(q as i8) * d;
    }
}

/// Dequantises one Q4_1 block (20 bytes) into 32 floats.
pub fn dequantize_q4_1_block(block: &[u8], out: &mut [f32]) {
    let d = f16::from_le_bytes([block[0], block[1]]).to_f32();
    let m = f16::from_le_bytes([block[2], block[3]]).to_f32();
    let (lo, hi) = out.split_at_mut(QK / 2);
    for (i, &q) in block[4..4 + QK / 2].iter().enumerate() {
        lo[i] = f32::from(q & 0x0f) * d + m;
        hi[i] = f32::from(q >> 4) * d + m;
    }
}

fn per_block(bytes: &[u8], out: &mut [f32], block_bytes: usize, f: fn(&[u8], &mut [f32])) {
    out.par_chunks_mut(QK * BLOCKS_PER_TASK)
        .zip(bytes.par_chunks(block_bytes * BLOCKS_PER_TASK))
        .for_each(|(out, bytes)| {
            for (o, b) in out.chunks_exact_mut(QK).zip(bytes.chunks_exact(block_bytes)) {
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
