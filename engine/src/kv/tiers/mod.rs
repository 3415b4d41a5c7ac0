//! Tiered KV memory behind the device pool: blocks the pool evicts go to host memory, and from there to
//! files on disk, each tier under its own byte limit, least recently used first out (LMCache's and
//! SGLang HiCache's idea, for docqa's own block pool).
//!
//! Blocks are keyed by their [`BlockHash`], which already covers the whole token prefix, the tenant's
//! cache namespace and the engine's cache salt (model weights, adapter, KV dtype, RoPE settings), so a
//! stored block can only ever be found again by the same prefix of the same tenant on the same model and
//! settings. The tiers hold bytes; moving them in and out of the device pool is the engine core's part
//! ([`crate::serving::EngineCore`]).

mod arena;
mod disk;
mod fingerprint;
mod host;
mod lru;
mod record;
mod writer;

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use rayon::prelude::*;

use crate::error::{EngineError, Result};
use crate::kv::block_hash::BlockHash;
use crate::kv::manager::CacheNamespace;
use disk::DiskTier;
use host::{HostBlock, HostTier};
use writer::DiskWriter;

pub use arena::{BlockArena, BlockBuf, DeviceFence, HostAllocator, HostMemory, heap_allocator};
pub use fingerprint::weights_fingerprint;
pub use record::BlockOwner;

/// One KV block's content over every layer, as [`crate::models::KvPool::read_blocks`] lays it out.
pub type BlockBytes = Arc<BlockBuf>;

/// Host memory for records in transit by default ([`TierSettings::transit_bytes`]).
const DEFAULT_TRANSIT_BYTES: usize = 1 << 30;

/// Sizes and policy of the lower tiers.
#[derive(Debug, Clone, PartialEq)]
pub struct TierSettings {
    /// Host-memory tier limit in bytes (0: no host tier).
    pub host_bytes: usize,
    /// Disk tier: its directory and limit in bytes (None or 0 bytes: no disk tier).
    pub disk: Option<(PathBuf, usize)>,
    /// Share of the device pool's blocks (running requests' blocks and cached blocks not yet copied
    /// down) above which cached blocks are copied to the host tier ahead of their eviction.
    pub high_water: f64,
    /// Host memory for block records beyond the host tier's limit: blocks on their way to disk, and
    /// blocks read back from disk on their way to the device (a larger document streams through it).
    pub transit_bytes: usize,
    /// Copy each block down as soon as it is computed, when host memory for records is free, instead
    /// of when it is evicted: to host memory and on to disk at once. Evicting it later costs nothing,
    /// and with a disk tier a document read is on disk within moments, so it survives a crash.
    pub write_through: bool,
}

impl Default for TierSettings {
    fn default() -> Self {
        TierSettings {
            host_bytes: 0,
            disk: None,
            high_water: 0.85,
            transit_bytes: DEFAULT_TRANSIT_BYTES,
            write_through: false,
        }
    }
}

impl TierSettings {
    /// Whether any lower tier is configured.
    pub fn enabled(&self) -> bool {
        self.host_bytes > 0 || self.disk.as_ref().is_some_and(|(_, b)| *b > 0)
    }
}

/// Which lower tier a block was found in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tier {
    /// Host memory: the host tier, or a block pushed out of it and waiting for its disk write.
    Host,
    /// A file on disk.
    Disk,
}

/// What the tiers hold and what has moved through them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TierStats {
    /// Blocks in host memory.
    pub host_blocks: u64,
    /// Bytes in host memory.
    pub host_bytes: u64,
    /// Blocks on disk.
    pub disk_blocks: u64,
    /// Bytes on disk (files, headers included).
    pub disk_bytes: u64,
    /// Blocks brought back to the device from host memory.
    pub host_hits: u64,
    /// Blocks brought back to the device from disk.
    pub disk_hits: u64,
    /// Blocks copied from the device down to host memory (or straight to disk without a host tier).
    pub offloaded_blocks: u64,
    /// Bytes copied from the device down.
    pub bytes_offloaded: u64,
    /// Bytes written to disk.
    pub bytes_to_disk: u64,
    /// Bytes brought back to the device.
    pub bytes_reloaded: u64,
    /// Blocks pushed out of host memory (to disk, or dropped without a disk tier).
    pub host_evictions: u64,
    /// Files deleted to stay under the disk limit.
    pub disk_evictions: u64,
    /// Disk writes that failed (a full disk) and files found damaged on reading; each is a miss.
    pub disk_errors: u64,
}

