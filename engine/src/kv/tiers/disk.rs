//! The disk tier: KV blocks pushed out of host memory, one file per block under `kv/<namespace>/`, up to
//! a byte limit, least recently used first out.
//!
//! A file is written whole and durably before it is named (temporary file, fsync, rename), carries a
//! checksum ([`super::record`]), and is believed only when it reads back whole: anything else is deleted
//! and counts as a miss. The index is rebuilt from the directory at start (oldest modification first
//! out), which is how a restarted engine finds what it read before.
//!
//! The tier is shared between the engine thread (lookups, reads, deletions) and the thread that writes
//! files ([`super::writer`]), behind one lock that is never held over a file's write or read: a write
//! reserves its room ([`DiskTier::begin_write`]), writes without the lock, and is indexed after
//! ([`DiskTier::finish_write`]) unless its block was forgotten meanwhile. A block waiting for its write
//! is found in memory meanwhile ([`DiskTier::queued`]), so a block pushed out a moment ago is not a miss.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use super::BlockBytes;
use super::arena::BlockBuf;
use super::lru::{HasSize, LruIndex};
use super::record::{self, BlockOwner, HEADER_BYTES, RecordError};
use crate::kv::block_hash::BlockHash;
use crate::kv::manager::CacheNamespace;

#[derive(Debug, Clone, Copy)]
pub(crate) struct DiskEntry {
    namespace: CacheNamespace,
    file_bytes: usize,
}

impl HasSize for DiskEntry {
    fn size(&self) -> usize {
        self.file_bytes
    }
}

/// Why a stored block could not be read.
#[derive(Debug)]
pub(crate) enum DiskReadError {
    /// The file is damaged (it has been deleted).
    Corrupt(RecordError),
    /// The file could not be read (it has been forgotten).
    Io(io::Error),
}

impl std::fmt::Display for DiskReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DiskReadError::Corrupt(why) => write!(f, "damaged file ({why:?})"),
            DiskReadError::Io(e) => write!(f, "unreadable file ({e})"),
        }
    }
}

/// Blocks in files under one directory.
#[derive(Debug)]
pub(crate) struct DiskTier {
    dir: PathBuf,
    blocks: LruIndex<DiskEntry>,
    /// Bytes of writes under way.
    reserved: usize,
    limit: usize,
    /// Blocks and namespaces forgotten while a write of theirs may be under way.
    forgotten: HashSet<BlockHash>,
    forgotten_namespaces: HashSet<CacheNamespace>,
    /// Blocks handed to the writer and not written yet, with their bytes.
    in_queue: HashMap<BlockHash, (CacheNamespace, BlockBytes)>,
    /// Bytes written since start.
    pub written_bytes: u64,
    /// Files deleted to stay under the limit since start.
    pub evictions: u64,
    /// Failed writes and damaged files since start.
    pub errors: u64,
    #[cfg(test)]
    pub(crate) simulate_full: bool,
}

/// A write [`DiskTier::begin_write`] made room for: done without the tier's lock, then handed to
/// [`DiskTier::finish_write`].
pub(crate) struct PendingWrite {
    hash: BlockHash,
    owner: BlockOwner,
    path: PathBuf,
    file_bytes: usize,
    /// Files of blocks the index no longer holds (older ones dropped to make room, or this block's
    /// previous file elsewhere), deleted by [`PendingWrite::write`] before it writes. A reader that
    /// found one in the index just before meets a missing file, which is a miss.
    stale: Vec<PathBuf>,
    simulate_full: bool,
}

impl PendingWrite {
    /// Deletes the stale files, then writes the file durably (temporary file, fsync, rename); an
    /// error leaves nothing behind. Both without the tier's lock: on a disk busy with other writes'
    /// fsyncs a deletion may wait behind them, and under the lock the engine
    /// thread waited with it: on an H100 its stores into the tiers took 34–117 ms a step once a long
    /// document's KV filled the tier, 0–45 ms with the deletions here.
    pub fn write(&self, payload: &[u8]) -> io::Result<()> {
        for file in &self.stale {
            let _ = fs::remove_file(file);
        }
        let tmp = self.path.with_extension("tmp");
        let header = record::header(self.hash, self.owner, payload);
        let written = write_durably(&tmp, &self.path, &header, payload, self.simulate_full);
        if written.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        written
    }
}

