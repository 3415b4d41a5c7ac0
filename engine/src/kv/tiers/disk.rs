//! The disk tier: KV blocks pushed out of host memory, one file per block under `kv/<namespace>/`, up to
//! a byte limit, least recently used first out.
//!
//! A file is written whole and durably before it is named (temporary file, fsync, rename), carries a
//! checksum ([`super::record`]), and is believed only when it reads back whole: anything else is deleted
//! and counts as a miss. The index is rebuilt from the directory at start (oldest modification first
//! out), which is how a restarted engine finds what it read before.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use super::lru::LruIndex;
use super::record::{self, HEADER_BYTES, RecordError};
use crate::kv::block_hash::BlockHash;
use crate::kv::manager::CacheNamespace;

#[derive(Debug, Clone, Copy)]
struct DiskEntry {
    namespace: CacheNamespace,
    file_bytes: usize,
}

/// Why a stored block could not be read.
#[derive(Debug)]
pub(crate) enum DiskReadError {
    /// The file is damaged (it has been deleted).
    Corrupt(RecordError),
    /// The file could not be read (it has been forgotten).
    Io(io::Error),
}

/// Blocks in files under one directory.
#[derive(Debug)]
pub(crate) struct DiskTier {
    dir: PathBuf,
    blocks: LruIndex<DiskEntry>,
    bytes: usize,
    limit: usize,
    #[cfg(test)]
    pub(crate) simulate_full: bool,
}

fn block_file(dir: &Path, namespace: CacheNamespace, hash: BlockHash) -> PathBuf {
    dir.join(format!("{namespace:016x}"))
        .join(format!("{:032x}.kv", hash.0))
}

impl DiskTier {
    /// The tier stored under `dir` (created if missing), holding at most `limit` bytes; files already
    /// there are indexed, leftovers of interrupted writes removed, and the oldest dropped while over the
    /// limit.
    pub fn open(dir: &Path, limit: usize) -> io::Result<Self> {
        fs::create_dir_all(dir)?;
        let mut found = Vec::new();
        for ns_dir in fs::read_dir(dir)? {
            let ns_dir = ns_dir?;
            let name = ns_dir.file_name();
            let Some(namespace) = name
                .to_str()
                .and_then(|n| CacheNamespace::from_str_radix(n, 16).ok())
            else {
                continue;
            };
            if !ns_dir.file_type()?.is_dir() {
                continue;
            }
            for file in fs::read_dir(ns_dir.path())? {
                let file = file?;
                let name = file.file_name();
                let name = name.to_string_lossy();
                if name.ends_with(".tmp") {
                    let _ = fs::remove_file(file.path());
                    continue;
                }
                let Some(hash) = name
                    .strip_suffix(".kv")
                    .and_then(|h| u128::from_str_radix(h, 16).ok())
                else {
                    continue;
                };
                let meta = file.metadata()?;
                let modified = meta.modified().unwrap_or(std::time::UNIX_EPOCH);
                found.push((modified, BlockHash(hash), namespace, meta.len() as usize));
            }
        }
        found.sort();
        let mut tier = DiskTier {
            dir: dir.to_path_buf(),
            blocks: LruIndex::default(),
            bytes: 0,
            limit,
            #[cfg(test)]
            simulate_full: false,
        };
        for (_, hash, namespace, file_bytes) in found {
            tier.blocks.insert(
                hash,
                DiskEntry {
                    namespace,
                    file_bytes,
                },
            );
            tier.bytes += file_bytes;
        }
        tier.make_room(0);
        Ok(tier)
    }

    /// Blocks held.
    pub fn len(&self) -> usize {
        self.blocks.len()
    }

    /// Bytes of the files held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Whether `hash` has a file.
    pub fn contains(&self, hash: BlockHash) -> bool {
        self.blocks.contains(hash)
    }

    /// Deletes the least recently used files until `incoming` more bytes fit; returns how many.
    fn make_room(&mut self, incoming: usize) -> usize {
        let mut dropped = 0;
        while self.bytes + incoming > self.limit {
            let Some((hash, entry)) = self.blocks.pop_oldest() else {
                break;
            };
            self.bytes -= entry.file_bytes;
            let _ = fs::remove_file(block_file(&self.dir, entry.namespace, hash));
            dropped += 1;
        }
        dropped
    }