fn buffer_for(arena: Option<&Arc<BlockArena>>, bytes: usize) -> BlockBuf {
    match arena {
        Some(a) if a.slot_bytes() == bytes => BlockBuf::new_in(a),
        _ => BlockBuf::from(vec![0u8; bytes]),
    }
}

/// The disk tier, shared with its writer thread.
#[derive(Debug)]
struct Disk {
    tier: Arc<Mutex<DiskTier>>,
    writer: DiskWriter,
}

impl Disk {
    fn lock(&self) -> std::sync::MutexGuard<'_, DiskTier> {
        self.tier.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Hands `block` to the writer, findable in memory until its file is written.
    fn write(&self, hash: BlockHash, block: HostBlock) {
        self.lock()
            .enqueue(hash, block.owner.namespace, block.bytes.clone());
        self.writer.write(hash, block.owner, block.bytes);
    }

    /// [`Disk::write`] if the writer's queue has room now, without waiting for it; whether it had.
    fn try_write(&self, hash: BlockHash, block: HostBlock) -> bool {
        let namespace = block.owner.namespace;
        self.lock().enqueue(hash, namespace, block.bytes.clone());
        let queued = self.writer.try_write(hash, block.owner, block.bytes);
        if !queued {
            self.lock().dequeue(hash);
        }
        queued
    }
}

/// The host and disk tiers of one engine.
#[derive(Debug)]
pub struct KvTiers {
    host: HostTier,
    arena: Option<Arc<BlockArena>>,
    /// Slots for blocks read back from disk on their way to the device, apart from the arena so a
    /// backlog of writes to disk never leaves a reload without room.
    read_arena: Option<Arc<BlockArena>>,
    disk: Option<Disk>,
    high_water: f64,
    transit_bytes: usize,
    write_through: bool,
    stats: TierStats,
    /// Namespaces whose lineage was read from the disk tier's files ([`KvTiers::disk_lineage`]).
    lineage_read: HashSet<CacheNamespace>,
}

impl KvTiers {
    /// Opens the tiers `settings` describe; the disk tier indexes the blocks already in its directory
    /// and starts its writer thread.
    pub fn open(settings: &TierSettings) -> Result<Self> {
        if !(settings.high_water > 0.0 && settings.high_water <= 1.0) {
            return Err(EngineError::InvalidConfig(format!(
                "a KV high-water mark of {} is not in (0, 1]",
                settings.high_water
            )));
        }
        let disk = match &settings.disk {
            Some((dir, limit)) if *limit > 0 => {
                let cannot = |e: std::io::Error| {
                    EngineError::InvalidConfig(format!(
                        "the KV disk tier at {} cannot be opened: {e}",
                        dir.display()
                    ))
                };
                let tier = Arc::new(Mutex::new(DiskTier::open(dir, *limit).map_err(cannot)?));
                let writer = DiskWriter::spawn(Arc::clone(&tier)).map_err(cannot)?;
                Some(Disk { tier, writer })
            }
            _ => None,
        };
        Ok(KvTiers {
            host: HostTier::new(settings.host_bytes),
            arena: None,
            read_arena: None,
            disk,
            high_water: settings.high_water,
            transit_bytes: settings.transit_bytes,
            write_through: settings.write_through,
            stats: TierStats::default(),
            lineage_read: HashSet::new(),
        })
    }

    /// Keeps block records in slots of `block_bytes` allocated by `allocate` (pinned memory on CUDA):
    /// as many as the host tier holds and [`TierSettings::transit_bytes`] more for blocks on their way
    /// down, and with a disk tier, as many again for blocks read back from disk. `pinned`: the memory
    /// is slow to allocate and is all allocated in the background at once ([`BlockArena::eager`]);
    /// otherwise a little ahead of need.
    pub fn use_host_memory(&mut self, block_bytes: usize, allocate: HostAllocator, pinned: bool) {
        let arena = match pinned {
            true => BlockArena::eager,
            false => BlockArena::new,
        };
        let bytes = self.host.limit() + self.transit_bytes;
        if self.disk.is_some() && self.transit_bytes >= block_bytes {
            self.read_arena = Some(arena(
                block_bytes,
                self.transit_bytes,
                Arc::clone(&allocate),
            ));
        }
        self.arena = Some(arena(block_bytes, bytes, allocate));
    }

