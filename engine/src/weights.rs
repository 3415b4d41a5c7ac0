//! Safetensors weight loading: a single `model.safetensors` or shards listed by
//! `model.safetensors.index.json`, memory-mapped, tensors looked up by their HF name.
//!
//! Headers are validated when a file is opened (a truncated or corrupt file is an
//! [`EngineError::Safetensors`] naming it); tensor bytes are only read when a backend uploads them.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use safetensors::{Dtype, SafeTensors};
use serde::Deserialize;

use crate::error::{EngineError, Result};

mod owned;
pub use owned::OwnedTensor;

/// The element types the engine reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightDtype {
    /// IEEE single precision.
    F32,
    /// bfloat16.
    Bf16,
    /// IEEE half precision.
    F16,
}

impl WeightDtype {
    fn size(self) -> usize {
        match self {
            WeightDtype::F32 => 4,
            WeightDtype::Bf16 | WeightDtype::F16 => 2,
        }
    }
}

struct Entry {
    file: usize,
    /// The dtype, or its name when the engine cannot read it (reported when the tensor is asked for).
    dtype: std::result::Result<WeightDtype, String>,
    shape: Vec<usize>,
    start: usize,
    end: usize,
}

/// A borrowed tensor inside a mapped file.
#[derive(Debug, Clone, Copy)]
pub struct TensorRef<'a> {
    /// The tensor's name.
    pub name: &'a str,
    /// Element type.
    pub dtype: WeightDtype,
    /// Shape, outermost first.
    pub shape: &'a [usize],
    /// Raw little-endian bytes.
    pub bytes: &'a [u8],
}

impl TensorRef<'_> {
    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// The elements converted to f32.
    pub fn to_f32(&self) -> Vec<f32> {
        // Into a buffer of the final length, element by element: loops the compiler vectorises.
        let halves = |widen: fn([u8; 2]) -> f32| {
            let mut out = vec![0f32; self.bytes.len() / 2];
            for (o, b) in out.iter_mut().zip(self.bytes.chunks_exact(2)) {
                *o = widen([b[0], b[1]]);
            }
            out
        };
        match self.dtype {
            WeightDtype::F32 => {
                let mut out = vec![0f32; self.bytes.len() / 4];
                for (o, b) in out.iter_mut().zip(self.bytes.chunks_exact(4)) {
                    *o = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                }
                out
            }
            WeightDtype::Bf16 => halves(|b| half::bf16::from_le_bytes(b).to_f32()),
            WeightDtype::F16 => halves(|b| half::f16::from_le_bytes(b).to_f32()),
        }
    }

    /// The elements as bf16 bit patterns (f32 and f16 rounded to nearest even).
    pub fn to_bf16_bits(&self) -> Vec<u16> {
        match self.dtype {
            WeightDtype::Bf16 => self
                .bytes
                .chunks_exact(2)
                .map(|b| u16::from_le_bytes([b[0], b[1]]))
                .collect(),
            _ => self
                .to_f32()
                .into_iter()
                .map(|f| half::bf16::from_f32(f).to_bits())
                .collect(),
        }
    }

    /// Checks the shape against what the config implies.
    pub fn expect_shape(&self, expected: &[usize]) -> Result<()> {
        if self.shape == expected {
            Ok(())
        } else {
            Err(EngineError::TensorShape {
                name: self.name.into(),
                expected: expected.into(),
                actual: self.shape.into(),
            })
        }
    }
}

/// Memory-mapped safetensors files of one model.
pub struct Weights {
    maps: Vec<Mmap>,
    entries: HashMap<String, Entry>,
}

#[derive(Deserialize)]
struct ShardIndex {
    weight_map: HashMap<String, String>,
}

impl Weights {
    /// Opens the weights of the model directory `dir`: `model.safetensors.index.json` and its shards
    /// if present, `model.safetensors` otherwise.
    pub fn open_dir(dir: &Path) -> Result<Self> {
        let index = dir.join("model.safetensors.index.json");
        if !index.exists() {
            return Self::open_files(&[dir.join("model.safetensors")]);
        }
        let text = std::fs::read_to_string(&index).map_err(|source| EngineError::Io {
            path: index.clone(),
            source,
        })?;
        let parsed: ShardIndex =
            serde_json::from_str(&text).map_err(|e| EngineError::Safetensors {
                path: index.clone(),
                reason: e.to_string(),
            })?;
        let mut shards: Vec<&String> = parsed.weight_map.values().collect();
        shards.sort();
        shards.dedup();
        let files: Vec<PathBuf> = shards.into_iter().map(|s| dir.join(s)).collect();
        let weights = Self::open_files(&files)?;
        match parsed
            .weight_map
            .keys()
            .find(|name| !weights.entries.contains_key(*name))
        {
            Some(name) => Err(EngineError::Safetensors {
                path: index,
                reason: format!("{name} is not in its shard"),
            }),
            None => Ok(weights),
        }
    }

    /// Opens the given safetensors files as one set of tensors.
    pub fn open_files(files: &[PathBuf]) -> Result<Self> {
        let mut weights = Weights {
            maps: Vec::new(),
            entries: HashMap::new(),
        };
        for path in files {
            weights.add_file(path)?;
        }
        Ok(weights)
    }

    fn add_file(&mut self, path: &Path) -> Result<()> {
        let file = File::open(path).map_err(|source| EngineError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        // SAFETY: the map is read-only; model files are not modified while the engine runs.
        let map = unsafe { Mmap::map(&file) }.map_err(|source| EngineError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let bad = |reason: String| EngineError::Safetensors {
            path: path.to_path_buf(),
            reason,
        };
        let (header_len, metadata) =
            SafeTensors::read_metadata(&map).map_err(|e| bad(e.to_string()))?;
        let base = 8 + header_len;
        for (name, info) in metadata.tensors() {
            let dtype = match info.dtype {
                Dtype::F32 => Ok(WeightDtype::F32),
                Dtype::BF16 => Ok(WeightDtype::Bf16),
                Dtype::F16 => Ok(WeightDtype::F16),
                other => Err(format!("{other:?}")),
            };
            let (start, end) = (base + info.data_offsets.0, base + info.data_offsets.1);
            let size = dtype.as_ref().map_or(0, |d| d.size());
            if size > 0 && end - start != info.shape.iter().product::<usize>() * size {
                return Err(bad(format!(
                    "tensor {name} has {} bytes for shape {:?}",
                    end - start,
                    info.shape
                )));
            }
            let entry = Entry {
                file: self.maps.len(),
                dtype,
                shape: info.shape.clone(),
                start,
                end,
            };
            self.entries.insert(name, entry);
        }
        self.maps.push(map);
        Ok(())
    }

    /// Whether a tensor of that name exists.
    pub fn contains(&self, name: &str) -> bool {
        self.entries.contains_key(name)
    }

    /// Looks a tensor up by name.
    pub fn get(&self, name: &str) -> Result<TensorRef<'_>> {
        let (key, e) = self
            .entries
            .get_key_value(name)
            .ok_or_else(|| EngineError::MissingTensor { name: name.into() })?;
        let dtype = e
            .dtype
            .clone()
            .map_err(|dtype| EngineError::UnsupportedDtype {
                name: name.into(),
                dtype,
            })?;
        Ok(TensorRef {
            name: key,
            dtype,
            shape: &e.shape,
            bytes: &self.maps[e.file][e.start..e.end],
        })
    }

    /// Names of all tensors (unordered).
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }
}