    /// Stores block `hash` of `namespace` durably; returns how many older files were deleted to make
    /// room. An error (a full disk, say) leaves nothing behind.
    pub fn write(
        &mut self,
        hash: BlockHash,
        namespace: CacheNamespace,
        payload: &[u8],
    ) -> io::Result<usize> {
        let file_bytes = HEADER_BYTES + payload.len();
        if file_bytes > self.limit {
            return Err(io::Error::new(
                io::ErrorKind::StorageFull,
                format!(
                    "a block of {file_bytes} bytes is larger than the disk tier ({} bytes)",
                    self.limit
                ),
            ));
        }
        self.remove(hash);
        let dropped = self.make_room(file_bytes);
        let path = block_file(&self.dir, namespace, hash);
        let tmp = path.with_extension("tmp");
        let written = self.write_durably(
            &tmp,
            &path,
            &record::header(hash, namespace, payload),
            payload,
        );
        if written.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        written?;
        self.blocks.insert(
            hash,
            DiskEntry {
                namespace,
                file_bytes,
            },
        );
        self.bytes += file_bytes;
        Ok(dropped)
    }

    fn write_durably(
        &self,
        tmp: &Path,
        path: &Path,
        header: &[u8],
        payload: &[u8],
    ) -> io::Result<()> {
        if let Some(parent) = tmp.parent() {
            fs::create_dir_all(parent)?;
        }
        let mut file = fs::File::create(tmp)?;
        file.write_all(header)?;
        #[cfg(test)]
        if self.simulate_full {
            file.write_all(&payload[..payload.len() / 2])?;
            return Err(io::Error::new(
                io::ErrorKind::StorageFull,
                "no space left on device",
            ));
        }
        file.write_all(payload)?;
        file.sync_all()?;
        drop(file);
        fs::rename(tmp, path)
    }

    /// The block's bytes, marking it used; None when there is no file. A damaged or unreadable file is
    /// dropped and reported.
    pub fn read(&mut self, hash: BlockHash) -> Result<Option<Vec<u8>>, DiskReadError> {
        let Some(&entry) = self.blocks.touch(hash) else {
            return Ok(None);
        };
        let path = block_file(&self.dir, entry.namespace, hash);
        let fail = |tier: &mut Self| {
            tier.blocks.remove(hash);
            tier.bytes -= entry.file_bytes;
            let _ = fs::remove_file(&path);
        };
        let mut file = match fs::read(&path) {
            Ok(file) => file,
            Err(e) => {
                fail(self);
                return Err(DiskReadError::Io(e));
            }
        };
        if let Err(why) = record::decode(&file, hash) {
            fail(self);
            return Err(DiskReadError::Corrupt(why));
        }
        file.drain(..HEADER_BYTES);
        Ok(Some(file))
    }

    /// Deletes block `hash`; true when it had a file.
    pub fn remove(&mut self, hash: BlockHash) -> bool {
        match self.blocks.remove(hash) {
            Some(entry) => {
                self.bytes -= entry.file_bytes;
                let _ = fs::remove_file(block_file(&self.dir, entry.namespace, hash));
                true
            }
            None => false,
        }
    }

    /// Deletes every block of `namespace` and its directory; returns how many blocks.
    pub fn remove_namespace(&mut self, namespace: CacheNamespace) -> usize {
        let gone = self.blocks.remove_where(|e| e.namespace == namespace);
        self.bytes -= gone.iter().map(|(_, e)| e.file_bytes).sum::<usize>();
        let _ = fs::remove_dir_all(self.dir.join(format!("{namespace:016x}")));
        gone.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(n: u8, len: usize) -> Vec<u8> {
        (0..len).map(|i| n.wrapping_add(i as u8)).collect()
    }

    #[test]
    fn a_block_written_reads_back_and_survives_reopening_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        let mut tier = DiskTier::open(dir.path(), 1 << 20).unwrap();
        tier.write(BlockHash(1), 5, &payload(1, 1000)).unwrap();
        assert_eq!(tier.read(BlockHash(1)).unwrap(), Some(payload(1, 1000)));
        drop(tier);
        let mut again = DiskTier::open(dir.path(), 1 << 20).unwrap();
        assert_eq!((again.len(), again.bytes()), (1, HEADER_BYTES + 1000));
        assert_eq!(again.read(BlockHash(1)).unwrap(), Some(payload(1, 1000)));
        assert!(again.read(BlockHash(2)).unwrap().is_none());
    }