    /// Waits up to `timeout` until the host memory for records is all allocated (it is, in the
    /// background, from [`KvTiers::use_host_memory`] on); whether it is.
    pub fn wait_for_host_memory(&self, timeout: std::time::Duration) -> bool {
        [&self.arena, &self.read_arena]
            .into_iter()
            .flatten()
            .all(|a| a.wait_grown(timeout))
    }

    /// A buffer for one block record of `bytes`: an arena slot when the arena's slots are that size and
    /// one is free, else heap memory.
    pub fn block_buffer(&self, bytes: usize) -> BlockBuf {
        buffer_for(self.arena.as_ref(), bytes)
    }

    /// Whether blocks are copied down as soon as they are computed ([`TierSettings::write_through`]).
    pub fn writes_through(&self) -> bool {
        self.write_through
    }

    /// Whether blocks wait for the disk writer.
    pub fn writing_to_disk(&self) -> bool {
        self.disk.as_ref().is_some_and(|d| d.lock().queue_len() > 0)
    }

    /// Blocks that may be copied down now for [`TierSettings::write_through`] (0 when it is off): as
    /// many as fit the free host memory for records, less an eighth of it kept for evictions, and room
    /// in the disk writer's queue, so a copy never waits for the disk ([`copies_the_queue_takes`]).
    pub fn room_for_copies(&self) -> usize {
        if !self.write_through {
            return 0;
        }
        let memory = self.arena.as_ref().map_or(usize::MAX, |a| {
            a.free_slots().saturating_sub(a.capacity() / 8)
        });
        let queue = self.disk.as_ref().map_or(usize::MAX, |d| {
            let room = writer::QUEUE.saturating_sub(d.lock().queue_len());
            copies_the_queue_takes(room, self.host_free_blocks())
        });
        memory.min(queue)
    }

    /// The most blocks the tiers hold at once, in records of host memory's slot size (None before
    /// [`KvTiers::use_host_memory`] gives that size). Under write-through a block is kept in host
    /// memory and on disk both, so the larger of the two bounds it; otherwise a block pushed out of
    /// host memory leaves it for the disk, and the two add up.
    pub fn blocks_held_at_once(&self) -> Option<usize> {
        let slot = self.arena.as_ref()?.slot_bytes().max(1);
        let host = self.host.limit() / slot;
        let disk = self
            .disk
            .as_ref()
            .map_or(0, |d| d.lock().files_that_fit(slot));
        Some(match self.write_through {
            true => host.max(disk),
            false => host + disk,
        })
    }

    /// Blocks the host tier takes before it pushes any out (none known without host memory for
    /// records, whose slots give a block's size).
    fn host_free_blocks(&self) -> usize {
        self.arena.as_ref().map_or(0, |a| {
            self.host.limit().saturating_sub(self.host.bytes()) / a.slot_bytes().max(1)
        })
    }

    /// The device pool's high-water mark.
    pub fn high_water(&self) -> f64 {
        self.high_water
    }

    /// Whether a lower tier holds `hash`.
    pub fn contains(&self, hash: BlockHash) -> bool {
        self.host.contains(hash) || self.disk.as_ref().is_some_and(|d| d.lock().contains(hash))
    }

    /// Keeps a block copied down from the device: in host memory, pushing the least recently used
    /// blocks there down to disk (or dropping them without a disk tier). Under write-through the block
    /// goes to disk at once as well when the disk writer has room, and then leaves host memory later
    /// without another write.
    pub fn store(&mut self, hash: BlockHash, owner: impl Into<BlockOwner>, bytes: BlockBytes) {
        self.stats.offloaded_blocks += 1;
        self.stats.bytes_offloaded += bytes.len() as u64;
        let block = HostBlock {
            owner: owner.into(),
            bytes,
        };
        if let (true, Some(disk)) = (self.write_through, &self.disk)
            && self.host.limit() > 0
        {
            // Never waits for the disk: a block the queue has no room for now goes to disk when it
            // leaves host memory, as without write-through.
            disk.try_write(hash, block.clone());
        }
        let pushed_out = self.host.insert(hash, block);
        for (h, block) in pushed_out {
            if h != hash {
                self.stats.host_evictions += 1;
            }
            if let Some(disk) = &self.disk
                && !disk.lock().contains(h)
            {
                disk.write(h, block);
            }
        }
    }

    /// The bytes of block `hash` and the tier they came from, counted as a hit there; None on a miss.
    /// A damaged file is deleted and is a miss.
    pub fn fetch(&mut self, hash: BlockHash) -> Option<(BlockBytes, Tier)> {
        self.fetch_many(&[hash]).pop().flatten()
    }

