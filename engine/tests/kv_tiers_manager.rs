//! The KV cache manager with lower tiers behind its pool: which blocks are copied down and when, how a
//! lookup finds them again, and that tenants and deletions are respected in every tier. Copies are
//! only queued here ([`KvTransfer`]); the bytes handed to the tiers stand for a block's content.

use std::sync::Arc;

use docqa_engine::kv::manager::{CacheScope, KvCacheConfig, KvCacheManager, KvTransfer, Reload};
use docqa_engine::kv::tiers::{KvTiers, TierSettings, heap_allocator};

const BS: usize = 4;

fn manager(num_blocks: usize, settings: TierSettings) -> KvCacheManager {
    with_tiers(num_blocks, KvTiers::open(&settings).unwrap())
}

/// [`manager`] whose tiers know a block's record is 8 bytes (host memory for records in slots of that
/// size), as an engine's tiers do.
fn manager_with_records(num_blocks: usize, settings: TierSettings) -> KvCacheManager {
    let mut tiers = KvTiers::open(&settings).unwrap();
    tiers.use_host_memory(8, heap_allocator(), false);
    with_tiers(num_blocks, tiers)
}

fn with_tiers(num_blocks: usize, tiers: KvTiers) -> KvCacheManager {
    let mut kv = KvCacheManager::new(KvCacheConfig {
        block_size: BS,
        num_blocks,
        enable_prefix_caching: true,
        cache_salt: 0,
    })
    .unwrap();
    kv.attach_tiers(tiers);
    kv
}

/// Host memory for two blocks of the fake 8-byte content, then a disk tier in `dir`.
fn two_blocks_of_host_memory_then_disk(dir: &std::path::Path) -> TierSettings {
    TierSettings {
        host_bytes: 16,
        disk: Some((dir.to_path_buf(), 1 << 20)),
        ..TierSettings::default()
    }
}

fn host_only() -> TierSettings {
    TierSettings {
        host_bytes: 1 << 20,
        ..TierSettings::default()
    }
}

/// Runs `tokens` as one finished request of `scope`, then carries out the queued copies with fake
/// content: the block's id in every byte.
fn run(kv: &mut KvCacheManager, id: u64, tokens: &[u32], scope: CacheScope) -> Vec<KvTransfer> {
    let prefix = kv.find_cached_prefix(tokens, scope, true);
    assert!(kv.admit(id, &prefix, tokens.len()).unwrap().is_some());
    kv.commit_computed(id, tokens, tokens.len()).unwrap();
    kv.free(id).unwrap();
    settle(kv)
}

fn settle(kv: &mut KvCacheManager) -> Vec<KvTransfer> {
    let transfers = kv.take_transfers();
    for t in &transfers {
        if let KvTransfer::Offload {
            block,
            still_cached,
        } = t
        {
            kv.offloaded(
                *block,
                *still_cached,
                Arc::new(vec![block.block as u8; 8].into()),
            );
        }
    }
    transfers
}

fn offloaded(transfers: &[KvTransfer]) -> Vec<u32> {
    transfers
        .iter()
        .filter_map(|t| match t {
            KvTransfer::Offload { block, .. } => Some(block.block),
            KvTransfer::Reload(_) => None,
        })
        .collect()
}

fn doc(start: u32, blocks: usize) -> Vec<u32> {
    // Full blocks plus one token, so every full block is cacheable.
    (start..start + (blocks * BS) as u32 + 1).collect()
}

#[test]
fn evicted_blocks_are_copied_down_least_recently_freed_first_and_found_again_there() {
    let mut kv = manager(8, host_only());
    let dense = CacheScope::dense(0);
    let (a, b) = (doc(0, 4), doc(1000, 4));
    assert!(offloaded(&run(&mut kv, 1, &a, dense)).is_empty());
    // A held blocks 0..5 (four full, one partial) and freed them tail first. B needs five blocks:
    // the three never used, A's partial block, then A's last full block, the only cached one lost.
    let moved = offloaded(&run(&mut kv, 2, &b, dense));
    assert_eq!(
        moved,
        [3],
        "A's last full block is copied down before reuse"
    );
    let stats = kv.tier_stats().unwrap();
    assert_eq!((stats.offloaded_blocks, stats.host_blocks), (1, 1));
    // Looking A up again finds three blocks on the device and one in host memory: all four.
    let again = kv.find_cached_prefix(&a, dense, false);
    assert_eq!(again.num_tokens, 4 * BS);
    assert_eq!(again.reload.iter().map(|r| r.0).collect::<Vec<_>>(), [3]);
    assert!(kv.admit(3, &again, a.len()).unwrap().is_some());
    let reloads = kv
        .take_transfers()
        .into_iter()
        .filter(|t| matches!(t, KvTransfer::Reload(_)))
        .count();
    assert_eq!(reloads, 1);
    assert_eq!(kv.tier_stats().unwrap().host_hits, 1);
}

