//! On-disk layout of the dense index: a manifest, a flat vector file and an entry file.
//!
//! ```text
//! manifest.json         {"dim", "generation", "count", "entries_bytes", "deleted": [slot, ...]}
//! vectors-<gen>.f32     count × dim little-endian f32, slot order
//! entries-<gen>.jsonl   one DenseEntry per slot, same order
//! ```
//! New slots are appended to the current generation's files and become part of the index when
//! the manifest's `count` covers them, so a crash between the two leaves only ignored bytes.
//! Compaction writes a new generation, switches the manifest, then removes the old files.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::{IndexerError, Result};

/// What the dense index knows about a chunk besides its vector (enough to filter).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DenseEntry {
    /// The chunk's id.
    pub chunk_id: u64,
    /// Its document.
    pub document_id: String,
    /// Its collection, if any.
    pub collection: Option<String>,
}

/// The committed state named by `manifest.json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Vector dimension.
    pub dim: usize,
    /// Generation of the data files.
    pub generation: u64,
    /// Number of committed slots.
    pub count: usize,
    /// Byte length of the committed part of the entry file.
    pub entries_bytes: u64,
    /// Tombstoned slots.
    pub deleted: Vec<usize>,
}

/// Entries and vectors loaded from disk.
pub struct Loaded {
    /// The manifest they were read under.
    pub manifest: Manifest,
    /// One entry per slot.
    pub entries: Vec<DenseEntry>,
    /// `count × dim` values.
    pub vectors: Vec<f32>,
}

fn corrupt(path: &Path, reason: impl Into<String>) -> IndexerError {
    IndexerError::CorruptIndex {
        path: path.display().to_string(),
        reason: reason.into(),
    }
}

/// Paths of the files of one generation.
pub fn data_files(dir: &Path, generation: u64) -> (PathBuf, PathBuf) {
    (
        dir.join(format!("vectors-{generation}.f32")),
        dir.join(format!("entries-{generation}.jsonl")),
    )
}

/// Reads the index in `dir`, or `None` when there is no manifest yet.
pub fn load(dir: &Path) -> Result<Option<Loaded>> {
    let path = dir.join("manifest.json");
    if !path.exists() {
        return Ok(None);
    }
    let manifest: Manifest = serde_json::from_slice(&std::fs::read(&path)?)?;
    let (vpath, epath) = data_files(dir, manifest.generation);
    let mut entries = Vec::with_capacity(manifest.count);
    for line in BufReader::new(File::open(&epath)?)
        .lines()
        .take(manifest.count)
    {
        entries.push(serde_json::from_str(&line?)?);
    }
    let mut bytes = vec![0u8; manifest.count * manifest.dim * 4];
    File::open(&vpath)?
        .read_exact(&mut bytes)
        .map_err(|e| corrupt(&vpath, format!("short vector file: {e}")))?;
    if entries.len() != manifest.count {
        return Err(corrupt(&epath, "fewer entries than the manifest counts"));
    }
    let vectors = bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    Ok(Some(Loaded {
        manifest,
        entries,
        vectors,
    }))
}

/// Appends slots to the generation's files (cut first to what `m` covers, dropping the bytes
/// of an interrupted commit); returns the new byte length of the entry file.
pub fn append(dir: &Path, m: &Manifest, entries: &[DenseEntry], vectors: &[f32]) -> Result<u64> {
    let (vpath, epath) = data_files(dir, m.generation);
    let vfile = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&vpath)?;
    vfile.set_len((m.count * m.dim * 4) as u64)?;
    drop(vfile);
    let mut vout = BufWriter::new(OpenOptions::new().append(true).open(&vpath)?);
    for x in vectors {
        vout.write_all(&x.to_le_bytes())?;
    }
    vout.into_inner().map_err(|e| e.into_error())?.sync_data()?;
    let efile = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&epath)?;
    efile.set_len(m.entries_bytes)?;
    drop(efile);
    let mut buf = Vec::new();
    for e in entries {
        serde_json::to_writer(&mut buf, e)?;
        buf.push(b'\n');
    }
    let mut eout = OpenOptions::new().append(true).open(&epath)?;
    eout.write_all(&buf)?;
    eout.sync_data()?;
    Ok(m.entries_bytes + buf.len() as u64)
}

/// Replaces `manifest.json` atomically (write, sync, rename).
pub fn write_manifest(dir: &Path, m: &Manifest) -> Result<()> {
    let tmp = dir.join("manifest.json.tmp");
    let mut f = File::create(&tmp)?;
    f.write_all(&serde_json::to_vec(m)?)?;
    f.sync_all()?;
    std::fs::rename(&tmp, dir.join("manifest.json"))?;
    Ok(())
}

/// Removes the data files of a generation that is no longer current (missing files are fine).
pub fn remove_generation(dir: &Path, generation: u64) {
    let (v, e) = data_files(dir, generation);
    let _ = std::fs::remove_file(v);
    let _ = std::fs::remove_file(e);
}