    /// [`KvTiers::fetch`] of each of `hashes`, the files read in parallel.
    pub fn fetch_many(&mut self, hashes: &[BlockHash]) -> Vec<Option<(BlockBytes, Tier)>> {
        let mut found = self.find_in_memory(hashes);
        self.read_from_disk(hashes, &mut found);
        self.count_hits(&found);
        found
    }

    /// [`KvTiers::fetch`] of each of `hashes` from host memory only (the host tier, and blocks waiting
    /// for the disk writer): None for the rest, whose files are not read.
    pub fn fetch_in_memory(&mut self, hashes: &[BlockHash]) -> Vec<Option<(BlockBytes, Tier)>> {
        let found = self.find_in_memory(hashes);
        self.count_hits(&found);
        found
    }

    /// Block records that can be read from disk now into host memory set aside for records, without
    /// spilling into ordinary heap memory, which crosses to a device several times slower (and, fresh,
    /// is slow to touch); `usize::MAX` when records do not use set-aside memory.
    pub fn room_for_reads(&self) -> usize {
        self.read_arena
            .as_ref()
            .map_or(usize::MAX, |a| a.free_slots())
    }

    fn find_in_memory(&mut self, hashes: &[BlockHash]) -> Vec<Option<(BlockBytes, Tier)>> {
        let host = &mut self.host;
        let queue = self.disk.as_ref().map(Disk::lock);
        hashes
            .iter()
            .map(|&h| {
                host.get(h)
                    .or_else(|| queue.as_ref().and_then(|q| q.queued(h)))
                    .map(|b| (b, Tier::Host))
            })
            .collect()
    }

    /// Reads the files of the blocks of `hashes` not `found` yet, in parallel. A damaged file is
    /// deleted and is a miss.
    fn read_from_disk(&mut self, hashes: &[BlockHash], found: &mut [Option<(BlockBytes, Tier)>]) {
        let Some(disk) = &self.disk else {
            return;
        };
        let wanted: Vec<(usize, BlockHash, std::path::PathBuf)> = {
            let mut tier = disk.lock();
            (0..hashes.len())
                .filter(|&i| found[i].is_none())
                .filter_map(|i| tier.locate(hashes[i]).map(|p| (i, hashes[i], p)))
                .collect()
        };
        let arena = self.read_arena.as_ref();
        let read: Vec<_> = wanted
            .par_iter()
            .map(|(i, h, path)| {
                let record = disk::read_record(path, *h, |len| buffer_for(arena, len));
                (*i, *h, record)
            })
            .collect();
        let mut tier = disk.lock();
        for (i, h, result) in read {
            match result {
                Ok(bytes) => found[i] = Some((Arc::new(bytes), Tier::Disk)),
                Err(why) => {
                    tier.drop_damaged(h);
                    tracing::warn!(%why, "a KV block file could not be read; the block is recomputed");
                }
            }
        }
    }

    fn count_hits(&mut self, found: &[Option<(BlockBytes, Tier)>]) {
        for (bytes, tier) in found.iter().flatten() {
            match tier {
                Tier::Host => self.stats.host_hits += 1,
                Tier::Disk => self.stats.disk_hits += 1,
            }
            self.stats.bytes_reloaded += bytes.len() as u64;
        }
    }

    /// Writes every block held in host memory to disk as well (those not there already) and waits
    /// for the disk, so a restarted engine finds them; returns how many were queued. Without a disk
    /// tier, nothing.
    pub fn persist_host_blocks(&mut self) -> usize {
        let Some(disk) = &self.disk else {
            return 0;
        };
        let pending: Vec<(BlockHash, HostBlock)> = {
            let tier = disk.lock();
            self.host
                .blocks()
                .filter(|(h, _)| !tier.contains(*h))
                .map(|(h, b)| (h, b.clone()))
                .collect()
        };
        let n = pending.len();
        for (hash, block) in pending {
            disk.write(hash, block);
        }
        disk.writer.flush();
        n
    }