#[test]
fn above_the_high_water_mark_cached_blocks_are_copied_down_ahead_of_eviction_and_never_twice() {
    let mut kv = manager(
        10,
        TierSettings {
            high_water: 0.5,
            ..host_only()
        },
    );
    run(&mut kv, 1, &doc(0, 8), CacheScope::dense(0));
    // Eight full blocks hold cached content (the partial ninth is not cached): 8 of 10 would lose
    // content if reused, and the mark is 5.
    assert_eq!(kv.offload_above_high_water(100), 3);
    let moved = settle(&mut kv);
    assert!(moved.iter().all(|t| matches!(
        t,
        KvTransfer::Offload {
            still_cached: true,
            ..
        }
    )));
    assert_eq!(kv.offload_above_high_water(100), 0, "under the mark now");
    // Blocks copied down ahead of time are evicted without a copy: five new blocks take the unused
    // one, the partial one and the three copied down.
    let before = kv.tier_stats().unwrap().offloaded_blocks;
    run(&mut kv, 2, &doc(5000, 4), CacheScope::dense(0));
    assert_eq!(kv.tier_stats().unwrap().offloaded_blocks, before);
}

#[test]
fn under_write_through_blocks_are_copied_down_as_they_are_computed_and_evicted_for_free() {
    let mut kv = manager(
        10,
        TierSettings {
            write_through: true,
            ..host_only()
        },
    );
    let dense = CacheScope::dense(0);
    let a = doc(0, 8);
    let prefix = kv.find_cached_prefix(&a, dense, true);
    assert!(kv.admit(1, &prefix, a.len()).unwrap().is_some());
    kv.commit_computed(1, &a, 5 * BS).unwrap();
    // The request still runs: its five full blocks are copied while they stay in use, at most `max`
    // a call, oldest first.
    assert_eq!(kv.copy_down_fresh(3), 3);
    assert_eq!(offloaded(&settle(&mut kv)), [0, 1, 2]);
    kv.commit_computed(1, &a, a.len()).unwrap();
    kv.free(1).unwrap();
    assert_eq!(
        kv.copy_down_fresh(100),
        5,
        "the rest of the eight full blocks"
    );
    let moved = settle(&mut kv);
    assert!(moved.iter().all(|t| matches!(
        t,
        KvTransfer::Offload {
            still_cached: true,
            ..
        }
    )));
    assert_eq!(kv.copy_down_fresh(100), 0, "nothing is copied twice");
    assert!(!kv.has_fresh_blocks());
    // Evicting all eight later copies nothing more, and A is found whole in host memory.
    let before = kv.tier_stats().unwrap().offloaded_blocks;
    assert_eq!(before, 8);
    assert!(offloaded(&run(&mut kv, 2, &doc(5000, 8), dense)).is_empty());
    assert_eq!(kv.tier_stats().unwrap().offloaded_blocks, before);
    let again = kv.find_cached_prefix(&a, dense, false);
    assert_eq!(again.num_tokens, 8 * BS);
}

#[test]
fn a_one_off_prompt_is_not_written_through_but_is_still_copied_down_when_evicted() {
    let mut kv = manager(
        10,
        TierSettings {
            write_through: true,
            ..host_only()
        },
    );
    let one_off = CacheScope {
        transient: true,
        ..CacheScope::dense(0)
    };
    run(&mut kv, 1, &doc(0, 8), one_off);
    assert_eq!(kv.copy_down_fresh(100), 0);
    assert!(!kv.has_fresh_blocks());
    // A document read afterwards is written through; the one-off prompt's blocks it evicts are copied
    // down at their eviction, as without write-through.
    let moved = run(&mut kv, 2, &doc(5000, 8), CacheScope::dense(0));
    assert!(!offloaded(&moved).is_empty());
    assert!(moved.iter().all(|t| matches!(
        t,
        KvTransfer::Offload {
            still_cached: false,
            ..
        }
    )));
    assert_eq!(
        kv.copy_down_fresh(100),
        8,
        "the document's eight full blocks"
    );
}