    #[test]
    fn over_its_limit_the_tier_deletes_its_least_recently_used_files() {
        let dir = tempfile::tempdir().unwrap();
        let file = HEADER_BYTES + 100;
        let mut tier = DiskTier::open(dir.path(), 3 * file).unwrap();
        for n in 1..=3 {
            assert_eq!(
                tier.write(BlockHash(n), 0, &payload(n as u8, 100)).unwrap(),
                0
            );
        }
        tier.read(BlockHash(1)).unwrap();
        assert_eq!(tier.write(BlockHash(4), 0, &payload(4, 100)).unwrap(), 1);
        assert!(!tier.contains(BlockHash(2)));
        assert!(!block_file(dir.path(), 0, BlockHash(2)).exists());
        assert!(tier.contains(BlockHash(1)));
        assert!(tier.write(BlockHash(5), 0, &payload(5, 3 * file)).is_err());
    }

    #[test]
    fn a_truncated_or_corrupt_file_is_a_miss_and_is_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let mut tier = DiskTier::open(dir.path(), 1 << 20).unwrap();
        tier.write(BlockHash(1), 0, &payload(1, 100)).unwrap();
        tier.write(BlockHash(2), 0, &payload(2, 100)).unwrap();
        let truncated = block_file(dir.path(), 0, BlockHash(1));
        let bytes = fs::read(&truncated).unwrap();
        fs::write(&truncated, &bytes[..bytes.len() - 10]).unwrap();
        let corrupt = block_file(dir.path(), 0, BlockHash(2));
        let mut bytes = fs::read(&corrupt).unwrap();
        bytes[HEADER_BYTES + 3] ^= 0x40;
        fs::write(&corrupt, &bytes).unwrap();
        assert!(matches!(
            tier.read(BlockHash(1)),
            Err(DiskReadError::Corrupt(RecordError::Truncated))
        ));
        assert!(matches!(
            tier.read(BlockHash(2)),
            Err(DiskReadError::Corrupt(RecordError::Checksum))
        ));
        assert!(!truncated.exists() && !corrupt.exists());
        assert_eq!((tier.len(), tier.bytes()), (0, 0));
        assert!(tier.read(BlockHash(1)).unwrap().is_none());
    }

    #[test]
    fn a_full_disk_fails_the_write_and_leaves_no_file_behind() {
        let dir = tempfile::tempdir().unwrap();
        let mut tier = DiskTier::open(dir.path(), 1 << 20).unwrap();
        tier.simulate_full = true;
        let err = tier.write(BlockHash(1), 3, &payload(1, 100)).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::StorageFull);
        assert!(!tier.contains(BlockHash(1)));
        let left: Vec<_> = fs::read_dir(dir.path().join(format!("{:016x}", 3)))
            .unwrap()
            .collect();
        assert!(left.is_empty(), "left behind: {left:?}");
        let reopened = DiskTier::open(dir.path(), 1 << 20).unwrap();
        assert_eq!(reopened.len(), 0);
    }

    #[test]
    fn an_interrupted_write_is_cleaned_up_at_open_and_a_namespace_is_removed_whole() {
        let dir = tempfile::tempdir().unwrap();
        let mut tier = DiskTier::open(dir.path(), 1 << 20).unwrap();
        tier.write(BlockHash(1), 1, &payload(1, 10)).unwrap();
        tier.write(BlockHash(2), 2, &payload(2, 10)).unwrap();
        let stray = block_file(dir.path(), 1, BlockHash(9)).with_extension("tmp");
        fs::write(&stray, b"half a block").unwrap();
        drop(tier);
        let mut tier = DiskTier::open(dir.path(), 1 << 20).unwrap();
        assert!(!stray.exists());
        assert_eq!(tier.remove_namespace(1), 1);
        assert!(!dir.path().join(format!("{:016x}", 1)).exists());
        assert!(tier.contains(BlockHash(2)));
        assert!(tier.remove(BlockHash(2)));
        assert_eq!(tier.bytes(), 0);
    }
}