    /// The (parent, child) pairs the disk tier's files of `namespace` record, read from their headers
    /// in parallel, the first time a namespace is asked for in this process (later blocks are recorded
    /// as they are computed); empty after that, and without a disk tier.
    pub(crate) fn disk_lineage(
        &mut self,
        namespace: CacheNamespace,
    ) -> Vec<(BlockHash, BlockHash)> {
        let Some(disk) = &self.disk else {
            return Vec::new();
        };
        if !self.lineage_read.insert(namespace) {
            return Vec::new();
        }
        disk.writer.flush();
        let files = disk.lock().files_of(namespace);
        files
            .par_iter()
            .filter_map(|(child, path)| disk::read_parent(path).map(|parent| (parent, *child)))
            .collect()
    }

    /// Drops block `hash` from every tier; true when one held it.
    pub fn remove(&mut self, hash: BlockHash) -> bool {
        let host = self.host.remove(hash);
        let disk = self.disk.as_ref().is_some_and(|d| {
            let held = d.lock().forget(hash);
            d.writer.settle(Some(hash), None);
            held
        });
        host || disk
    }

    /// Drops every block of `namespace` from every tier; returns how many entries went.
    pub fn remove_namespace(&mut self, namespace: CacheNamespace) -> usize {
        let host = self.host.remove_namespace(namespace);
        host + self.disk.as_ref().map_or(0, |d| {
            let n = d.lock().forget_namespace(namespace);
            d.writer.settle(None, Some(namespace));
            n
        })
    }

    /// Counters, with the current sizes.
    pub fn stats(&self) -> TierStats {
        let mut stats = TierStats {
            host_blocks: self.host.len() as u64,
            host_bytes: self.host.bytes() as u64,
            ..self.stats
        };
        if let Some(d) = &self.disk {
            let tier = d.lock();
            stats.disk_blocks = tier.len() as u64;
            stats.disk_bytes = tier.bytes() as u64;
            stats.bytes_to_disk = tier.written_bytes;
            stats.disk_evictions = tier.evictions;
            stats.disk_errors = tier.errors;
        }
        stats
    }

    /// Waits until every block queued for the disk is written (tests and shutdown).
    pub fn flush(&self) {
        if let Some(d) = &self.disk {
            d.writer.flush();
        }
    }
}