#[test]
fn a_document_longer_than_the_tiers_hold_keeps_its_first_blocks_and_copies_no_later_ones() {
    for write_through in [true, false] {
        // Host memory for five records and no disk: a document of eight full blocks cannot be kept
        // whole, and its blocks past the fifth could never be found again without those before.
        let mut kv = manager_with_records(
            10,
            TierSettings {
                host_bytes: 5 * 8,
                transit_bytes: 8 * 8,
                write_through,
                ..TierSettings::default()
            },
        );
        assert_eq!(kv.blocks_lower_tiers_keep(), Some(5));
        let dense = CacheScope::dense(0);
        let a = doc(0, 8);
        run(&mut kv, 1, &a, dense);
        let written = kv.copy_down_fresh(100);
        settle(&mut kv);
        assert_eq!(written, if write_through { 5 } else { 0 });
        // A document of nine full blocks evicts every block of A from the ten-block pool.
        run(&mut kv, 2, &doc(5000, 9), dense);
        assert_eq!(
            kv.tier_stats().unwrap().offloaded_blocks,
            5,
            "write-through {write_through}: only the first five blocks are copied down"
        );
        assert_eq!(
            kv.find_cached_prefix(&a, dense, false).num_tokens,
            5 * BS,
            "write-through {write_through}: the first five blocks are found in host memory"
        );
    }
}

#[test]
fn without_write_through_nothing_is_copied_before_it_is_evicted() {
    let mut kv = manager(10, host_only());
    assert_eq!(
        kv.blocks_lower_tiers_keep(),
        None,
        "a record's size is not known"
    );
    run(&mut kv, 1, &doc(0, 8), CacheScope::dense(0));
    assert_eq!(kv.copy_down_fresh(100), 0);
    assert!(!kv.has_fresh_blocks());
    assert_eq!(kv.tier_stats().unwrap().offloaded_blocks, 0);
}

#[test]
fn a_tenants_blocks_in_a_lower_tier_are_invisible_to_another_tenant() {
    let mut kv = manager(6, host_only());
    let secret = doc(0, 4);
    run(&mut kv, 1, &secret, CacheScope::dense(7));
    run(&mut kv, 2, &doc(900, 4), CacheScope::dense(7));
    assert!(kv.tier_stats().unwrap().host_blocks > 0);
    let other = kv.find_cached_prefix(&secret, CacheScope::dense(8), false);
    assert_eq!(other.num_tokens, 0);
    let owner = kv.find_cached_prefix(&secret, CacheScope::dense(7), false);
    assert_eq!(owner.num_tokens, 4 * BS);
}

#[test]
fn forgetting_a_document_or_a_tenant_removes_its_blocks_from_every_tier() {
    let dir = tempfile::tempdir().unwrap();
    let settings = two_blocks_of_host_memory_then_disk(dir.path());
    let mut kv = manager(6, settings);
    let (a, b) = (doc(0, 4), doc(500, 4));
    run(&mut kv, 1, &a, CacheScope::dense(1));
    run(&mut kv, 2, &b, CacheScope::dense(2));
    run(&mut kv, 3, &doc(900, 4), CacheScope::dense(3));
    kv.flush_tiers();
    let s = kv.tier_stats().unwrap();
    assert!(s.host_blocks > 0 && s.disk_blocks > 0, "{s:?}");
    assert!(kv.forget_prefix(&a, CacheScope::dense(1)) >= 4);
    assert_eq!(
        kv.find_cached_prefix(&a, CacheScope::dense(1), false)
            .num_tokens,
        0
    );
    assert!(kv.forget_namespace(2) >= 4);
    assert_eq!(
        kv.find_cached_prefix(&b, CacheScope::dense(2), false)
            .num_tokens,
        0
    );
    let ns_dir = |n: u64| dir.path().join(format!("{n:016x}"));
    assert!(!ns_dir(2).exists());
    let files_of_1 = std::fs::read_dir(ns_dir(1)).map_or(0, |d| d.count());
    assert_eq!(files_of_1, 0, "the deleted document's files are gone");
}

#[test]
fn forgetting_a_document_also_forgets_the_questions_asked_about_it_in_every_tier() {
    let dir = tempfile::tempdir().unwrap();
    let settings = two_blocks_of_host_memory_then_disk(dir.path());
    // Eight blocks: room for the question's seven, too few to keep it and the other document.
    let mut kv = manager(8, settings);
    let document = doc(0, 4);
    // A question about it: the document's full blocks, then two blocks of its own.
    let mut asked = document[..4 * BS].to_vec();
    asked.extend(800..800 + (2 * BS) as u32 + 1);
    let other = doc(500, 4);
    run(&mut kv, 1, &document, CacheScope::dense(1));
    run(&mut kv, 2, &asked, CacheScope::dense(1));
    run(&mut kv, 3, &other, CacheScope::dense(1));
    kv.flush_tiers();
    let found = |kv: &mut KvCacheManager, tokens: &[u32]| {
        kv.find_cached_prefix(tokens, CacheScope::dense(1), false)
            .num_tokens
    };
    assert_eq!(
        found(&mut kv, &asked),
        6 * BS,
        "the question's blocks are cached"
    );
    assert_eq!(
        kv.forget_prefix(&document, CacheScope::dense(1)),
        6,
        "the document's four blocks and the question's two"
    );
    assert_eq!(found(&mut kv, &asked), 0);
    assert_eq!(
        found(&mut kv, &other),
        4 * BS,
        "the other document keeps its cache"
    );
}

