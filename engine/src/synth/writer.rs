//! Safetensors files of random tensors, written as they are drawn: the header first (offsets follow from
//! the shapes), then one tensor at a time through a buffered writer, so memory stays a few megabytes
//! whatever the model's size. Sharding follows HF's `save_pretrained`: a new shard starts when the next
//! tensor would take the current one past the limit, and `model.safetensors.index.json` maps every
//! tensor to its shard.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use super::shape::TensorSpec;
use crate::error::{EngineError, Result};
use crate::test_rng::Rng;
use crate::weights::WeightDtype;

/// HF's default shard limit (`max_shard_size="5GB"`).
pub const DEFAULT_SHARD_BYTES: u64 = 5_000_000_000;

/// Values drawn and converted per write.
const CHUNK: usize = 1 << 20;

const INDEX: &str = "model.safetensors.index.json";

fn bytes_per(dtype: WeightDtype) -> u64 {
    match dtype {
        WeightDtype::F32 => 4,
        WeightDtype::Bf16 | WeightDtype::F16 => 2,
    }
}

fn tag(dtype: WeightDtype) -> &'static str {
    match dtype {
        WeightDtype::F32 => "F32",
        WeightDtype::Bf16 => "BF16",
        WeightDtype::F16 => "F16",
    }
}

/// Draws every tensor of `specs`, in order, and writes them as one safetensors file of `dtype`.
pub fn write_safetensors(
    path: &Path,
    specs: &[TensorSpec],
    dtype: WeightDtype,
    rng: &mut Rng,
) -> Result<()> {
    let io = |e| EngineError::io(path, e);
    let mut header = Map::new();
    header.insert("__metadata__".into(), json!({"format": "pt"}));
    let mut offset = 0u64;
    for t in specs {
        let end = offset + t.numel() as u64 * bytes_per(dtype);
        let info = json!({"dtype": tag(dtype), "shape": t.shape, "data_offsets": [offset, end]});
        header.insert(t.name.clone(), info);
        offset = end;
    }
    let mut text = Value::Object(header).to_string();
    while !text.len().is_multiple_of(8) {
        text.push(' ');
    }
    let mut out = BufWriter::with_capacity(8 << 20, File::create(path).map_err(io)?);
    out.write_all(&(text.len() as u64).to_le_bytes())
        .map_err(io)?;
    out.write_all(text.as_bytes()).map_err(io)?;
    let mut bytes = Vec::with_capacity(CHUNK * 4);
    for t in specs {
        let mut left = t.numel();
        while left > 0 {
            let n = left.min(CHUNK);
            bytes.clear();
            for _ in 0..n {
                let v = rng.uniform() * t.scale + t.offset;
                match dtype {
                    WeightDtype::F32 => bytes.extend_from_slice(&v.to_le_bytes()),
                    WeightDtype::Bf16 => {
                        bytes.extend_from_slice(&half::bf16::from_f32(v).to_le_bytes())
                    }
                    WeightDtype::F16 => {
                        bytes.extend_from_slice(&half::f16::from_f32(v).to_le_bytes())
                    }
                }
            }
            out.write_all(&bytes).map_err(io)?;
            left -= n;
        }
    }
    out.flush().map_err(io)
}

/// Splits `specs` into shards of at most `max_bytes` each (a tensor larger than that gets a shard of
/// its own), keeping their order.
pub fn plan_shards(
    specs: &[TensorSpec],
    dtype: WeightDtype,
    max_bytes: u64,
) -> Vec<Vec<TensorSpec>> {
    let mut shards: Vec<Vec<TensorSpec>> = vec![Vec::new()];
    let mut size = 0u64;
    for t in specs {
        let bytes = t.numel() as u64 * bytes_per(dtype);
        let current = shards.last_mut().expect("at least one shard");
        if !current.is_empty() && size + bytes > max_bytes {
            shards.push(Vec::new());
            size = 0;
        }
        shards
            .last_mut()
            .expect("at least one shard")
            .push(t.clone());
        size += bytes;
    }
    shards
}

/// Writes `specs` into `dir` as HF does: `model.safetensors` when they fit in one shard of `max_bytes`,
/// else `model-0000i-of-0000n.safetensors` and `model.safetensors.index.json`. Weight files left from an
/// earlier checkpoint in `dir` are removed first. Returns the files written.
pub fn write_weights(
    dir: &Path,
    specs: &[TensorSpec],
    dtype: WeightDtype,
    max_bytes: u64,
    rng: &mut Rng,
) -> Result<Vec<PathBuf>> {
    remove_old_weights(dir)?;
    let shards = plan_shards(specs, dtype, max_bytes);
    if shards.len() == 1 {
        let path = dir.join("model.safetensors");
        write_safetensors(&path, specs, dtype, rng)?;
        return Ok(vec![path]);
    }
    let n = shards.len();
    let mut weight_map = Map::new();
    let mut files = Vec::with_capacity(n + 1);
    for (i, shard) in shards.iter().enumerate() {
        let file = format!("model-{:05}-of-{n:05}.safetensors", i + 1);
        for t in shard {
            weight_map.insert(t.name.clone(), json!(file));
        }
        let path = dir.join(&file);
        write_safetensors(&path, shard, dtype, rng)?;
        files.push(path);
    }
    let total: u64 = specs
        .iter()
        .map(|t| t.numel() as u64 * bytes_per(dtype))
        .sum();
    let index = json!({"metadata": {"total_size": total}, "weight_map": weight_map});
    let path = dir.join(INDEX);
    let text = serde_json::to_string_pretty(&index).map_err(|e| EngineError::json(&path, e))?;
    std::fs::write(&path, text).map_err(|e| EngineError::io(&path, e))?;
    files.push(path);
    Ok(files)
}

/// Removes `model.safetensors`, the index and `model-*-of-*.safetensors` shards from `dir`.
fn remove_old_weights(dir: &Path) -> Result<()> {
    let entries = std::fs::read_dir(dir).map_err(|e| EngineError::io(dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| EngineError::io(dir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let shard =
            name.starts_with("model-") && name.contains("-of-") && name.ends_with(".safetensors");
        if shard || name == "model.safetensors" || name == INDEX {
            let path = entry.path();
            std::fs::remove_file(&path).map_err(|e| EngineError::io(&path, e))?;
        }
    }
    Ok(())
}