/// Copies that `queue_room` places in the disk writer's queue take without waiting, where the host
/// tier takes `host_free` more blocks before it pushes its least recently used ones out. A copy takes
/// a place (written through to disk at once), and past the free host memory it pushes a block out,
/// which takes another where that block is not on disk: its own write found the queue full, or the
/// disk tier has since dropped its file, as it does once a document's KV outgrows it. Without this
/// second place the push-out waited for the writer, on the engine thread: up to 0.1 s a step on an
/// H100 after a 120K-token document at the Llama-3.1-8B shape, whose 15 GB outgrew the default tiers.
fn copies_the_queue_takes(queue_room: usize, host_free: usize) -> usize {
    match host_free >= queue_room {
        true => queue_room,
        false => (queue_room + host_free) / 2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(n: u8, len: usize) -> BlockBytes {
        Arc::new(BlockBuf::from(vec![n; len]))
    }

    fn tiers(host: usize, disk: Option<(&std::path::Path, usize)>) -> KvTiers {
        KvTiers::open(&TierSettings {
            host_bytes: host,
            disk: disk.map(|(p, b)| (p.to_path_buf(), b)),
            high_water: 0.85,
            ..TierSettings::default()
        })
        .unwrap()
    }

    #[test]
    fn blocks_pushed_out_of_host_memory_go_to_disk_and_come_back_from_there() {
        let dir = tempfile::tempdir().unwrap();
        let mut t = tiers(200, Some((dir.path(), 1 << 20)));
        t.store(BlockHash(1), 0, bytes(1, 100));
        t.store(BlockHash(2), 0, bytes(2, 100));
        t.store(BlockHash(3), 0, bytes(3, 100));
        t.flush();
        let s = t.stats();
        assert_eq!((s.host_blocks, s.disk_blocks, s.host_evictions), (2, 1, 1));
        assert_eq!(t.fetch(BlockHash(1)), Some((bytes(1, 100), Tier::Disk)));
        assert_eq!(t.fetch(BlockHash(3)), Some((bytes(3, 100), Tier::Host)));
        assert_eq!(t.fetch(BlockHash(4)), None);
        let s = t.stats();
        assert_eq!((s.host_hits, s.disk_hits, s.bytes_reloaded), (1, 1, 200));
    }

    struct FailedCopy;

    impl DeviceFence for FailedCopy {
        fn wait(&self) -> bool {
            false
        }
    }

    #[test]
    fn a_block_whose_copy_from_the_device_failed_is_never_written_to_disk() {
        let dir = tempfile::tempdir().unwrap();
        let mut t = tiers(0, Some((dir.path(), 1 << 20)));
        let mut broken = BlockBuf::from(vec![3u8; 100]);
        broken.written_by(Arc::new(FailedCopy));
        t.store(BlockHash(1), 0, Arc::new(broken));
        t.store(BlockHash(2), 0, bytes(2, 100));
        t.flush();
        assert!(!t.contains(BlockHash(1)));
        assert_eq!(t.fetch(BlockHash(2)), Some((bytes(2, 100), Tier::Disk)));
        assert_eq!(t.stats().disk_blocks, 1);
    }

    #[test]
    fn without_a_host_tier_blocks_go_straight_to_disk_and_without_either_they_are_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let mut t = tiers(0, Some((dir.path(), 1 << 20)));
        t.store(BlockHash(1), 0, bytes(1, 100));
        t.flush();
        assert!(t.contains(BlockHash(1)));
        assert_eq!(t.stats().host_evictions, 0);
        assert_eq!(t.fetch(BlockHash(1)).map(|f| f.1), Some(Tier::Disk));
        let mut none = tiers(0, None);
        none.store(BlockHash(1), 0, bytes(1, 100));
        assert!(!none.contains(BlockHash(1)));
    }

    #[test]
    fn copies_past_the_free_host_memory_count_two_places_in_the_writers_queue() {
        assert_eq!(copies_the_queue_takes(100, 500), 100);
        assert_eq!(copies_the_queue_takes(100, 100), 100);
        // 40 copies fit host memory; each of the next 30 pushes a block out: 40 + 2 · 30 = 100.
        assert_eq!(copies_the_queue_takes(100, 40), 70);
        assert_eq!(copies_the_queue_takes(100, 0), 50);
        assert_eq!(copies_the_queue_takes(0, 0), 0);
        // A host tier of ten records of 100 bytes, transit memory for thousands more, a queue with
        // every place free: ten copies fit host memory, then two places a copy.
        let dir = tempfile::tempdir().unwrap();
        let mut t = KvTiers::open(&TierSettings {
            host_bytes: 1000,
            disk: Some((dir.path().to_path_buf(), 1 << 20)),
            high_water: 0.85,
            transit_bytes: 1 << 20,
            write_through: true,
        })
        .unwrap();
        t.use_host_memory(100, arena::heap_allocator(), false);
        assert_eq!(t.room_for_copies(), (writer::QUEUE + 10) / 2);
        for n in 1..=10 {
            t.store(BlockHash(n), 0, bytes(n as u8, 100));
        }
        t.flush();
        assert_eq!(t.room_for_copies(), writer::QUEUE / 2);
    }

    #[test]
    fn the_tiers_hold_the_larger_of_host_memory_and_disk_under_write_through_and_their_sum_without()
    {
        let dir = tempfile::tempdir().unwrap();
        let open = |write_through| {
            let mut t = KvTiers::open(&TierSettings {
                host_bytes: 2 * 100,
                disk: Some((
                    dir.path().to_path_buf(),
                    5 * (record::HEADER_BYTES + 100) + 99,
                )),
                high_water: 0.85,
                transit_bytes: 1000,
                write_through,
            })
            .unwrap();
            assert_eq!(
                t.blocks_held_at_once(),
                None,
                "a block's size is not known yet"
            );
            t.use_host_memory(100, arena::heap_allocator(), false);
            t.blocks_held_at_once()
        };
        assert_eq!(open(true), Some(5));
        assert_eq!(open(false), Some(2 + 5));
    }

    #[test]
    fn removal_reaches_every_tier_and_a_bad_high_water_mark_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut t = tiers(100, Some((dir.path(), 1 << 20)));
        t.store(BlockHash(1), 7, bytes(1, 100));
        t.store(BlockHash(2), 7, bytes(2, 100));
        t.store(BlockHash(3), 8, bytes(3, 100));
        t.flush();
        assert_eq!(t.remove_namespace(7), 2);
        assert!(t.remove(BlockHash(3)));
        assert!(!t.contains(BlockHash(1)) && !t.contains(BlockHash(3)));
        let s = t.stats();
        assert_eq!((s.host_blocks, s.disk_blocks), (0, 0));
        let bad = KvTiers::open(&TierSettings {
            high_water: 1.5,
            ..TierSettings::default()
        });
        assert!(bad.is_err());
    }
}