#[test]
fn a_question_asked_before_a_restart_is_forgotten_with_its_document_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let settings = two_blocks_of_host_memory_then_disk(dir.path());
    let document = doc(0, 4);
    let mut asked = document[..4 * BS].to_vec();
    asked.extend(800..800 + (2 * BS) as u32 + 1);
    let other = doc(500, 4);
    {
        let mut kv = manager(16, settings.clone());
        run(&mut kv, 1, &document, CacheScope::dense(1));
        run(&mut kv, 2, &asked, CacheScope::dense(1));
        run(&mut kv, 3, &other, CacheScope::dense(1));
        // A shutdown: everything the pool caches goes down, and host memory to disk.
        kv.offload_all_cached();
        settle(&mut kv);
        kv.persist_host_tier();
    }
    let files = || {
        walk_files(dir.path())
            .into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == "kv"))
            .count()
    };
    assert_eq!(files(), 10, "both documents and the question, on disk");
    let mut kv = manager(16, settings);
    let found = |kv: &mut KvCacheManager, tokens: &[u32]| {
        kv.find_cached_prefix(tokens, CacheScope::dense(1), false)
            .num_tokens
    };
    assert_eq!(found(&mut kv, &asked), 6 * BS, "found after the restart");
    assert_eq!(
        kv.forget_prefix(&document, CacheScope::dense(1)),
        6,
        "the document's four blocks and the question's two, though this process never computed them"
    );
    kv.flush_tiers();
    assert_eq!(found(&mut kv, &asked), 0);
    assert_eq!(found(&mut kv, &other), 4 * BS);
    assert_eq!(files(), 4, "only the other document's files are left");
}

fn walk_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        match entry.file_type().unwrap().is_dir() {
            true => out.extend(walk_files(&entry.path())),
            false => out.push(entry.path()),
        }
    }
    out
}

/// What a block of a prefix holds in the simulated device: a digest of every token up to its end (a
/// block's KV depends on its whole prefix).
fn content_of(tokens: &[u32], block: usize) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    tokens[..(block + 1) * BS].hash(&mut h);
    h.finish()
}

/// Carries out queued copies against a simulated device (block id → content).
fn settle_on(kv: &mut KvCacheManager, device: &mut std::collections::HashMap<u32, u64>) {
    let mut transfers = kv.take_transfers();
    let mut reloads: Vec<Reload> = transfers
        .iter()
        .filter_map(|t| match t {
            KvTransfer::Reload(r) => Some(r.clone()),
            KvTransfer::Offload { .. } => None,
        })
        .collect();
    kv.read_reloads(&mut reloads);
    let mut read = reloads.into_iter();
    for t in &mut transfers {
        if let KvTransfer::Reload(r) = t {
            *r = read.next().unwrap();
        }
    }
    for t in transfers {
        match t {
            KvTransfer::Offload {
                block,
                still_cached,
            } => {
                let content = device.get(&block.block).copied().unwrap_or(0);
                kv.offloaded(
                    block,
                    still_cached,
                    Arc::new(content.to_le_bytes().to_vec().into()),
                );
            }
            KvTransfer::Reload(Reload { block, bytes, .. }) => {
                let bytes = bytes.expect("every record in this test is readable");
                let content = u64::from_le_bytes(bytes[..8].try_into().unwrap());
                device.insert(block, content);
            }
        }
    }
}

