//! Reading files out of a wheel (a zip archive) with the `zip` crate.

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::{Component, Path, PathBuf};

use zip::ZipArchive;

use super::FetchProgress;
use crate::error::{EngineError, Result};

/// Extracts every file under `prefix/` in `wheel` into `dest`, without the prefix. Returns the relative
/// paths written. Entries whose path would leave `dest` are rejected.
pub fn extract_dir(wheel: &Path, prefix: &str, dest: &Path, progress: &dyn FetchProgress) -> Result<Vec<PathBuf>> {
    let bad = |problem: String| EngineError::Wheel {
        path: wheel.to_path_buf(),
        problem,
    };
    let file = File::open(wheel).map_err(|e| EngineError::io(wheel, e))?;
    let mut archive = ZipArchive::new(file).map_err(|e| bad(format!("not a zip archive: {e}")))?;
    let selected = select_entries(&mut archive, prefix).map_err(|e| bad(e.to_string()))?;
    if selected.is_empty() {
        return Err(bad(format!("contains no files under {prefix}/")));
    }
    let total: u64 = selected.iter().map(|(_, _, size)| size).sum();
    let mut done = 0u64;
    let mut written = Vec::new();
    for (index, relative, _) in selected {
        let mut entry = archive.by_index(index).map_err(|e| bad(e.to_string()))?;
        let target = dest.join(&relative);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(|e| EngineError::io(parent, e))?;
        }
        done += copy_entry(&mut entry, &target, |n| progress.advance(done + n, total))?;
        written.push(relative);
    }
    Ok(written)
}

/// `(index, path relative to prefix, size)` of every file entry under `prefix/`.
fn select_entries(archive: &mut ZipArchive<File>, prefix: &str) -> zip::result::ZipResult<Vec<(usize, PathBuf, u64)>> {
    let mut out = Vec::new();
    for index in 0..archive.len() {
        let entry = archive.by_index(index)?;
        if entry.is_dir() {
            continue;
        }
        let Some(path) = entry.enclosed_name() else {
            continue;
        };
        if let Ok(relative) = path.strip_prefix(prefix)
            && relative.components().all(|c| matches!(c, Component::Normal(_)))
        {
            out.push((index, relative.to_path_buf(), entry.size()));
        }
    }
    Ok(out)
}

/// Streams one entry to `target`, reporting bytes copied so far; returns the byte count.
fn copy_entry(entry: &mut impl Read, target: &Path, report: impl Fn(u64)) -> Result<u64> {
    let io = |e| EngineError::io(target, e);
    let mut out = BufWriter::new(File::create(target).map_err(io)?);
    let mut buf = vec![0u8; 1 << 20];
    let mut copied = 0u64;
    loop {
        let n = entry.read(&mut buf).map_err(io)?;
        if n == 0 {
            break;
        }
        out.write_all(&buf[..n]).map_err(io)?;
        copied += n as u64;
        report(copied);
    }
    out.flush().map_err(io)?;
    Ok(copied)
}
