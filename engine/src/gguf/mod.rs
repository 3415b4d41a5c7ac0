//! A reader for GGUF v3 files, the single-file model format of llama.cpp.
//!
//! [`GgufFile::open`] memory-maps the file, parses the header (module `parse`) and checks that every tensor's
//! data lies inside the file; [`GgufFile::tensor_f32`] dequantises one tensor ([`dequant`]). Tensor
//! dimensions are kept in GGUF order (`dims[0]` is the fastest-varying, i.e. the number of columns);
//! [`TensorInfo::shape`] gives the row-major order that HF and safetensors use.

pub mod dequant;
pub mod dtype;
pub mod k_quants;
pub mod legacy_quants;
mod parse;
pub mod value;

use std::collections::HashMap;
use std::fs::File;
use std::path::Path;

use memmap2::Mmap;

pub use dtype::GgmlType;
pub use parse::{DEFAULT_ALIGNMENT, GGUF_MAGIC, GGUF_VERSION};
pub use value::MetadataValue;

use crate::error::{EngineError, Result};

/// Name, shape, type and location of one tensor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    /// The tensor's GGUF name, e.g. `blk.0.attn_q.weight`.
    pub name: String,
    /// Dimensions in GGUF order: `dims[0]` varies fastest.
    pub dims: Vec<u64>,
    /// The element type.
    pub dtype: GgmlType,
    /// Offset of the first byte, relative to the start of the data section.
    pub offset: u64,
}

impl TensorInfo {
    /// Builds a tensor info, checking that its element count is whole blocks of its type.
    pub fn new(name: String, dims: Vec<u64>, dtype: GgmlType, offset: u64) -> Result<Self> {
        let info = Self {
            name,
            dims,
            dtype,
            offset,
        };
        if info.dims.is_empty() {
            return Err(EngineError::GgufMalformed(format!(
                "tensor {} has no dimensions",
                info.name
            )));
        }
        let n = info.checked_len()?;
        if !info.dims[0].is_multiple_of(dtype.block_len()) || !n.is_multiple_of(dtype.block_len()) {
            return Err(EngineError::GgufMalformed(format!(
                "tensor {}: row length {} is not a multiple of the {:?} block length {}",
                info.name,
                info.dims[0],
                dtype,
                dtype.block_len()
            )));
        }
        Ok(info)
    }

    fn checked_len(&self) -> Result<u64> {
        self.dims
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| {
                EngineError::GgufMalformed(format!("tensor {}: element count overflows", self.name))
            })
    }

    /// Number of elements.
    pub fn len(&self) -> u64 {
        self.dims.iter().product()
    }

    /// Whether the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of bytes of the tensor's data.
    pub fn byte_len(&self) -> u64 {
        self.len() / self.dtype.block_len() * self.dtype.block_bytes()
    }

    /// Shape in row-major order (outermost first), as HF/safetensors write it: `dims` reversed.
    pub fn shape(&self) -> Vec<usize> {
        self.dims.iter().rev().map(|&d| d as usize).collect()
    }
}

/// The bytes behind a GGUF file: a memory map, or an owned buffer (for in-memory files).
enum Storage {
    Mapped(Mmap),
    Owned(Vec<u8>),
}

impl Storage {
    fn bytes(&self) -> &[u8] {
        match self {
            Storage::Mapped(m) => m,
            Storage::Owned(v) => v,
        }
    }
}

/// An opened GGUF file: metadata, tensor infos and access to tensor data.
pub struct GgufFile {
    storage: Storage,
    metadata: Vec<(String, MetadataValue)>,
    index: HashMap<String, usize>,
    tensors: Vec<TensorInfo>,
    alignment: u64,
    data_offset: u64,
}

impl GgufFile {
    /// Memory-maps and parses the GGUF file at `path`.
    pub fn open(path: &Path) -> Result<Self> {
        let file = File::open(path).map_err(|e| EngineError::io(path, e))?;
        // SAFETY: the map is read-only; the model file is not expected to change while it is open.
        // A concurrent truncation by another process could fault; that is the usual mmap contract.
        let map = unsafe { Mmap::map(&file) }.map_err(|e| EngineError::io(path, e))?;
        Self::from_storage(Storage::Mapped(map))
    }