proptest::proptest! {
    #[test]
    fn reused_blocks_always_hold_their_prefix_whether_kept_offloaded_or_reloaded(
        docs in proptest::collection::vec((0u32..6, 1usize..7, 0u64..2), 1..60),
        host_blocks in 0usize..12,
        write_through: bool,
        records_sized: bool,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let disk = (host_blocks % 3 == 0).then(|| (dir.path().to_path_buf(), 1 << 20));
        let settings = TierSettings { host_bytes: host_blocks * 8, disk, high_water: 0.6, write_through, ..TierSettings::default() };
        // With a record's size known, a document longer than the tiers hold copies down only its
        // first blocks.
        let mut kv = if records_sized { manager_with_records(10, settings) } else { manager(10, settings) };
        let mut device = std::collections::HashMap::new();
        for (id, (doc, blocks, tenant)) in docs.into_iter().enumerate() {
            let id = id as u64;
            let tokens = doc_tokens(doc, blocks);
            let scope = CacheScope::dense(tenant);
            kv.offload_above_high_water(3);
            let prefix = kv.find_cached_prefix(&tokens, scope, true);
            let Some(start) = kv.admit(id, &prefix, tokens.len()).unwrap() else { continue };
            settle_on(&mut kv, &mut device);
            let table = kv.block_table(id).unwrap().to_vec();
            for (b, block) in table.iter().enumerate().take(start / BS) {
                let block = block.unwrap();
                proptest::prop_assert_eq!(device.get(&block).copied(), Some(content_of(&tokens, b)),
                    "block {} of request {} holds another prefix", b, id);
            }
            // The model writes the rest.
            for (b, block) in table.iter().enumerate().skip(start / BS) {
                if (b + 1) * BS <= tokens.len() {
                    device.insert(block.unwrap(), content_of(&tokens, b));
                }
            }
            // Half the prompt first, its blocks copied down (under write-through) while in use.
            let half = tokens.len() / 2;
            kv.commit_computed(id, &tokens, start.max(half)).unwrap();
            kv.copy_down_fresh(2);
            settle_on(&mut kv, &mut device);
            kv.commit_computed(id, &tokens, tokens.len()).unwrap();
            kv.free(id).unwrap();
            kv.pool().check_invariants().map_err(proptest::test_runner::TestCaseError::fail)?;
            kv.flush_tiers();
        }
    }
}

/// Document `doc` cut to `blocks` full blocks and one token more.
fn doc_tokens(doc: u32, blocks: usize) -> Vec<u32> {
    (0..(blocks * BS) as u32 + 1)
        .map(|i| doc * 1000 + i)
        .collect()
}

#[test]
fn a_record_found_unreadable_when_read_sends_back_every_request_holding_its_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let settings = TierSettings {
        disk: Some((dir.path().to_path_buf(), 1 << 20)),
        ..TierSettings::default()
    };
    let document = doc(0, 4);
    {
        let mut kv = manager(16, settings.clone());
        run(&mut kv, 1, &document, CacheScope::dense(1));
        kv.offload_all_cached();
        settle(&mut kv);
        kv.flush_tiers();
    }
    let mut kv = manager(16, settings);
    let scope = CacheScope::dense(1);
    let first = kv.find_cached_prefix(&document, scope, false);
    assert_eq!(first.reload.len(), 4, "the document is on disk only");
    assert!(kv.admit(7, &first, document.len()).unwrap().is_some());
    // A second question in the same step shares the blocks being brought back.
    let second = kv.find_cached_prefix(&document, scope, false);
    assert_eq!((second.num_tokens, second.reload.len()), (4 * BS, 0));
    assert!(kv.admit(8, &second, document.len()).unwrap().is_some());
    let mut reloads: Vec<Reload> = kv
        .take_transfers()
        .into_iter()
        .filter_map(|t| match t {
            KvTransfer::Reload(r) => Some(r),
            KvTransfer::Offload { .. } => None,
        })
        .collect();
    assert!(
        reloads.iter().all(|r| r.bytes.is_none()),
        "read when carried out"
    );
    // One block's file is damaged between admission and the copy.
    let mut files: Vec<_> = walk_files(dir.path())
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "kv"))
        .collect();
    files.sort();
    assert_eq!(files.len(), 4);
    std::fs::write(&files[1], b"torn").unwrap();
    kv.read_reloads(&mut reloads);
    let unreadable: Vec<usize> = (0..4).filter(|&i| reloads[i].bytes.is_none()).collect();
    assert_eq!(unreadable.len(), 1, "one file was damaged");
    let failed: Vec<Reload> = reloads[unreadable[0]..].to_vec();
    assert_eq!(kv.reloads_failed(&failed), [7, 8]);
    kv.free(7).unwrap();
    kv.free(8).unwrap();
    let again = kv.find_cached_prefix(&document, scope, false);
    assert_eq!(
        again.num_tokens,
        unreadable[0] * BS,
        "the prefix is found up to the block that is gone"
    );
    assert_eq!(kv.tier_stats().unwrap().disk_errors, 1);
    kv.pool()
        .check_invariants()
        .map_err(|e| e.to_string())
        .unwrap();
}