fn write_durably(
    tmp: &Path,
    path: &Path,
    header: &[u8],
    payload: &[u8],
    simulate_full: bool,
) -> io::Result<()> {
    if let Some(parent) = tmp.parent() {
        fs::create_dir_all(parent)?;
    }
    let mut file = fs::File::create(tmp)?;
    file.write_all(header)?;
    if simulate_full {
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

/// Reads and checks block `hash`'s file at `path`: its payload, read straight into a buffer `buffer`
/// makes for the length the header states.
pub(crate) fn read_record(
    path: &Path,
    hash: BlockHash,
    buffer: impl FnOnce(usize) -> BlockBuf,
) -> Result<BlockBuf, DiskReadError> {
    let mut file = fs::File::open(path).map_err(DiskReadError::Io)?;
    let file_len = file.metadata().map_err(DiskReadError::Io)?.len();
    let mut header = [0u8; HEADER_BYTES];
    file.read_exact(&mut header).map_err(|e| match e.kind() {
        io::ErrorKind::UnexpectedEof => DiskReadError::Corrupt(RecordError::Truncated),
        _ => DiskReadError::Io(e),
    })?;
    let len = record::payload_len(&header, hash).map_err(DiskReadError::Corrupt)?;
    if file_len != HEADER_BYTES as u64 + len {
        return Err(DiskReadError::Corrupt(RecordError::Truncated));
    }
    let mut payload = buffer(len as usize);
    file.read_exact(&mut payload).map_err(DiskReadError::Io)?;
    record::check(&header, &payload, hash).map_err(DiskReadError::Corrupt)?;
    Ok(payload)
}

/// The parent the header of the file at `path` names (unverified; see [`record::parent_hint`]).
pub(crate) fn read_parent(path: &Path) -> Option<BlockHash> {
    let mut header = [0u8; HEADER_BYTES];
    fs::File::open(path).ok()?.read_exact(&mut header).ok()?;
    record::parent_hint(&header)
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
            reserved: 0,
            limit,
            forgotten: HashSet::new(),
            forgotten_namespaces: HashSet::new(),
            in_queue: HashMap::new(),
            written_bytes: 0,
            evictions: 0,
            errors: 0,
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
        }
        for file in tier.make_room(0) {
            let _ = fs::remove_file(file);
        }
        Ok(tier)
    }

    /// Blocks held.
    pub fn len(&self) -> usize {
        self.blocks.len()
    }

    /// Bytes of the files held.
    pub fn bytes(&self) -> usize {
        self.blocks.bytes()
    }

    /// How many files of blocks of `payload_len` bytes the tier's limit holds.
    pub fn files_that_fit(&self, payload_len: usize) -> usize {
        self.limit / (HEADER_BYTES + payload_len)
    }

    /// Whether `hash` has a file.
    pub fn contains(&self, hash: BlockHash) -> bool {
        self.blocks.contains(hash) || self.in_queue.contains_key(&hash)
    }

    /// Notes that block `hash` of `namespace` is handed to the writer, so it is found before its file
    /// is written.
    pub fn enqueue(&mut self, hash: BlockHash, namespace: CacheNamespace, bytes: BlockBytes) {
        self.in_queue.insert(hash, (namespace, bytes));
    }

    /// Ends [`DiskTier::enqueue`]: the writer is done with `hash` (written or not).
    pub fn dequeue(&mut self, hash: BlockHash) {
        self.in_queue.remove(&hash);
    }

    /// Blocks handed to the writer and not written yet.
    pub fn queue_len(&self) -> usize {
        self.in_queue.len()
    }

    /// The bytes of block `hash` while it waits for the writer.
    pub fn queued(&self, hash: BlockHash) -> Option<BlockBytes> {
        self.in_queue.get(&hash).map(|(_, b)| b.clone())
    }

    /// Drops the least recently used blocks from the index until `incoming` more bytes fit, counted as
    /// evictions; returns their files, for the caller to delete.
    fn make_room(&mut self, incoming: usize) -> Vec<PathBuf> {
        let mut stale = Vec::new();
        while self.blocks.bytes() + self.reserved + incoming > self.limit {
            let Some((hash, entry)) = self.blocks.pop_oldest() else {
                break;
            };
            stale.push(block_file(&self.dir, entry.namespace, hash));
        }
        self.evictions += stale.len() as u64;
        stale
    }

    /// Makes room for block `hash` of `owner` (`payload_len` bytes) and reserves it; the write itself
    /// is then done without the lock. Fails when one block is larger than the whole tier.
    pub fn begin_write(
        &mut self,
        hash: BlockHash,
        owner: BlockOwner,
        payload_len: usize,
    ) -> io::Result<PendingWrite> {
        let namespace = owner.namespace;
        let file_bytes = HEADER_BYTES + payload_len;
        if file_bytes > self.limit {
            return Err(io::Error::new(
                io::ErrorKind::StorageFull,
                format!(
                    "a block of {file_bytes} bytes is larger than the disk tier ({} bytes)",
                    self.limit
                ),
            ));
        }
        let path = block_file(&self.dir, namespace, hash);
        self.in_queue.remove(&hash);
        let previous = self.blocks.remove(hash);
        let mut stale = self.make_room(file_bytes);
        // The block's previous file, where it lies elsewhere: at the same path the rename replaces it,
        // and a deletion after the rename would take the new file.
        stale.extend(
            previous
                .map(|e| block_file(&self.dir, e.namespace, hash))
                .filter(|old| *old != path),
        );
        self.reserved += file_bytes;
        Ok(PendingWrite {
            hash,
            owner,
            path,
            file_bytes,
            stale,
            #[cfg(test)]
            simulate_full: self.simulate_full,
            #[cfg(not(test))]
            simulate_full: false,
        })
    }

    /// Indexes a finished write (or counts its failure). A block forgotten while it was written is
    /// deleted instead.
    pub fn finish_write(&mut self, w: PendingWrite, written: io::Result<()>) -> io::Result<()> {
        self.reserved -= w.file_bytes;
        if written.is_err() {
            self.errors += 1;
            // A previous file of the block, which the rename would have replaced: the index no
            // longer counts it.
            let _ = fs::remove_file(&w.path);
        }
        written?;
        if self.forgotten.contains(&w.hash)
            || self.forgotten_namespaces.contains(&w.owner.namespace)
        {
            let _ = fs::remove_file(&w.path);
            return Ok(());
        }
        self.blocks.insert(
            w.hash,
            DiskEntry {
                namespace: w.owner.namespace,
                file_bytes: w.file_bytes,
            },
        );
        self.written_bytes += (w.file_bytes - HEADER_BYTES) as u64;
        Ok(())
    }

    /// Stores block `hash` of `namespace` durably, all under the caller's hold on the tier; returns how
    /// many older files were deleted to make room. An error (a full disk, say) leaves nothing behind.
    #[cfg(test)]
    pub fn write(
        &mut self,
        hash: BlockHash,
        owner: impl Into<BlockOwner>,
        payload: &[u8],
    ) -> io::Result<usize> {
        let before = self.evictions;
        let pending = self.begin_write(hash, owner.into(), payload.len())?;
        let written = pending.write(payload);
        self.finish_write(pending, written)?;
        Ok((self.evictions - before) as usize)
    }

    /// The blocks of `namespace` held, with their files.
    pub fn files_of(&self, namespace: CacheNamespace) -> Vec<(BlockHash, PathBuf)> {
        self.blocks
            .iter_oldest_first()
            .filter(|(_, e)| e.namespace == namespace)
            .map(|(h, _)| (h, block_file(&self.dir, namespace, h)))
            .collect()
    }

    /// Where block `hash`'s file is, marking it used; None when there is none.
    pub fn locate(&mut self, hash: BlockHash) -> Option<PathBuf> {
        let entry = *self.blocks.touch(hash)?;
        Some(block_file(&self.dir, entry.namespace, hash))
    }

    /// Drops a block whose file turned out damaged or unreadable (and deletes the file).
    pub fn drop_damaged(&mut self, hash: BlockHash) {
        self.errors += 1;
        self.remove(hash);
    }

    /// Forgets `hash` now and keeps it forgotten until [`DiskTier::settle_forgotten`], so a write of
    /// it under way is not indexed.
    pub fn forget(&mut self, hash: BlockHash) -> bool {
        self.forgotten.insert(hash);
        self.remove(hash)
    }

    /// Forgets `namespace` now, likewise.
    pub fn forget_namespace(&mut self, namespace: CacheNamespace) -> usize {
        self.forgotten_namespaces.insert(namespace);
        self.remove_namespace(namespace)
    }

    /// Ends the forgetting of [`DiskTier::forget`] and [`DiskTier::forget_namespace`]: called by the
    /// writer once every write queued before them is done.
    pub fn settle_forgotten(&mut self, hash: Option<BlockHash>, namespace: Option<CacheNamespace>) {
        if let Some(h) = hash {
            self.forgotten.remove(&h);
        }
        if let Some(n) = namespace {
            self.forgotten_namespaces.remove(&n);
        }
    }

    /// The block's bytes, marking it used; None when there is no file. A damaged or unreadable file is
    /// dropped and reported.
    #[cfg(test)]
    pub fn read(&mut self, hash: BlockHash) -> Result<Option<Vec<u8>>, DiskReadError> {
        let Some(path) = self.locate(hash) else {
            return Ok(None);
        };
        read_record(&path, hash, |len| BlockBuf::from(vec![0; len]))
            .inspect_err(|_| self.drop_damaged(hash))
            .map(|b| Some(b.to_vec()))
    }

    /// Deletes block `hash`; true when it had a file.
    pub fn remove(&mut self, hash: BlockHash) -> bool {
        let queued = self.in_queue.remove(&hash).is_some();
        match self.blocks.remove(hash) {
            Some(entry) => {
                let _ = fs::remove_file(block_file(&self.dir, entry.namespace, hash));
                true
            }
            None => queued,
        }
    }

    /// Deletes every block of `namespace` and its directory; returns how many blocks.
    pub fn remove_namespace(&mut self, namespace: CacheNamespace) -> usize {
        let gone = self.blocks.remove_where(|e| e.namespace == namespace);
        let _ = fs::remove_dir_all(self.dir.join(format!("{namespace:016x}")));
        let on_disk: HashSet<BlockHash> = gone.iter().map(|(h, _)| *h).collect();
        let mut only_queued = 0;
        self.in_queue.retain(|h, (n, _)| {
            let drop = *n == namespace;
            only_queued += usize::from(drop && !on_disk.contains(h));
            !drop
        });
        on_disk.len() + only_queued
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(n: u8, len: usize) -> Vec<u8> {
        (0..len).map(|i| n.wrapping_add(i as u8)).collect()
    }

    #[test]
    fn a_block_waiting_for_the_writer_is_found_in_memory_until_it_is_written_or_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let mut tier = DiskTier::open(dir.path(), 1 << 20).unwrap();
        let bytes = |n: u8| std::sync::Arc::new(BlockBuf::from(payload(n, 100)));
        tier.enqueue(BlockHash(1), 5, bytes(1));
        tier.enqueue(BlockHash(2), 5, bytes(2));
        tier.enqueue(BlockHash(3), 6, bytes(3));
        assert!(tier.contains(BlockHash(1)));
        assert_eq!(tier.queued(BlockHash(1)).unwrap().to_vec(), payload(1, 100));
        assert_eq!(tier.len(), 0, "no file yet");
        tier.write(BlockHash(1), 5, &payload(1, 100)).unwrap();
        tier.dequeue(BlockHash(1));
        assert!(tier.queued(BlockHash(1)).is_none());
        assert!(tier.contains(BlockHash(1)), "now on disk");
        assert!(tier.forget(BlockHash(3)));
        assert!(!tier.contains(BlockHash(3)));
        assert_eq!(
            tier.forget_namespace(5),
            2,
            "block 1 on disk and block 2 in the queue, counted once each"
        );
        assert!(!tier.contains(BlockHash(2)));
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
    fn the_files_dropped_to_make_room_are_deleted_by_the_write_not_under_the_tiers_lock() {
        let dir = tempfile::tempdir().unwrap();
        let file = HEADER_BYTES + 100;
        let mut tier = DiskTier::open(dir.path(), 2 * file).unwrap();
        tier.write(BlockHash(1), 0, &payload(1, 100)).unwrap();
        tier.write(BlockHash(2), 0, &payload(2, 100)).unwrap();
        // Making room drops block 1 from the index at once, counted; its file stays until the write
        // (done by the writer without the lock) deletes it.
        let pending = tier
            .begin_write(BlockHash(3), BlockOwner::from(0), 100)
            .unwrap();
        assert!(!tier.contains(BlockHash(1)));
        assert_eq!(tier.evictions, 1);
        assert!(block_file(dir.path(), 0, BlockHash(1)).exists());
        pending.write(&payload(3, 100)).unwrap();
        assert!(!block_file(dir.path(), 0, BlockHash(1)).exists());
        tier.finish_write(pending, Ok(())).unwrap();
        assert_eq!(tier.read(BlockHash(3)).unwrap(), Some(payload(3, 100)));
        // Writing a block again keeps its one file: the rename replaces it, nothing deletes it after.
        tier.write(BlockHash(3), 0, &payload(9, 100)).unwrap();
        assert_eq!(tier.read(BlockHash(3)).unwrap(), Some(payload(9, 100)));
        assert_eq!(tier.len(), 2);
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
