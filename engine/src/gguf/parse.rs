//! Parsing of the GGUF v3 header: magic, version, key/value metadata and tensor infos.
//!
//! Layout (little-endian): `"GGUF"`, `u32` version, `u64` tensor count, `u64` metadata count, the
//! metadata pairs (`string` key, `u32` value type, value), the tensor infos (`string` name, `u32` n_dims,
//! `n_dims × u64` dims, `u32` ggml type, `u64` offset), then padding to `general.alignment` (default 32)
//! and the tensor data. Every read is bounds-checked so that a truncated file gives
//! [`EngineError::GgufTruncated`] rather than a panic.

use super::dtype::GgmlType;
use super::value::MetadataValue;
use super::TensorInfo;
use crate::error::{EngineError, Result};

/// The four magic bytes every GGUF file starts with.
pub const GGUF_MAGIC: [u8; 4] = *b"GGUF";
/// The only GGUF version this reader accepts.
pub const GGUF_VERSION: u32 = 3;
/// Alignment of the data section when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// ggml's maximum number of tensor dimensions.
const MAX_DIMS: u32 = 4;
/// Arrays may nest, but not deeper than this (guards against stack exhaustion on hostile files).
const MAX_ARRAY_NESTING: u32 = 4;

/// The parsed header: metadata in file order, tensor infos, and where tensor data starts.
pub(super) struct Header {
    pub metadata: Vec<(String, MetadataValue)>,
    pub tensors: Vec<TensorInfo>,
    pub alignment: u64,
    pub data_offset: u64,
}

/// A bounds-checked little-endian reader over the file bytes.
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: u64) -> Result<&'a [u8]> {
        let len = self.bytes.len() as u64;
        let start = self.pos as u64;
        match start.checked_add(n) {
            Some(end) if end <= len => {
                let slice = &self.bytes[self.pos..end as usize];
                self.pos = end as usize;
                Ok(slice)
            }
            _ => Err(EngineError::GgufTruncated {
                offset: start,
                needed: n,
                len,
            }),
        }
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let slice = self.take(N as u64)?;
        let mut out = [0u8; N];
        out.copy_from_slice(slice);
        Ok(out)
    }

    fn u8(&mut self) -> Result<u8> {
        Ok(self.array::<1>()?[0])
    }
    fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_le_bytes(self.array()?))
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    fn string(&mut self) -> Result<String> {
        let n = self.u64()?;
        let at = self.pos;
        let bytes = self.take(n)?;
        String::from_utf8(bytes.to_vec())
            .map_err(|_| EngineError::GgufMalformed(format!("string at offset {at} is not UTF-8")))
    }

    fn value(&mut self, type_id: u32, depth: u32) -> Result<MetadataValue> {
        use MetadataValue as V;
        Ok(match type_id {
            0 => V::U8(self.u8()?),
            1 => V::I8(self.u8()? as i8),
            2 => V::U16(self.u16()?),
            3 => V::I16(self.u16()? as i16),
            4 => V::U32(self.u32()?),
            5 => V::I32(self.u32()? as i32),
            6 => V::F32(f32::from_bits(self.u32()?)),
            7 => V::Bool(self.bool()?),
            8 => V::String(self.string()?),
            9 => self.array_value(depth)?,
            10 => V::U64(self.u64()?),
            11 => V::I64(self.u64()? as i64),
            12 => V::F64(f64::from_bits(self.u64()?)),
            other => {
                return Err(EngineError::GgufMalformed(format!(
                    "unknown metadata value type {other} at offset {}",
                    self.pos
                )));
            }
        })
    }

    fn bool(&mut self) -> Result<bool> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(EngineError::GgufMalformed(format!("bool byte {b} is neither 0 nor 1"))),
        }
    }

    fn array_value(&mut self, depth: u32) -> Result<MetadataValue> {
        if depth >= MAX_ARRAY_NESTING {
            return Err(EngineError::GgufMalformed("arrays nested too deeply".into()));
        }
        let elem_type = self.u32()?;
        let count = self.u64()?;
        // Every element takes at least one byte: a count beyond the remaining bytes is a truncation,
        // caught here before any allocation.
        let remaining = (self.bytes.len() - self.pos) as u64;
        if count > remaining {
            return Err(EngineError::GgufTruncated {
                offset: self.pos as u64,
                needed: count,
                len: self.bytes.len() as u64,
            });
        }
        let mut items = Vec::with_capacity(count as usize);
        for _ in 0..count {
            items.push(self.value(elem_type, depth + 1)?);
        }
        Ok(MetadataValue::Array(items))
    }

    fn tensor_info(&mut self) -> Result<TensorInfo> {
        let name = self.string()?;
        let n_dims = self.u32()?;
        if n_dims == 0 || n_dims > MAX_DIMS {
            return Err(EngineError::GgufMalformed(format!(
                "tensor {name} has {n_dims} dimensions (1..={MAX_DIMS} allowed)"
            )));
        }
        let dims = (0..n_dims).map(|_| self.u64()).collect::<Result<Vec<_>>>()?;
        let type_id = self.u32()?;
        let offset = self.u64()?;
        let dtype = GgmlType::from_id(type_id).ok_or_else(|| EngineError::GgufUnknownTensorType {
            tensor: name.clone(),
            type_id,
        })?;
        TensorInfo::new(name, dims, dtype, offset)
    }
}

/// Parses the header of a GGUF file held in `bytes`.
pub(super) fn parse_header(bytes: &[u8]) -> Result<Header> {
    let mut cur = Cursor { bytes, pos: 0 };
    let magic: [u8; 4] = cur.array()?;
    if magic != GGUF_MAGIC {
        return Err(EngineError::GgufBadMagic { found: magic });
    }
    let version = cur.u32()?;
    if version != GGUF_VERSION {
        return Err(EngineError::GgufUnsupportedVersion(version));
    }
    let n_tensors = cur.u64()?;
    let n_kv = cur.u64()?;
    let mut metadata = Vec::new();
    for _ in 0..n_kv {
        let key = cur.string()?;
        let type_id = cur.u32()?;
        let value = cur.value(type_id, 0)?;
        metadata.push((key, value));
    }
    let alignment = alignment_of(&metadata)?;
    let mut tensors = Vec::new();
    for _ in 0..n_tensors {
        tensors.push(cur.tensor_info()?);
    }
    let data_offset = (cur.pos as u64).next_multiple_of(alignment);
    Ok(Header {
        metadata,
        tensors,
        alignment,
        data_offset,
    })
}

fn alignment_of(metadata: &[(String, MetadataValue)]) -> Result<u64> {
    let Some((_, value)) = metadata.iter().find(|(k, _)| k == "general.alignment") else {
        return Ok(DEFAULT_ALIGNMENT);
    };
    match value.as_u64() {
        Some(a) if a > 0 && a.is_power_of_two() => Ok(a),
        _ => Err(EngineError::metadata(
            "general.alignment",
            format!("{value:?} is not a positive power of two"),
        )),
    }
}