    /// Parses a GGUF file held in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self> {
        Self::from_storage(Storage::Owned(bytes))
    }

    fn from_storage(storage: Storage) -> Result<Self> {
        let header = parse::parse_header(storage.bytes())?;
        let file = Self {
            index: header
                .tensors
                .iter()
                .enumerate()
                .map(|(i, t)| (t.name.clone(), i))
                .collect(),
            storage,
            metadata: header.metadata,
            tensors: header.tensors,
            alignment: header.alignment,
            data_offset: header.data_offset,
        };
        file.check_tensor_bounds()?;
        Ok(file)
    }

    fn check_tensor_bounds(&self) -> Result<()> {
        let data_len = (self.storage.bytes().len() as u64).saturating_sub(self.data_offset);
        for t in &self.tensors {
            let end = t.offset.checked_add(t.byte_len());
            if !t.offset.is_multiple_of(self.alignment) {
                return Err(EngineError::GgufMalformed(format!(
                    "tensor {}: offset {} is not a multiple of the alignment {}",
                    t.name, t.offset, self.alignment
                )));
            }
            match end {
                Some(end) if end <= data_len => {}
                _ => {
                    return Err(EngineError::GgufTensorOutOfBounds {
                        tensor: t.name.clone(),
                        start: t.offset,
                        end: end.unwrap_or(u64::MAX),
                        len: data_len,
                    });
                }
            }
        }
        Ok(())
    }

    /// All metadata pairs in file order.
    pub fn metadata(&self) -> &[(String, MetadataValue)] {
        &self.metadata
    }

    /// The metadata value for `key`, if present.
    pub fn get(&self, key: &str) -> Option<&MetadataValue> {
        self.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// The unsigned integer at `key`, or a typed error when absent or mistyped.
    pub fn get_u64(&self, key: &str) -> Result<u64> {
        let v = self.require(key)?;
        v.as_u64().ok_or_else(|| {
            EngineError::metadata(
                key,
                format!("expected an unsigned integer, found {}", v.type_name()),
            )
        })
    }

    /// The float at `key`, or a typed error when absent or mistyped.
    pub fn get_f64(&self, key: &str) -> Result<f64> {
        let v = self.require(key)?;
        v.as_f64().ok_or_else(|| {
            EngineError::metadata(key, format!("expected a number, found {}", v.type_name()))
        })
    }

    /// The string at `key`, or a typed error when absent or mistyped.
    pub fn get_str(&self, key: &str) -> Result<&str> {
        let v = self.require(key)?;
        v.as_str().ok_or_else(|| {
            EngineError::metadata(key, format!("expected a string, found {}", v.type_name()))
        })
    }

    /// The array at `key`, or a typed error when absent or mistyped.
    pub fn get_array(&self, key: &str) -> Result<&[MetadataValue]> {
        let v = self.require(key)?;
        v.as_array().ok_or_else(|| {
            EngineError::metadata(key, format!("expected an array, found {}", v.type_name()))
        })
    }

    fn require(&self, key: &str) -> Result<&MetadataValue> {
        self.get(key)
            .ok_or_else(|| EngineError::metadata(key, "missing"))
    }

    /// All tensor infos in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The tensor info named `name`, if present.
    pub fn tensor_info(&self, name: &str) -> Option<&TensorInfo> {
        self.index.get(name).map(|&i| &self.tensors[i])
    }

    /// The data alignment (`general.alignment`, default 32).
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// The raw bytes of a tensor's data (bounds were checked at open).
    pub fn tensor_bytes(&self, info: &TensorInfo) -> &[u8] {
        let start = (self.data_offset + info.offset) as usize;
        &self.storage.bytes()[start..start + info.byte_len() as usize]
    }

    /// Dequantises the tensor named `name` into `f32`, in row-major order.
    pub fn tensor_f32(&self, name: &str) -> Result<Vec<f32>> {
        let info = self.tensor_info(name).ok_or_else(|| {
            EngineError::Convert(format!("tensor {name} is not in the GGUF file"))
        })?;
        dequant::dequantize(info, self.tensor_bytes(info))
    }
}
